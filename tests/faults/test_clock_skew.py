"""A lease held by a worker whose clock is an hour off is still held, on every shared store.

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
from tests.faults.nemesis import faketime_library
from tests.harness import Harness, in_ci

ROOT = Path(__file__).resolve().parents[2]
HOLDER = """
import sys, time, tenure
store = tenure.connect(sys.argv[1])
store.submit("j")
lease = store.claim("j", "skewed", 30.0)
print(lease.token, flush=True)
sys.stdin.read()  # hold the lease (and any session) until the test is done
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
