"""A per-job linearizability check against a mutex-with-token model (Wing & Gong, Lowe).

The model of one job: who holds it (a token or nobody), the highest token issued, whether
it is completed, and a lower bound of when the holder's lease can expire in real time: the
invocation of the claim or renewal that set it, plus the TTL (less a small slack for the
store's clock). A claim may take the job from a holder only if it returned after that
bound; a stale rejection of the holder is allowed only once the lease may have expired, or,
on a store that may end a lease early and restores it only while its holder's safe deadline
runs (etcd, 3.5.16 too; docs/protocol.md: ``deadline_margin``), once that deadline may have
passed: the TTL less the drift margin after the claim or renewal, on the holder's clock.

The job's life cycle (issue 28) is in the model too: the attempts of its run (a claim
counts one, and its lease says which it is; a release gives it back; a requeue starts
again from none), whether it is parked (a fail on its last attempt, or its last allowed
lease run out: never claimed until a requeue), and the window in which it becomes
claimable again after a delayed submit, a fail (its ``retry_in``, or the store's backoff
for the attempt) or a delayed requeue: no claim may return before the window opens (by
the store's clock, which may run 2 % fast), and a claim may be refused as scheduled only
if it began before the window closed.

As in Jepsen, an operation with an unknown outcome may take effect at any time after its
invocation, or never; one known to have happened (found in the store) must take effect.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

INF = float("inf")
MAX_STEPS = 200_000  # per job; beyond this the job is reported as not checked, not as valid


@dataclass(frozen=True)
class Op:
    # claim, claim-refused, renew, complete, release, fail, requeue, stale (a renew, complete,
    # release or fail the store refused)
    kind: str
    token: int
    start: float
    end: float  # INF when the outcome was unknown
    required: bool = True  # False: unknown, may not have happened
    refused: str = ""  # for claim-refused: AlreadyClaimed, JobCompleted, JobParked or JobScheduled
    label: str = ""  # for messages: process and op id
    rate: float = 1.0  # how fast the invoking process's clock runs (faketime's x1.03)
    attempt: int | None = None  # a claim's lease.attempt, when the worker saw it
    wait: float | None = None  # fail: its retry_in (None: the store's backoff); requeue: its delay


@dataclass(frozen=True)
class Life:
    """One job's life-cycle rules: its attempts, the store's backoff, its submit's delay."""

    max_attempts: int | None = None  # None: unlimited
    retry_base: float = 1.0  # the store's backoff (tenure.core.lifecycle.Lifecycle)
    retry_factor: float = 2.0
    retry_max: float = 600.0
    due: tuple[float, float] = (-INF, -INF)  # the submit's delay: the claimable window (below)
    # How late after its wait a delayed job may become claimable (never early): 0 where the
    # store's clock judges claimable_at; etcd's delays are etcd leases (``Harness.delay_late``).
    late: float = 0.0

    def backoff(self, attempts: int) -> tuple[float, float]:
        """The least and most a fail without retry_in on attempt ``attempts`` waits (jitter
        takes the full backoff down to between half of it and all of it)."""
        full = min(self.retry_max, self.retry_base * self.retry_factor ** min(max(attempts, 1) - 1, 1000))
        return full / 2, full


@dataclass(frozen=True)
class State:
    holder: int | None = None
    expiry_lb: float = -INF
    done: bool = False
    max_token: int = 0
    refusal_lb: float = -INF  # from when the store may refuse the holder
    attempts: int = 0  # the store's count for this run of the job
    parked: bool = False  # by a fail on the last attempt (a last lease run out is judged from holder)
    due_lb: float = -INF  # no claim of a job nobody holds returns before this (its claimable_at, at the earliest)
    due_ub: float = -INF  # a claim invoked from here on cannot find it scheduled


def _refusable(op: Op, expiry_lb: float, ttl: float, deadline_margin: float | None) -> float:
    if deadline_margin is None:
        return expiry_lb
    return min(expiry_lb, op.start + ttl * (1 - deadline_margin) / op.rate)  # the holder's deadline


def due(start: float, end: float, low: float, high: float, rate_slack: float,
        late: float = 0.0) -> tuple[float, float]:
    """The real-time window in which a job that an operation invoked at ``start`` and ended
    at ``end`` made wait ``low`` to ``high`` seconds of the store's clock becomes claimable;
    a wait of 0 is none (claimable at once). ``late``: ``Life.late``, for the window's end only."""
    if high <= 0:
        return -INF, -INF
    return start + low * (1 - rate_slack), end + high * (1 + rate_slack) + late


def _spent(s: State, life: Life) -> bool:
    return life.max_attempts is not None and s.attempts >= life.max_attempts


