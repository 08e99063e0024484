"""Checks on everything a caller hands us, done before anything is written."""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Callable

from tenure.core.errors import InvalidArgument, quoted

MAX_JOB_ID = 256
MAX_OWNER = 128
MAX_RESOURCE = 256
MAX_TTL = 7 * 24 * 3600.0
MAX_WAIT = MAX_TTL  # the longest a call blocks (a blocking claim, a grace period)
MAX_TOKEN = 2**63 - 1  # stores and fence tables keep tokens in signed 64-bit integers
# The highest token a claim issues. A record holding a higher one was written by something
# else; one holding this token can be claimed no more (``TokensExhausted``), as a next claim
# would issue a token no readable record may hold.
LAST_TOKEN = MAX_TOKEN - 1
MAX_REASON = 512

# Refused in ids: Cc, control characters; Cs, lone surrogates, which no store can encode; Cf,
# format characters (zero-width, bidi overrides, BOM), which make two ids look alike or reorder
# what an operator reads; Zl, Zp: line and paragraph separators, which break log lines and
# tables. As Unicode 14.0 assigns them (Python 3.11's unicodedata), written out rather than
# asked of unicodedata: every Python reads an id alike (3.10 knows Unicode 13, 3.12 Unicode 15),
# and the SQL stores check the same ranges (tests/core/test_codec.py checks them against 14.0).
REFUSED_RANGES = (
    (0x0, 0x1F, "control"), (0x7F, 0x9F, "control"), (0xAD, 0xAD, "format"), (0x600, 0x605, "format"),
    (0x61C, 0x61C, "format"), (0x6DD, 0x6DD, "format"), (0x70F, 0x70F, "format"), (0x890, 0x891, "format"),
    (0x8E2, 0x8E2, "format"), (0x180E, 0x180E, "format"), (0x200B, 0x200F, "format"),
    (0x2028, 0x2028, "line separator"), (0x2029, 0x2029, "paragraph separator"), (0x202A, 0x202E, "format"),
    (0x2060, 0x2064, "format"), (0x2066, 0x206F, "format"), (0xD800, 0xDFFF, "surrogate"),
    (0xFEFF, 0xFEFF, "format"), (0xFFF9, 0xFFFB, "format"), (0x110BD, 0x110BD, "format"),
    (0x110CD, 0x110CD, "format"), (0x13430, 0x13438, "format"), (0x1BCA0, 0x1BCA3, "format"),
    (0x1D173, 0x1D17A, "format"), (0xE0001, 0xE0001, "format"), (0xE0020, 0xE007F, "format"),
)
_STARTS = [low for low, _, _ in REFUSED_RANGES]
# The first refused character in a text, or None: a scan in C, so a good id (every one, nearly)
# costs no Python call; ``refused_character`` then says which character it is. Its class of
# 26 ranges is slow to match (1.5 us for a 5-character id); an ASCII text is checked first by
# ``isascii() and isprintable()``, the same answer (ASCII's refused characters are C0 and DEL,
# its unprintable ones) in a tenth of the time.
find_refused = re.compile("[" + "".join(f"\\U{low:08x}-\\U{high:08x}" for low, high, _ in REFUSED_RANGES) + "]").search


def refused_class(written: Callable[[int], str]) -> str:
    """``REFUSED_RANGES`` as the inside of a bracket expression (a SQL GLOB, a regular
    expression), each code point as ``written`` gives it. NUL and lone surrogates are left
    out: SQL text cannot carry them (a store checks for NUL its own way)."""
    return "".join(written(max(low, 1)) if low == high else f"{written(max(low, 1))}-{written(high)}"
                   for low, high, what in REFUSED_RANGES if what != "surrogate")


def refused_character(value: str) -> str | None:
    """The first character of ``value`` no id may contain, described without quoting the rest
    ("the control character U+000A ('\\n')"); None when there is none."""
    if find_refused(value) is None:
        return None
    for ch in value:
        code = ord(ch)
        low, high, what = REFUSED_RANGES[bisect.bisect_right(_STARTS, code) - 1]  # the first starts at 0
        if low <= code <= high:
            return f"the {what} character U+{code:04X} ({ch!a})"
    return None


def _text(kind: str, value: object, limit: int) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(f"{kind} must be a str, not {type(value).__name__}")
    if not 1 <= len(value) <= limit:
        raise InvalidArgument(f"{kind} must be 1 to {limit} characters, got {len(value)}")
    # str's own methods: a str subclass's overrides must not skip the scan (it refused them before).
    if not (str.isascii(value) and str.isprintable(value)) and find_refused(value) is not None:
        raise InvalidArgument(f"{kind} {quoted(value)} contains {refused_character(value)}")
    return value


