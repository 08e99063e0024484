"""The checks the project passes, enforced by the README's test command: ruff, and mypy strict.

Each runs as a subprocess of this interpreter's environment (the ``lint`` dependency group,
which ``scripts/setup.sh`` installs) from the repository root, and a failure shows its output.
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from devservers.availability import in_ci

ROOT = Path(__file__).resolve().parents[2]


def _run(tool: str, *args: str) -> None:
    if importlib.util.find_spec(tool) is None:
        missing = f"{tool} is not installed here (pip install --group lint)"
        if in_ci():
            pytest.fail(missing)
        pytest.skip(missing)
    done = subprocess.run([sys.executable, "-m", tool, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, f"{' '.join((tool, *args))} failed:\n{done.stdout[-20000:]}{done.stderr[-5000:]}"


def test_ruff() -> None:
    _run("ruff", "check", "tenure", "tests", "benchmarks", "scripts")


@pytest.mark.slow
def test_mypy_strict() -> None:
    _run("mypy")  # the packages and strictness are pyproject.toml's [tool.mypy]


def _imported_by_tenure() -> set[str]:
    """The top-level packages tenure's modules import (absolute imports)."""
    found: set[str] = set()
    for path in (ROOT / "tenure").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found


def test_mypy_skips_only_packages_tenure_never_imports() -> None:
    # mypy does not analyse these (pyproject's follow_imports = "skip", for a faster cold run):
    # tenure's own calls into one of them would be checked against Any.
    tomllib = pytest.importorskip("tomllib")  # Python 3.11
    overrides = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["overrides"]
    skipped = {m.split(".")[0] for o in overrides if o.get("follow_imports") == "skip" for m in o["module"]}
    assert not skipped & _imported_by_tenure(), "tenure imports a package mypy skips: check it, or stop skipping it"
