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
``tenure.failures``                counter    jobs failed (``fail``: retried later, or parked)
``tenure.rejections``              counter    ``tenure.operation``, ``tenure.reason`` (the audit's)
``tenure.leases.lost``             counter    held leases that could no longer be trusted
``tenure.operation.duration``      histogram  ``tenure.operation``, ``tenure.outcome``
                                              (``ok``, ``refused`` or ``error``), seconds
=================================  =========  ====================================================
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from opentelemetry import metrics

from tenure.core.errors import BackendUnavailable, LeaseError, StaleLease

T = TypeVar("T")

_meter = metrics.get_meter("tenure")
claims = _meter.create_counter("tenure.claims", unit="{lease}", description="Leases granted")
renewals = _meter.create_counter("tenure.renewals", unit="{lease}", description="Leases renewed")
completions = _meter.create_counter("tenure.completions", unit="{job}", description="Jobs completed")
failures = _meter.create_counter("tenure.failures", unit="{job}", description="Jobs failed by their holder")
rejections = _meter.create_counter("tenure.rejections", unit="{rejection}",
                                   description="Operations the store refused as stale, by reason")
leases_lost = _meter.create_counter("tenure.leases.lost", unit="{lease}",
                                    description="Held leases that could no longer be trusted")
duration = _meter.create_histogram("tenure.operation.duration", unit="s",
                                   description="Time of one store operation as the caller saw it")

_COUNTED = {"claim": claims, "claim_next": claims, "renew": renewals, "complete": completions, "fail": failures}


def timed(backend: str, operation: str, call: Callable[[], T]) -> T:
    """Run one store operation, recording its duration, its outcome and what it counts."""
    started = time.perf_counter()
    try:
        result = call()
    except BaseException as exc:
        measured(backend, operation, started, failure=exc)
        raise
    measured(backend, operation, started, result=result)
    return result


async def timed_async(backend: str, operation: str, call: Awaitable[T]) -> T:
    """``timed`` around an await."""
    started = time.perf_counter()
    try:
        result = await call
    except BaseException as exc:
        measured(backend, operation, started, failure=exc)
        raise
    measured(backend, operation, started, result=result)
    return result


def measured(backend: str, operation: str, started: float, *, result: object = None,
             failure: BaseException | None = None) -> None:
    """Record one operation begun at ``started`` (``time.perf_counter``) and its outcome: what
    it counts if it succeeded, its refusal if the store refused it."""
    outcome = "ok"
    if failure is None:
        counter = _COUNTED.get(operation)
        if counter is not None and not (operation == "claim_next" and result is None):
            counter.add(1, {"tenure.backend": backend})
    elif isinstance(failure, StaleLease):
        outcome = "refused"
        rejected(backend, operation, failure.rejection.reason)
    elif isinstance(failure, LeaseError) and not isinstance(failure, BackendUnavailable):
        outcome = "refused"  # already claimed, completed, token changed, invalid ...
    else:
        outcome = "error"
    duration.record(time.perf_counter() - started, {
        "tenure.backend": backend, "tenure.operation": operation, "tenure.outcome": outcome})


def renewed_each(backend: str, found: Sequence[object]) -> None:
    """Count what a renew_many renewed and refused, as single renewals count."""
    _each(backend, "renew", renewals, sum(1 for one in found if not isinstance(one, LeaseError)), found)


def completed_each(backend: str, found: Sequence[object]) -> None:
    """Count what a complete_many completed and refused, as single completions count."""
    _each(backend, "complete", completions, sum(1 for one in found if one is None), found)


def claimed_many(backend: str, found: Sequence[object]) -> None:
    """Count the leases a claim_next_many won, as single claims count."""
    if found:
        claims.add(len(found), {"tenure.backend": backend})


def _each(backend: str, operation: str, counter: metrics.Counter, done: int, found: Sequence[object]) -> None:
    if done:
        counter.add(done, {"tenure.backend": backend})
    for one in found:
        if isinstance(one, StaleLease):
            rejected(backend, operation, one.rejection.reason)


def rejected(backend: str, operation: str, reason: str) -> None:
    rejections.add(1, {"tenure.backend": backend, "tenure.operation": operation, "tenure.reason": reason})


def lost(backend: str) -> None:
    leases_lost.add(1, {"tenure.backend": backend})
