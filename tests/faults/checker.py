"""Every check over one run: the workers' history, the store's final state and the destination.

``check(run)`` returns a ``Verdict``: counts for the report and the list of violations,
each a sentence naming the job, tokens and processes involved. A run is correct only with
no violation at all.
"""

from __future__ import annotations

import dataclasses
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import tenure
from tenure.core.lifecycle import DEFAULT as DEFAULT_LIFECYCLE
from tenure.core.lifecycle import Lifecycle
from tests.faults import linear
from tests.faults.destination import DestRejection, Effect
from tests.faults.history import INF, Operation

SLACK = 0.02  # fraction of the TTL (or of a delay) by which a store's clock may run ahead of real time
HOLDER_OPS = ("renew", "complete", "release", "fail")  # a lease's holder's, refused if it is stale
CLAIM_REFUSALS = ("AlreadyClaimed", "JobCompleted", "JobParked", "JobScheduled")


@dataclass
class Final:
    """What the store and the destination hold once the run is over."""

    jobs: dict[str, tenure.JobStatus]
    history: list[tenure.HistoryEvent]
    rejections: list[tenure.Rejection]
    effects: list[Effect]
    dest_rejections: list[DestRejection]


@dataclass
class Verdict:
    counts: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    unchecked_jobs: int = 0  # jobs whose linearizability search ran out of budget

    def flag(self, text: str) -> None:
        self.violations.append(text)


@dataclass(frozen=True)
class ProcessEffect:
    """One effect a process of a ``tenure run`` command wrote (the run-term fault), in order."""

    job: str
    token: int
    pid: int
    line: int  # its place in its job's file: the order the effects happened in


def check_process_effects(effects: list[ProcessEffect], v: Verdict) -> None:
    """No effect from a process of an earlier token after a later token's first effect: every
    process of a ``tenure run`` command has ended before the job can be claimed again."""
    first: dict[str, ProcessEffect] = {}  # per job, the first effect of the highest token so far
    for e in effects:
        v.counts["process effects"] += 1
        top = first.get(e.job)
        if top is None or e.token > top.token:
            first[e.job] = e
        elif e.token < top.token:
            v.flag(f"{e.job}: effect of token {e.token} by process {e.pid} (line {e.line}) after the first "
                   f"effect of token {top.token} (line {top.line}, process {top.pid})")


def _owner_op(owner: str | None) -> tuple[str, int] | None:
    if not owner or "#" not in owner:
        return None
    process, _, number = owner.rpartition("#")
    return (process, int(number)) if number.isdigit() else None


def check(ops: list[Operation], final: Final, ttl: float, deadline_margin: float | None = None,
          rates: dict[str, float] | None = None, lifecycle: Lifecycle = DEFAULT_LIFECYCLE,
          delay_late: float = 0.0) -> Verdict:
    """``deadline_margin``: the store may refuse a holder from its safe deadline on
    (``Harness.early_end_margin``); ``rates``: the workers' clock rates (``linear``);
    ``lifecycle``: the store's backoff options (its URL's); ``delay_late``: how late a delay
    may end (``linear.Life.late``)."""
    v = Verdict()
    ops, members = expand_batches(ops, final)
    for o in ops:
        v.counts[f"{o.op}:{o.outcome}"] += 1
        v.counts[o.outcome] += 1
        if o.op == "claim" and o.error in ("JobParked", "JobScheduled"):
            v.counts[o.error] += 1
        elif o.op == "claim" and (o.extra.get("attempt") or 0) > 1:
            v.counts["retried claims"] += 1
    v.counts["ops"] = len(ops)
    by_key = {o.key: o for o in ops}
    happened = _resolve_claims(ops, final, by_key, v, members)
    _check_tokens(happened, final, v)
    completes = _resolve_completions(ops, final, by_key, v)
    _check_effects(ops, final, happened, completes, by_key, v)
    _check_rejections(ops, final, v)
    _check_forgeries(ops, final, v)
    lives = _lives(ops, final, ttl, lifecycle, v, delay_late)
    _check_linearizable(ops, happened, completes, ttl, v, deadline_margin, rates or {}, lives,
                        linear.Life(late=delay_late))
    return v


