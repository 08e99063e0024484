"""The checks the project passes, enforced by the README's test command: ruff, and mypy strict.

Each runs as a subprocess of this interpreter's environment (the ``lint`` dependency group,
which ``scripts/setup.sh`` installs) from the repository root, and a failure shows its output.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import in_ci

ROOT = Path(__file__).resolve().parent.parent


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
