"""Store URLs and their options.

``scheme://user:pass@h1:p1,h2:p2/path?opt=value``: options come from the query string and
keyword arguments override them. Every backend reads its options through ``Options``, so an
unknown or out-of-range option is reported the same way everywhere.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote

from tenure.core.errors import InvalidArgument

_URL = re.compile(r"^(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*)://(?P<rest>.*)$", re.DOTALL)
_USERINFO = re.compile(r"(^|[/:])[^/:@]*(?::[^@]*)?@")
_HOST = re.compile(r"^(?:\[(?P<v6>[0-9a-fA-F:.]+)\]|(?P<name>[A-Za-z0-9._-]+))(?::(?P<port>\d{1,5}))?$")


@dataclass(frozen=True)
class StoreURL:
    scheme: str
    hosts: tuple[tuple[str, int | None], ...]
    path: str
    query: dict[str, str]
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    raw: str = field(default="", repr=False)

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
        shown = _USERINFO.sub(r"\1***@", url)  # whatever stands before an @ may be a password
        raise InvalidArgument(f"not a store URL (expected scheme://...): {shown!r}")
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
    for part in filter(None, netloc.split(",")):
        hm = _HOST.match(part)
        if not hm:
            raise InvalidArgument(f"bad host {part!r} in store URL")
        port = int(hm["port"]) if hm["port"] else None
        if port is not None and not 0 < port < 65536:
            raise InvalidArgument(f"port {port} out of range in store URL")
        hosts.append((hm["v6"] or hm["name"], port))
    try:
        pairs = parse_qsl(query_text, keep_blank_values=True, strict_parsing=bool(query_text))
    except ValueError as exc:
        raise InvalidArgument(f"bad query string in store URL: {query_text!r}") from exc
    query: dict[str, str] = {}
    for key, value in pairs:
        if key in query:
            raise InvalidArgument(f"option {key!r} given twice in store URL")
        query[key] = value
    return StoreURL(scheme, tuple(hosts), unquote(path), query, username, password, url)


class Options:
    """Typed access to URL options, keyword arguments winning; leftovers are an error."""

    def __init__(self, query: dict[str, str], overrides: dict[str, Any], where: str) -> None:
        self._values: dict[str, Any] = {**query, **overrides}
        self._where = where

    def _take(self, name: str) -> Any:
        return self._values.pop(name, None)

    def _bad(self, name: str, value: Any, expected: str) -> InvalidArgument:
        return InvalidArgument(f"option {name}={value!r} for {self._where}: expected {expected}")

    def number(self, name: str, default: float | None, *, low: float = 0.0,
               high: float = math.inf, low_open: bool = False) -> float | None:
        value = self._take(name)
        if value is None:
            return default
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise self._bad(name, value, "a number") from None
        if isinstance(value, bool) or not math.isfinite(number) or number < low or number > high \
                or (low_open and number == low):
            raise self._bad(name, value, f"a number {'>' if low_open else '>='} {low:g}"
                            + (f" and <= {high:g}" if high != math.inf else ""))
        return number

    def integer(self, name: str, default: int, *, low: int = 0, high: int = 2**62) -> int:
        value = self._take(name)
        if value is None:
            return default
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise self._bad(name, value, "an integer") from None
        if isinstance(value, (bool, float)) or not low <= number <= high:
            raise self._bad(name, value, f"an integer from {low} to {high}")
        return number

    def boolean(self, name: str, default: bool) -> bool:
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
        if self._values:
            names = ", ".join(sorted(self._values))
            raise InvalidArgument(f"unknown option(s) for {self._where}: {names}")
