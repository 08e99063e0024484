"""A holder's session expires, its connection is suspended, its process pauses; the server
restarts. Each on a server of the test's own where the fault would disturb others."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

import tenure
from devservers.zookeeper import ZooKeeperServer
from tenure import JobState, Op
from tests.servers.zookeeper import ZooKeeperHarness, expire_session


def _until(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)  # polling a state another thread or process changes


def _wait_store_time_past(store: tenure.Store, moment: float) -> None:
    _until(lambda: store.now() > moment)


def test_expired_session_loses_held_leases_and_the_store_decides_reclaim(
        zk_harness: ZooKeeperHarness) -> None:
    url = zk_harness.url()
    with zk_harness.connect(url, session_timeout=2) as a, zk_harness.connect(url) as b:
        held = a.hold("j", owner="a", ttl=3.0)
        expire_session(a)
        _until(lambda: a.backend.link().lost_epoch > 0)
        with pytest.raises(tenure.LeaseLost, match="session was lost"):
            held.check()
        # The session is gone but the lease is not: only the store's clock ends it.
        status = b.get("j")
        assert status is not None and status.state is JobState.LEASED
        with pytest.raises(tenure.AlreadyClaimed):
            b.claim("j", owner="b", ttl=10.0)
        assert held._renew_once() is False  # never renewed from the new session
        assert status.expires_at is not None
        _wait_store_time_past(b, status.expires_at)
        won = b.claim("j", owner="b", ttl=10.0)
        assert won.token == held.token + 1
        with pytest.raises(tenure.StaleLease):
            a.renew(held.lease)
        with pytest.raises(tenure.StaleLease):
            held.complete(b"from a")
        assert [(r.op, r.owner, r.token) for r in b.rejections()] == [
            (Op.RENEW, "a", held.token), (Op.COMPLETE, "a", held.token)]


def test_suspended_connection_puts_leases_at_risk_until_verified(zk_private: ZooKeeperServer) -> None:
    # session_timeout 6 s: kazoo gives up on a silent server after 2/3 of it (4 s), before the
    # server could expire the session once it runs again.
    with tenure.connect(f"zk://{zk_private.hosts}/susp", session_timeout=6) as store:
        held = store.hold("j", owner="a", ttl=30.0)
        held.check()
        zk_private.pause()
        try:
            _until(lambda: not store.backend.link().connected)
            with pytest.raises(tenure.LeaseLost, match="at risk"):
                held.check()
        finally:
            zk_private.resume()
        _until(lambda: store.backend.link().connected)
        with pytest.raises(tenure.LeaseLost, match="at risk"):
            held.check()  # reconnected, but nothing has verified the lease yet
        assert not held.lost.is_set() and store.backend.link().lost_epoch == 0
        assert held._renew_once() is True  # what the renewal thread does on its next turn
        held.check()
        held.complete()


def test_a_write_whose_answer_is_lost_is_outcome_unknown_not_refused(zk_private: ZooKeeperServer) -> None:
    with tenure.connect(f"zk://{zk_private.hosts}/lost", timeout=1, session_timeout=20) as store:
        store.complete(store.claim("warm", owner="a", ttl=30))  # the leader's clock just stamped
        zk_private.pause()  # the claim's multi reaches the server's socket; no answer comes back
        try:
            with pytest.raises(tenure.OutcomeUnknown, match="may or may not have been applied"):
                store.claim("j", owner="a", ttl=30)
        finally:
            zk_private.resume()
        # The resumed server runs the multi it had read (the session outlived the pause): the
        # claim was applied after all, and nothing was refused.
        _until(lambda: store.get("j") is not None)
        status = store.get("j")
        assert status is not None and status.state is tenure.JobState.LEASED and status.owner == "a"
        assert store.rejections() == []
