"""ZooKeeper I/O written once for the sync backend and for tenure.aio (``tenure.core.io_drivers``):
an ``Io`` yields kazoo ``IAsyncResult``\\ s sent with kazoo's ``*_async`` calls.

``run`` waits with ``IAsyncResult.get(timeout)``: the sync backend's calls, unchanged.
``run_async`` awaits each result bridged to an asyncio future (``rawlink``, then
``loop.call_soon_threadsafe`` from kazoo's completion thread): no thread per call, and a wait
that outlasts the timeout raises kazoo's own timeout error, as ``get`` does. ``detached``
waits for nothing: each answer resumes the ``Io`` on kazoo's completion thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable
from typing import Any, TypeVar

from kazoo.handlers.threading import KazooTimeoutError

from tenure.core import io_drivers
from tenure.core.io_drivers import Io

T = TypeVar("T")
__all__ = ["Io", "awaited", "detached", "run", "run_async"]


def run(io: Io[T], timeout: float) -> T:
    """``io``, each result waited for in this thread."""
    return io_drivers.run(io, lambda result: result.get(timeout=timeout))


async def run_async(io: Io[T], timeout: float) -> T:
    """``io``, each result awaited in the running loop."""
    return await io_drivers.run_async(io, lambda result: awaited(result, timeout))


def detached(io: Io[None], ended: Callable[[BaseException | None], None]) -> None:
    """``io`` with nobody waiting for it: started here, then resumed by each answer on kazoo's
    completion thread (``rawlink``); ``ended(error)`` once it returns or raises. For tidying
    that must not hold up the request it follows (an audit trim after a renewal's commit). A
    request of a closed client fails, which ends it."""
    def resume(step: Callable[[], Any]) -> None:
        try:
            pending = step()
        except StopIteration:
            ended(None)
        except Exception as exc:
            ended(exc)
        else:
            pending.rawlink(answered)

    def answered(result: Any) -> None:
        if result.successful():
            resume(functools.partial(io.send, result.value))
        else:
            resume(functools.partial(io.throw, result.exception))

    resume(functools.partial(next, io))


async def awaited(result: Any, timeout: float) -> Any:
    """The value of a kazoo ``IAsyncResult``, awaited; ``KazooTimeoutError`` after ``timeout``."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(done: Any) -> None:  # on kazoo's completion thread
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
            loop.call_soon_threadsafe(_settle, future, done)

    result.rawlink(settle)
    try:
        return await asyncio.wait_for(future, timeout)
    except asyncio.TimeoutError:
        raise KazooTimeoutError(f"Value not received within {timeout} seconds") from None
    finally:
        result.unlink(settle)


def _settle(future: asyncio.Future[Any], done: Any) -> None:
    if future.done():
        return  # timed out or cancelled meanwhile
    if done.successful():
        future.set_result(done.value)
    else:
        future.set_exception(done.exception)
