"""Run workloads under faults against real stores, check them, and write the report.

    python -m tests.faults.run --backend sqlite,etcd,etcd3,zk,zk3,postgres --fault all \\
        --seconds 60 --seed 1 --report docs/reliability.md

``--fault all`` runs each fault of a backend alone, then all of them mixed. ``--repeat N``
runs every case N times with seeds seed, seed+1, ... The exit status is 1 if any case has a
violation, so the command can gate a release.
"""

from __future__ import annotations

import argparse
import logging
import random
import shlex
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import tenure
from devservers import versions
from tests.faults import checker, envs, history, report, run_term, workload
from tests.faults.admin import Operator
from tests.faults.destination import Destination
from tests.faults.nemesis import BURST_WORKERS, SKEWS, Nemesis, Workers
from tests.harness import Harness

WORKERS = 8
STEPS = 3  # effects (and renewals) per job


@dataclass
class Result:
    backend: str
    fault: str
    seed: int
    seconds: float
    counts: Counter[str]
    violations: list[str]
    unchecked: int = 0
    audit: int = 0
    injected: Counter[str] = field(default_factory=Counter)
    directory: str = ""
    early_ends: int = 0  # leases etcd ended early that their holders restored (etcd-io/etcd#15247)


def _retry(call: object, timeout: float = 90.0) -> object:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()  # type: ignore[operator]
        except tenure.BackendUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _wait_started(hist: Path, names: list[str], timeout: float = 120.0) -> None:
    """Until every worker has invoked its first operation (a claim_next, jobs or none).

    Starting eight Python processes takes seconds on a busy machine; the workload's seconds
    count from when they work, not from when they were spawned. A worker that never starts
    leaves no history, and the caller's progress check says so.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = [history.file_for(hist, name) for name in names]
        if all(f.exists() and f.stat().st_size > 0 for f in files):
            return
        time.sleep(0.1)  # polling files the workers write


def run_case(env: Harness, fault: str, seconds: float, seed: int, workers: int = WORKERS, batch: int = 1) -> Result:
    """One workload of ``seconds`` under ``fault`` (or ``mixed``, or ``none``) on a fresh store;
    ``batch`` > 1: the workers claim, renew and complete that many leases at a time."""
    rng = random.Random(seed)
    url = env.new_store()
    faults = list(env.faults) if fault == "mixed" else ([] if fault == "none" else [fault])
    rundir = Path(tempfile.mkdtemp(prefix=f"{env.name}-{fault}-{seed}-", dir=env.workdir))
    hist = rundir / "history"
    hist.mkdir()
    base = {"ttl": env.fault_ttl, "steps": STEPS, "history": str(hist), "destination": str(rundir / "dest.db"),
            "burst": str(rundir / "burst.json"), "batch": batch}
    Destination(rundir / "dest.db").close()  # tables exist before workers race to make them
    admin: tenure.Store = _retry(lambda: tenure.connect(url))  # type: ignore[assignment]
    pool = Workers(env, base, rng)
    try:  # the workers stop whatever fails (a server that cannot restart fails heal()): none is left behind
        for i in range(1, workers + 1):
            skew = None
            if "skew" in faults:
                skew = SKEWS[(i - 1) % len(SKEWS)] if fault == "skew" or i <= 3 else None
            pool.launch(f"w{i}", skew)
        if "burst" in faults:
            for i in range(1, BURST_WORKERS + 1):
                pool.launch(f"b{i}", None, burst_mode=True)
        _wait_started(hist, [f"w{i}" for i in range(1, workers + 1)])
        started = time.monotonic()
        nemesis = Nemesis(env, pool, faults, url, rng, hist)
        nemesis.start()
        op_rec = history.Recorder(history.file_for(hist, "operator"), "operator")
        operator = Operator(admin, op_rec, random.Random(rng.randrange(2**32)), max(2, batch) * workers)
        try:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                operator.look()
                time.sleep(0.3)
        finally:
            op_rec.close()
            nemesis.stop()
            env.heal()
    finally:
        pool.stop(grace=env.fault_ttl * (STEPS + 2) + 5)
    if nemesis.error is not None:
        raise RuntimeError(f"the nemesis failed: {nemesis.error!r}") from nemesis.error
    final = _collect(admin, rundir / "dest.db")
    admin.close()
    ops = history.load(hist)
    verdict = checker.check(ops, final, env.fault_ttl, env.early_end_margin, clock_rates(pool.clocks),
                            envs.LIFECYCLE, env.delay_late)
    checker.check_process_effects(run_term.load_effects(run_term.effects_dir(hist)), verdict)
    if nemesis.run_term is not None:
        verdict.violations += nemesis.run_term.problems
    return Result(env.name + ("3" if env.size > 1 else ""), fault, seed,
                  time.monotonic() - started, verdict.counts, verdict.violations, verdict.unchecked_jobs,
                  len(final.rejections), nemesis.done, str(rundir), workload.early_ends(hist))


def clock_rates(skews: dict[str, str]) -> dict[str, float]:
    """Each skewed worker's clock rate from its faketime setting ("+0 x1.03": 1.03)."""
    return {name: float(skew.rsplit("x", 1)[1]) for name, skew in skews.items() if "x" in skew}


