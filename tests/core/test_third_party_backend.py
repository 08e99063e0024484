"""The backend of docs/backends/writing-a-backend.md, exactly as the page shows it, passes the
shipped conformance suite.

The page's ``python`` blocks, in order, are one file; this module runs them as its own code
(``exec`` in its namespace), so the example has no copy to drift from. Lines outside the
blocks are left blank: a traceback names the page and its line. The suite's child processes
import this module by name (``register_backend`` records ``tests.core.test_third_party_backend``),
which runs the page's code again there.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from devservers.availability import in_ci

PAGE = Path(__file__).resolve().parents[2] / "docs" / "backends" / "writing-a-backend.md"
_FENCE = re.compile(r"^```(\w*)\s*$")
# What a backend author may import of tenure: the page promises these three and nothing else.
PUBLIC = {"tenure", "tenure.backend", "tenure.testing"}


def example(text: str) -> str:
    """The page's ``python`` blocks as one module, each line where it stands on the page."""
    lines, block = [], None  # block: the language of the fenced block a line is in; None in prose
    for line in text.splitlines():
        fence = _FENCE.match(line)
        if block is None and fence:
            block = fence.group(1)
            lines.append("")
        elif block is not None and line.strip() == "```":
            block = None
            lines.append("")
        else:
            lines.append(line if block == "python" else "")
    return "\n".join(lines) + "\n"


SOURCE = example(PAGE.read_text())
exec(compile(SOURCE, str(PAGE), "exec"), globals())  # the page's code, defined in this module


def test_the_page_imports_only_the_public_namespaces() -> None:
    used = set()
    for node in ast.walk(ast.parse(SOURCE)):
        if isinstance(node, ast.ImportFrom):
            used.add(node.module or "")
        elif isinstance(node, ast.Import):
            used.update(alias.name for alias in node.names)
    of_tenure = {name for name in used if name == "tenure" or name.startswith("tenure.")}
    assert of_tenure == PUBLIC, of_tenure
    assert "tenure.core" not in SOURCE


def test_the_page_holds_the_whole_backend_and_its_test() -> None:
    defined = globals()
    assert defined["JsonFileBackend"].__module__ == __name__  # the page's class, run here
    assert {"JsonFileBackend", "JsonTransaction", "TestJsonFileStore"} <= set(defined)
    assert len(SOURCE.splitlines()) == len(PAGE.read_text().splitlines())  # line numbers are the page's


@pytest.mark.slow
def test_the_page_type_checks_as_a_reader_would_copy_it(tmp_path: Path) -> None:
    # A newcomer copies the blocks into jsonfile.py: mypy --strict passes on it as it stands.
    if importlib.util.find_spec("mypy") is None:
        missing = "mypy is not installed here (pip install --group lint)"
        if in_ci():
            pytest.fail(missing)
        pytest.skip(missing)
    (tmp_path / "jsonfile.py").write_text(SOURCE.lstrip("\n"))
    done = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "jsonfile.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "MYPYPATH": str(PAGE.parents[2])})
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
