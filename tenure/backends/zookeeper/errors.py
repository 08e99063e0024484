"""The one place where kazoo's errors become tenure's."""

from __future__ import annotations

from types import TracebackType

from kazoo.exceptions import ConnectionLoss, KazooException, NoAuthError, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError

from tenure.core.errors import AuthenticationFailed, BackendUnavailable, OutcomeUnknown

# What a request meets when its answer is lost: it may have reached the server, and a write
# may have been applied (kazoo cannot say whether a request queued while it reconnected went).
_ANSWER_LOST = (ConnectionLoss, SessionExpiredError, KazooTimeoutError)


# What ``mapped`` turns into tenure's errors; any other exception goes through as it is.
MAPPED = (KazooException, KazooTimeoutError, OSError)


def mapped(exc: Exception, what: str, *, write: bool = False) -> BackendUnavailable:
    """The tenure error for ``exc``, one of ``MAPPED``, met during ``what``. ``write``: the
    requests may change the store (a commit's multi). One whose answer was lost may have been
    applied: ``OutcomeUnknown``, never a refusal and never sent again. The hot paths call it
    from ``except MAPPED`` (no frame unless something failed); the rest use ``mapped_errors``."""
    if write and isinstance(exc, _ANSWER_LOST):
        return OutcomeUnknown(f"ZooKeeper lost the answer during {what} ({type(exc).__name__}): "
                              "it may or may not have been applied; read the job before acting on it")
    if isinstance(exc, NoAuthError):
        return AuthenticationFailed(f"ZooKeeper refused {what}: not allowed by the znode's ACL "
                                    "for these credentials")
    if isinstance(exc, KazooTimeoutError):
        return BackendUnavailable(f"ZooKeeper timed out during {what}")
    if isinstance(exc, KazooException):
        return BackendUnavailable(f"ZooKeeper failed during {what}: {type(exc).__name__} {exc}")
    # kazoo's four-letter-word commands use a socket of their own
    return BackendUnavailable(f"ZooKeeper unreachable during {what}: {exc}")


class mapped_errors:  # lower case: it reads as a call, ``with mapped_errors("reading"):``
    """A context that raises the tenure error for a kazoo one (``mapped``) and lets any other
    exception through. A class, not a ``contextlib.contextmanager``: a generator costs two more
    frames."""

    __slots__ = ("_what", "_write")

    def __init__(self, what: str, *, write: bool = False) -> None:
        self._what = what
        self._write = write

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if isinstance(exc, MAPPED):
            raise mapped(exc, self._what, write=self._write) from exc
