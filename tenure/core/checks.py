"""What a store checks and computes around each backend call, free of I/O.

``tenure.Store`` and ``tenure.aio.AsyncStore`` differ only in how they call the backend; both
validate arguments and stamp leases here, so the two flavours accept, refuse and answer alike.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import NamedTuple

from tenure.core import validation
from tenure.core.backend import Characteristics
from tenure.core.errors import InvalidArgument, quoted
from tenure.core.records import JobState, Lease, Op, Reason, Rejection, RejectionKind

DEFAULT_DRIFT_MARGIN = 0.05
PAGE_ORDERS = ("expiry", "job")
MAX_PAGE = 1000


class PageQuery(NamedTuple):
    """``Store.page``'s arguments, checked, in the order ``Backend.page`` takes them (after now)."""

    states: frozenset[JobState] | None
    job: str | None
    owner: str | None
    order: str
    offset: int
    limit: int


class Checks:
    """The checks of one store: its backend's characteristics and the holder's drift margin."""

    def __init__(self, characteristics: Characteristics, drift_margin: float) -> None:
        if not 0 <= drift_margin < 1:
            raise InvalidArgument(f"drift_margin must be in [0, 1), got {quoted(drift_margin)}")
        resolution = characteristics.clock_resolution
        if drift_margin == 0 and resolution > 0:
            raise InvalidArgument(f"drift_margin=0 leaves no room for the {characteristics.name} "
                                  f"store clock's steps of {resolution:g}s; give it a margin above 0")
        self.characteristics = characteristics
        self.drift_margin = drift_margin

    def ttl(self, ttl: object) -> float:
        c = self.characteristics
        seconds = validation.ttl(ttl, minimum=c.min_ttl, maximum=c.max_ttl, backend=c.name)
        if seconds * self.drift_margin < c.clock_resolution:
            raise InvalidArgument(f"ttl {seconds:g}s with drift_margin {self.drift_margin:g} leaves a margin "
                                  f"below the {c.name} store clock's steps of {c.clock_resolution:g}s")
        return seconds

    def claim(self, job_id: object, owner: object, ttl: object) -> tuple[str, str, float]:
        return validation.job_id(job_id), validation.owner(owner), self.ttl(ttl)

    def lease(self, lease: object) -> Lease:
        """A lease handed back to us, checked field by field like a claim's arguments: a Lease is
        a plain dataclass anyone can build, and its fields reach the backend and the audit."""
        if not isinstance(lease, Lease):
            raise InvalidArgument(f"expected a tenure.Lease, not {type(lease).__name__}")
        validation.job_id(lease.job_id)
        validation.owner(lease.owner)
        validation.token(lease.token)
        self.ttl(lease.ttl)
        validation.store_time("expires_at", lease.expires_at)
        validation.deadline(lease.deadline)
        return lease

    def result(self, result: object) -> bytes | None:
        data = validation.result(result)
        limit = self.characteristics.max_result_bytes
        if data is not None and len(data) > limit:
            raise InvalidArgument(f"result of {len(data)} bytes is above the {limit} bytes "
                                  f"{self.characteristics.name} can store with a job")
        return data

    def stamped(self, lease: Lease, sent_at: float) -> Lease:
        # The store started this lease no earlier than sent_at, on a clock that may run a
        # little faster than ours: trust it for ttl shortened by the drift margin.
        return dataclasses.replace(lease, deadline=sent_at + lease.ttl * (1 - self.drift_margin))


def actor(value: object) -> str | None:
    return None if value is None else validation.owner(value)


def soon(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise InvalidArgument(f"soon must be a non-negative number of seconds, got {quoted(value)}")
    return float(value)


def interval(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise InvalidArgument(f"interval must be a positive number, got {quoted(value)}")
    return float(value)


def since(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"since must be a store time in seconds, not {type(value).__name__}")
    return float(value)


def page(states: Iterable[JobState | str] | None, job: object, owner: object, order: object,
         offset: object, limit: object) -> PageQuery:
    wanted = None if states is None else frozenset(_state(s) for s in states)
    if order not in PAGE_ORDERS:
        raise InvalidArgument(f"order must be one of {', '.join(PAGE_ORDERS)}, got {quoted(order)}")
    start = validation.limit(offset)
    size = validation.limit(limit)
    if start is None or size is None or not 1 <= size <= MAX_PAGE:
        raise InvalidArgument(f"offset must be an int >= 0 and limit from 1 to {MAX_PAGE}")
    return PageQuery(wanted, _needle("job", job), _needle("owner", owner), str(order), start, size)


def destination_rejection(job_id: object, owner: object, token: object, resource: object,
                          highest: object, reason: object) -> Rejection:
    """A rejection seen at a fenced destination, checked; ``at`` is filled in with the store's now.

    Every field is checked like a claim's arguments and bounded (``reason`` to 512 characters),
    so the record fits every backend's largest write.
    """
    checked = (validation.job_id(job_id), validation.owner(owner), validation.token(token),
               validation.resource(resource), validation.highest(highest), validation.reason(reason))
    return Rejection(
        job_id=checked[0], op=Op.EFFECT, owner=checked[1], token=checked[2], current_owner=None,
        current_token=checked[4], at=0.0, reason=checked[5] or str(Reason.STALE_TOKEN),
        kind=RejectionKind.DESTINATION, resource=checked[3])


def _state(value: object) -> JobState:
    try:
        return JobState(value)
    except ValueError:
        names = ", ".join(s.value for s in JobState)
        raise InvalidArgument(f"unknown job state {quoted(value)}; states are {names}") from None


def _needle(kind: str, value: object) -> str | None:
    """Search text: None or "" means no filter; otherwise validated like the field it matches."""
    if value is None or value == "":
        return None
    return validation.job_id(value) if kind == "job" else validation.owner(value)
