"""``tenure.aio.bridge``: sync code run once in a greenlet, each ``await_only`` awaited by the
task that runs it; what it raises comes out as it was raised, and a cancelled task unwinds it."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import warnings
import weakref

import greenlet
import pytest

from tenure.aio import bridge


def suspended_calls() -> int:
    """Greenlets suspended inside a call (a step), not between calls (kept for the next one,
    only their own loop's frame left)."""
    return sum(1 for g in gc.get_objects() if isinstance(g, greenlet.greenlet) and g and g.parent is not None
               and g.gr_frame is not None and g.gr_frame.f_back is not None)


async def answer(value: int, order: list[str]) -> int:
    await asyncio.sleep(0)  # a turn of the loop, as a round trip gives
    order.append(f"answered {value}")
    return value


class Refused(Exception):
    pass


def test_the_function_runs_once_each_await_answered_where_it_was_made() -> None:
    order: list[str] = []

    def step(n: int) -> int:
        order.append("started")
        total = sum(bridge.await_only(answer(i, order)) for i in range(n))
        order.append("ended")
        return total

    assert asyncio.run(bridge.run(step, 3)) == 3
    assert order == ["started", "answered 0", "answered 1", "answered 2", "ended"]


def test_steps_of_two_tasks_interleave_each_with_its_own_answers() -> None:
    order: list[str] = []

    def step(base: int) -> list[int]:
        return [bridge.await_only(answer(base + i, order)) for i in range(3)]

    async def both() -> list[list[int]]:
        return list(await asyncio.gather(bridge.run(step, 0), bridge.run(step, 10)))

    assert asyncio.run(both()) == [[0, 1, 2], [10, 11, 12]]
    assert order == ["answered 0", "answered 10", "answered 1", "answered 11", "answered 2", "answered 12"]


def test_what_the_function_raises_comes_out_unchanged() -> None:
    raised = Refused("no")

    def step(after: int) -> None:
        for i in range(after):
            bridge.await_only(answer(i, []))
        raise raised

    for after in (0, 2):  # before any await, and after some
        with pytest.raises(Refused) as caught:
            asyncio.run(bridge.run(step, after))
        assert caught.value is raised
        assert caught.traceback[-1].name == "step"  # raised where the step raised it


def test_an_awaitable_that_fails_raises_in_the_function_where_it_awaited() -> None:
    raised = Refused("the read failed")

    async def failing() -> int:
        await asyncio.sleep(0)
        raise raised

    def step(_: None) -> str:
        try:
            bridge.await_only(failing())
        except Refused as exc:
            assert exc is raised
            return "handled"
        return "not raised"

    def unhandled(_: None) -> None:
        bridge.await_only(failing())

    assert asyncio.run(bridge.run(step, None)) == "handled"
    with pytest.raises(Refused) as caught:
        asyncio.run(bridge.run(unhandled, None))
    assert caught.value is raised


def test_a_task_cancelled_while_the_function_awaits_unwinds_it_and_leaves_no_greenlet_in_it() -> None:
    unwound: list[str] = []

    def step(forever: asyncio.Event) -> None:
        try:
            bridge.await_only(forever.wait())
        finally:
            unwound.append("unwound")
        unwound.append("carried on")  # never: the cancellation is raised in the step

    async def scenario() -> None:
        task = asyncio.ensure_future(bridge.run(step, asyncio.Event()))
        await asyncio.sleep(0.01)
        assert suspended_calls() == 1  # in its await
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert suspended_calls() == 0

    asyncio.run(scenario())
    assert unwound == ["unwound"]


def test_await_only_outside_run_is_refused_and_closes_the_coroutine() -> None:
    coroutine = answer(1, [])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "coroutine was never awaited" would be an error
        with pytest.raises(bridge.NotInStep):
            bridge.await_only(coroutine)
    assert coroutine.cr_frame is None  # closed


def test_the_function_sees_the_task_s_context_variables() -> None:
    seen: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="unset")

    def step(_: None) -> str:
        bridge.await_only(asyncio.sleep(0))
        return seen.get()

    async def scenario() -> str:
        seen.set("the task's")
        return await bridge.run(step, None)

    assert asyncio.run(scenario()) == "the task's"


def test_calls_one_after_another_share_a_greenlet_and_one_that_raised_ends_it() -> None:
    def where(_: None) -> object:
        bridge.await_only(asyncio.sleep(0))
        return greenlet.getcurrent()

    def failing(_: None) -> None:
        raise Refused(greenlet.getcurrent())

    async def scenario() -> None:
        first = await bridge.run(where, None)
        assert await bridge.run(where, None) is first and first is not greenlet.getcurrent()
        with pytest.raises(Refused) as caught:
            await bridge.run(failing, None)
        assert caught.value.args[0] is first and first.dead
        assert await bridge.run(where, None) is not first

    asyncio.run(scenario())


def test_a_greenlet_kept_for_the_next_call_keeps_nothing_of_the_last_task() -> None:
    class Big:
        pass

    held: contextvars.ContextVar[Big] = contextvars.ContextVar("held")

    def step(_: None) -> None:
        bridge.await_only(asyncio.sleep(0))

    async def task() -> weakref.ref[Big]:
        big = Big()
        held.set(big)
        await bridge.run(step, None)
        return weakref.ref(big)

    async def scenario() -> None:
        gone = await asyncio.ensure_future(task())  # a task of its own: its context ends with it
        await asyncio.sleep(0)  # the loop lets go of the finished task
        gc.collect()
        assert gone() is None

    asyncio.run(scenario())
