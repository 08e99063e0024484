"""The library's OpenTelemetry instruments, read with the SDK's InMemoryMetricReader."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import tenure

sdk_metrics = pytest.importorskip("opentelemetry.sdk.metrics")
sdk_export = pytest.importorskip("opentelemetry.sdk.metrics.export")

_READER: Any = None


@pytest.fixture(scope="module")
def reader() -> Any:
    """One provider for the process: OpenTelemetry allows the global one to be set once."""
    global _READER
    if _READER is None:
        from opentelemetry import metrics

        _READER = sdk_export.InMemoryMetricReader()
        metrics.set_meter_provider(sdk_metrics.MeterProvider(metric_readers=[_READER]))
    return _READER


def points(reader: Any) -> Iterator[tuple[str, dict[str, Any], Any]]:
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    yield metric.name, dict(point.attributes), point


def total(reader: Any, name: str, **attributes: str) -> float:
    return sum(p.value for n, a, p in points(reader)
               if n == name and all(a.get(f"tenure.{k}") == v for k, v in attributes.items()))


def test_operations_are_counted_and_timed_per_backend(reader: Any) -> None:
    before = {name: total(reader, name, backend="memory") for name in
              ("tenure.claims", "tenure.renewals", "tenure.completions", "tenure.rejections", "tenure.leases.lost")}
    with tenure.connect("memory://otel", clock=tenure.ManualClock()) as store:
        lease = store.claim("j", "a", 30)
        lease = store.renew(lease)
        store.complete(lease)
        with pytest.raises(tenure.StaleLease):
            store.renew(lease)
        assert store.claim_next("a", 30) is None  # nothing claimed: not counted
        held = store.hold("k", "a", 30)
        store.force_expire("k")
        store.claim("k", "b", 30)
        assert held._renew_once() is False  # what the renewal thread does on its turn: lost
    after = {name: total(reader, name, backend="memory") for name in before}
    assert {name: after[name] - before[name] for name in before} == {
        "tenure.claims": 3, "tenure.renewals": 1, "tenure.completions": 1, "tenure.rejections": 2,
        "tenure.leases.lost": 1}
    assert total(reader, "tenure.rejections", backend="memory", operation="renew",
                 reason="job already completed") >= 1
    timings = [(a["tenure.operation"], a["tenure.outcome"], p.count) for n, a, p in points(reader)
               if n == "tenure.operation.duration" and a["tenure.backend"] == "memory"]
    assert {(op, outcome) for op, outcome, _ in timings} >= {
        ("claim", "ok"), ("renew", "ok"), ("renew", "refused"), ("complete", "ok"), ("claim_next", "ok")}