def _lives(ops: list[Operation], final: Final, ttl: float, lifecycle: Lifecycle, v: Verdict,
           late: float = 0.0) -> dict[str, linear.Life]:
    """Each submitted job's life-cycle rules, from its submits (a submit with an unknown
    outcome is tried again with the same options); the store must keep its max_attempts."""
    submits: dict[str, list[Operation]] = defaultdict(list)
    for o in ops:
        if o.op == "submit" and o.job:
            submits[o.job].append(o)
    lives = {}
    for job, tries in submits.items():
        limit, delay = tries[0].extra.get("max_attempts"), float(tries[0].extra.get("delay") or 0.0)
        window = linear.due(tries[0].start, tries[-1].end, delay, delay, SLACK, late)
        lives[job] = linear.Life(limit, lifecycle.retry_base, lifecycle.retry_factor, lifecycle.retry_max, window,
                                 late)
        status = final.jobs.get(job)
        if status is not None and status.max_attempts != limit:
            v.flag(f"{job}: submitted with max_attempts {limit}, the store has {status.max_attempts}")
    return lives


BATCH_KEYS = 1_000_000  # a batch claim's leases are keyed (process, its id * BATCH_KEYS + place)
Members = dict[tuple[str, int], dict[tuple[str, int], Operation]]  # a batch claim's key: its claims by (job, token)


def expand_batches(ops: list[Operation], final: Final) -> tuple[list[Operation], Members]:
    """A batch claim (``claim_next_many``: one owner for all its leases) as one claim per lease:
    those it acknowledged, and those the store's history shows by its owner that it did not
    acknowledge (its answer lost, or a job claimed twice in one batch of single requests whose
    first lease ran out meanwhile: the batch hands out the newest) as claims of unknown outcome.
    A batch the store shows nothing of stays one unknown claim of no job. Each keeps the
    batch's start."""
    by_owner: dict[str, list[tenure.HistoryEvent]] = defaultdict(list)
    for event in final.history:
        if event.op is tenure.Op.CLAIM and event.owner:
            by_owner[event.owner].append(event)
    found: list[Operation] = []
    members: Members = {}
    for o in ops:
        if o.op != "claim" or "batch" not in o.extra or o.outcome == "fail":
            found.append(o)
            continue
        acked = {(job, token): {"expires_at": until, "attempt": attempt}
                 for job, token, until, attempt in (o.extra.get("leases") or []) if o.outcome == "ok"}
        stored = [(e.job_id, e.token) for e in by_owner.get(o.owner or "", []) if (e.job_id, e.token) not in acked]
        if not acked and not stored:
            found.append(o)
            continue
        each = {}
        for place, (job, token) in enumerate([*acked, *stored], 1):
            more = acked.get((job, token))
            extra = {**o.extra, **(more or {}), "leases": None}
            each[job, token] = dataclasses.replace(o, id=o.id * BATCH_KEYS + place, job=job, token=token, extra=extra,
                                                   **({} if more else {"outcome": "info", "end": INF}))
        members[o.key] = each
        found += each.values()
    return found, members


def _resolve_claims(ops: list[Operation], final: Final, by_key: dict[tuple[str, int], Operation],
                    v: Verdict, members: Members | None = None) -> list[Operation]:
    """Claims that happened: acknowledged ones, and unknown ones the store's history shows."""
    seen: set[tuple[str, int]] = set()
    for event in final.history:
        if event.op is not tenure.Op.CLAIM:
            continue
        key = _owner_op(event.owner)
        batch = (members or {}).get(key) if key else None
        o = batch.get((event.job_id, event.token)) if batch is not None else by_key.get(key) if key else None
        if o is None or o.op != "claim":
            v.flag(f"store history has a claim of {event.job_id} (token {event.token}) by {event.owner},"
                   " which no worker invoked")
            continue
        seen.add(o.key)
        if o.outcome == "fail":
            v.flag(f"{event.owner}: claim of {event.job_id} failed for the worker but is in the store")
        elif o.outcome == "ok" and (o.job, o.token) != (event.job_id, event.token):
            v.flag(f"{event.owner}: claim acknowledged as {o.job}/{o.token}, store has {event.job_id}/{event.token}")
        elif o.outcome == "info":
            o.job, o.token = event.job_id, event.token
            v.counts["claims resolved from store"] += 1
    happened = [o for o in ops if o.op == "claim" and o.key in seen]
    for o in ops:
        if o.op == "claim" and o.outcome == "ok" and o.key not in seen:
            v.flag(f"{o.process}#{o.id}: acknowledged claim of {o.job} (token {o.token}) is not in the store's history")
            happened.append(o)
    return happened


