"""The one place where kazoo's errors become tenure's."""

from __future__ import annotations

from types import TracebackType

from kazoo.exceptions import KazooException, NoAuthError
from kazoo.handlers.threading import KazooTimeoutError

from tenure.core.errors import AuthenticationFailed, BackendUnavailable


class mapped_errors:  # lower case: it reads as a call, ``with mapped_errors("reading"):``
    """The one place where kazoo's errors become tenure's: a context that raises the tenure
    error for a kazoo one (and lets any other exception through). A class, not a
    ``contextlib.contextmanager``: it wraps every request, and a generator costs two more frames."""

    __slots__ = ("_what",)

    def __init__(self, what: str) -> None:
        self._what = what

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        what = self._what
        if isinstance(exc, NoAuthError):
            raise AuthenticationFailed(f"ZooKeeper refused {what}: not allowed by the znode's ACL "
                                       "for these credentials") from exc
        if isinstance(exc, KazooTimeoutError):
            raise BackendUnavailable(f"ZooKeeper timed out during {what}") from exc
        if isinstance(exc, KazooException):
            raise BackendUnavailable(f"ZooKeeper failed during {what}: {type(exc).__name__} {exc}") from exc
        if isinstance(exc, OSError):  # kazoo's four-letter-word commands use a socket of their own
            raise BackendUnavailable(f"ZooKeeper unreachable during {what}: {exc}") from exc

