"""What a store checks and computes around each backend call, free of I/O.

``tenure.Store`` and ``tenure.aio.AsyncStore`` differ only in how they call the backend; both
validate arguments and stamp leases here, so the two flavours accept, refuse and answer alike.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterable
from typing import Any, NamedTuple

from tenure.core import lifecycle, validation
from tenure.core.backend import Characteristics
from tenure.core.errors import InvalidArgument, LeaseError, StaleLease, quoted
from tenure.core.holding import MAX_DRIFT_MARGIN
from tenure.core.records import HistoryEvent, JobState, Lease, Op, Reason, Rejection, RejectionKind
from tenure.core.stamps import Stamps
from tenure.core.steps import Completion, Renewal

DEFAULT_DRIFT_MARGIN = 0.05
PAGE_ORDERS = ("expiry", "job")
MAX_PAGE = 1000
MAX_BATCH = 1000  # leases one claim_next_many or complete_many call takes at most


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
        margin = validation.number("drift_margin", drift_margin, what="fraction of the TTL")
        if not 0 <= margin <= MAX_DRIFT_MARGIN:
            raise InvalidArgument(f"drift_margin must be from 0 to {MAX_DRIFT_MARGIN:g} (a larger one leaves too "
                                  f"little time to renew before the safe deadline), got {quoted(drift_margin)}")
        resolution = characteristics.clock_resolution
        if margin == 0 and resolution > 0:
            raise InvalidArgument(f"drift_margin=0 leaves no room for the {characteristics.name} "
                                  f"store clock's steps of {resolution:g}s; give it a margin above 0")
        self.characteristics = characteristics
        self.drift_margin = margin
        self._stamps = Stamps()  # the deadlines stamped here, the only ones a backend sees

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
        given = validation.deadline(lease.deadline)
        trusted = self._stamps.trusted(lease.job_id, lease.token, given)  # see tenure.core.stamps
        return lease if trusted == given else dataclasses.replace(lease, deadline=trusted)

    def renewals(self, leases: object, ttl: object) -> list[Renewal]:
        """``renew_many``'s leases, each checked like ``renew``'s before anything is sent, with
        the TTL each renews for (its own unless ``ttl`` is given); one job at most once."""
        checked = self._leases("renew_many", leases, "renew", None)  # the renewer's batches are larger
        seconds = None if ttl is None else self.ttl(ttl)
        return [(lease, self.ttl(lease.ttl) if seconds is None else seconds) for lease in checked]

    def completions(self, leases: object, results: object) -> list[Completion]:
        """``complete_many``'s leases and results, each checked like ``complete``'s before
        anything is sent; ``results`` None, or one result per lease (None for none)."""
        checked = self._leases("complete_many", leases, "complete", MAX_BATCH)
        if results is None:
            return [(lease, None) for lease in checked]
        each = _listed("complete_many", "results", results)
        if len(each) != len(checked):
            raise InvalidArgument(f"complete_many takes one result per lease: {len(checked)} leases, "
                                  f"{len(each)} results")
        return [(lease, self.result(result)) for lease, result in zip(checked, each, strict=True)]

    def _leases(self, call: str, leases: object, single: str, most: int | None) -> list[Lease]:
        """A batch's leases, each checked (``lease``), one per job, ``most`` at most."""
        if isinstance(leases, Lease):
            raise InvalidArgument(f"{call} takes an iterable of leases, not one lease; use {single}() for one")
        checked = [self.lease(lease) for lease in _listed(call, "leases", leases)]
        if most is not None and len(checked) > most:
            raise InvalidArgument(f"{call} takes at most {most} leases, got {len(checked)}")
        if len({lease.job_id for lease in checked}) < len(checked):
            raise InvalidArgument(f"{call} takes one lease per job: a job appears twice")
        return checked

    def renewed(self, found: list[Lease | LeaseError], sent_at: float) -> list[Lease | LeaseError]:
        """``renew_many``'s answers, each renewed lease stamped with its safe deadline from
        ``sent_at`` (when the batch was sent, so no later than its own renewal was)."""
        return [self.stamped(one, sent_at) if isinstance(one, Lease) else one for one in found]

    def held_lease(self, lease: object) -> Lease:
        """A lease to hold: checked, and stamped with its safe deadline by this store."""
        checked = self.lease(lease)
        if not math.isfinite(checked.deadline):  # not stamped here: it would be trusted forever
            raise InvalidArgument(f"lease on {quoted(checked.job_id)} has no safe deadline from this store: "
                                  "hold a lease returned by its claim() or renew(), not one built by hand")
        return checked

    def forget(self, lease: Lease) -> None:
        """The lease ended (completed or released): its deadline is no longer trusted."""
        self._stamps.forget(lease.job_id, lease.token)

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
        deadline = sent_at + lease.ttl * (1 - self.drift_margin)
        self._stamps.stamp(lease.job_id, lease.token, deadline)
        return dataclasses.replace(lease, deadline=deadline)


