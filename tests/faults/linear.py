"""A per-job linearizability check against a mutex-with-token model (Wing & Gong, Lowe).

The model of one job: who holds it (a token or nobody), the highest token issued, whether
it is completed, and a lower bound of when the holder's lease can expire in real time: the
invocation of the claim or renewal that set it, plus the TTL (less a small slack for the
store's clock). A claim may take the job from a holder only if it returned after that
bound; a stale rejection of the holder is allowed only once the lease may have expired, or,
on a store that may end a lease early and restores it only while its holder's safe deadline
runs (etcd, 3.5.16 too; docs/protocol.md: ``deadline_margin``), once that deadline may have
passed: the TTL less the drift margin after the claim or renewal, on the holder's clock.

As in Jepsen, an operation with an unknown outcome may take effect at any time after its
invocation, or never; one known to have happened (found in the store) must take effect.
"""

from __future__ import annotations

from dataclasses import dataclass

INF = float("inf")
MAX_STEPS = 200_000  # per job; beyond this the job is reported as not checked, not as valid


@dataclass(frozen=True)
class Op:
    kind: str  # claim, claim-refused, renew, complete, stale (a renew/complete the store refused)
    token: int
    start: float
    end: float  # INF when the outcome was unknown
    required: bool = True  # False: unknown, may not have happened
    refused: str = ""  # for claim-refused: AlreadyClaimed or JobCompleted
    label: str = ""  # for messages: process and op id
    rate: float = 1.0  # how fast the invoking process's clock runs (faketime's x1.03)


@dataclass(frozen=True)
class State:
    holder: int | None = None
    expiry_lb: float = -INF
    done: bool = False
    max_token: int = 0
    refusal_lb: float = -INF  # from when the store may refuse the holder


def _refusable(op: Op, expiry_lb: float, ttl: float, deadline_margin: float | None) -> float:
    if deadline_margin is None:
        return expiry_lb
    return min(expiry_lb, op.start + ttl * (1 - deadline_margin) / op.rate)  # the holder's deadline


def step(s: State, op: Op, ttl: float, slack: float, deadline_margin: float | None = None) -> State | None:
    """The state after ``op``, or None if the model forbids it."""
    if op.kind == "claim":
        if s.done or op.token <= s.max_token:
            return None
        if s.holder is not None and op.end < s.expiry_lb:
            return None  # the previous lease cannot have expired before this claim returned
        lb = op.start + ttl - slack
        return State(op.token, lb, False, op.token, _refusable(op, lb, ttl, deadline_margin))
    if op.kind == "claim-refused":
        if op.refused == "JobCompleted":
            return s if s.done else None
        return s if s.holder is not None and not s.done else None
    if op.kind == "renew":
        if s.done or s.holder != op.token:
            return None
        lb = op.start + ttl - slack
        return State(s.holder, max(s.expiry_lb, lb), False, s.max_token,
                     max(s.refusal_lb, _refusable(op, lb, ttl, deadline_margin)))
    if op.kind == "complete":
        if s.done or s.holder != op.token:
            return None
        return State(None, -INF, True, s.max_token)
    if op.kind == "stale":
        ok = s.done or s.holder != op.token or op.end >= s.refusal_lb
        return s if ok else None
    raise ValueError(op.kind)


def check(ops: list[Op], ttl: float, slack: float, deadline_margin: float | None = None) -> bool | None:
    """True if some linearization fits the model, False if none does, None if out of budget."""
    ops = sorted(ops, key=lambda o: o.start)
    n = len(ops)
    required = 0
    for i, o in enumerate(ops):
        if o.required:
            required |= 1 << i
    failed: set[tuple[int, State]] = set()
    steps = 0

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
            after = step(state, ops[i], ttl, slack, deadline_margin)
            if after is None:
                continue
            found = search(done | 1 << i, after)
            if found is not False:
                return found
        failed.add((done, state))
        return False

    return search(0, State())
