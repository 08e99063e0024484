"""What the fences need to know about a DB-API (PEP 249) connection, learned once per connection.

The driver module (``sqlite3``, ``psycopg`` ...) tells us its placeholder style and its
``Error`` base class; its errors become tenure errors here and nowhere else.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from tenure.core.errors import BackendUnavailable, InvalidArgument, quoted

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,47}")
_PLACEHOLDER = "?"  # tenure's own SQL is written in qmark style and rewritten once per driver
SQLITE_UPSERT_RETURNING = (3, 35, 0)


class Connection(Protocol):
    """The part of a DB-API connection the fences use."""

    def cursor(self) -> Any: ...

    def commit(self) -> None: ...

    def rollback(self) -> None: ...


Params = Sequence[Any] | dict[str, Any]


def identifier(kind: str, value: object) -> str:
    """A table name prefix: it goes into SQL text, so only plain identifiers are allowed."""
    if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value):
        raise InvalidArgument(f"{kind} must be a plain SQL identifier (letters, digits, _), got {quoted(value)}")
    return value


class Driver:
    """The driver behind one connection: placeholder style, error class, transaction state."""

    def __init__(self, conn: object) -> None:
        name = type(conn).__module__.split(".")[0]
        module = sys.modules.get(name)
        style = getattr(module, "paramstyle", None)
        error = getattr(module, "Error", None)
        if (not callable(getattr(conn, "cursor", None)) or style not in _STYLES
                or not (isinstance(error, type) and issubclass(error, Exception))):
            raise InvalidArgument(
                f"expected a DB-API connection (sqlite3, psycopg ...), not {type(conn).__name__}")
        if name == "sqlite3" and sqlite3.sqlite_version_info < SQLITE_UPSERT_RETURNING:
            raise InvalidArgument(f"fences need SQLite 3.35 or later (upsert with RETURNING), "
                                  f"this is {sqlite3.sqlite_version}")
        self.name = name
        self.paramstyle: str = style
        self.error: type[Exception] = error

    def statement(self, text: str) -> _Statement:
        return _Statement(text, self.paramstyle)

    @contextlib.contextmanager
    def errors(self, doing: str) -> Iterator[None]:
        """The one place where this driver's errors become tenure errors."""
        try:
            yield
        except self.error as exc:
            raise BackendUnavailable(f"{doing} failed on {self.name}: {exc}") from exc

    def in_transaction(self, conn: object) -> bool | None:
        """Whether a transaction is open; None when the driver does not say."""
        if self.name == "sqlite3" and getattr(conn, "autocommit", None) is False:
            return None  # Python 3.12's PEP 249 mode keeps a transaction open at all times
        flag = getattr(conn, "in_transaction", None)  # sqlite3
        if isinstance(flag, bool):
            return flag
        status = getattr(getattr(conn, "info", None), "transaction_status", None)  # psycopg: 0 is idle
        return None if status is None else int(status) != 0

    def autocommit(self, conn: object) -> bool:
        mode = getattr(conn, "autocommit", None)
        if mode is True or mode is False:
            return mode
        # sqlite3 before 3.12 (and its legacy mode after): autocommit means no isolation level.
        return self.name == "sqlite3" and getattr(conn, "isolation_level", "") is None


class _Statement:
    """One SQL text rewritten for the driver's placeholder style."""

    def __init__(self, text: str, style: str) -> None:
        parts = text.split(_PLACEHOLDER)
        self.count = len(parts) - 1
        self.named = style in ("named", "pyformat")
        marks = [_STYLES[style](i) for i in range(self.count)]
        self.text = parts[0] + "".join(m + p for m, p in zip(marks, parts[1:], strict=True))

    def params(self, values: Sequence[Any]) -> Params:
        if len(values) != self.count:  # a bug in tenure, not bad input
            raise AssertionError(f"statement takes {self.count} parameters, got {len(values)}")
        return {f"p{i}": v for i, v in enumerate(values)} if self.named else tuple(values)

    def run(self, cursor: Any, *values: Any) -> Any:
        cursor.execute(self.text, self.params(values))
        return cursor


_STYLES: dict[str, Callable[[int], str]] = {
    "qmark": lambda i: "?",
    "format": lambda i: "%s",
    "pyformat": lambda i: f"%(p{i})s",
    "numeric": lambda i: f":{i + 1}",
    "named": lambda i: f":p{i}",
}


@contextlib.contextmanager
def transaction(conn: Connection, driver: Driver, doing: str) -> Iterator[None]:
    """One transaction of the caller's connection: commit on success, roll back on any error.

    It refuses a connection in autocommit mode (each statement would commit alone, so a check
    could not cover the writes after it) and one with a transaction already open (our commit
    would also commit writes made before the check).
    """
    if driver.autocommit(conn):
        raise InvalidArgument(f"{doing} needs a connection that is not in autocommit mode: "
                              "the check and the writes must commit together")
    if driver.in_transaction(conn):
        raise InvalidArgument(f"{doing} needs a connection without an open transaction: "
                              "commit or roll back first")
    try:
        yield
        with driver.errors(f"committing {doing}"):
            conn.commit()
    except BaseException:
        with contextlib.suppress(Exception):  # the error that got us here matters more
            conn.rollback()
        raise
