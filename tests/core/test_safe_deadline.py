"""The safe local deadline, on an injected clock: no sleeping, no store needed to fail."""

from __future__ import annotations

import time

import pytest

import tenure


def test_check_fails_at_the_safe_deadline_even_if_the_store_says_nothing() -> None:
    clock = tenure.ManualClock()
    with tenure.connect("memory://", clock=clock, drift_margin=0.1) as store:
        held = store.hold("j", owner="a", ttl=10.0)
        assert held.deadline == pytest.approx(clock.monotonic() + 9.0)
        clock.advance(8.9)
        held.check()
        clock.advance(0.2)  # past ttl * (1 - drift) measured from before the claim was sent
        with pytest.raises(tenure.LeaseLost, match="deadline"):
            held.check()
        assert held.lost.is_set()


def test_deadline_is_measured_from_before_the_request_was_sent() -> None:
    clock = tenure.ManualClock()

    class SlowBackend(tenure.connect("memory://", clock=clock).backend.__class__):  # type: ignore[misc]
        def claim(self, job_id: str, owner: str, ttl: float) -> tenure.Lease:
            clock.advance(3.0)  # the request took 3 s on the way
            return super().claim(job_id, owner, ttl)

    store = tenure.Store(SlowBackend(clock), clock=clock, drift_margin=0.0)
    start = clock.monotonic()
    lease = store.claim("j", owner="a", ttl=10.0)
    assert lease.deadline == pytest.approx(start + 10.0)
    assert lease.expires_at == pytest.approx(start + 13.0)  # the store started later than we sent


@pytest.mark.parametrize("margin", [-0.1, 1.0, 2])
def test_drift_margin_is_checked(margin: float) -> None:
    with pytest.raises(tenure.InvalidArgument, match="drift_margin"):
        tenure.connect("memory://", drift_margin=margin)


@pytest.mark.skipif(not hasattr(time, "CLOCK_BOOTTIME"), reason="CLOCK_BOOTTIME is Linux's")
def test_the_system_clock_counts_time_suspended(monkeypatch: pytest.MonkeyPatch) -> None:
    # After a suspend, CLOCK_MONOTONIC (time.monotonic) lags CLOCK_BOOTTIME by the time
    # suspended: a holder's deadline on it would still be running when it wakes.
    real = time.monotonic
    monkeypatch.setattr(time, "monotonic", lambda: real() - 3600.0)
    assert abs(tenure.SystemClock().monotonic() - time.clock_gettime(time.CLOCK_BOOTTIME)) < 1.0
