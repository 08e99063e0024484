"""A dead holder's lease reclaimed across a leader fault: the scenario of the cluster tests and
of ``benchmarks/failover.py``, written once.

A holder claims a job and never renews it (it died); the cluster's leader is then killed or
paused; a rescuer polls ``claim`` until the store lets it in. The tests assert ordering and
safety on the timings (never a reclaim before the holder's TTL ran out); the benchmark reports
how long a reclaim took, which depends on the machine's load.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import tenure


@dataclass(frozen=True)
class Reclaim:
    victim: tenure.Lease
    rescued: tenure.Lease
    claim_sent: float  # time.monotonic() of each moment
    claimed: float
    faulted: float
    reclaimed: float

    @property
    def from_fault(self) -> float:
        return self.reclaimed - self.faulted

    @property
    def from_claim(self) -> float:
        return self.reclaimed - self.claimed

    def check_order(self) -> None:
        """What holds however busy the machine: the holder's lease outlived its TTL, the
        rescuer got a higher token, and the moments came in order."""
        assert self.claim_sent <= self.claimed <= self.faulted <= self.reclaimed
        # The store granted the lease after claim_sent; it may end no sooner than TTL later.
        assert self.reclaimed - self.claim_sent >= self.victim.ttl, self
        assert self.rescued.token > self.victim.token

    def describe(self) -> str:
        return f"reclaimed {self.from_fault:.2f}s after the fault, {self.from_claim:.2f}s after the claim"


def reclaim_after(store: tenure.Store, job_id: str, ttl: float, fault: Callable[[], None],
                  timeout: float = 120.0) -> Reclaim:
    """Claim ``job_id`` as a holder that then dies, run ``fault``, and reclaim it."""
    claim_sent = time.monotonic()
    victim = store.claim(job_id, owner="dead-holder", ttl=ttl)  # held and never renewed
    claimed = time.monotonic()
    fault()
    faulted = time.monotonic()
    while True:
        try:
            rescued = store.claim(job_id, owner="rescuer", ttl=ttl)
            break
        except (tenure.AlreadyClaimed, tenure.BackendUnavailable):
            if time.monotonic() - faulted > timeout:  # a liveness limit, far above any reclaim
                raise
            time.sleep(0.05)  # polling for the moment the store ends the dead holder's lease
    return Reclaim(victim, rescued, claim_sent, claimed, faulted, time.monotonic())