def _check_tokens(claims: list[Operation], final: Final, v: Verdict) -> None:
    per_job: dict[str, list[Operation]] = defaultdict(list)
    for o in claims:
        per_job[o.job or ""].append(o)
    for job, cs in per_job.items():
        tokens = Counter(o.token for o in cs)
        for token, n in tokens.items():
            if n > 1:
                v.flag(f"{job}: token {token} issued to {n} claims")
        for a in cs:
            for b in cs:
                if a.end < b.start and (a.token or 0) >= (b.token or 0):
                    v.flag(f"{job}: claim {a.process}#{a.id} got token {a.token} and returned before "
                           f"{b.process}#{b.id} began, which got the lower or equal token {b.token}")
        status = final.jobs.get(job)
        top = max(o.token or 0 for o in cs)
        if status is None or status.token < top:
            v.flag(f"{job}: the store's token {status and status.token} is below issued token {top}")
    last: dict[str, int] = {}
    for event in final.history:
        if event.op is tenure.Op.CLAIM:
            if event.token <= last.get(event.job_id, 0):
                v.flag(f"{event.job_id}: store history claim token {event.token} after {last[event.job_id]}")
            last[event.job_id] = event.token


def _resolve_completions(ops: list[Operation], final: Final, by_key: dict[tuple[str, int], Operation],
                         v: Verdict) -> dict[str, Operation]:
    """The one completion per job that took effect, named by the result the store keeps."""
    taken: dict[str, Operation] = {}
    acked: dict[str, list[Operation]] = defaultdict(list)
    for o in ops:
        if o.op == "complete" and o.outcome == "ok":
            acked[o.job or ""].append(o)
    for job, os_ in acked.items():
        if len(os_) > 1:
            names = ", ".join(f"{o.process}#{o.id}/{o.token}" for o in os_)
            v.flag(f"{job}: {len(os_)} completions accepted: {names}")
    for job, status in final.jobs.items():
        if status.state is not tenure.JobState.COMPLETED:
            if acked.get(job):
                o = acked[job][0]
                v.flag(f"{job}: completion by {o.process}#{o.id} (token {o.token}) was acknowledged, "
                       f"but the store has it {status.state}: lost")
            continue
        key = _owner_op((status.result or b"").decode(errors="replace"))
        o = by_key.get(key) if key else None
        if o is None or o.op != "complete" or o.job != job:
            v.flag(f"{job}: completed with result {status.result!r}, which no worker's completion wrote")
            continue
        if o.outcome == "fail":
            v.flag(f"{job}: completed by {o.process}#{o.id}, whose completion was refused to it")
        if o.token != status.token:
            v.flag(f"{job}: completed by token {o.token} but the store's token is {status.token}")
        if o.outcome == "ok" and any(a is not o for a in acked.get(job, [])):
            continue  # already flagged above
        taken[job] = o
    for job in acked:
        if job not in final.jobs:
            v.flag(f"{job}: acknowledged completion, but the job is gone from the store")
    return taken


