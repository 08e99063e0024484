"""Blocking claims: ``claim(..., wait=)`` and ``claim_next(..., wait=)`` on every backend.

Each test starts the change it waits for only once the claim is pausing (a hook on
``Pacing.next_sleep`` says so), so nothing depends on how long a thread takes to start. Where the
store has a native watch (etcd, ZooKeeper) the backoff is stretched to ten minutes, so the
claim can only return in time if the watch woke it.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import tenure
from tenure.core import waiting
from tenure.testing.kit import Kit


def only_a_watch_can_wake(store: tenure.Store, monkeypatch: pytest.MonkeyPatch) -> bool:
    native = waiting.has_native_watch(store.backend)
    if native:
        monkeypatch.setattr(waiting, "FIRST_DELAY", 600.0)
        monkeypatch.setattr(waiting, "MAX_WATCH_DELAY", 600.0)
    return native


def in_background(call: Any) -> concurrent.futures.Future[Any]:
    pool = concurrent.futures.ThreadPoolExecutor(1)
    future = pool.submit(call)
    pool.shutdown(wait=False)
    return future


class BlockingClaimTests:
    @pytest.fixture
    def paused(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
        """Set once a blocking claim first pauses between attempts."""
        event = threading.Event()
        original = waiting.Pacing.next_sleep  # what both flavours' waiters ask before each pause

        def next_sleep(pacing: waiting.Pacing, due_in: float | None) -> float | None:
            event.set()
            return original(pacing, due_in)

        monkeypatch.setattr(waiting.Pacing, "next_sleep", next_sleep)
        yield event

    def test_claim_next_waits_for_a_job_submitted_meanwhile(self, kit: Kit, store: tenure.Store,
                                                           paused: threading.Event,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
        only_a_watch_can_wake(store, monkeypatch)
        future = in_background(lambda: store.claim_next("w", kit.ttl, wait=60))
        assert paused.wait(30)
        store.submit("late")
        lease = future.result(timeout=90)
        assert lease is not None and lease.job_id == "late"

    def test_claim_waits_for_the_holder_to_release(self, kit: Kit, store: tenure.Store, paused: threading.Event,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
        first = store.claim("j", "a", 120)
        only_a_watch_can_wake(store, monkeypatch)
        future = in_background(lambda: store.claim("j", "b", kit.ttl, wait=60))
        assert paused.wait(30)
        store.release(first)
        lease = future.result(timeout=90)
        assert (lease.owner, lease.token > first.token) == ("b", True)

    def test_claim_waits_for_a_lease_to_run_out(self, kit: Kit) -> None:
        with kit.connect(clock=tenure.SystemClock()) as store:
            first = store.claim("j", "a", kit.short_ttl)
            lease = store.claim("j", "b", kit.ttl, wait=60)
            assert (lease.owner, lease.token > first.token) == ("b", True)

    def test_a_wait_that_ends_raises_or_returns_none(self, kit: Kit, store: tenure.Store) -> None:
        store.claim("j", "a", 120)
        with pytest.raises(tenure.AlreadyClaimed):
            store.claim("j", "b", kit.ttl, wait=0.2)
        assert store.claim_next("b", kit.ttl, wait=0.2) is None
        store.complete(store.claim("done", "a", kit.ttl))
        with pytest.raises(tenure.JobCompleted):  # a completed job is never waited for
            store.claim("done", "b", kit.ttl, wait=60)

    @pytest.mark.parametrize("wait", [-1, float("nan"), float("inf"), "5", True])
    def test_a_bad_wait_is_refused(self, store: tenure.Store, wait: Any) -> None:
        with pytest.raises(tenure.InvalidArgument, match="wait"):
            store.claim_next("w", 5.0, wait=wait)
        with pytest.raises(tenure.InvalidArgument, match="wait"):
            store.claim("j", "w", 5.0, wait=wait)
        assert store.get("j") is None