def batch(n: object) -> int:
    """How many leases one ``claim_next_many`` may claim: 1 to MAX_BATCH."""
    return validation.whole("n", n, 1, MAX_BATCH)


def _listed(call: str, what: str, values: object) -> list[Any]:
    if not isinstance(values, (str, bytes)):
        with contextlib.suppress(TypeError):
            return list(values)  # type: ignore[call-overload,no-any-return]
    raise InvalidArgument(f"{call} takes an iterable of {what}, not {type(values).__name__}")


def actor(value: object) -> str | None:
    return None if value is None else validation.owner(value)


def job_ids(values: object) -> list[str]:
    """``submit_many``'s ids, every one checked before any is written."""
    if isinstance(values, (str, bytes, bytearray, memoryview)):  # "abc" would be jobs "a", "b", "c"
        raise InvalidArgument(f"submit_many takes an iterable of job ids, not one {type(values).__name__}; "
                              "use submit() for one job")
    try:
        each = iter(values)  # type: ignore[call-overload]
    except TypeError:
        raise InvalidArgument(f"submit_many takes an iterable of job ids, not {type(values).__name__}") from None
    return [validation.job_id(job_id) for job_id in each]


def soon(value: object) -> float:
    return validation.seconds("soon", value, maximum=validation.MAX_TTL)  # no lease runs longer


def interval(value: object) -> float:
    return validation.seconds("interval", value, maximum=validation.MAX_WAIT, positive=True)


def since(value: object) -> float | None:
    return None if value is None else validation.store_time("since", value)


def page(states: Iterable[JobState | str] | None, job: object, owner: object, order: object,
         offset: object, limit: object) -> PageQuery:
    wanted = None if states is None else frozenset(_state(s) for s in states)
    if order not in PAGE_ORDERS:
        raise InvalidArgument(f"order must be one of {', '.join(PAGE_ORDERS)}, got {quoted(order)}")
    start = validation.whole("offset", offset)
    size = validation.whole("limit", limit, 1, MAX_PAGE)
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


def may_be_operator_ended(refused: StaleLease) -> bool:
    """Whether a refusal said the lease ran out, which may be an operator's doing: then the
    job's latest history event tells (``explained``)."""
    return refused.rejection.reason == Reason.EXPIRED.value


def explained(refused: StaleLease, latest: list[HistoryEvent]) -> StaleLease:
    """``refused`` naming the operator who ended the lease, when the job's latest history
    event is an EXPIRE of the refused token; else ``refused`` as it is."""
    r = refused.rejection
    if latest and latest[-1].op is Op.EXPIRE and latest[-1].token == r.token:
        return StaleLease(r, latest[-1])
    return refused


def max_attempts(value: object) -> int | None:
    """How many claims a job's run may have: a whole number from 1, or None for the store's default."""
    return None if value is None else validation.whole("max_attempts", value, 1, lifecycle.MAX_ATTEMPTS)


def delay(kind: str, value: object) -> float:
    """A delay before a job may be claimed (``delay``, ``retry_in``): seconds of store time, up to a year."""
    return validation.seconds(kind, value, maximum=lifecycle.MAX_DELAY)


_ERROR_CONTROLS = frozenset(chr(c) for c in range(32)) - {"\n", "\t"} | {"\x7f"}


def error(value: object) -> str | None:
    """A fail()'s error: text of up to ``lifecycle.MAX_ERROR`` characters, lines and tabs
    allowed (a traceback's last lines), no other control character (no store keeps NUL)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidArgument(f"error must be a str or None, not {type(value).__name__}")
    if len(value) > lifecycle.MAX_ERROR:
        raise InvalidArgument(f"error of {len(value)} characters is above the maximum of {lifecycle.MAX_ERROR}")
    if not _ERROR_CONTROLS.isdisjoint(value):
        raise InvalidArgument("error contains a control character other than a line break or tab")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument("error is not valid Unicode text (it holds a lone surrogate)") from None
    return value


def health(facts: dict[str, Any], characteristics: Characteristics, warnings: tuple[str, ...]) -> dict[str, Any]:
    """A store's health in both flavours: the backend's facts, the durability it declares (so
    an operator sees a volatile store for what it is), and this connection's warnings."""
    declared = characteristics.durability
    found = {**facts, "durability": "not declared" if declared is None else declared.value}
    return {**found, "warnings": "; ".join(warnings)} if warnings else found
