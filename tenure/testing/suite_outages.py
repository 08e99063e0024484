"""Outages the protocol must survive: a holder process frozen past its TTL, a server restart.

The paused holder is a real process frozen by the ``pause_holder`` hook (SIGSTOP by default), so
only the store's clock can end its lease; it needs a store shared between processes. The restart needs the
``restartable_store`` hook: a server the test may crash and start again on the same data.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import TypeVar

import tenure
from tenure.testing.kit import Kit
from tenure.testing.processes import child_environment, python_child

T = TypeVar("T")

HOLDER = """
import sys, tenure
store = tenure.connect(sys.argv[1])
lease = store.claim("paused", owner="worker-a", ttl=float(sys.argv[2]))
print(lease.token, flush=True)
sys.stdin.readline()  # stopped around here, resumed after another worker claimed the job
for name, op in (("renew", store.renew), ("complete", store.complete)):
    try:
        op(lease)
        print(name, "accepted", flush=True)
    except tenure.StaleLease:
        print(name, "rejected", flush=True)
store.close()
"""


def eventually(call: Callable[[], T], timeout: float = 60.0) -> T:
    """``call()`` once the store answers again: a client reconnects on its own schedule."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except tenure.BackendUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)  # real time: waiting for a reconnection


class OutageTests:
    def test_a_paused_holder_process_is_fenced_and_audited(self, kit: Kit) -> None:
        kit.require_processes()
        pauser = kit.holder_pauser()
        worker = subprocess.Popen(python_child(HOLDER, kit.url, str(kit.short_ttl)), env=child_environment(),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert worker.stdout is not None and worker.stdin is not None
            line = worker.stdout.readline()
            assert line.strip().isdigit(), f"the holder did not claim: {line!r}, exit {worker.poll()}"
            token_a = int(line)
            pauser.pause(worker.pid)  # frozen, whatever it was doing
            with kit.connect(own_clock=True) as store:
                # A blocking claim: it returns once the store's clock has ended the holder's lease.
                b = store.claim("paused", owner="worker-b", ttl=kit.ttl, wait=kit.short_ttl * 10 + 60)
                assert b.token > token_a
                pauser.resume(worker.pid)
                out, _ = worker.communicate("go\n", timeout=120)
                assert out.split("\n")[:2] == ["renew rejected", "complete rejected"], out
                audit = [(r.op, r.owner, r.token, r.current_owner, r.current_token) for r in store.rejections()]
                assert audit == [(tenure.Op.RENEW, "worker-a", token_a, "worker-b", b.token),
                                 (tenure.Op.COMPLETE, "worker-a", token_a, "worker-b", b.token)]
                status = store.get("paused")
                assert status is not None and (status.owner, status.token) == ("worker-b", b.token)
        finally:
            if worker.poll() is None:
                pauser.resume(worker.pid)
                worker.kill()
                worker.wait()

    def test_a_restart_keeps_acknowledged_writes_and_tokens_grow(self, kit: Kit) -> None:
        target = kit.restart_target()
        with kit.connect(target.url, own_clock=True) as kept:
            done = {}
            for i in range(5):
                lease = kept.claim(f"j{i}", owner="a", ttl=30.0)
                kept.complete(lease, result=f"r{i}")  # acknowledged before the crash
                done[f"j{i}"] = lease.token
            held = kept.claim("held", owner="a", ttl=30.0)
            target.restart()
            with eventually(lambda: kit.connect(target.url, own_clock=True)) as fresh:
                for job_id, token in done.items():
                    status = eventually(lambda job_id=job_id: fresh.get(job_id))  # type: ignore[misc]
                    assert status is not None
                    assert (status.state, status.token, status.result) == (
                        tenure.JobState.COMPLETED, token, f"r{job_id[1:]}".encode())
                fresh.submit("j0")
                again = fresh.claim("j0", owner="b", ttl=30.0)
                assert again.token > max(*done.values(), held.token)
                status = fresh.get("held")
                assert status is not None and (status.owner, status.token) == ("a", held.token)
            # The store that lived through the restart goes on, and a lease survives an outage
            # shorter than its TTL.
            renewed = eventually(lambda: kept.renew(held))
            assert renewed.token == held.token
