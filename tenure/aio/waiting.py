"""The pauses of a blocking claim in an event loop: ``tenure.core.waiting`` without threads.

The pacing (backoff, waking at a lease's expiry, the caps) is ``waiting.Pacing``, the same as
the sync store's. Where the backend's watch is pushed by the store, one task per store follows
it, started by the first claim that waits, and wakes every waiting claim at a change that may
free a job; elsewhere a waiting claim sleeps out its backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from tenure.aio.backend import AsyncBackend
from tenure.core import waiting

log = logging.getLogger("tenure.waiting")


class AsyncChanges:
    """A count of the changes the store's watch reported that may free a job."""

    def __init__(self, backend: AsyncBackend) -> None:
        self._backend = backend
        self.native = backend.native_watch
        self._count = 0
        self._changed = asyncio.Event()  # replaced at each change: set ones wake their waiters
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def seen(self) -> int:
        """The count now; starts following the watch if nothing follows it."""
        if self.native and self._task is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(self._follow())
        return self._count

    async def wait(self, seen: int, timeout: float) -> None:
        """Until a change after ``seen`` is reported, or ``timeout`` seconds."""
        if self._count != seen:
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout)

    async def _follow(self) -> None:
        try:
            async for change in self._backend.watch(waiting.WATCH_INTERVAL):
                if waiting.may_free_a_job(change):
                    self._count += 1
                    changed, self._changed = self._changed, asyncio.Event()
                    changed.set()
        except Exception as exc:  # the backoff goes on without it
            log.info("the watch behind waiting claims ended: %s", exc)
        finally:
            if self._task is asyncio.current_task():
                self._task = None

    async def close(self) -> None:
        """Stop following the watch, and wait until it has let go of its connection."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class AsyncWaiter:
    """Paces the attempts of one blocking claim."""

    def __init__(self, changes: AsyncChanges, wait: float) -> None:
        self._changes = changes
        self._pacing = waiting.Pacing(wait, changes.native)
        self._seen = changes.seen()  # before the next attempt: a change after it wakes us

    async def pause(self, due_in: float | None = None) -> bool:
        """Sleep before the next attempt; False once the wait is over (do not try again)."""
        timeout = self._pacing.next_sleep(due_in)
        if timeout is None:
            return False
        await self._changes.wait(self._seen, timeout)
        self._seen = self._changes.seen()
        return True
