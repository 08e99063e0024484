"""A store's I/O written once for sync and asyncio callers, as generators.

An I/O generator sends its requests (without waiting), yields each effect it must wait for
(a pending answer, or a request for the driver to send), is sent the answer's value (or has
its exception thrown in, as a blocking call would have raised it there) and returns a ``T``.
Requests sent before a yield travel together (pipelined). ``run`` waits for each answer in
this thread, ``run_async`` awaits it; what an effect is and how it is answered is the store's
(``wait``), and mypy checks that ``wait`` answers every kind a generator yields with what the
generator is sent (PostgreSQL's plans: a query's rows).

``IoOf[E, T]`` is such a generator yielding a store's effects ``E`` (etcd's ``EtcdIo``,
ZooKeeper's ``ZkIo``) and sent ``Any``: one send type per generator cannot follow which
effect it answers, so a store whose effects answer different types says so with ``Any``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

T = TypeVar("T")
E = TypeVar("E")  # what the generator yields: the store's effects
S = TypeVar("S")  # what it is sent: their answers
IoOf = Generator[E, Any, T]


def run(io: Generator[E, S, T], wait: Callable[[E], S]) -> T:
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


async def run_async(io: Generator[E, S, T], wait: Callable[[E], Awaitable[S]]) -> T:
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
