"""A lease held by a worker whose clock is an hour off is still held, on every shared store;
a job's delay is kept by the store's clock whatever the clock of the process that set it, or
of the one that claims it.

The fault runs found this on etcd (two holders at once after a claim by a worker at -1 h);
this is the same fault, small and deterministic: a holder under libfaketime keeps its
lease, and a worker with a true clock can take it neither by name nor with claim_next.
The worker's clock moves a few milliseconds between any two readings, as on a busy machine
(the fault run had two cores shared by eleven processes); how much time passes between two
steps of a claim must not decide who holds a job.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tenure
from devservers.availability import in_ci
from tests.faults.nemesis import faketime_library
from tests.harness import Harness

ROOT = Path(__file__).resolve().parents[2]
HOLDER = """
import sys, time, tenure
store = tenure.connect(sys.argv[1])
store.submit("j")
lease = store.claim("j", "skewed", 30.0)
print(lease.token, flush=True)
sys.stdin.read()  # hold the lease (and any session) until the test is done
"""


SKEWED = """
import sys, tenure
store = tenure.connect(sys.argv[1])
if sys.argv[2] == "wait":  # a delayed submit, and a fail asking for a wait
    store.submit("delayed", delay=30.0)
    store.submit("failed")
    store.fail(store.claim("failed", "skewed", 30.0), retry_in=30.0)
    print("waiting", flush=True)
else:  # a claim of a job a process with a true clock delayed
    try:
        store.claim("later", "skewed", 30.0)
        print("claimed", flush=True)
    except tenure.JobScheduled:
        print("scheduled", flush=True)
    print(store.claim_next("skewed", 30.0) is None, flush=True)
"""


class BusyClock:
    """The real clock, plus 5 ms more at every reading."""

    def __init__(self) -> None:
        self._steps = itertools.count()

    def time(self) -> float:
        return time.time() + 0.005 * next(self._steps)

    def monotonic(self) -> float:
        return time.monotonic() + 0.005 * next(self._steps)


def _library() -> str:
    try:
        return faketime_library()
    except RuntimeError as exc:
        if in_ci():
            pytest.fail(str(exc))
        pytest.skip(str(exc))


@pytest.mark.parametrize("skew", ["-1h", "+1h"])
def test_a_lease_held_under_a_skewed_clock_cannot_be_taken(harness: Harness, skew: str) -> None:
    if not harness.shared_between_processes:
        pytest.skip("a store of one process")
    url = harness.url()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LD_PRELOAD": _library(), "FAKETIME": skew}
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, url], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        token = int(holder.stdout.readline())
        # On SQLite a clock passed in replaces the store's own (the machine's), so it keeps that.
        options = {} if harness.name == "sqlite" else {"clock": BusyClock()}
        with harness.connect(url, **options) as store:
            with pytest.raises(tenure.AlreadyClaimed):
                store.claim("j", "honest", 30.0)
            assert store.claim_next("honest", 30.0) is None
            status = store.get("j")
            assert status is not None and (status.owner, status.token) == ("skewed", token)
    finally:
        holder.communicate("", timeout=30)


@pytest.mark.parametrize("skew", ["-1h", "+1h"])
def test_a_delay_is_kept_by_the_stores_clock_whoever_set_it_and_whoever_claims(harness: Harness, skew: str) -> None:
    if not harness.shared_between_processes:
        pytest.skip("a store of one process")
    url = harness.url()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LD_PRELOAD": _library(), "FAKETIME": skew}

    def skewed(what: str) -> list[str]:
        done = subprocess.run([sys.executable, "-c", SKEWED, url, what], env=env, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert skewed("wait") == ["waiting"]
    with tenure.connect(url) as store:  # the store's own clock (the harness's SQLite stores take a manual one)
        for job in ("delayed", "failed"):  # 30 s by the store's clock, set by a process an hour off
            with pytest.raises(tenure.JobScheduled):
                store.claim(job, "honest", 30.0)
        assert store.claim_next("honest", 30.0) is None
        store.submit("later", delay=30.0)
    assert skewed("claim") == ["scheduled", "True"]
