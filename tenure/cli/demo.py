"""``tenure demo``: the seed's worked example, live, with real worker processes.

Worker processes take jobs with ``claim_next`` and hold them while they work. A separate
worker A claims an invoice job; the demo pauses A with SIGSTOP beyond its lease; a worker
claims the job with a higher token and completes it; A resumes and tries to complete with
its stale token. The store rejects it and the rejection is in the audit, which the demo
prints with the job's timeline. Without ``--once`` it repeats until Ctrl-C, beside the
dashboard.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import multiprocessing
import os
import queue
import signal
import time
from dataclasses import dataclass
from multiprocessing.synchronize import Event as EventType
from typing import Any

import tenure
from tenure.cli.arguments import EVERY, JOBS, PORT, TTL, WORKERS
from tenure.cli.format import table, when

POLL = 0.1  # how often the demo's own loop looks for events
IDLE_WAIT = 1.0  # an idle worker blocks in claim_next this long, then looks at ``stop``


@dataclass(frozen=True)
class Event:
    at: float  # the demo's monotonic clock
    who: str
    what: str
    job_id: str
    token: int
    detail: str = ""


def _say(events: Any, who: str, what: str, job_id: str, token: int, detail: str = "") -> None:
    events.put(Event(time.monotonic(), who, what, job_id, token, detail))


def worker(url: str, name: str, ttl: float, work: float, events: Any, stop: EventType) -> None:
    """A well-behaved worker: claim, check before each step of work, complete."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the demo stops us through ``stop``
    logging.getLogger("tenure").setLevel(logging.ERROR)  # the demo prints its own account
    with tenure.connect(url) as store:
        while not stop.is_set():
            held = store.hold_next(owner=name, ttl=ttl, wait=IDLE_WAIT)
            if held is None:
                continue
            with held:
                _say(events, name, "claimed", held.job_id, held.token)
                try:
                    for _ in range(5):
                        held.check()  # stop producing effects the moment the lease is in doubt
                        time.sleep(work / 5)
                    held.complete(f"done by {name}")
                    _say(events, name, "completed", held.job_id, held.token)
                except tenure.LeaseError as exc:
                    _say(events, name, "gave up", held.job_id, held.token, str(exc))


def paused_worker(url: str, name: str, job_id: str, ttl: float, events: Any) -> None:
    """Worker A: claims, gets paused mid-work by the demo, then tries to finish anyway."""
    logging.getLogger("tenure").setLevel(logging.ERROR)
    with tenure.connect(url) as store:
        held = store.hold(job_id, owner=name, ttl=ttl)
        _say(events, name, "claimed", job_id, held.token)
        for _ in range(4):  # the work itself takes less than the TTL; the pause does not
            time.sleep(ttl / 10)
        try:
            held.check()
            verdict = "check() passed"
        except tenure.LeaseLost as exc:
            verdict = f"check() raised LeaseLost ({exc.args[0].split(': ', 1)[-1]})"
        _say(events, name, "resumed", job_id, held.token, verdict)
        try:
            # A worker that ignores check() is still stopped by the store.
            store.complete(held.lease, result=f"done by {name}")
            _say(events, name, "completed", job_id, held.token)
        except tenure.StaleLease as exc:
            _say(events, name, "REJECTED", job_id, held.token, exc.rejection.reason)
        held.lost.set()  # nothing left to release: the job belongs to someone else now


