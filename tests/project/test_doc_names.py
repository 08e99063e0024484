"""Every ``tenure.x.Name`` the README and docs/**/*.md use, and every name their examples import
from tenure, exists in the package: a reader who copies one gets no AttributeError."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
_DOTTED = re.compile(r"(?<![\w.\-/])tenure(?:\.[A-Za-z_]\w*)+")
_IMPORT = re.compile(r"^\s*from (tenure(?:\.\w+)*) import \(?([\w, ]+)\)?\s*$", re.M)
# Names tenure emits as text (logger, metric and attribute names, the ASGI scope key): they are
# string literals in the package, not attributes.
_EMITTED = {m.group(1) for path in (ROOT / "tenure").rglob("*.py")
            for m in re.finditer(r"[\"'](tenure(?:\.\w+)+)[\"']", path.read_text())}


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):  # the longest importable module, then attributes
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(found, name):
                return False
            found = getattr(found, name)
        return True
    return False


def _used() -> list[tuple[str, str]]:
    """(document, dotted name) for every name the docs use."""
    used = []
    for doc in DOCS:
        text = doc.read_text()
        used += [(doc.name, m.group(0)) for m in _DOTTED.finditer(text)]
        used += [(doc.name, f"{m.group(1)}.{name.strip()}") for m in _IMPORT.finditer(text)
                 for name in m.group(2).split(",") if name.strip()]
    return sorted(set(used))


@pytest.mark.parametrize(("doc", "dotted"), _used())
def test_every_name_the_docs_use_exists(doc: str, dotted: str) -> None:
    assert dotted in _EMITTED or _resolves(dotted), f"{doc} names {dotted}, which tenure does not have"


def test_the_check_sees_the_fencing_errors() -> None:
    assert ("fencing.md", "tenure.fencing.StaleToken") in _used()  # the name of issue 26 item 14
