"""OpenTelemetry metrics of the library, through opentelemetry-api.

Without an SDK installed and configured by the application, every instrument here is the
API's no-op: recording costs a function call. With one, these instruments report (every one
carries ``tenure.backend``, the backend's name):

=================================  =========  ====================================================
instrument                         kind       attributes besides ``tenure.backend``
=================================  =========  ====================================================
``tenure.claims``                  counter    leases granted by claim/claim_next
``tenure.renewals``                counter    leases renewed
``tenure.completions``             counter    jobs completed
``tenure.rejections``              counter    ``tenure.operation``, ``tenure.reason`` (the audit's)
``tenure.leases.lost``             counter    held leases that could no longer be trusted
``tenure.operation.duration``      histogram  ``tenure.operation``, ``tenure.outcome``
                                              (``ok``, ``refused`` or ``error``), seconds
=================================  =========  ====================================================
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from opentelemetry import metrics

from tenure.core.errors import BackendUnavailable, LeaseError, StaleLease

T = TypeVar("T")

_meter = metrics.get_meter("tenure")
claims = _meter.create_counter("tenure.claims", unit="{lease}", description="Leases granted")
renewals = _meter.create_counter("tenure.renewals", unit="{lease}", description="Leases renewed")
completions = _meter.create_counter("tenure.completions", unit="{job}", description="Jobs completed")
rejections = _meter.create_counter("tenure.rejections", unit="{rejection}",
                                   description="Operations the store refused as stale, by reason")
leases_lost = _meter.create_counter("tenure.leases.lost", unit="{lease}",
                                    description="Held leases that could no longer be trusted")
duration = _meter.create_histogram("tenure.operation.duration", unit="s",
                                   description="Time of one store operation as the caller saw it")

_COUNTED = {"claim": claims, "claim_next": claims, "renew": renewals, "complete": completions}


def timed(backend: str, operation: str, call: Callable[[], T]) -> T:
    """Run one store operation, recording its duration, its outcome and what it counts."""
    started = time.perf_counter()
    outcome = "error"
    try:
        result = call()
        outcome = "ok"
        counter = _COUNTED.get(operation)
        if counter is not None and not (operation == "claim_next" and result is None):
            counter.add(1, {"tenure.backend": backend})
        return result
    except StaleLease as exc:
        outcome = "refused"
        rejected(backend, operation, exc.rejection.reason)
        raise
    except BackendUnavailable:
        raise
    except LeaseError:
        outcome = "refused"  # already claimed, completed, token changed, invalid ...
        raise
    finally:
        duration.record(time.perf_counter() - started,
                        {"tenure.backend": backend, "tenure.operation": operation, "tenure.outcome": outcome})


def rejected(backend: str, operation: str, reason: str) -> None:
    rejections.add(1, {"tenure.backend": backend, "tenure.operation": operation, "tenure.reason": reason})


def lost(backend: str) -> None:
    leases_lost.add(1, {"tenure.backend": backend})