class Demo:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.ctx = multiprocessing.get_context("spawn")
        self.events: Any = self.ctx.Queue()
        # Worker A gets a queue of its own: a process stopped while it holds a shared queue's
        # write lock would silence every other worker until it resumes.
        self.paused_events: Any = self.ctx.Queue()
        self.stop = self.ctx.Event()
        self.start = time.monotonic()
        self.store = tenure.connect(args.url)
        self.workers: list[Any] = []
        self.round = 0  # the last round's number (see ``fresh_round``)

    def log(self, event: Event) -> None:
        token = f"token {event.token}" if event.token else ""
        print(f"[{event.at - self.start:6.2f}s] {event.who:<9} {event.what:<10} {event.job_id:<12} "
              f"{token:<10} {event.detail}".rstrip(), flush=True)

    def note(self, text: str) -> None:
        print(f"[{time.monotonic() - self.start:6.2f}s] {'demo':<9} {text}", flush=True)

    def next_event(self, timeout: float) -> Event | None:
        for source in (self.paused_events, self.events):
            try:
                event: Event = source.get(timeout=timeout)
            except queue.Empty:
                continue
            self.log(event)
            return event
        return None

    def wait_for(self, who: str | None, what: str, job_id: str, timeout: float) -> Event:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            event = self.next_event(POLL / 2)
            if event and event.what == what and event.job_id == job_id and who in (None, event.who):
                return event
        raise TimeoutError(f"no {what!r} of {job_id!r} within {timeout:.0f}s")

    def drain(self) -> None:
        while self.next_event(0.01):
            pass

    def start_workers(self) -> None:
        a = self.args
        for i in range(1, a.workers + 1):
            p = self.ctx.Process(target=worker, args=(a.url, f"worker-{i}", a.ttl, a.ttl / 2, self.events,
                                                      self.stop), daemon=True)
            p.start()
            self.workers.append(p)

    def fresh_round(self) -> int:
        """The next round number whose jobs are not in the store (from an earlier round or run):
        each round submits new jobs, report-N.0 ... and invoice-N, rather than running the
        completed ones again, which read as one job rerun round after round."""
        n = self.round + 1
        while any(self.store.get(job_id) is not None for job_id in (f"invoice-{n}", f"report-{n}.0")):
            n += 1
        self.round = n
        return n

    def scenario(self) -> str:
        """The seed's example once; returns the invoice job's id."""
        a = self.args
        n = self.fresh_round()
        self.store.submit_many(f"report-{n}.{i}" for i in range(a.jobs))
        self.note(f"submitted {a.jobs} jobs; workers take them with claim_next()")
        job_id = f"invoice-{n}"
        paused = self.ctx.Process(target=paused_worker, args=(a.url, "worker-A", job_id, a.ttl, self.paused_events),
                                  daemon=True)
        paused.start()
        try:
            claimed = self.wait_for("worker-A", "claimed", job_id, 30)
            assert paused.pid is not None
            os.kill(paused.pid, signal.SIGSTOP)
            self.note(f"SIGSTOP worker-A (pid {paused.pid}) beyond its {a.ttl:g}s lease on {job_id}")
            taken = self.wait_for(None, "completed", job_id, 30 + 3 * a.ttl)
            os.kill(paused.pid, signal.SIGCONT)
            self.note(f"SIGCONT worker-A: it still holds token {claimed.token}; {taken.who} "
                      f"completed with token {taken.token}")
            self.wait_for("worker-A", "REJECTED", job_id, 30)
            paused.join(timeout=10)
        finally:
            if paused.is_alive():  # never leave a stopped process behind
                os.kill(paused.pid, signal.SIGCONT)  # type: ignore[arg-type]
                paused.kill()
        self.timeline(job_id)
        return job_id

    def timeline(self, job_id: str) -> None:
        now = self.store.now()
        history = self.store.history(job_id)
        rows = [(e.at, e.op.value, e.owner, e.token, "accepted", when(e.expires_at, now) if e.expires_at else "")
                for e in history]
        # Where a newer claim followed, the older lease ran out first: show when.
        for older, newer in itertools.pairwise(history):
            if newer.op is tenure.Op.CLAIM and newer.token != older.token and older.expires_at is not None:
                rows.append((older.expires_at, "expired", older.owner, older.token, "by TTL", ""))
        rows += [(r.at, r.op.value, r.owner, r.token, "REJECTED", f"{r.reason}; current token {r.current_token}")
                 for r in self.store.rejections() if r.job_id == job_id]
        rows.sort(key=lambda row: (row[0], row[1] != "expired"))  # an expiry before the claim it allowed
        print(f"\nTimeline of {job_id} by the store's clock ({self.store.url}):")
        print(table(["at", "op", "owner", "token", "outcome", "expires / reason"],
                    [(when(at, now), *rest) for at, *rest in rows]))
        print()

    def close(self) -> None:
        self.stop.set()
        for p in self.workers:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
        self.drain()
        self.store.close()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--once", action="store_true", help="run one scenario and exit")
    parser.add_argument("--workers", type=WORKERS, default=2, help="worker processes (default 2)")
    parser.add_argument("--jobs", type=JOBS, default=4, help="jobs submitted per round (default 4)")
    parser.add_argument("--ttl", type=TTL, default=2.0, help="lease TTL in seconds (default 2)")
    parser.add_argument("--every", type=EVERY, default=10.0, help="seconds between rounds (default 10)")
    parser.add_argument("--no-dashboard", action="store_true", help="do not serve the dashboard")
    parser.add_argument("--port", type=PORT, default=8501, help="dashboard port (default 8501)")


def _start_dashboard(args: argparse.Namespace) -> Any:
    try:
        from tenure.dashboard import launcher
    except ImportError as exc:
        print(f"dashboard not started ({exc}); pip install 'tenure[dashboard]'", flush=True)
        return None
    process = launcher.start(args.url, port=args.port)
    try:
        address = launcher.wait_ready(process, "127.0.0.1", args.port, timeout=60)
    except tenure.LeaseError as exc:
        print(f"dashboard did not start: {exc}", flush=True)
        launcher.stop(process)
        return None
    except BaseException:  # Ctrl-C, SIGTERM or SIGHUP while it starts: not left serving
        with launcher.uninterrupted():
            launcher.stop(process)
        raise
    print(f"dashboard: {address}", flush=True)
    return process


def run(args: argparse.Namespace) -> int:
    """The demo until it is done, Ctrl-C, SIGTERM or SIGHUP; every process it started is stopped."""
    from tenure.dashboard.launcher import interrupted_by_signals

    with interrupted_by_signals():
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    demo = Demo(args)
    dashboard = None
    try:  # from before the dashboard starts: a signal while it starts stops the demo too
        dashboard = None if args.once or args.no_dashboard else _start_dashboard(args)
        print(f"tenure demo on {demo.store.url}: {args.workers} workers, TTL {args.ttl:g}s"
              + ("" if args.once else "; Ctrl-C to stop"), flush=True)
        demo.start_workers()
        while True:
            demo.scenario()
            if args.once:
                return 0
            deadline = time.monotonic() + args.every
            while time.monotonic() < deadline:
                demo.drain()
                time.sleep(0.2)
    except KeyboardInterrupt:
        print("\nstopping", flush=True)
        return 0
    finally:
        from tenure.dashboard.launcher import stop, uninterrupted

        with uninterrupted():  # a second signal must not cut the cleanup short
            demo.close()
            if dashboard is not None:
                stop(dashboard)
