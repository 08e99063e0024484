"""Competing claims from 8 processes (threads for a single-process store) on 20 jobs."""

from __future__ import annotations

import contextlib
import multiprocessing
import threading
from collections import Counter
from typing import Any

import tenure
from tenure.core.registry import registered_backends
from tenure.testing.kit import Kit
from tenure.testing.processes import adopt_registrations

WORKERS = 8
JOBS = [f"job-{i:02d}" for i in range(20)]
ROUNDS = 3


def _compete(
    url: str, owner: str, barrier: Any, ttl: float, store: tenure.Store | None = None
) -> list[tuple[str, int]]:
    """Try to claim every job each round; complete nothing, release what was won."""
    own = store is None
    store = store or tenure.connect(url)
    won: list[tuple[str, int]] = []
    try:
        for _ in range(ROUNDS):
            barrier.wait(timeout=60)
            leases = []
            for job_id in JOBS:
                with contextlib.suppress(tenure.AlreadyClaimed):
                    leases.append(store.claim(job_id, owner=owner, ttl=ttl))
            won.extend((lease.job_id, lease.token) for lease in leases)
            barrier.wait(timeout=60)  # everyone has tried before anyone lets go
            for lease in leases:
                store.release(lease)
    finally:
        if own:
            store.close()
    return won


def _process_entry(url: str, owner: str, barrier: Any, ttl: float, out: Any, backends: dict[str, str]) -> None:
    adopt_registrations(backends)  # a third-party backend registered in the parent
    out.put(_compete(url, owner, barrier, ttl))


class CompetingTests:
    def test_exactly_one_winner_per_job_and_generation(self, kit: Kit) -> None:
        url = kit.url
        with kit.connect() as store:
            for job_id in JOBS:
                store.submit(job_id)
            results: list[list[tuple[str, int]]] = []
            if kit.shared_between_processes:
                ctx = multiprocessing.get_context("spawn")
                barrier, out = ctx.Barrier(WORKERS), ctx.Queue()
                backends = registered_backends()
                procs = [ctx.Process(target=_process_entry, args=(url, f"w{i}", barrier, 30.0, out, backends))
                         for i in range(WORKERS)]
                for p in procs:
                    p.start()
                results = [out.get(timeout=120) for _ in procs]
                for p in procs:
                    p.join(timeout=30)
                    assert p.exitcode == 0
            else:
                tbarrier = threading.Barrier(WORKERS)
                threads = [threading.Thread(target=lambda i=i: results.append(
                    _compete(url, f"w{i}", tbarrier, kit.ttl, store))) for i in range(WORKERS)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(timeout=120)
            wins = [win for result in results for win in result]
            per_job = Counter(job_id for job_id, _ in wins)
            assert per_job == {job_id: ROUNDS for job_id in JOBS}  # one winner per job per round
            assert len(set(wins)) == len(wins)  # no generation handed out twice
            for job_id in JOBS:
                tokens = sorted(token for j, token in wins if j == job_id)
                assert tokens == sorted(set(tokens)) and store.get(job_id).token == tokens[-1]  # type: ignore[union-attr]
