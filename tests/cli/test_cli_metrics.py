"""``tenure metrics``: scraped over HTTP and parsed with prometheus_client's own parser."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

import tenure
from tests.harness import Harness
from tests.reads import count_reads

parser = pytest.importorskip("prometheus_client.parser")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def exporter(tmp_path: Path) -> Iterator[tuple[str, str]]:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    with tenure.connect(url) as store:
        store.submit_many(["p1", "p2", "c1"])
        store.claim("l1", "w", 3600)
        store.claim("soon", "w", 5)
        store.complete(store.claim("c1", "w", 30))
    proc = subprocess.Popen([sys.executable, "-m", "tenure", "--url", url, "metrics", "--port", "0", "--soon", "60"],
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        found = re.search(r"http://\S+/metrics", line)
        assert found, line
        yield url, found.group(0)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def scrape(address: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(address, timeout=30) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in parser.text_string_to_metric_families(text) for s in family.samples}


def test_metrics_count_jobs_by_state_and_rejections_since_start(exporter: tuple[str, str]) -> None:
    url, address = exporter
    first = scrape(address)
    jobs = {dict(labels)["state"]: value for (name, labels), value in first.items() if name == "tenure_jobs"}
    assert jobs == {"pending": 2, "leased": 2, "expired": 0, "completed": 1, "corrupt": 0, "scheduled": 0,
                    "parked": 0}
    assert first[("tenure_leases_expiring_soon", ())] == 1
    assert first[("tenure_store_up", ())] == 1
    # Every series exported from the start, at 0 (Prometheus's convention: rate() and absent() work).
    rejections = {labels: value for (name, labels), value in first.items() if name == "tenure_rejections_total"}
    assert set(rejections.values()) == {0}
    assert {dict(labels)["reason"] for labels in rejections} == {str(r) for r in tenure.Reason} | {"other"}
    assert (("kind", "store"), ("op", "renew"), ("reason", "job already completed")) in rejections

    with tenure.connect(url) as store:
        lease = store.claim("p1", "w", 30)
        store.complete(lease)
        for _ in range(2):
            with pytest.raises(tenure.StaleLease):
                store.renew(lease)
        store.report_rejection("p2", "w", 1, resource="db", highest=3)
    second = scrape(address)
    key = ("tenure_rejections_total", (("kind", "store"), ("op", "renew"), ("reason", "job already completed")))
    assert second[key] == 2
    destination = ("tenure_rejections_total", (("kind", "destination"), ("op", "effect"),
                                               ("reason", "token lower than one already admitted")))
    assert second[destination] == 1
    assert second[("tenure_rejections_last_hour", ())] == 3
    assert scrape(address)[key] == 2  # counted once, however often it is scraped


def test_metrics_count_with_the_dashboards_snapshot(postgres_harness: Harness) -> None:
    """On a store with a native watch a scrape's counts come from the watch's mirror of the
    jobs (the dashboard's Snapshot), not from summary() or a listing of the store."""
    from prometheus_client.core import Metric

    from tenure.cli.metrics import StoreCollector

    with postgres_harness.connect() as store:
        store.submit_many(["p1", "p2"])
        store.claim("l1", "w", 3600)
        collector = StoreCollector(store, 60.0)
        try:
            assert collector.snapshot.mirror is not None and collector.snapshot.mirror.wait_ready(60)
            reads = count_reads(store)
            families: dict[str, Metric] = {m.name: m for m in collector.collect()}
            jobs = {s.labels["state"]: s.value for s in families["tenure_jobs"].samples}
            assert jobs == {"pending": 2, "leased": 1, "expired": 0, "completed": 0, "corrupt": 0, "scheduled": 0,
                            "parked": 0}
            assert reads["summary"] == reads["jobs"] == reads["page"] == 0
        finally:
            collector.snapshot.close()


def test_metrics_count_parked_and_scheduled_jobs_and_failures() -> None:
    from prometheus_client.core import Metric

    from tenure.cli.metrics import StoreCollector

    with tenure.connect("memory://", clock=tenure.ManualClock()) as store:
        store.submit("later", delay=60)
        collector = StoreCollector(store, 60.0)
        try:
            store.fail(store.claim("poison", "w", 30), "boom")  # no limit: retried after the backoff
            store.submit("spent", max_attempts=1)
            store.fail(store.claim("spent", "w", 30), "boom")
            with pytest.raises(tenure.StaleLease):
                store.fail(tenure.Lease("spent", "w", 1, 0.0, 30), "again")  # refused: not counted
            families: dict[str, Metric] = {m.name: m for m in collector.collect()}
            jobs = {s.labels["state"]: s.value for s in families["tenure_jobs"].samples}
            assert (jobs["scheduled"], jobs["parked"], jobs["pending"]) == (2, 1, 0)
            assert [s.value for s in families["tenure_failures"].samples if s.name == "tenure_failures_total"] == [2]
            stale = {tuple(s.labels.values()): s.value for s in families["tenure_rejections"].samples
                     if s.name == "tenure_rejections_total" and s.labels["op"] == "fail"}
            assert stale[("fail", "store", "job is not leased")] == 1
            families = {m.name: m for m in collector.collect()}
            assert [s.value for s in families["tenure_failures"].samples if s.name == "tenure_failures_total"] == [2]
        finally:
            collector.snapshot.close()
