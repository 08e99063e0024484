"""The one place where kazoo's errors become tenure's."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from kazoo.exceptions import KazooException, NoAuthError
from kazoo.handlers.threading import KazooTimeoutError

from tenure.core.errors import AuthenticationFailed, BackendUnavailable


@contextlib.contextmanager
def mapped_errors(what: str) -> Iterator[None]:
    """The one place where kazoo's errors become tenure's."""
    try:
        yield
    except NoAuthError as exc:
        raise AuthenticationFailed(f"ZooKeeper refused {what}: not allowed by the znode's ACL "
                                   "for these credentials") from exc
    except KazooTimeoutError as exc:
        raise BackendUnavailable(f"ZooKeeper timed out during {what}") from exc
    except KazooException as exc:
        raise BackendUnavailable(f"ZooKeeper failed during {what}: {type(exc).__name__} {exc}") from exc
    except OSError as exc:  # kazoo's four-letter-word commands use a socket of their own
        raise BackendUnavailable(f"ZooKeeper unreachable during {what}: {exc}") from exc
