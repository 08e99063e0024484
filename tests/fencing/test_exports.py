"""The public names of tenure.fencing are exactly its __all__, and each one resolves."""

from __future__ import annotations

import tenure.fencing


def test_every_exported_name_exists_and_nothing_public_is_left_out() -> None:
    exported = set(tenure.fencing.__all__)
    assert all(hasattr(tenure.fencing, name) for name in exported)
    public = {name for name in vars(tenure.fencing) if not name.startswith("_")}
    modules = {"binding", "budget", "claims", "dbapi", "http", "idempotency", "paths", "proof", "sql"}
    assert public - modules == exported


def test_the_fencing_errors_are_the_tenure_tree_s() -> None:
    assert tenure.fencing.StaleToken is tenure.StaleToken
    assert tenure.fencing.ForgedToken is tenure.ForgedToken
