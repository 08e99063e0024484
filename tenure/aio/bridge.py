"""Sync code that awaits: ``run(fn, arg)`` calls ``fn(arg)`` in a greenlet of its own, and an
``await_only(awaitable)`` inside it switches to the task that called ``run``, which awaits it
in the event loop and switches back with its result (or throws its exception in). ``fn`` runs
once, its frames suspended across each await, so sync code (the protocol's steps) can read
through I/O the loop waits for without being written as a coroutine or a generator.

The design is SQLAlchemy's asyncio extension's (``sqlalchemy/util/_concurrency_py3k.py``:
``greenlet_spawn`` and ``await_only``), written again small rather than depended on.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from contextvars import Context
from typing import Any, Protocol, TypeVar, cast

import greenlet

A = TypeVar("A")
T = TypeVar("T")


class _Greenlet(Protocol):
    """What this module uses of ``greenlet.greenlet``, which ships no types."""

    dead: bool
    gr_context: Context | None

    def switch(self, *args: Any) -> Any: ...

    def throw(self, exc: BaseException) -> Any: ...


_greenlet: Callable[[Callable[..., Any], _Greenlet], _Greenlet] = greenlet.greenlet
_current: Callable[[], _Greenlet] = greenlet.getcurrent


class NotInStep(RuntimeError):
    """``await_only`` outside ``run``: there is no task to await for it (a programming error)."""


_drivers: dict[_Greenlet, _Greenlet] = {}  # each running ``fn``'s greenlet -> the task's greenlet


async def run(fn: Callable[[A], T], arg: A) -> T:
    """``fn(arg)``, each ``await_only`` in it awaited here; what it raises, raised here as is
    (a ``CancelledError`` of this task is thrown into it at its ``await_only``, so it unwinds)."""
    driver = _current()
    child = _greenlet(fn, driver)
    child.gr_context = driver.gr_context  # the task's context variables, as SQLAlchemy does
    _drivers[child] = driver
    try:
        asked: Any = child.switch(arg)
        while not child.dead:
            try:
                got = await asked
            except BaseException as exc:  # CancelledError too: fn sees it where it awaited
                asked = child.throw(exc)
            else:
                asked = child.switch(got)
    finally:
        del _drivers[child]
    return cast(T, asked)


def await_only(awaitable: Awaitable[T]) -> T:
    """``awaitable``'s result, awaited by the task that runs this code (``run``)."""
    driver = _drivers.get(_current())
    if driver is None:
        if inspect.iscoroutine(awaitable):
            awaitable.close()  # never awaited: no warning about it
        raise NotInStep("await_only() outside bridge.run(): nothing awaits for it")
    return cast(T, driver.switch(awaitable))
