"""ZooKeeper I/O written once for the sync backend and for tenure.aio.

An ``Io[T]`` is a generator that sends requests with kazoo's ``*_async`` calls, yields each
``IAsyncResult`` it must wait for, is sent its value (or has its exception thrown in, where
``mapped_errors`` maps it as around a blocking call) and returns a ``T``. Requests sent before
a yield travel together (pipelined), exactly as when the sync code waited at that point.

``run`` waits with ``IAsyncResult.get(timeout)``: the sync backend's calls, unchanged.
``run_async`` awaits each result bridged to an asyncio future (``rawlink``, then
``loop.call_soon_threadsafe`` from kazoo's completion thread): no thread per call, and a wait
that outlasts the timeout raises kazoo's own timeout error, as ``get`` does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Generator
from typing import Any, TypeVar

from kazoo.handlers.threading import KazooTimeoutError

T = TypeVar("T")
Io = Generator[Any, Any, T]


def started(io: Io[T]) -> Io[T]:
    """``io`` with its first requests sent now rather than at its first wait, so they travel
    with requests sent after them."""
    try:
        first = next(io)
    except StopIteration as done:
        return _done(done.value)
    return _resumed(io, first)


def _done(value: T) -> Io[T]:
    return value
    yield  # a generator that waits for nothing


def _resumed(io: Io[T], result: Any) -> Io[T]:
    while True:
        try:
            value = yield result
        except Exception as exc:
            try:
                result = io.throw(exc)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
        else:
            try:
                result = io.send(value)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]


def run(io: Io[T], timeout: float) -> T:
    """``io``, each result waited for in this thread."""
    try:
        result = next(io)
        while True:
            try:
                value = result.get(timeout=timeout)
            except Exception as exc:  # handed to the generator, which maps or handles it
                result = io.throw(exc)
            else:
                result = io.send(value)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def run_async(io: Io[T], timeout: float) -> T:
    """``io``, each result awaited in the running loop."""
    try:
        result = next(io)
        while True:
            try:
                value = await awaited(result, timeout)
            except Exception as exc:
                result = io.throw(exc)
            else:
                result = io.send(value)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


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