def _check_effects(ops: list[Operation], final: Final, claims: list[Operation],
                   completes: dict[str, Operation], by_key: dict[tuple[str, int], Operation], v: Verdict) -> None:
    landed = {(e.process, e.op_id) for e in final.effects}
    for o in ops:
        if o.op == "effect" and o.outcome == "ok" and o.key not in landed:
            v.flag(f"{o.process}#{o.id}: effect on {o.job} acknowledged but not at the destination")
    claimed_by: dict[tuple[str, int], str] = {(o.job or "", o.token or 0): o.process for o in claims}
    claims_of: dict[str, list[Operation]] = defaultdict(list)
    for c in claims:
        claims_of[c.job or ""].append(c)
    highest: dict[str, Effect] = {}
    for e in final.effects:
        v.counts["effects landed"] += 1
        o = by_key.get((e.process, e.op_id))
        if o is None or o.op != "effect" or (o.job, o.token) != (e.job, e.token):
            v.flag(f"destination row {e.seq} ({e.job}/{e.token}) matches no effect a worker invoked")
            continue
        if o.outcome == "fail":
            v.flag(f"{e.process}#{e.op_id}: effect refused to the worker landed anyway")
        if claimed_by.get((e.job, e.token)) != e.process:
            v.flag(f"{e.process}#{e.op_id}: effect with token {e.token} on {e.job}, which that process never claimed")
        prev = highest.get(e.job)
        if prev is not None and e.token < prev.token:
            v.flag(f"{e.job}: effect with token {e.token} (row {e.seq}) landed after token {prev.token} "
                   f"(row {prev.seq})")
        else:
            highest[e.job] = e
        for c in claims_of[e.job]:
            if (c.token or 0) > e.token and c.end < e.admitted_at:
                v.flag(f"{e.job}: effect of token {e.token} admitted at {e.admitted_at:.3f}, after claim "
                       f"{c.process}#{c.id} got token {c.token} at {c.end:.3f}: its lease was not current")
        done = completes.get(e.job)
        if done is not None and done.token != e.token and done.end < e.admitted_at:
            v.flag(f"{e.job}: effect of token {e.token} admitted after the job was completed by token {done.token}")


def _check_rejections(ops: list[Operation], final: Final, v: Verdict) -> None:
    seen = Counter((o.job, o.op, o.owner, o.token) for o in ops
                   if o.op in HOLDER_OPS and o.outcome == "fail" and o.error == "StaleLease")
    maybe = Counter((o.job, o.op, o.owner, o.token) for o in ops
                    if o.op in HOLDER_OPS and o.outcome == "info")
    audited = Counter((r.job_id, r.op.value, r.owner, r.token) for r in final.rejections
                      if r.kind is tenure.RejectionKind.STORE)
    v.counts["store rejections seen"] = sum(seen.values())
    v.counts["store rejections audited"] = sum(audited.values())
    for key, n in seen.items():
        if audited[key] < n:
            v.flag(f"{key[1]} of {key[0]} by {key[2]} (token {key[3]}) was refused {n} times, audited {audited[key]}")
    for key, n in audited.items():
        if n > seen[key] + maybe[key]:
            v.flag(f"audit has {n} rejections of {key[1]} of {key[0]} by {key[2]} (token {key[3]}); "
                   f"workers caused at most {seen[key] + maybe[key]}")
    d_seen = Counter((o.job, o.owner, o.token) for o in ops if o.op == "effect" and o.error == "StaleToken")
    d_maybe = Counter((o.job, o.owner, o.token) for o in ops if o.op == "effect" and o.outcome == "info")
    d_audited = Counter((r.job, r.owner, r.token) for r in final.dest_rejections)
    v.counts["destination rejections"] = sum(d_audited.values())
    for key, n in d_seen.items():
        if d_audited[key] < n:
            v.flag(f"destination refused the effect of {key[0]} by {key[1]} (token {key[2]}) unrecorded")
    for key, n in d_audited.items():
        if n > d_seen[key] + d_maybe[key]:
            v.flag(f"destination recorded a rejection of {key[0]} by {key[1]} (token {key[2]}) nobody caused")


