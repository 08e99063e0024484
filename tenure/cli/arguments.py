"""Argument types of ``tenure``'s commands, checked by the library's own validators.

nan, inf, a negative or huge number, or a job id the store would refuse, is a usage error
(exit 64) at parse time, before the store is opened (for SQLite, before its file is created).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from tenure.core import validation
from tenure.core.checks import MAX_PAGE
from tenure.core.errors import InvalidArgument


def _checked(check: Callable[[Any], Any], convert: Callable[[str], Any] = float,
             what: str = "a number") -> Callable[[str], Any]:
    """An argparse type: a value checked like the library's own arguments. Its messages are
    the library's, never Python's ("invalid int value")."""

    def parse(text: str) -> Any:
        try:
            return check(convert(text))
        except ValueError as exc:  # InvalidArgument is a ValueError too
            raise argparse.ArgumentTypeError(str(exc) if isinstance(exc, InvalidArgument)
                                             else f"not {what}: {text[:40]!r}") from None

    parse.__name__ = "value"  # what argparse's message calls the type
    return parse


def _whole(kind: str, minimum: int = 0, maximum: int | None = None) -> Callable[[str], Any]:
    return _checked(lambda v: validation.whole(kind, v, minimum, maximum), int, "a whole number")


JOB_ID = _checked(validation.job_id, str)
OWNER = _checked(validation.owner, str)
TOKEN = _checked(validation.token, int, "a whole number")
LIMIT = _whole("limit")  # the most recent N records
PAGE_LIMIT = _whole("limit", 1, MAX_PAGE)
OFFSET = _whole("offset")
COUNT = _whole("count", 1)
WORKERS = _whole("workers", 1)
JOBS = _whole("jobs")
EVERY = _checked(lambda v: validation.seconds("every", v, maximum=validation.MAX_WAIT))
TTL = _checked(validation.ttl)
WAIT = _checked(lambda v: validation.seconds("wait", v, maximum=validation.MAX_WAIT))
GRACE = _checked(lambda v: validation.seconds("grace", v, maximum=validation.MAX_WAIT))
INTERVAL = _checked(lambda v: validation.seconds("interval", v, maximum=validation.MAX_WAIT, positive=True))
SINCE = _checked(lambda v: validation.store_time("since", v))


def _port(value: int) -> int:
    if not 0 <= value <= 65535:
        raise InvalidArgument(f"port must be from 0 to 65535, got {value}")
    return value


PORT = _checked(_port, int)
REFRESH = _checked(lambda v: validation.seconds("refresh", v, maximum=validation.MAX_WAIT))
SOON = _checked(lambda v: validation.seconds("soon", v, maximum=validation.MAX_TTL))
