"""``python -m benchmarks.drain --backends sqlite,postgres --jobs 100000 --workers 16 --n 1,32``

Claims in batches (issue 29): ``--workers`` worker processes drain ``--jobs`` submitted jobs,
each claiming and completing ``n`` at a time, for each ``n`` side by side in one run on the same
server; jobs per second and each ``n``'s ratio to the first. ``n`` = 1 is today's worker loop
(``claim_next``, ``complete``); a larger ``n`` is ``claim_next_many`` and ``complete_many``.
Each store runs on a private server started like the tests start theirs (fsync on); etcd's
with the auto-compaction docs/backends/etcd.md tells operators to run it with (periodic, an
hour: ``benchmarks.servers.AS_OPERATED``), which compacts nothing in a run shorter than an hour,
as a user's etcd keeps an hour or two of deleted keys (etcd walks them in a range until then:
``benchmarks.studies.etcd_drain_cost``), and each ``n`` on etcd under a key prefix of its own
(``_store_of``). A run checks that every job was completed once.

Not a timed test: figures for docs/performance.md ("Claims in batches").
"""

from __future__ import annotations

import argparse
import functools
import os
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import tenure
from benchmarks.subjects import bare
from benchmarks.workloads import in_processes

TTL = 600.0  # longer than any run: no lease runs out while the queue drains
SUBMIT_BATCH = 2000
RETRIES = 100
T = TypeVar("T")


def _retried(call: Callable[[], T]) -> T:
    """``call()``, sent again while the store is busy (SQLite's write lock held past its
    timeout on a loaded machine): nothing was written, or a retry finds it done."""
    for _ in range(RETRIES):
        try:
            return call()
        except tenure.BackendUnavailable:
            time.sleep(0.05)
    return call()


def _complete_all(store: tenure.Store, leases: list[tenure.Lease]) -> None:
    """Complete every lease, one request (n = 1: ``complete``) or a batch; those the store was
    too busy for are sent again, and one that landed before its retry counts as done."""
    left = leases
    for _ in range(RETRIES):
        if len(left) == 1 and len(leases) == 1:
            found: list[tenure.LeaseError | None] = [_single(store, left[0])]
        else:
            found = _retried(functools.partial(store.complete_many, left))
        refused = [one for one in found if not isinstance(one, tenure.BackendUnavailable) and not _done(one)]
        if refused:
            raise RuntimeError(f"completions refused: {refused[:3]}")
        left = [lease for lease, one in zip(left, found, strict=True) if isinstance(one, tenure.BackendUnavailable)]
        if not left:
            return
    raise RuntimeError(f"{len(left)} completions never answered")


def _single(store: tenure.Store, lease: tenure.Lease) -> tenure.LeaseError | None:
    try:
        store.complete(lease)
    except tenure.LeaseError as exc:
        return exc
    return None


def _done(one: tenure.LeaseError | None) -> bool:
    """A completion that landed: now, or before a retry that found it so."""
    return one is None or (isinstance(one, tenure.StaleLease) and one.rejection.reason == tenure.Reason.COMPLETED)


def drain_loop(store: tenure.Store, owner: str, n: int) -> int:
    """A worker's loop: claim ``n`` at a time (n = 1: today's ``claim_next``, else
    ``claim_next_many``) and complete them, until none is left; the jobs it completed."""
    done = 0
    while True:
        if n == 1:  # today's worker loop
            lease = _retried(lambda: store.claim_next(owner, TTL))
            leases = [] if lease is None else [lease]
        else:
            leases = _retried(lambda: store.claim_next_many(owner, TTL, n))
        if not leases:
            return done
        _complete_all(store, leases)
        done += len(leases)


def _worker(url: str, options: dict[str, Any], n: int, barrier: Any, out: Any) -> None:
    with tenure.connect(url, **options) as store:
        barrier.wait()
        out.put(drain_loop(store, f"drain-{os.getpid()}", n))


def drain(url: str, options: dict[str, Any], jobs: int, workers: int, n: int) -> float:
    """Jobs per second for ``workers`` processes draining ``jobs`` fresh jobs ``n`` at a time."""
    prefix = f"d{n}-{uuid.uuid4().hex[:6]}-"
    with tenure.connect(url, **options) as store:
        for start in range(0, jobs, SUBMIT_BATCH):
            store.submit_many(f"{prefix}{i:07d}" for i in range(start, min(jobs, start + SUBMIT_BATCH)))
    elapsed, done = in_processes(_worker, (url, options, n), workers, timeout=3600.0)
    completed = sum(done)
    if completed != jobs:
        raise RuntimeError(f"{completed} of {jobs} jobs completed")
    return jobs / elapsed


def _store_of(name: str, url: str, n: int) -> str:
    """The store each ``n`` drains on the one server: etcd's under a key prefix of its own
    (the URL's path), so that no half walks the deleted keys the one before left in the
    sections claim_next reads whole (etcd keeps them in its index until a compaction: the
    second half of a 100,000-job run ran at 44 to 52 jobs/s, alone on a fresh etcd at 267 in
    its first minute); the others' as they are."""
    return f"{url}-n{n}" if name == "etcd" else url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1] if __doc__ else None)
    parser.add_argument("--backends", default="sqlite,postgres", help="of memory, sqlite, postgres, zk, etcd")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--n", default="1,32", help="batch sizes, side by side; the first is the baseline")
    args = parser.parse_args()
    sizes = [int(n) for n in args.n.split(",")]
    print(f"# {args.workers} worker processes drain {args.jobs:,} jobs, n at a time; "
          f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    print("| store | " + " | ".join(f"n={n} jobs/s" for n in sizes) + " | "
          + " | ".join(f"n={n} / n={sizes[0]}" for n in sizes[1:]) + " |")
    print("|---" * (2 * len(sizes)) + "|")
    for name in args.backends.split(","):
        with bare(name) as subject:
            # SQLite: 16 processes take turns at one write lock; on a loaded machine a turn can
            # take longer than the default 5 s busy timeout.
            options = {**subject.options, **({"timeout": 60.0} if name == "sqlite" else {})}
            rates = [drain(_store_of(name, subject.url, n), options, args.jobs, args.workers, n) for n in sizes]
        print(f"| {name} | " + " | ".join(f"{rate:,.0f}" for rate in rates) + " | "
              + " | ".join(f"{rate / rates[0]:.1f}x" for rate in rates[1:]) + " |", flush=True)


if __name__ == "__main__":
    main()