def _check_forgeries(ops: list[Operation], final: Final, v: Verdict) -> None:
    """Every forged write refused as unproven and audited in the store; none landed."""
    forged = [o for o in ops if o.op == "forge"]
    audited = Counter((r.job_id, r.owner, r.token) for r in final.rejections
                      if r.kind is tenure.RejectionKind.DESTINATION and r.reason.startswith("unproven token"))
    expected = Counter((o.job, o.owner, o.token) for o in forged
                       if o.error == "ForgedToken" and o.extra.get("audited"))
    v.counts["forgeries refused"] = sum(1 for o in forged if o.error == "ForgedToken")
    v.counts["forgeries audited"] = sum(audited.values())
    for o in forged:
        if o.outcome == "ok":
            v.flag(f"{o.process}#{o.id}: forged token {o.token} of {o.job} by {o.owner} was admitted")
        elif o.outcome == "fail" and o.error != "ForgedToken":
            v.flag(f"{o.process}#{o.id}: forged token {o.token} of {o.job} refused as {o.error}, not as unproven")
    for key, n in expected.items():
        if audited[key] < n:
            v.flag(f"forged token {key[2]} of {key[0]} by {key[1]} refused {n} times, audited {audited[key]}")
    attempted = Counter((o.job, o.owner, o.token) for o in forged)
    for key, n in audited.items():
        if n > attempted[key]:
            v.flag(f"audit has {n} unproven-token rejections of {key[0]} by {key[1]} (token {key[2]}); "
                   f"the forger tried {attempted[key]}")


def _check_linearizable(ops: list[Operation], claims: list[Operation], completes: dict[str, Operation],
                        ttl: float, v: Verdict, deadline_margin: float | None, rates: dict[str, float],
                        lives: dict[str, linear.Life], unsubmitted: linear.Life) -> None:
    per_job: dict[str, list[linear.Op]] = defaultdict(list)
    for o in claims:
        per_job[o.job or ""].append(linear.Op("claim", o.token or 0, o.start, o.end, label=f"{o.process}#{o.id}",
                                              rate=rates.get(o.process, 1.0), attempt=o.extra.get("attempt")))
    for o in ops:
        label = f"{o.process}#{o.id}"
        if o.op == "claim" and o.job and o.outcome == "fail" and o.error in CLAIM_REFUSALS:
            per_job[o.job].append(linear.Op("claim-refused", 0, o.start, o.end, refused=o.error, label=label))
        elif o.op in HOLDER_OPS and o.job:
            if o.outcome == "fail" and o.error == "StaleLease":
                per_job[o.job].append(linear.Op("stale", o.token or 0, o.start, o.end,
                                                label=f"{label} {o.op} ({o.reason})"))
            elif o.outcome == "ok" or (o.outcome == "info" and o.op != "complete"):
                per_job[o.job].append(linear.Op(o.op, o.token or 0, o.start, o.end, required=o.outcome == "ok",
                                                label=label, rate=rates.get(o.process, 1.0),
                                                wait=o.extra.get("retry_in")))
        elif o.op == "requeue" and o.job and o.outcome != "fail":
            per_job[o.job].append(linear.Op("requeue", 0, o.start, o.end, required=o.outcome == "ok", label=label,
                                            wait=o.extra.get("delay")))
    for job, o in completes.items():
        if o.outcome == "info":  # the store's result says it happened
            per_job[job].append(linear.Op("complete", o.token or 0, o.start, INF, label=f"{o.process}#{o.id}"))
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for job, jops in per_job.items():
        v.counts["jobs checked"] += 1
        life = lives.get(job, unsubmitted)
        result = linear.check(jops, ttl, SLACK * ttl, deadline_margin, life)
        if result is None:
            v.unchecked_jobs += 1
        elif not result:
            rules = f"max_attempts {life.max_attempts}" + (
                f", claimable from {life.due[0]:.3f} (its submit's delay)" if life.due[0] > -INF else "")
            v.flag(f"{job} ({rules}): its history is not linearizable as a mutex with tokens and a life cycle: "
                   + "; ".join(_shown(o) for o in sorted(jops, key=lambda o: o.start)))


def _shown(o: linear.Op) -> str:
    more = "" if o.attempt is None else f" attempt {o.attempt}"
    more += f" {o.refused}" if o.refused else ""
    more += f" wait {o.wait}" if o.wait is not None else ""
    return f"{o.label} {o.kind} {o.token}{more} [{o.start:.3f}, {o.end:.3f}]"