def job_id(value: object) -> str:
    """Any Unicode text of 1 to 256 characters without control, format or separator characters."""
    return _text("job id", value, MAX_JOB_ID)


def owner(value: object) -> str:
    return _text("owner", value, MAX_OWNER)


def resource(value: object) -> str:
    """The name of a fenced resource at a destination: text as for job ids."""
    return _text("resource", value, MAX_RESOURCE)


def effect_id(value: object) -> str:
    """The caller's name for one external effect of a job (an idempotency key)."""
    return _text("effect id", value, MAX_RESOURCE)


def number(kind: str, value: object, what: str = "number of seconds") -> float:
    """A finite real number as a float: an int or a float, never a bool, str or Decimal, never
    nan or infinity, never an int too large for a float (10**400 would raise OverflowError)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"{kind} must be a {what} (int or float), not {type(value).__name__}")
    try:
        converted = float(value)
    except OverflowError:
        converted = math.inf  # refused just below, with the same words as infinity
    if not math.isfinite(converted):
        raise InvalidArgument(f"{kind} must be a finite {what}, got {quoted(value)}")
    return converted


def seconds(kind: str, value: object, *, maximum: float, positive: bool = False) -> float:
    """A duration: a finite number from 0 (above 0 with ``positive``) up to ``maximum``.

    Every duration has an upper bound: a wait or timeout beyond ``threading.TIMEOUT_MAX``
    raises OverflowError deep in the standard library, and a deadline that far away is a typo.
    """
    converted = number(kind, value)
    if converted < 0 or (positive and converted == 0):
        raise InvalidArgument(f"{kind} must be a {'positive' if positive else 'non-negative'} number of "
                              f"seconds, got {quoted(value)}")
    if converted > maximum:
        raise InvalidArgument(f"{kind} {converted:g}s is above the maximum of {maximum:g}s")
    return converted


def ttl(value: object, *, minimum: float = 0.0, maximum: float = MAX_TTL, backend: str = "") -> float:
    """A lease length: at most ``MAX_TTL`` whatever a backend declares, so no deadline computed
    from it can overflow a clock."""
    length = seconds("ttl", value, maximum=min(maximum, MAX_TTL), positive=True)
    if length < minimum:
        where = f" on {backend}" if backend else ""
        raise InvalidArgument(f"ttl {length:g}s is below the minimum of {minimum:g}s{where}")
    return length


def token(value: object) -> int:
    """A fencing token: a positive int that fits a signed 64-bit column (etcd revisions are int64)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"token must be an int, not {type(value).__name__}")
    if value < 1:
        raise InvalidArgument(f"token must be a positive int, got {quoted(value)}")
    if value > MAX_TOKEN:
        raise InvalidArgument(f"token must be at most {MAX_TOKEN}, got {quoted(value)}")
    return value


def highest(value: object) -> int:
    """The highest token a destination admitted: as a token, or 0 when it had admitted none."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"highest must be an int, not {type(value).__name__}")
    return 0 if value == 0 else token(value)


def reason(value: object) -> str:
    """Why a destination refused: text as for job ids, up to 512 characters; may be empty."""
    return "" if value == "" else _text("reason", value, MAX_REASON)


def store_time(kind: str, value: object) -> float:
    """A time on the store's clock (seconds since the epoch): a finite number, not a bool."""
    return number(kind, value)


def deadline(value: object) -> float:
    """A safe local deadline on the holder's monotonic clock; infinity means not stamped."""
    if isinstance(value, float) and value == math.inf:
        return value
    return number("deadline", value)


def result(value: object) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    raise InvalidArgument(f"result must be str, bytes or None, not {type(value).__name__}")


def whole(kind: str, value: object, minimum: int = 0, maximum: int | None = None) -> int:
    """A whole number from ``minimum`` (up to ``maximum``): a count, an offset, a page size."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{kind} must be a whole number, got {quoted(value)}")
    if value < minimum or (maximum is not None and value > maximum):
        within = f"from {minimum} to {maximum}" if maximum is not None else f"{minimum} or more"
        raise InvalidArgument(f"{kind} must be {within}, got {quoted(value)}")
    return value


def limit(value: object) -> int | None:
    """How many records at most: a whole number from 0, or None for no limit."""
    return None if value is None else whole("limit", value)
