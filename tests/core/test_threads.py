"""The renewal pool (``tenure.core.threads.ElasticPool``): a thread more only for tasks that
wait behind one that hangs, not behind one that makes progress request by request."""

from __future__ import annotations

import threading
import time

import pytest

from tenure.core.threads import ElasticPool, OneWorker

PATIENCE = 0.5  # seconds a task runs before it counts as stuck (a loaded machine may
# stretch a 0.05 s sleep, not tenfold)
STEPS = 20  # requests of the long task, 0.05 s each: twice the patience


@pytest.mark.parametrize("progressing", [True, False])
def test_a_task_that_makes_progress_is_not_stuck(progressing: bool) -> None:
    pool = ElasticPool("test-pool", keep=1, limit=4, patience=PATIENCE)
    done = threading.Event()

    def long_task() -> None:
        for _ in range(STEPS):
            time.sleep(0.05)  # real time: one request of a batch, answered
            if progressing:
                pool.progress()
        done.set()

    try:
        pool.submit(long_task)
        pool.submit(lambda: None)  # waits behind it
        most = 1
        while not done.is_set():
            pool.unstall()  # what the renewer's scheduler calls whenever it wakes
            most = max(most, pool.threads)
            time.sleep(0.02)  # real time: the scheduler wakes again
        # A task stuck on one request (no progress) gets a thread started beside it.
        assert most == (1 if progressing else 2)
    finally:
        pool.close()


def test_one_worker_runs_urgent_calls_before_those_queued() -> None:
    """``OneWorker`` (tenure.aio's ThreadedBackend): a renewal queued behind claims runs next,
    after the one call running; the rest keep their order."""
    worker = OneWorker("test-worker")
    running, go = threading.Event(), threading.Event()
    order: list[str] = []

    def first() -> None:
        running.set()
        go.wait(10)  # bound: only a broken worker leaves it waiting
        order.append("first")

    try:
        futures = [worker.submit(first)]
        assert running.wait(10)
        futures += [worker.submit(lambda: order.append("claim 1")), worker.submit(lambda: order.append("claim 2")),
                    worker.submit(lambda: order.append("renewal"), urgent=True)]
        go.set()
        for future in futures:
            future.result(timeout=10)
        assert order == ["first", "renewal", "claim 1", "claim 2"]
    finally:
        worker.shutdown()


def test_one_worker_hands_errors_over_and_refuses_calls_once_shut_down() -> None:
    worker = OneWorker("test-worker")

    def fails() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        worker.submit(fails).result(timeout=10)
    worker.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        worker.submit(lambda: None)
