"""The one place where kazoo's errors become tenure's."""

from __future__ import annotations

from types import TracebackType

from kazoo.exceptions import ConnectionLoss, KazooException, NoAuthError, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError

from tenure.core.errors import AuthenticationFailed, BackendUnavailable, OutcomeUnknown

# What a request meets when its answer is lost: it may have reached the server, and a write
# may have been applied (kazoo cannot say whether a request queued while it reconnected went).
_ANSWER_LOST = (ConnectionLoss, SessionExpiredError, KazooTimeoutError)


class mapped_errors:  # lower case: it reads as a call, ``with mapped_errors("reading"):``
    """The one place where kazoo's errors become tenure's: a context that raises the tenure
    error for a kazoo one (and lets any other exception through). A class, not a
    ``contextlib.contextmanager``: it wraps every request, and a generator costs two more frames.

    ``write``: the requests may change the store (a commit's multi). One whose answer was lost
    may have been applied: ``OutcomeUnknown``, never a refusal and never sent again. ``job``:
    named after ``what`` (``"writing job 'a'"``), formatted only for an error (every commit)."""

    __slots__ = ("_job", "_what", "_write")

    def __init__(self, what: str, *, write: bool = False, job: str | None = None) -> None:
        self._what = what
        self._write = write
        self._job = job

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is None:
            return
        what = self._what if self._job is None else f"{self._what} {self._job!r}"
        if self._write and isinstance(exc, _ANSWER_LOST):
            raise OutcomeUnknown(f"ZooKeeper lost the answer during {what} ({type(exc).__name__}): "
                                 "it may or may not have been applied; read the job before acting on it") from exc
        if isinstance(exc, NoAuthError):
            raise AuthenticationFailed(f"ZooKeeper refused {what}: not allowed by the znode's ACL "
                                       "for these credentials") from exc
        if isinstance(exc, KazooTimeoutError):
            raise BackendUnavailable(f"ZooKeeper timed out during {what}") from exc
        if isinstance(exc, KazooException):
            raise BackendUnavailable(f"ZooKeeper failed during {what}: {type(exc).__name__} {exc}") from exc
        if isinstance(exc, OSError):  # kazoo's four-letter-word commands use a socket of their own
            raise BackendUnavailable(f"ZooKeeper unreachable during {what}: {exc}") from exc