def _collect(admin: tenure.Store, dest_path: Path) -> checker.Final:
    jobs = _retry(lambda: {j.job_id: j for j in admin.jobs()})
    hist = _retry(admin.history)
    rejections = _retry(admin.rejections)
    dest = Destination(dest_path)
    try:
        return checker.Final(jobs, hist, rejections, dest.effects(), dest.rejections())  # type: ignore[arg-type]
    finally:
        dest.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.run", description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="sqlite", help="comma-separated: sqlite, etcd, etcd3, zk, zk3, postgres")
    parser.add_argument("--fault", default="all", help="comma-separated faults, 'mixed', 'none' or 'all'")
    parser.add_argument("--seconds", type=float, default=20.0, help="workload seconds per case")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=1, help="runs per case, with consecutive seeds")
    parser.add_argument("--report", type=Path, help="add the results to this page (and the .json beside it)")
    parser.add_argument("--note", default="", help="a sentence about this run for the report")
    parser.add_argument("--keep", action="store_true", help="keep the run directories")
    parser.add_argument("--batch", type=int, default=1, help="leases a worker claims and completes at once")
    args = parser.parse_args(argv)
    # Stopped by a signal, still stop the workers and servers (a background shell ignores SIGINT).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    for name in ("kazoo", "tenure", "psycopg"):  # their reconnect chatter would bury the table
        logging.getLogger(name).setLevel(logging.CRITICAL)
    given = sys.argv[1:] if argv is None else argv
    # The note annotates the run; it does not change what produced the numbers.
    shown = [a for i, a in enumerate(given) if a != "--note" and (i == 0 or given[i - 1] != "--note")]
    command = " ".join([*versions.selected(), "python -m tests.faults.run", shlex.join(shown)])
    results: list[Result] = []
    workdir = Path(tempfile.mkdtemp(prefix="tenure-faults-"))
    note = args.note
    try:
        for backend in args.backend.split(","):
            env = envs.make(backend, workdir / backend)
            env.start()
            try:
                wanted = [*env.faults, "mixed"] if args.fault == "all" else args.fault.split(",")
                for fault in wanted:
                    for k in range(args.repeat):
                        try:
                            r = run_case(env, fault, args.seconds, args.seed + k, batch=args.batch)
                        except Exception as exc:
                            # The cases that ran are still reported, with where the run stopped.
                            note = f"{note} Stopped at {backend} {fault} (seed {args.seed + k}): {exc}".strip()
                            raise
                        results.append(r)
                        print(report.row(report._plain(r)), flush=True)
                        for text in r.violations[:20]:
                            print("   VIOLATION:", text, flush=True)
                        if r.unchecked:
                            print(f"   {r.unchecked} jobs whose linearizability search ran out of budget", flush=True)
            finally:
                env.close()
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        if args.report and results:
            report.save(args.report.with_suffix(".json"), args.report, command, args.seed, results, note)
    return 1 if any(r.violations for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
