"""Sync code that awaits: ``run(fn, arg)`` calls ``fn(arg)`` in a greenlet, and an
``await_only(awaitable)`` inside it switches to the task that called ``run``, which awaits it
in the event loop and switches back with its result (or throws its exception in). ``fn`` runs
once, its frames suspended across each await, so sync code (the protocol's steps) can read
through I/O the loop waits for without being written as a coroutine or a generator.

The design is SQLAlchemy's asyncio extension's (``sqlalchemy/util/_concurrency_py3k.py``:
``greenlet_spawn`` and ``await_only``), written again small rather than depended on. One
difference: the greenlets are kept for the next call (``_IDLE`` per thread), as a new one cost
a step 12 us against a kept one's 3 (Python 3.11, greenlet 3.5.6; a kept greenlet's frames
and Python stack are already allocated).
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Awaitable, Callable
from contextvars import Context
from typing import Any, Protocol, TypeVar, cast

import greenlet

A = TypeVar("A")
T = TypeVar("T")
_IDLE = 64  # greenlets kept per thread for the next calls; more run at once are let go after


class _Greenlet(Protocol):
    """What this module uses of ``greenlet.greenlet``, which ships no types."""

    parent: _Greenlet | None
    gr_context: Context | None

    def switch(self, *args: Any) -> Any: ...

    def throw(self, exc: BaseException) -> Any: ...


_greenlet: Callable[[Callable[[_Call], None]], _Greenlet] = greenlet.greenlet
_current: Callable[[], _Greenlet] = greenlet.getcurrent


class NotInStep(RuntimeError):
    """``await_only`` outside ``run``: there is no task to await for it (a programming error)."""


class _Call:
    """One ``fn(arg)`` handed to a greenlet, and what it returned."""

    __slots__ = ("arg", "fn", "value")

    def __init__(self, fn: Callable[[Any], Any], arg: Any) -> None:
        self.fn, self.arg, self.value = fn, arg, None


class _Idle(threading.local):
    def __init__(self) -> None:
        self.greenlets: list[_Greenlet] = []  # this thread's, between calls


_DONE = object()  # what a greenlet switches to its task with once its call returned
_running: dict[_Greenlet, _Greenlet] = {}  # each greenlet running a call -> its task's greenlet
_idle = _Idle()


def _serve(call: _Call) -> None:
    """A greenlet's life: each call handed to it run, then back to the task it ran for. What a
    call raises ends the greenlet and is raised in the task, as is (by ``switch`` or ``throw``)."""
    while True:
        call.value = call.fn(call.arg)
        del call  # nothing of it kept between calls
        call = _running[_current()].switch(_DONE)


async def run(fn: Callable[[A], T], arg: A) -> T:
    """``fn(arg)``, each ``await_only`` in it awaited here; what it raises, raised here as is
    (a ``CancelledError`` of this task is thrown into it at its ``await_only``, so it unwinds)."""
    idle = _idle.greenlets
    child = idle.pop() if idle else _greenlet(_serve)
    task = _current()
    child.parent = task  # where what the call raises goes
    child.gr_context = task.gr_context  # the task's context variables, as SQLAlchemy does
    call = _Call(fn, arg)
    _running[child] = task
    try:
        asked = child.switch(call)
        while asked is not _DONE:
            try:
                got = await asked
            except BaseException as exc:  # CancelledError too: fn sees it where it awaited
                asked = child.throw(exc)
            else:
                asked = child.switch(got)
    finally:
        del _running[child]
    if len(idle) < _IDLE:
        child.gr_context = None  # keeps nothing of the task's alive while idle
        idle.append(child)
    return cast(T, call.value)


def await_only(awaitable: Awaitable[T]) -> T:
    """``awaitable``'s result, awaited by the task that runs this code (``run``)."""
    task = _running.get(_current())
    if task is None:
        if inspect.iscoroutine(awaitable):
            awaitable.close()  # never awaited: no warning about it
        raise NotInStep("await_only() outside bridge.run(): nothing awaits for it")
    return cast(T, task.switch(awaitable))
