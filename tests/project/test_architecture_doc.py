"""docs/architecture.md is the map a newcomer reads first: every module it names exists, and
it names every module of the fencing package with what it decides."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEXT = " ".join((ROOT / "docs" / "architecture.md").read_text().split())
_MODULE = re.compile(r"`((?:core|aio|backends|fencing|cli|dashboard)/[\w/]*?(?:\.py|/))`")


def test_every_module_the_map_names_exists() -> None:
    named = set(_MODULE.findall(TEXT))
    assert named, "the map names no module"
    assert [m for m in sorted(named) if not (ROOT / "tenure" / m).exists()] == []


def test_the_map_names_every_fencing_module() -> None:
    modules = {p.name for p in (ROOT / "tenure" / "fencing").glob("*.py") if p.name != "__init__.py"}
    assert sorted(m for m in modules if f"`fencing/{m}`" not in TEXT) == []


def test_the_map_says_what_a_fence_takes_from_the_store() -> None:
    assert "does not depend on any store" not in TEXT  # proof.py reads it; fences report to its audit
    assert "Given a `Store` (`store=`), a fence reports its refusals to the store's audit" in TEXT
