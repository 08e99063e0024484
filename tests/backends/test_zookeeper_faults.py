"""A holder's session expires, its connection is suspended, its process pauses; the server
restarts. Each on a server of the test's own where the fault would disturb others."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable

import pytest

import tenure
from tenure import JobState, Op
from tests.servers.zookeeper import ZooKeeperHarness, ZooKeeperServer, expire_session


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


_WORKER = textwrap.dedent("""
    import sys, tenure
    store = tenure.connect(sys.argv[1])
    held = store.hold("j", owner="paused", ttl=float(sys.argv[2]))
    print(held.token, flush=True)
    sys.stdin.readline()  # the test pauses us, reclaims, resumes us, then writes a line
    for name, call in (("check", held.check), ("complete", held.complete)):
        try:
            call()
            print(name, "ok", flush=True)
        except tenure.LeaseError as exc:
            print(name, type(exc).__name__, flush=True)
    print("lost_epoch", store.backend.link().lost_epoch, flush=True)
""")


def test_paused_holder_process_is_fenced_off(zk_harness: ZooKeeperHarness) -> None:
    url, ttl = zk_harness.url(), 1.0
    worker = subprocess.Popen([sys.executable, "-c", _WORKER, url, str(ttl)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=os.getcwd())
    try:
        assert worker.stdout is not None and worker.stdin is not None
        token = int(worker.stdout.readline())
        with zk_harness.connect(url) as store:
            os.kill(worker.pid, signal.SIGSTOP)
            status = store.get("j")
            assert status is not None and status.expires_at is not None
            with pytest.raises(tenure.AlreadyClaimed):
                store.claim("j", owner="b", ttl=10.0)
            _wait_store_time_past(store, status.expires_at)
            b = store.claim("j", owner="b", ttl=10.0)
            os.kill(worker.pid, signal.SIGCONT)
            worker.stdin.write("go\n")
            worker.stdin.flush()
            lines = [worker.stdout.readline().split() for _ in range(3)]
            # The session outlived the pause (10 s > about 1 s): store time ended the lease.
            assert lines == [["check", "LeaseLost"], ["complete", "StaleLease"], ["lost_epoch", "0"]]
            assert b.token == token + 1
            # A renewal already past its deadline check when the pause hit may be refused too.
            audited = [(r.op, r.owner) for r in store.rejections()]
            assert audited[-1] == (Op.COMPLETE, "paused") and {o for _, o in audited} == {"paused"}
            assert store.get("j").owner == "b"  # type: ignore[union-attr]
    finally:
        worker.kill()
        worker.wait()


def test_restart_keeps_acknowledged_completions_and_tokens_increase(zk_private: ZooKeeperServer) -> None:
    url = f"zk://{zk_private.hosts}/restart"
    with tenure.connect(url) as store:
        tokens = {}
        for i in range(5):
            lease = store.claim(f"j{i}", owner="a", ttl=30.0)
            store.complete(lease, result=f"r{i}")
            tokens[f"j{i}"] = lease.token
        held = store.claim("held", owner="a", ttl=30.0)
        zk_private.restart()  # kill -9, then the same data directory and port
        _until(lambda: store.backend.link().connected)
        for i in range(5):
            status = store.get(f"j{i}")
            assert status is not None and (status.state, status.result) == (JobState.COMPLETED,
                                                                              f"r{i}".encode())
        store.renew(held)  # a lease survives a restart shorter than its TTL
    with tenure.connect(url) as fresh:
        for job_id, token in tokens.items():
            fresh.submit(job_id)
            assert fresh.claim(job_id, owner="b", ttl=30.0).token > token
        assert [e.op for e in fresh.history("j0")][:2] == [Op.CLAIM, Op.COMPLETE]
