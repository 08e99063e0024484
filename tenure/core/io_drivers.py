"""A store's I/O written once for sync and asyncio callers, as generators.

An ``Io[T]`` is a generator that sends its requests (without waiting), yields each pending
answer it must wait for, is sent the answer's value (or has its exception thrown in, as a
blocking call would have raised it there) and returns a ``T``. Requests sent before a yield
travel together (pipelined). ``run`` waits for each answer in this thread, ``run_async``
awaits it; what a pending answer is and how it is waited for is the store's (``wait``).

``IoOf[E, T]`` names what an ``Io`` yields (``E``: a store's effects, e.g. etcd's ``EtcdIo``), so
mypy checks each yield and that ``wait`` answers every kind; ``Io[T]`` yields anything.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

T = TypeVar("T")
E = TypeVar("E")
IoOf = Generator[E, Any, T]
Io = IoOf[Any, T]


def run(io: IoOf[E, T], wait: Callable[[E], Any]) -> T:
    """``io``, each answer it yields given ``wait(answer)`` in this thread."""
    try:
        pending = next(io)
        while True:
            try:
                value = wait(pending)
            except Exception as exc:  # handed to the generator, which maps or handles it
                pending = io.throw(exc)
            else:
                pending = io.send(value)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def run_async(io: IoOf[E, T], wait: Callable[[E], Awaitable[Any]]) -> T:
    """``io``, each answer it yields awaited as ``wait(answer)`` in the running loop."""
    try:
        pending = next(io)
        while True:
            try:
                value = await wait(pending)
            except Exception as exc:
                pending = io.throw(exc)
            else:
                pending = io.send(value)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
