"""Dashboard at scale: 100,000 jobs in SQLite; first render and refresh times, and memory.

    PYTHONPATH=. python benchmarks/dashboard_scale.py [--jobs 100000] [--db PATH]

Seeds the store in a child process (so its memory is not counted), then, in this process,
times the dashboard's data queries and the whole app script through Streamlit's AppTest:
the first render of each view (the first one also connects) and a refresh (a rerun; the
live fragment reruns less than that). Peak RSS is this process's, app and AppTest included.
Targets (issue 6): first render <= 2 s, refresh <= 1 s, RSS < 500 MB.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tenure  # noqa: E402
from tenure.core.records import HistoryEvent, JobState, Op, Rejection  # noqa: E402
from tenure.core.transitions import JobRecord  # noqa: E402

FIRST_RENDER, REFRESH, RSS_MB = 2.0, 1.0, 500.0
VIEWS = ["Overview", "Live leases", "Expiry timeline", "Rejections", "Job detail"]


def seed(url: str, jobs: int) -> None:
    """70% completed, 15% pending, 10% leased, 5% expired; 5,000 rejections; recent history."""
    rnd = random.Random(7)
    with tenure.connect(url + "?synchronous=NORMAL") as store:
        backend = store.backend
        now = store.now()
        with backend.transaction() as tx:  # type: ignore[attr-defined]
            for i in range(jobs):
                job, roll = f"job-{i:06d}", rnd.random()
                sub = now - rnd.uniform(600, 7200)
                if roll < 0.70:
                    rec = JobRecord(job, JobState.COMPLETED, f"worker-{i % 50}", 1, None, 30.0, sub,
                                    sub + 1, None, sub + 20, 1, b"ok")
                elif roll < 0.85:
                    rec = JobRecord(job, JobState.PENDING, submitted_at=sub)
                else:
                    until = now + rnd.uniform(1, 600) if roll < 0.95 else now - rnd.uniform(1, 600)
                    claimed = min(until, now) - rnd.uniform(10, 200)
                    rec = JobRecord(job, JobState.LEASED, f"worker-{i % 50}", 2, until, 30.0, sub,
                                    claimed, claimed + 5, None, 1, None)
                    tx.add_event(HistoryEvent(job, Op.CLAIM, rec.owner, 2, claimed, until))
                tx.save(rec)
            for n in range(5000):
                job = f"job-{rnd.randrange(jobs):06d}"
                tx.add_rejection(Rejection(job, Op.COMPLETE, f"worker-{n % 50}", 1, "worker-x", 2,
                                           now - rnd.uniform(0, 3000), "token superseded by a newer claim"))


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--db", help="SQLite file to use (default: a new temporary file)")
    args = parser.parse_args()
    path = Path(args.db or Path(tempfile.mkdtemp()) / "scale.db")
    url = f"sqlite:///{path}"
    if not path.exists():
        t = time.perf_counter()
        child = multiprocessing.get_context("spawn").Process(target=seed, args=(url, args.jobs))
        child.start()
        child.join()
        print(f"seeded {args.jobs} jobs in {time.perf_counter() - t:.1f} s: {path}")

    print("\ndata queries (one each, seconds):")
    with tenure.connect(url) as store:
        now = store.now()
        for name, fn in [
            ("summary", lambda: store.summary()),
            ("page leased+expired, first 50", lambda: store.page(states=["leased", "expired"])),
            ("page all states, page 100", lambda: store.page(offset=99 * 50)),
            ("page search job '12345'", lambda: store.page(job="12345", states=None)),
            ("history last 5 min", lambda: store.history(since=now - 300)),
            ("rejections last hour (<=10,000)", lambda: store.rejections(since=now - 3600, limit=10_000)),
        ]:
            print(f"  {name:34s} {timed(fn):.3f}")

    from streamlit.testing.v1 import AppTest

    os.environ.update({"TENURE_DASHBOARD_URL": url, "TENURE_DASHBOARD_REFRESH": "0"})
    at = AppTest.from_file(str(ROOT / "tenure" / "dashboard" / "app.py"), default_timeout=120)
    results: list[tuple[str, float, float]] = []
    for view in VIEWS:
        first = timed(at.run if view == "Overview" else at.radio(key="view").set_value(view).run)
        if view == "Job detail":  # it shows a job once one is entered: time that
            first = timed(at.text_input(key="detail_job").set_value("job-000042").run)
        assert not at.exception, at.exception
        results.append((view, first, timed(at.run)))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    print("\nwhole app through AppTest (seconds; first render of Overview includes connecting):")
    print(f"  {'view':18s} {'first render':>12s} {'refresh':>8s}")
    for view, first, again in results:
        print(f"  {view:18s} {first:12.3f} {again:8.3f}")
    worst_first = max(r[1] for r in results)
    worst_refresh = max(r[2] for r in results)
    verdicts = [
        (f"first render <= {FIRST_RENDER:g} s", worst_first <= FIRST_RENDER, f"{worst_first:.3f} s"),
        (f"refresh <= {REFRESH:g} s", worst_refresh <= REFRESH, f"{worst_refresh:.3f} s"),
        (f"peak RSS < {RSS_MB:g} MB", rss < RSS_MB, f"{rss:.0f} MB"),
    ]
    print()
    for target, met, value in verdicts:
        print(f"  {'met    ' if met else 'NOT MET'}  {target:22s} worst: {value}")
    return 0 if all(met for _, met, _ in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
