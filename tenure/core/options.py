"""Store URLs and their options.

``scheme://user:pass@h1:p1,h2:p2/path?opt=value``: options come from the query string and
keyword arguments override them. Every backend reads its options through ``Options``, so an
unknown or out-of-range option is reported the same way everywhere.

A URL may hold a password (in its user part or its options) and a mistyped URL may put it
anywhere, so no error here quotes the URL's text: errors name the part that is wrong and
quote only option names that look like names, and values of options that hold no secret.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, unquote_plus

from tenure.core.errors import InvalidArgument, quoted

_URL = re.compile(r"^(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*)://(?P<rest>.*)$", re.DOTALL)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")
# Options whose values are secrets (or paths to them), never quoted back.
_SECRET = re.compile(r"pass|secret|token|key|digest|auth|cred|reader", re.IGNORECASE)
_HOST = re.compile(r"^(?:\[(?P<v6>[0-9a-fA-F:.]+)\]|(?P<name>[A-Za-z0-9._-]+))(?::(?P<port>\d{1,5}))?$")


@dataclass(frozen=True)
class StoreURL:
    """A parsed store URL: ``scheme://user:password@host:port,host2/path?name=value``.

    ``hosts`` is a tuple of ``(host, port or None)``, empty for ``scheme:///path`` (three
    slashes: a local path); ``path`` is percent-decoded; ``query`` the raw options (read them
    through ``Options``). ``password`` never shows in a repr; ``redacted()`` is the URL for
    display, ``secrets()`` what must never be shown."""

    scheme: str
    hosts: tuple[tuple[str, int | None], ...]
    path: str
    query: dict[str, str]
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    raw: str = field(default="", repr=False)

    def secrets(self) -> tuple[str, ...]:
        """What this URL holds that must never be shown or handed on: its password and the
        values of options whose names say they hold a secret, and the password part of such a
        value written ``name:password`` (ZooKeeper's ``reader=``)."""
        return tuple(dict.fromkeys(v for v in (self.password, *secret_values(self.query)) if v))

    def redacted(self) -> str:
        """The URL for display: never the password, never query options that hold secrets."""
        auth = f"{self.username}:***@" if self.password is not None else (
            f"{self.username}@" if self.username else "")
        hosts = ",".join(h if p is None else f"{h}:{p}" for h, p in self.hosts)
        return f"{self.scheme}://{auth}{hosts}{self.path}"


def parse_url(url: object) -> StoreURL:
    if not isinstance(url, str):
        raise InvalidArgument(f"store URL must be a str, not {type(url).__name__}")
    m = _URL.match(url.strip())
    if not m:
        raise InvalidArgument("not a store URL (expected scheme://...; the text is not shown, "
                              "it may hold a password)")
    scheme, rest = m["scheme"].lower(), m["rest"]
    rest, _, query_text = rest.partition("?")
    netloc, slash, path = rest.partition("/")
    path = slash + path
    username = password = None
    if "@" in netloc:
        auth, _, netloc = netloc.rpartition("@")
        user_text, colon, pass_text = auth.partition(":")
        username = unquote(user_text) or None
        password = unquote(pass_text) if colon else None
    hosts: list[tuple[str, int | None]] = []
    for number, part in enumerate(filter(None, netloc.split(",")), 1):
        hm = _HOST.match(part)
        if not hm:
            raise InvalidArgument(f"bad host (the {_ordinal(number)}) in store URL: expected name[:port] "
                                  "or [IPv6 address][:port], comma-separated")
        port = int(hm["port"]) if hm["port"] else None
        if port is not None and not 0 < port < 65536:
            raise InvalidArgument(f"port {port} out of range in store URL")
        hosts.append((hm["v6"] or hm["name"], port))
    query: dict[str, str] = {}
    fields = query_text.split("&") if query_text else []
    for number, text in enumerate(fields, 1):
        raw_key, equals, raw_value = text.partition("=")
        if not equals or not raw_key:  # checked here, not by parse_qsl, whose errors quote the field
            raise InvalidArgument(f"bad query string in store URL: the {_ordinal(number)} of its "
                                  f"{len(fields)} fields is not name=value")
        key, value = unquote_plus(raw_key), unquote_plus(raw_value)
        if key in query:
            raise InvalidArgument(f"option {option_name(key)} given twice in store URL")
        query[key] = value
    return StoreURL(scheme, tuple(hosts), unquote(path), query, username, password, url)


class Options:
    """Typed access to URL options, keyword arguments winning; leftovers are an error."""

    def __init__(self, query: dict[str, str], overrides: dict[str, Any], where: str,
                 secrets: tuple[str | None, ...] = ()) -> None:
        self._values: dict[str, Any] = {**query, **overrides}
        self._where = where
        # Never quoted back, even from the wrong option: the URL's password and secret options.
        self._secrets = {v for v in (*(str(s) for s in secrets if s is not None), *secret_values(self._values)) if v}

    def _take(self, name: str) -> Any:
        return self._values.pop(name, None)

    def _bad(self, name: str, value: Any, expected: str) -> InvalidArgument:
        secret = is_secret_option(name) or any(s in str(value) for s in self._secrets)
        shown = "(not shown)" if secret else quoted(value)
        return InvalidArgument(f"option {option_name(name)}={shown} for {self._where}: expected {expected}")

    def number(self, name: str, default: float | None, *, low: float = 0.0,
               high: float = math.inf, low_open: bool = False) -> float | None:
        """Option ``name`` as a finite float from ``low`` (excluded with ``low_open``) to ``high``,
        both included; ``default`` if not given. Taken: ``finish`` no longer sees it."""
        value = self._take(name)
        if value is None:
            return default
        try:
            number: float | None = float(value)
        except (TypeError, ValueError, OverflowError):  # OverflowError: float(10**400), int(inf)
            number = None  # raised below, outside this block: the error must not chain the value
        if number is None:
            raise self._bad(name, value, "a number")
        if isinstance(value, bool) or not math.isfinite(number) or number < low or number > high \
                or (low_open and number == low):
            raise self._bad(name, value, f"a number {'>' if low_open else '>='} {low:g}"
                            + (f" and <= {high:g}" if high != math.inf else ""))
        return number

    def integer(self, name: str, default: int, *, low: int = 0, high: int = 2**62) -> int:
        """Option ``name`` as an int from ``low`` to ``high``, both included (a float or a bool is
        refused); ``default`` if not given."""
        value = self._take(name)
        if value is None:
            return default
        try:
            number: int | None = int(value)
        except (TypeError, ValueError, OverflowError):  # OverflowError: float(10**400), int(inf)
            number = None  # raised below, outside this block: the error must not chain the value
        if number is None:
            raise self._bad(name, value, "an integer")
        if isinstance(value, (bool, float)) or not low <= number <= high:
            raise self._bad(name, value, f"an integer from {low} to {high}")
        return number

    def boolean(self, name: str, default: bool) -> bool:
        """Option ``name`` as a bool: 1/true/yes/on or 0/false/no/off (any case), or a bool
        keyword; ``default`` if not given."""
        value = self._take(name)
        if value is None:
            return default
        if isinstance(value, bool):
            return value
        text = str(value).lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise self._bad(name, value, "true or false")

    def text(self, name: str, default: str | None = None, *, choices: tuple[str, ...] = ()) -> str | None:
        """Option ``name`` as text, one of ``choices`` when given; ``default`` if not given."""
        value = self._take(name)
        if value is None:
            return default
        if not isinstance(value, str) or (choices and value not in choices):
            raise self._bad(name, value, " or ".join(choices) if choices else "text")
        return value

    def raw(self, name: str, default: Any = None) -> Any:
        """An object option (a clock, a client) that only keyword arguments can pass."""
        value = self._take(name)
        return default if value is None else value

    def finish(self) -> None:
        """Call once every option was read: one left over is an ``InvalidArgument`` naming it
        (never its value), so a misspelt option is an error, not ignored."""
        if self._values:
            names = ", ".join(sorted(option_name(name) for name in self._values))
            raise InvalidArgument(f"unknown option(s) for {self._where}: {names}")


def secret_values(options: Mapping[str, Any]) -> list[str]:
    """The values of options whose names say they hold a secret, and the password part of such
    a value written ``name:password`` (ZooKeeper's ``reader=``), a secret on its own."""
    values = [str(v) for k, v in options.items() if is_secret_option(k) and v is not None]
    return [*values, *(v.partition(":")[2] for v in values)]


def is_secret_option(name: str) -> bool:
    """Whether an option's value is a secret (or a path to one), by its name."""
    return _SECRET.search(name) is not None


def option_name(name: object) -> str:
    """An option's name for an error message; text that is not a name may be a misplaced secret."""
    return name if isinstance(name, str) and _NAME.fullmatch(name) else "(a name that is not an identifier)"


def _ordinal(number: int) -> str:
    return {1: "first", 2: "second", 3: "third"}.get(number, f"{number}th")