def _freed(s: State, **changes: Any) -> State:
    """Nobody holds the job any more (a release, fail or requeue); ``changes`` on top."""
    return dataclasses.replace(s, **{"holder": None, "expiry_lb": -INF, "refusal_lb": -INF, "parked": False,
                                     "due_lb": -INF, "due_ub": -INF, **changes})


def _claim(s: State, op: Op, ttl: float, slack: float, deadline_margin: float | None, life: Life) -> State | None:
    if s.done or s.parked or op.token <= s.max_token:
        return None
    if s.holder is not None and (op.end < s.expiry_lb or _spent(s, life)):
        return None  # the previous lease cannot have expired yet, or ran out on the last attempt: parked
    if s.holder is None and op.end < s.due_lb:
        return None  # returned before the job was claimable by the store's clock
    if op.attempt is not None and op.attempt != s.attempts + 1:
        return None  # an attempt counted twice, or one that went down without a release or requeue
    lb = op.start + ttl - slack
    return State(op.token, lb, False, op.token, _refusable(op, lb, ttl, deadline_margin), s.attempts + 1)


def _refused_claim(s: State, op: Op, life: Life) -> bool:
    if op.refused == "JobCompleted":
        return s.done
    if s.done:
        return False
    if op.refused == "JobParked":
        return s.parked or (s.holder is not None and _spent(s, life) and op.end >= s.expiry_lb)
    if op.refused == "JobScheduled":
        return op.start < s.due_ub  # the window: a claim, a completion or parking closes it
    return s.holder is not None  # AlreadyClaimed


def step(s: State, op: Op, ttl: float, slack: float, deadline_margin: float | None = None,
         life: Life = Life()) -> State | None:
    """The state after ``op``, or None if the model forbids it."""
    rate_slack = slack / ttl  # the store's clock may run this much fast
    if op.kind == "claim":
        return _claim(s, op, ttl, slack, deadline_margin, life)
    if op.kind == "claim-refused":
        return s if _refused_claim(s, op, life) else None
    if op.kind == "stale":
        ok = s.done or s.holder != op.token or op.end >= s.refusal_lb
        return s if ok else None
    if op.kind == "requeue":
        if s.done or (s.holder is not None and op.end < s.expiry_lb):
            return None  # a live lease is not requeued
        lb, ub = due(op.start, op.end, op.wait or 0.0, op.wait or 0.0, rate_slack, life.late)
        return _freed(s, attempts=0, due_lb=lb, due_ub=ub)
    if s.done or s.holder != op.token:  # renew, complete, release, fail: the holder's
        return None
    if op.kind == "renew":
        lb = op.start + ttl - slack
        return State(s.holder, max(s.expiry_lb, lb), False, s.max_token,
                     max(s.refusal_lb, _refusable(op, lb, ttl, deadline_margin)), s.attempts)
    if op.kind == "complete":
        return State(None, -INF, True, s.max_token, attempts=s.attempts)
    if op.kind == "release":  # the attempt is given back: the worker did not try
        return _freed(s, attempts=max(s.attempts - 1, 0))
    if op.kind == "fail":
        if _spent(s, life):
            return _freed(s, parked=True)
        low, high = life.backoff(s.attempts) if op.wait is None else (op.wait, op.wait)
        lb, ub = due(op.start, op.end, low, high, rate_slack, life.late)
        return _freed(s, due_lb=lb, due_ub=ub)
    raise ValueError(op.kind)


def check(ops: list[Op], ttl: float, slack: float, deadline_margin: float | None = None,
          life: Life = Life()) -> bool | None:
    """True if some linearization fits the model, False if none does, None if out of budget."""
    ops = sorted(ops, key=lambda o: o.start)
    n = len(ops)
    required = 0
    for i, o in enumerate(ops):
        if o.required:
            required |= 1 << i
    failed: set[tuple[int, State]] = set()
    steps = 0
    first = State(due_lb=life.due[0], due_ub=life.due[1])

    def search(done: int, state: State) -> bool | None:
        nonlocal steps
        if done & required == required:
            return True
        if (done, state) in failed:
            return False
        steps += 1
        if steps > MAX_STEPS:
            return None
        # Only an op invoked before every pending op returned can come next.
        horizon = min(ops[i].end for i in range(n) if not done >> i & 1)
        for i in range(n):
            if done >> i & 1 or ops[i].start > horizon:
                continue
            after = step(state, ops[i], ttl, slack, deadline_margin, life)
            if after is None:
                continue
            found = search(done | 1 << i, after)
            if found is not False:
                return found
        failed.add((done, state))
        return False

    return search(0, first)
