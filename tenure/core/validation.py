"""Checks on everything a caller hands us, done before anything is written."""

from __future__ import annotations

import math
import unicodedata

from tenure.core.errors import InvalidArgument

MAX_JOB_ID = 256
MAX_OWNER = 128
MAX_RESOURCE = 256
MAX_TTL = 7 * 24 * 3600.0


def _text(kind: str, value: object, limit: int) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(f"{kind} must be a str, not {type(value).__name__}")
    if not 1 <= len(value) <= limit:
        raise InvalidArgument(f"{kind} must be 1 to {limit} characters, got {len(value)}")
    if value.isascii() and value.isprintable():  # the common case, and ASCII's only Cc are unprintable
        return value
    for ch in value:
        # Cc: control characters; Cs: lone surrogates, which no store can encode.
        if unicodedata.category(ch) in ("Cc", "Cs"):
            raise InvalidArgument(f"{kind} {value!r} contains the control character {ch!r}")
    return value


def job_id(value: object) -> str:
    """Any Unicode text of 1 to 256 characters without control characters."""
    return _text("job id", value, MAX_JOB_ID)


def owner(value: object) -> str:
    return _text("owner", value, MAX_OWNER)


def resource(value: object) -> str:
    """The name of a fenced resource at a destination: text as for job ids."""
    return _text("resource", value, MAX_RESOURCE)


def effect_id(value: object) -> str:
    """The caller's name for one external effect of a job (an idempotency key)."""
    return _text("effect id", value, MAX_RESOURCE)


def ttl(value: object, *, minimum: float = 0.0, maximum: float = MAX_TTL, backend: str = "") -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"ttl must be a number of seconds, not {type(value).__name__}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidArgument(f"ttl must be a positive number of seconds, got {value!r}")
    if seconds < minimum:
        where = f" on {backend}" if backend else ""
        raise InvalidArgument(f"ttl {seconds:g}s is below the minimum of {minimum:g}s{where}")
    if seconds > maximum:
        raise InvalidArgument(f"ttl {seconds:g}s is above the maximum of {maximum:g}s")
    return seconds


def token(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"token must be an int, not {type(value).__name__}")
    if value < 1:
        raise InvalidArgument(f"token must be a positive int, got {value}")
    return value


def result(value: object) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    raise InvalidArgument(f"result must be str, bytes or None, not {type(value).__name__}")


def limit(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgument(f"limit must be a non-negative int or None, got {value!r}")
    return value
