"""A holder whose machine was suspended past its TTL wakes to a deadline that has passed.

The suspend is the fault suite's (``tests.faults.suspend``): the holder is stopped, the new
holder claims the job, and the holder's ``time.monotonic()`` is made to miss the pause before
it resumes, as CLOCK_MONOTONIC misses a suspend. Nothing it does afterwards may be accepted:
its deadline check, a fenced write guarded by that check, a renewal and a completion.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tenure
from tests.faults import suspend
from tests.faults.clock import true_now
from tests.harness import Harness

ROOT = Path(__file__).resolve().parents[2]
HOLDER = """
import sqlite3, sys
from pathlib import Path
from tests.faults import suspend
suspend.install(Path(sys.argv[2]))
import tenure
from tenure.fencing import SQLFence

store = tenure.connect(sys.argv[1])
lease = store.claim("j", "sleeper", float(sys.argv[4]))
print(lease.token, flush=True)
sys.stdin.readline()  # stopped, then resumed here by the test

def within_deadline() -> bool:
    return store.clock.monotonic() < lease.deadline

seen = ["deadline:" + ("alive" if within_deadline() else "passed")]
fence = SQLFence(sqlite3.connect(sys.argv[3]))
try:
    with fence.fenced("ledger", lease.token, job_id="j", owner="sleeper") as cur:
        if not within_deadline():
            raise tenure.LeaseLost("safe local deadline passed")
        cur.execute("INSERT INTO effects VALUES (?)", (lease.token,))
    seen.append("effect:admitted")
except tenure.LeaseError as exc:
    seen.append("effect:" + type(exc).__name__)
for name, op in (("renew", store.renew), ("complete", store.complete)):
    try:
        op(lease)
        seen.append(name + ":accepted")
    except tenure.LeaseError as exc:
        seen.append(name + ":" + type(exc).__name__)
print(" ".join(seen), flush=True)
"""


def test_nothing_a_suspended_holder_does_is_accepted_after_it_wakes(harness: Harness, tmp_path: Path) -> None:
    if not harness.shared_between_processes:
        pytest.skip("a store of one process")
    url, ttl = harness.url(), harness.short_ttl
    hidden, dest = tmp_path / "hidden", tmp_path / "dest.db"
    suspend.create(hidden)
    with sqlite3.connect(dest) as db:
        db.execute("CREATE TABLE effects (token INTEGER)")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, url, str(hidden), str(dest), str(ttl)],
                              env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdin is not None
        token = int(holder.stdout.readline())
        os.kill(holder.pid, signal.SIGSTOP)
        stopped = true_now()
        with harness.connect(url, clock=tenure.SystemClock()) as store:
            while True:  # the new holder claims as soon as the store lets it
                try:
                    taken = store.claim("j", "waker", ttl * 20)
                    break
                except tenure.AlreadyClaimed:
                    time.sleep(ttl / 10)  # real time: the store's clock decides expiry
            assert taken.token > token
            suspend.hide(hidden, true_now() - stopped)  # the holder's monotonic clock missed it all
            os.kill(holder.pid, signal.SIGCONT)
            out, _ = holder.communicate("go\n", timeout=60)
            assert holder.returncode == 0
            assert out.split()[-4:] == ["deadline:passed", "effect:LeaseLost", "renew:StaleLease",
                                        "complete:StaleLease"], out
            with sqlite3.connect(dest) as db:
                assert db.execute("SELECT count(*) FROM effects").fetchone() == (0,)
            status = store.get("j")
            assert status is not None and (status.owner, status.token) == ("waker", taken.token)
    finally:
        if holder.poll() is None:
            os.kill(holder.pid, signal.SIGCONT)
            holder.kill()
            holder.wait()
