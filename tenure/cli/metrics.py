"""``tenure metrics``: Prometheus metrics of a store at ``/metrics``, for alerting.

Each scrape counts jobs through ``tenure.views.snapshot.Snapshot``, the dashboard's code: where
the store has a native watch (etcd, ZooKeeper, PostgreSQL) the counts come from a mirror of
every job kept by that watch, so a scrape does not list the store; elsewhere from the store's
indexed ``summary()``. Nothing is kept between scrapes otherwise (``max_age=0``): a scrape costs
the store at most one summary, the last hour's audit, and the rejections and history since the
last scrape.

=====================================  =======  ==============================================
metric                                 type     meaning
=====================================  =======  ==============================================
``tenure_jobs{state}``                 gauge    jobs by state (pending, scheduled, leased,
                                                expired, completed, parked, corrupt) by the
                                                store's clock
``tenure_leases_expiring_soon``        gauge    live leases ending within ``--soon`` seconds
``tenure_rejections_total{op,kind,     counter  rejections audited since this exporter started;
reason}``                                       every series of a known reason exported at 0 from
                                                the start
``tenure_rejections_last_hour``        gauge    rejections the audit holds for the last hour
``tenure_failures_total``              counter  jobs failed (``fail``, ``tenure run``'s failed
                                                commands) since this exporter started, read from
                                                the store's history; no label (one series per
                                                store: a job id would be unbounded)
``tenure_store_up``                    gauge    1 if the store answered this scrape, else 0
``tenure_store_read_seconds``          gauge    how long this scrape's reads took
=====================================  =======  ==============================================
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import tenure
from tenure.cli import exits, stores
from tenure.cli.arguments import PORT, SOON
from tenure.core.records import JobState, Op, Reason, RejectionKind
from tenure.core.watch import NewEvents, NewRejections
from tenure.views.snapshot import Snapshot

_REASONS = frozenset(r.value for r in Reason)
# Every series known in advance, exported at 0 from the first scrape (Prometheus's convention,
# so rate() and absent() alerts work before the first rejection): the store's refusals of a
# holder's operation, and a destination's (its reason when tenure's own, else "other").
_SERIES = [(op.value, RejectionKind.STORE.value, reason.value)
           for op in (Op.RENEW, Op.COMPLETE, Op.RELEASE, Op.FAIL)
           for reason in Reason if reason is not Reason.STALE_TOKEN] + [
    (Op.EFFECT.value, RejectionKind.DESTINATION.value, reason) for reason in (Reason.STALE_TOKEN.value, "other")]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=PORT, default=9464, help="port to serve on (default 9464; 0 picks one)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--soon", type=SOON, default=30.0,
                        help="a lease ending within this many seconds counts as expiring soon (default 30)")


class StoreCollector:
    """A prometheus_client collector that reads the store at each scrape."""

    def __init__(self, store: tenure.Store, soon: float) -> None:
        self.store = store
        self.soon = soon
        self._lock = threading.Lock()  # scrapes may overlap; the audit tally is one
        self._rejections: Counter[tuple[str, str, str]] = Counter(dict.fromkeys(_SERIES, 0))
        started = store.now()
        self._new_rejections = NewRejections(store.backend, started)
        self._new_events = NewEvents(store.backend, started)
        self._failures = 0
        self.snapshot = Snapshot(store, max_age=0.0)  # the dashboard's counts, read at each scrape

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        started = time.perf_counter()
        up = 1
        summary = None
        with self._lock:
            try:
                summary = self.snapshot.summary(self.soon)
                for r in self._new_rejections():
                    reason = r.reason if r.reason in _REASONS or r.kind is RejectionKind.STORE else "other"
                    self._rejections[(r.op.value, r.kind.value, reason)] += 1
                self._failures += sum(e.op is Op.FAIL for e in self._new_events())
            except tenure.LeaseError as exc:
                up = 0
                print(f"tenure metrics: reading the store failed: {exc}", file=sys.stderr, flush=True)
            tally, failures = dict(self._rejections), self._failures
        if summary is not None:
            jobs = GaugeMetricFamily("tenure_jobs", "Jobs by state, judged by the store's clock", labels=["state"])
            for state in JobState:
                jobs.add_metric([state.value], getattr(summary, state.value))
            yield jobs
            yield GaugeMetricFamily("tenure_leases_expiring_soon", f"Live leases ending within {self.soon:g} s",
                                    value=summary.expiring_soon)
            yield GaugeMetricFamily("tenure_rejections_last_hour", "Rejections audited in the last hour",
                                    value=summary.rejections_last_hour)
        rejections = CounterMetricFamily("tenure_rejections", "Rejections audited since this exporter started",
                                         labels=["op", "kind", "reason"])
        for (op, kind, reason), count in sorted(tally.items()):
            rejections.add_metric([op, kind, reason], count)
        yield rejections
        yield CounterMetricFamily("tenure_failures", "Jobs failed since this exporter started", value=failures)
        yield GaugeMetricFamily("tenure_store_up", "1 if the store answered this scrape", value=up)
        yield GaugeMetricFamily("tenure_store_read_seconds", "Time this scrape's store reads took",
                                value=time.perf_counter() - started)


def run(args: argparse.Namespace) -> int:
    try:
        from prometheus_client import CollectorRegistry, start_http_server
    except ImportError:
        print("tenure: metrics need prometheus_client: pip install 'tenure[metrics]'", file=sys.stderr)
        return exits.UNAVAILABLE  # as a store whose extra is missing
    with tenure.connect(args.url, **stores.connect_options(args)) as store:  # creates none
        registry = CollectorRegistry(auto_describe=False)
        collector = StoreCollector(store, args.soon)
        registry.register(collector)
        try:
            server, _ = start_http_server(args.port, addr=args.host, registry=registry)
        except OSError as exc:  # the port is taken, or the address is not this machine's
            print(f"tenure metrics: cannot serve on {args.host}:{args.port}: {exc.strerror}", file=sys.stderr)
            return exits.UNAVAILABLE
        print(f"tenure metrics: serving http://{args.host}:{server.server_port}/metrics", file=sys.stderr, flush=True)
        try:
            threading.Event().wait()  # until Ctrl-C or SIGTERM
        finally:
            server.shutdown()
            collector.snapshot.close()
    return exits.OK
