"""The safe deadlines a store stamped, so that only those reach a backend.

``Lease.deadline`` is a plain field anyone can set, and backends trust a running deadline:
ZooKeeper's and etcd's one-round-trip renew and complete skip judging expiry while it runs.
A lease handed back to the store therefore goes to the backend with the deadline this store
stamped on that token (or an earlier one the caller holds), and with none (infinity: judged
in full) if this store never stamped it: a copy with a later deadline, or a lease built by
hand or carried over from another process or machine, cannot skip the store's judgement.
"""

from __future__ import annotations

import math

from tenure.core.bounded import Bounded

MAX_STAMPS = 65_536  # tokens remembered; beyond it the oldest lose their fast path, never safety


class Stamps:
    def __init__(self, limit: int = MAX_STAMPS) -> None:
        self._deadlines: Bounded[tuple[str, int], float] = Bounded(limit)

    def stamp(self, job_id: str, token: int, deadline: float) -> None:
        self._deadlines.put((job_id, token), deadline, refresh=True)

    def trusted(self, job_id: str, token: int, given: float) -> float:
        """The deadline a backend may rely on: the earlier of ``given`` and the stamped one;
        infinity (not stamped: judge in full) if this store never stamped the token."""
        stamped = self._deadlines.get((job_id, token))
        return math.inf if stamped is None else min(given, stamped)

    def forget(self, job_id: str, token: int) -> None:
        self._deadlines.pop((job_id, token))
