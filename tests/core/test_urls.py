"""Store URLs and options: malformed input names the problem, keyword arguments win."""

from __future__ import annotations

from pathlib import Path

import pytest

import tenure
from tenure.core.options import parse_url
from tenure.core.registry import backend_class


@pytest.mark.parametrize("url, message", [
    ("", "not a store URL"),
    ("jobs.db", "not a store URL"),
    (42, "must be a str"),
    ("ftp://host/x", "unknown store scheme 'ftp'"),
    ("etcd://h:99999/p", "port 99999 out of range"),
    ("etcd://bad host:1/p", "bad host"),
    ("sqlite://", "SQLite URLs look like"),
    ("sqlite://host/x.db", "SQLite URLs look like"),
    ("sqlite:////no/such/dir/x.db", "directory does not exist"),
    ("memory://?retention=0", "retention"),
    ("memory://?retention=ten", "an integer"),
    ("memory://?drift_margin=0.9", "drift_margin"),
    ("memory://?unknown=1", "unknown option(s) for memory://: unknown"),
    ("memory://?a=1&a=2", "given twice"),
])
def test_bad_urls_and_options(url: object, message: str) -> None:
    with pytest.raises(tenure.InvalidArgument) as info:
        tenure.connect(url)  # type: ignore[arg-type]
    assert message in str(info.value)


def test_keyword_arguments_override_the_query(tmp_path: Path) -> None:
    with tenure.connect(f"sqlite:///{tmp_path / 'x.db'}?timeout=1", timeout=7.5) as store:
        assert store.backend._db.execute("PRAGMA busy_timeout").fetchone()[0] == 7500  # type: ignore[attr-defined]
    with pytest.raises(tenure.InvalidArgument, match="timeout"):
        tenure.connect(f"sqlite:///{tmp_path / 'x.db'}", timeout=-1)


def test_parse_url_pieces_and_redaction() -> None:
    url = parse_url("etcd://user:s%40cret@h1:2379,[::1]:2380,h3/pre/fix?timeout=2")
    assert url.hosts == (("h1", 2379), ("::1", 2380), ("h3", None))
    assert (url.username, url.password, url.path, url.query) == ("user", "s@cret", "/pre/fix", {"timeout": "2"})
    assert "cret" not in url.redacted() and "cret" not in repr(url)
    assert url.redacted() == "etcd://user:***@h1:2379,::1:2380,h3/pre/fix"


def test_named_memory_stores_are_shared_in_the_process() -> None:
    with tenure.connect("memory://shared-test") as a, tenure.connect("memory://shared-test") as b:
        a.submit("j")
        assert b.get("j") is not None
    with tenure.connect("memory://") as private:
        assert private.get("j") is None


def test_builtin_schemes_resolve() -> None:
    assert backend_class("memory").characteristics.name == "memory"
    assert backend_class("sqlite").characteristics.name == "sqlite"
