"""Argument types of ``tenure``'s commands, checked by the library's own validators.

nan, inf, a negative or huge number, or a job id the store would refuse, is a usage error
(exit 64) at parse time, before the store is opened (for SQLite, before its file is created).
"""

from __future__ import annotations

import argparse
import os
import stat
from collections.abc import Callable, Mapping
from typing import Any

from tenure.core import store_rules, validation
from tenure.core.errors import InvalidArgument, quoted
from tenure.core.store_rules import MAX_PAGE

URL_ENV = "TENURE_URL"
URL_FILE_ENV = "TENURE_URL_FILE"
MAX_URL_FILE = 64 * 1024  # far above any URL: a file this long is not one


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
MAX_ATTEMPTS = _checked(store_rules.max_attempts, int, "a whole number")
DELAY = _checked(lambda v: store_rules.delay("delay", v))
RETRY_IN = _checked(lambda v: store_rules.delay("retry_in", v))
ERROR = _checked(store_rules.error, str, "text")


def _port(value: int) -> int:
    if not 0 <= value <= 65535:
        raise InvalidArgument(f"port must be from 0 to 65535, got {value}")
    return value


PORT = _checked(_port, int)
REFRESH = _checked(lambda v: validation.seconds("refresh", v, maximum=validation.MAX_WAIT))
SOON = _checked(lambda v: validation.seconds("soon", v, maximum=validation.MAX_TTL))


def store_url(url: str | None, url_file: str | None, environ: Mapping[str, str], default: str) -> str:
    """The store URL: ``--url`` or ``--url-file`` (not both), else ``$TENURE_URL_FILE`` or
    ``$TENURE_URL`` (not both, and neither set but empty), else ``default``."""
    if url is not None and url_file is not None:
        raise InvalidArgument("give --url or --url-file, not both")
    if url_file is not None:
        return url_from_file(url_file)
    if url is not None:
        return url
    for name in (URL_ENV, URL_FILE_ENV):  # a secret that failed to render: not the demo store in the cwd
        if name in environ and not environ[name].strip():
            raise InvalidArgument(f"{name} is set but empty: give the store's URL there, or unset it")
    if environ.get(URL_ENV) and environ.get(URL_FILE_ENV):
        raise InvalidArgument(f"{URL_ENV} and {URL_FILE_ENV} are both set: unset one")
    if environ.get(URL_FILE_ENV):
        return url_from_file(environ[URL_FILE_ENV])
    return environ.get(URL_ENV) or default


def url_from_file(path: str) -> str:
    """The one URL in the file at ``path``, on one line (surrounding whitespace ignored).

    The file holds the store's password, so it is refused, unread, if it belongs to another
    user (root aside), if other users may read it, or if anyone but its owner may write it
    (and so point every worker at another store). Nothing of its content is ever quoted.
    """
    try:
        with open(path, "rb") as f:  # fstat what was opened: the file checked is the file read
            exposed = _exposed(os.fstat(f.fileno()))
            if exposed:
                raise InvalidArgument(f"the URL file {quoted(path)} {exposed}: it may hold the store's password; "
                                      "make it yours and chmod 600 (or 640 to share it with a group; a "
                                      "mounted secret: defaultMode 0440 with fsGroup, or 0400)")
            data = f.read(MAX_URL_FILE + 1)
    except OSError as exc:
        raise InvalidArgument(f"cannot read the URL file {quoted(path)}: {exc.strerror}") from None
    try:
        lines = data.decode("utf-8").strip().splitlines()
    except UnicodeDecodeError:
        raise InvalidArgument(f"the URL file {quoted(path)} is not UTF-8 text") from None
    if len(data) > MAX_URL_FILE or len(lines) != 1:
        raise InvalidArgument(f"the URL file {quoted(path)} must hold one URL on one line "
                              f"({'empty' if not lines else 'more than that'})")
    return lines[0].strip()


def _exposed(info: os.stat_result) -> str:
    """What is wrong with a URL file's owner or mode, or "" if nothing is."""
    if info.st_uid not in (os.geteuid(), 0):
        return f"belongs to another user (uid {info.st_uid})"
    mode = stat.S_IMODE(info.st_mode)
    if mode & stat.S_IROTH:
        return f"is readable by every user (mode {mode:04o})"
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by others than its owner (mode {mode:04o})"
    return ""
