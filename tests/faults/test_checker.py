"""The checker on hand-made histories: each broken one must be flagged, the sound ones not.

A checker that passes everything would make the fault suite worthless; these show it fails.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tenure
from tenure.core.lifecycle import Lifecycle
from tests.faults import linear
from tests.faults.checker import Final, Verdict, check, check_process_effects
from tests.faults.destination import DestRejection, Effect
from tests.faults.history import INF, Operation
from tests.faults.run_term import load_effects

TTL = 10.0
J = "job-1"
BACKOFF = Lifecycle(retry_base=1.0, retry_factor=2.0, retry_max=8.0)  # the store's, for fails without retry_in


@dataclass
class World:
    """A history being built by hand, and the final state it should be checked against."""

    ops: list[Operation] = field(default_factory=list)
    events: list[tenure.HistoryEvent] = field(default_factory=list)
    rejections: list[tenure.Rejection] = field(default_factory=list)
    effects: list[Effect] = field(default_factory=list)
    dest_rejections: list[DestRejection] = field(default_factory=list)
    jobs: dict[str, tenure.JobStatus] = field(default_factory=dict)
    max_attempts: int | None = None  # the job's, as submitted

    def op(self, p: str, n: int, op: str, start: float, end: float, outcome: str = "ok", *, token: int = 1,
           job: str = J, error: str | None = None, **extra: Any) -> Operation:
        owner = f"{p}#{n}" if op == "claim" else f"{p}#{self.claim_of(p, token)}" if token else None
        o = Operation(p, n, op, job, token, start, end if outcome != "info" else INF, outcome, error,
                      owner=owner, ttl=TTL, extra=extra)
        self.ops.append(o)
        return o

    def claim_of(self, p: str, token: int) -> int:
        return next(o.id for o in self.ops if o.op == "claim" and o.process == p and o.token == token)

    def claim(self, p: str, n: int, start: float, end: float, token: int, *, in_store: bool = True,
              outcome: str = "ok", attempt: int | None = None) -> Operation:
        o = self.op(p, n, "claim", start, end, outcome, token=token, attempt=attempt)
        if in_store:
            self.events.append(tenure.HistoryEvent(J, tenure.Op.CLAIM, f"{p}#{n}", token, start))
        return o

    def effect(self, p: str, n: int, at: float, token: int, *, landed: bool = True) -> None:
        self.op(p, n, "effect", at - 0.01, at + 0.01, token=token)
        if landed:
            self.effects.append(Effect(len(self.effects) + 1, J, token, p, n, at))

    def stale(self, p: str, n: int, op: str, start: float, end: float, token: int, *, audited: bool = True) -> None:
        """A renew, complete, release or fail that the store refused as stale."""
        o = self.op(p, n, op, start, end, "fail", token=token, error="StaleLease")
        if audited:
            self.rejections.append(tenure.Rejection(J, tenure.Op(op), o.owner or "", token, None, 0, end, "x"))

    def refused(self, p: str, n: int, start: float, end: float, error: str) -> None:
        """A claim of the job by name that the store refused with ``error``."""
        self.op(p, n, "claim", start, end, "fail", token=0, error=error)

    def fail(self, p: str, n: int, start: float, end: float, token: int, retry_in: float | None,
             outcome: str = "ok") -> None:
        self.op(p, n, "fail", start, end, outcome, token=token, retry_in=retry_in)

    def submit(self, at: float, *, max_attempts: int | None = None, delay: float = 0.0) -> None:
        self.op("operator", len(self.ops) + 1000, "submit", at, at + 0.01, token=0, max_attempts=max_attempts,
                delay=delay)
        self.max_attempts = max_attempts

    def requeue(self, start: float, end: float, delay: float = 0.0) -> None:
        self.op("operator", len(self.ops) + 1000, "requeue", start, end, token=0, delay=delay)

    def finish(self, state: tenure.JobState, token: int, result: str | None = None) -> None:
        self.jobs[J] = tenure.JobStatus(J, state, token=token, result=result.encode() if result else None,
                                        max_attempts=self.max_attempts)

    def verdict(self) -> Verdict:
        return check(self.ops, Final(self.jobs, self.events, self.rejections, self.effects,
                                     self.dest_rejections), TTL, lifecycle=BACKOFF)


def sound() -> World:
    """A paused holder (A) loses the job to B after expiry; its stale completion is refused."""
    w = World()
    w.claim("A", 1, 0.0, 0.1, 1)
    w.effect("A", 2, 1.0, 1)
    w.claim("B", 1, 11.0, 11.1, 2)
    w.effect("B", 2, 12.0, 2)
    w.op("B", 3, "renew", 13.0, 13.1, token=2)
    w.stale("A", 3, "complete", 14.0, 14.1, 1)
    w.op("B", 4, "complete", 15.0, 15.1, token=2)
    w.finish(tenure.JobState.COMPLETED, 2, "B#4")
    return w


def flagged(w: World, words: str) -> None:
    v = w.verdict()
    assert any(words in text for text in v.violations), v.violations


def test_a_sound_history_passes() -> None:
    v = sound().verdict()
    assert v.violations == []
    assert v.counts["ops"] == 7 and v.counts["store rejections seen"] == 1


def test_unknown_outcomes_are_allowed_either_way() -> None:
    w = sound()
    w.op("B", 5, "renew", 13.5, INF, "info", token=2)  # may or may not have happened
    w.claim("C", 1, 12.5, INF, 3, in_store=False, outcome="info")  # never reached the store
    assert w.verdict().violations == []


def test_an_unknown_claim_found_in_the_store_must_fit_the_model() -> None:
    w = sound()
    w.claim("C", 1, 12.5, INF, 3, outcome="info")  # took the job from live holder B
    flagged(w, "not linearizable")


def test_two_overlapping_holders_are_flagged() -> None:
    w = World()
    w.claim("A", 1, 0.0, 0.1, 1)
    w.claim("B", 1, 2.0, 2.1, 2)  # A's lease of 10 s cannot have expired yet
    w.finish(tenure.JobState.LEASED, 2)
    flagged(w, "not linearizable")


def test_a_lower_token_landing_after_a_higher_one_is_flagged() -> None:
    w = sound()
    w.effect("A", 9, 12.5, 1)  # A's write lands after B's
    flagged(w, "landed after token 2")


def test_an_effect_admitted_after_a_newer_claim_is_flagged() -> None:
    w = World()
    w.claim("A", 1, 0.0, 0.1, 1)
    w.claim("B", 1, 11.0, 11.1, 2)
    w.effect("A", 2, 11.5, 1)  # fence admitted A though B already held the job
    w.finish(tenure.JobState.LEASED, 2)
    flagged(w, "was not current")


def test_a_lost_acknowledged_completion_is_flagged() -> None:
    w = sound()
    w.finish(tenure.JobState.LEASED, 2)  # the store forgot B's acknowledged completion
    flagged(w, "lost")


def test_two_accepted_completions_are_flagged() -> None:
    w = sound()
    w.op("A", 9, "complete", 14.2, 14.3, token=1)
    flagged(w, "2 completions accepted")


def test_an_acknowledged_effect_missing_at_the_destination_is_flagged() -> None:
    w = sound()
    w.effect("B", 9, 12.5, 2, landed=False)
    flagged(w, "not at the destination")


def test_a_stale_refusal_missing_from_the_audit_is_flagged() -> None:
    w = sound()
    w.stale("A", 8, "renew", 14.5, 14.6, 1, audited=False)
    flagged(w, "audited 0")


def test_an_audited_rejection_nobody_caused_is_flagged() -> None:
    w = sound()
    w.rejections.append(tenure.Rejection(J, tenure.Op.RENEW, "Z#1", 7, None, 0, 1.0, "x"))
    flagged(w, "workers caused at most 0")


def test_a_refusal_of_a_live_holder_is_flagged() -> None:
    w = World()
    w.claim("A", 1, 0.0, 0.1, 1)
    w.stale("A", 2, "renew", 1.0, 1.1, 1)  # refused 1 s into a 10 s lease, nobody else claimed
    w.finish(tenure.JobState.LEASED, 1)
    flagged(w, "not linearizable")


def early_end(w: World, rates: dict[str, float] | None = None) -> Verdict:
    """The verdict on a store that may end a lease early (etcd, 3.5.16 too): 5 % margin."""
    return check(w.ops, Final(w.jobs, w.events, w.rejections, w.effects, w.dest_rejections), TTL, 0.05, rates)


def test_a_refusal_after_the_holders_deadline_passes_only_where_the_store_may_end_leases_early() -> None:
    # Refused 0.97 TTL after the renewal was sent, nobody else claimed: a store judging by its
    # own clock may not; etcd, which restores an early-ended lease only while the holder's
    # deadline (0.95 TTL on the holder's clock) runs, may; unless that clock is slow (x0.97:
    # its deadline is 0.98 TTL of real time).
    w = World()
    w.claim("A", 1, 0.0, 0.1, 1)
    w.op("A", 2, "renew", 1.0, 1.2)
    w.stale("A", 3, "complete", 10.6, 10.7, 1)
    w.finish(tenure.JobState.LEASED, 1)
    flagged(w, "not linearizable")
    assert not early_end(w).violations
    assert any("not linearizable" in text for text in early_end(w, {"A": 0.97}).violations)


def test_an_early_claim_is_flagged_where_the_store_may_end_leases_early_too() -> None:
    # The margin is the holder's, for refusals: another worker's claim 0.955 TTL after the
    # renewal is a second holder on every store.
    w = World()
    w.claim("A", 1, 0.0, 0.1, 1)
    w.op("A", 2, "renew", 1.0, 1.2)
    w.claim("B", 1, 10.45, 10.55, 2)
    w.finish(tenure.JobState.LEASED, 2)
    assert any("not linearizable" in text for text in early_end(w).violations)


def test_a_token_that_goes_down_is_flagged() -> None:
    w = World()
    w.claim("A", 1, 0.0, 0.1, 5)
    w.claim("B", 1, 20.0, 20.1, 3)
    w.finish(tenure.JobState.LEASED, 5)
    flagged(w, "lower or equal token 3")


def test_a_claim_nobody_made_is_flagged() -> None:
    w = sound()
    w.events.append(tenure.HistoryEvent(J, tenure.Op.CLAIM, "ghost#1", 9, 30.0))
    flagged(w, "which no worker invoked")


def test_linear_search_accepts_an_unknown_renewal_that_must_have_happened() -> None:
    # B's claim at 14 s is legal only if A's unknown renewal at 5 s did *not* happen ... and
    # A's refusal at 12 s is legal only if the lease expired: both fit with the renewal left out.
    ops = [linear.Op("claim", 1, 0.0, 0.1), linear.Op("renew", 1, 5.0, INF, required=False),
           linear.Op("stale", 1, 12.0, 12.1), linear.Op("claim", 2, 13.0, 13.1)]
    assert linear.check(ops, TTL, 0.0) is True
    ops[1] = linear.Op("renew", 1, 5.0, 5.1)  # now acknowledged: the lease lasts until 15 s
    assert linear.check(ops, TTL, 0.0) is False


def test_a_process_of_an_earlier_token_acting_after_a_later_tokens_first_effect_is_flagged(tmp_path: Path) -> None:
    # The run-term fault's files, one line per effect in the order written: "job token pid n".
    (tmp_path / "run-0001.log").write_text("run-0001 1 10 0\nrun-0001 1 11 0\nrun-0001 2 20 0\n"
                                           "run-0001 1 11 1\nrun-0001 2 20 1\n")
    (tmp_path / "run-0002.log").write_text("run-0002 1 30 0\nrun-0002 2 40 0\nrun-0002 3 50 0\n")
    v = Verdict()
    check_process_effects(load_effects(tmp_path), v)
    assert v.violations == ["run-0001: effect of token 1 by process 11 (line 4) after the first effect of "
                            "token 2 (line 3, process 20)"]
    assert v.counts["process effects"] == 8


# -- the job's life cycle: fail, release, attempts, parking, delays, requeue -----------------

def failed_at_two(retry_in: float | None = 0.0, **submit: Any) -> World:
    """A claims at 0 (attempt 1) and fails the job at 2 s."""
    w = World()
    w.submit(-1.0, **submit)
    w.claim("A", 1, 0.0, 0.1, 1, attempt=1)
    w.fail("A", 2, 2.0, 2.1, 1, retry_in)
    return w


def test_a_fail_ends_the_holders_lease_as_a_completion_would() -> None:
    w = failed_at_two()
    w.claim("B", 1, 3.0, 3.1, 2, attempt=2)  # 3 s into A's 10 s lease: free since A failed
    w.finish(tenure.JobState.LEASED, 2)
    assert w.verdict().violations == []
    w.op("A", 3, "renew", 4.0, 4.1)  # but A's lease no longer exists
    flagged(w, "not linearizable")


def test_a_fail_with_an_unknown_outcome_may_or_may_not_have_ended_the_lease() -> None:
    w = World()
    w.submit(-1.0)
    w.claim("A", 1, 0.0, 0.1, 1, attempt=1)
    w.fail("A", 2, 2.0, INF, 1, 0.0, outcome="info")
    w.claim("B", 1, 3.0, 3.1, 2, attempt=2)  # fits only if the fail happened
    w.finish(tenure.JobState.LEASED, 2)
    assert w.verdict().violations == []
    w.ops = [o for o in w.ops if o.op != "fail"]
    flagged(w, "not linearizable")


def test_a_stale_fail_is_a_stale_completion() -> None:
    w = failed_at_two()
    w.stale("A", 3, "fail", 2.5, 2.6, 1)  # A tries again: the job is no longer its
    w.finish(tenure.JobState.PENDING, 1)
    assert w.verdict().violations == []
    w = World()
    w.submit(-1.0)
    w.claim("A", 1, 0.0, 0.1, 1, attempt=1)
    w.stale("A", 2, "fail", 2.0, 2.1, 1)  # refused 2 s into a live lease nobody took
    w.finish(tenure.JobState.LEASED, 1)
    flagged(w, "not linearizable")
    w = failed_at_two()
    w.stale("A", 3, "fail", 2.5, 2.6, 1, audited=False)
    flagged(w, "audited 0")


def test_no_claim_returns_before_the_fails_retry_in_has_passed_on_the_stores_clock() -> None:
    w = failed_at_two(retry_in=5.0)
    w.claim("B", 1, 6.0, 6.85, 2, attempt=2)  # returned 4.85 s after the fail began: 5 s less 2 %
    w.finish(tenure.JobState.LEASED, 2)
    flagged(w, "not linearizable")
    w.ops[-1] = Operation("B", 1, "claim", J, 2, 6.0, 7.0, "ok", owner="B#1", ttl=TTL, extra={"attempt": 2})
    assert w.verdict().violations == []


def test_no_claim_returns_before_the_stores_backoff_for_the_attempt() -> None:
    # Attempt 3 on a base of 1 s and factor 2: a backoff of 4 s jittered down to 2 to 4 s.
    def third_fails(b_returns: float) -> World:
        w = failed_at_two()
        w.claim("B", 1, 3.0, 3.1, 2, attempt=2)
        w.fail("B", 2, 4.0, 4.1, 2, 0.0)
        w.claim("C", 1, 5.0, 5.1, 3, attempt=3)
        w.fail("C", 2, 6.0, 6.1, 3, None)
        w.claim("B", 3, b_returns - 0.1, b_returns, 4, attempt=4)
        w.finish(tenure.JobState.LEASED, 4)
        return w

    assert third_fails(8.0).verdict().violations == []
    flagged(third_fails(7.9), "not linearizable")  # 1.9 s: less than the least backoff, 2 s less 2 %


def test_a_job_submitted_with_a_delay_is_not_claimed_before_it() -> None:
    w = World()
    w.submit(0.0, delay=5.0)
    w.claim("A", 1, 3.0, 3.1, 1, attempt=1)
    w.finish(tenure.JobState.LEASED, 1)
    flagged(w, "not linearizable")
    w = World()
    w.submit(0.0, delay=5.0)
    w.refused("A", 1, 3.0, 3.1, "JobScheduled")
    w.claim("A", 2, 5.0, 5.1, 1, attempt=1)
    w.finish(tenure.JobState.LEASED, 1)
    assert w.verdict().violations == []


def test_a_refusal_as_scheduled_only_while_the_job_may_still_wait() -> None:
    w = failed_at_two(retry_in=1.0)
    w.refused("B", 1, 2.5, 2.6, "JobScheduled")
    w.finish(tenure.JobState.PENDING, 1)
    assert w.verdict().violations == []
    w.refused("B", 2, 3.2, 3.3, "JobScheduled")  # the second the fail asked for is over by 3.12 s
    flagged(w, "not linearizable")
    w = failed_at_two(retry_in=0.0)  # no wait: claimable at once
    w.refused("B", 1, 2.05, 2.2, "JobScheduled")  # may come after the fail, which had not ended
    w.finish(tenure.JobState.PENDING, 1)
    flagged(w, "not linearizable")
    w = World()
    w.submit(0.0)
    w.claim("A", 1, 1.0, 1.1, 1, attempt=1)
    w.refused("B", 1, 2.0, 2.1, "JobScheduled")  # held, not scheduled
    w.finish(tenure.JobState.LEASED, 1)
    flagged(w, "not linearizable")


def test_a_job_parked_by_a_fail_on_its_last_attempt_is_not_claimed_until_a_requeue() -> None:
    w = failed_at_two(max_attempts=1)
    w.refused("B", 1, 3.0, 3.1, "JobParked")
    w.claim("B", 2, 4.0, 4.1, 2, attempt=2)
    w.finish(tenure.JobState.LEASED, 2)
    flagged(w, "not linearizable")
    w = failed_at_two(max_attempts=1)
    w.refused("B", 1, 3.0, 3.1, "JobParked")
    w.requeue(3.5, 3.6)
    w.claim("B", 2, 4.0, 4.1, 2, attempt=1)  # the requeue started the count again
    w.finish(tenure.JobState.LEASED, 2)
    assert w.verdict().violations == []
    w = failed_at_two(max_attempts=2)  # one attempt left: not parked
    w.refused("B", 1, 3.0, 3.1, "JobParked")
    w.finish(tenure.JobState.PENDING, 1)
    flagged(w, "not linearizable")


def test_a_job_whose_last_lease_ran_out_is_parked() -> None:
    def last_lease_runs_out(claimed: bool) -> World:
        w = World()
        w.submit(-1.0, max_attempts=1)
        w.claim("A", 1, 0.0, 0.1, 1, attempt=1)
        if claimed:
            w.claim("B", 1, 11.0, 11.1, 2, attempt=2)
        else:
            w.refused("B", 1, 11.0, 11.1, "JobParked")
        w.finish(tenure.JobState.LEASED, 2 if claimed else 1)
        return w

    assert last_lease_runs_out(claimed=False).verdict().violations == []
    flagged(last_lease_runs_out(claimed=True), "not linearizable")
    w = last_lease_runs_out(claimed=False)
    w.refused("C", 1, 5.0, 5.1, "JobParked")  # A's lease is live at 5 s: AlreadyClaimed, not parked
    flagged(w, "not linearizable")


def test_a_claims_attempt_goes_up_by_one_and_down_only_by_release_or_requeue() -> None:
    def second(attempt: int, between: str = "") -> World:
        w = World()
        w.submit(-1.0)
        w.claim("A", 1, 0.0, 0.1, 1, attempt=1)
        if between == "release":
            w.op("A", 2, "release", 2.0, 2.1)
        else:
            w.fail("A", 2, 2.0, 2.1, 1, 0.0)
        if between == "requeue":
            w.requeue(2.5, 2.6)
        w.claim("B", 1, 3.0, 3.1, 2, attempt=attempt)
        w.finish(tenure.JobState.LEASED, 2)
        return w

    assert second(2).verdict().violations == []  # a fail keeps the attempt
    flagged(second(1), "not linearizable")  # went down
    flagged(second(3), "not linearizable")  # counted twice
    assert second(1, "release").verdict().violations == []  # the release gave it back
    flagged(second(2, "release"), "not linearizable")
    assert second(1, "requeue").verdict().violations == []
    w = World()  # a lease lost by expiry keeps its attempt
    w.submit(-1.0)
    w.claim("A", 1, 0.0, 0.1, 1, attempt=1)
    w.claim("B", 1, 11.0, 11.1, 2, attempt=1)
    w.finish(tenure.JobState.LEASED, 2)
    flagged(w, "not linearizable")


def test_a_requeue_with_a_delay_and_a_requeue_of_a_live_lease() -> None:
    w = failed_at_two(max_attempts=1)
    w.requeue(3.0, 3.1, delay=4.0)
    w.claim("B", 1, 5.0, 5.1, 2, attempt=1)  # before the requeue's 4 s
    w.finish(tenure.JobState.LEASED, 2)
    flagged(w, "not linearizable")
    w = World()
    w.submit(-1.0)
    w.claim("A", 1, 0.0, 0.1, 1, attempt=1)
    w.requeue(3.0, 3.1)  # A's lease is live: the store refuses that requeue
    w.finish(tenure.JobState.PENDING, 1)
    flagged(w, "not linearizable")


def test_the_store_keeps_a_jobs_max_attempts() -> None:
    w = failed_at_two(max_attempts=3)
    w.finish(tenure.JobState.PENDING, 1)
    assert w.verdict().violations == []
    w.max_attempts = None
    w.finish(tenure.JobState.PENDING, 1)
    flagged(w, "submitted with max_attempts 3, the store has None")


def test_a_delay_may_end_late_by_the_stores_delay_late_and_never_early() -> None:
    # A fail's retry_in of 10 s. A claim refused as scheduled 12 s later is allowed only where
    # the store may end a delay that late (etcd's leases: Harness.delay_late), and no more
    # than that; a claim 1 s after the fail is early whatever the allowance.
    fail = linear.Op("fail", 1, 0.0, 0.1, wait=10.0)
    held = [linear.Op("claim", 1, -1.0, -0.9, attempt=1), fail]
    refused = linear.Op("claim-refused", 0, 12.0, 12.1, refused="JobScheduled")
    assert linear.check([*held, refused], 5.0, 0.1) is False
    assert linear.check([*held, refused], 5.0, 0.1, life=linear.Life(late=3.0)) is True
    assert linear.check([*held, refused], 5.0, 0.1, life=linear.Life(late=1.0)) is False
    early = linear.Op("claim", 2, 1.0, 1.1, attempt=2)
    assert linear.check([*held, early], 5.0, 0.1, life=linear.Life(late=3600.0)) is False


def batch_claim(w: World, p: str, n: int, start: float, end: float, won: list[tuple[str, int]],
                outcome: str = "ok") -> None:
    """A claim_next_many by ``p`` (one owner for all its leases) that won ``won`` (job, token)."""
    leases = [[job, token, start + TTL, 1] for job, token in won] if outcome == "ok" else None
    w.ops.append(Operation(p, n, "claim", None, None, start, end if outcome == "ok" else INF, outcome,
                           owner=f"{p}#{n}", ttl=TTL, extra={"batch": 32, **({"leases": leases} if leases else {})}))
    w.events += [tenure.HistoryEvent(job, tenure.Op.CLAIM, f"{p}#{n}", token, start) for job, token in won]


def test_a_batch_claim_is_one_claim_per_lease() -> None:
    w = World()
    batch_claim(w, "A", 1, 0.0, 0.1, [(J, 1), ("job-2", 1)])
    w.ops += [Operation("A", n, "complete", job, 1, 1.0, 1.1, "ok", owner="A#1", ttl=TTL)
              for n, job in ((2, J), (3, "job-2"))]
    w.finish(tenure.JobState.COMPLETED, 1, "A#2")
    w.jobs["job-2"] = tenure.JobStatus("job-2", tenure.JobState.COMPLETED, token=1, result=b"A#3")
    v = w.verdict()
    assert v.violations == [] and v.counts["claim:ok"] == 2


def test_a_batch_claim_whose_answer_was_lost_is_resolved_from_the_store_per_lease() -> None:
    w = World()
    batch_claim(w, "A", 1, 0.0, 0.1, [(J, 1), ("job-2", 1)], outcome="info")
    w.claim("B", 1, 2.0, 2.1, 2)  # J's lease from A's lost batch is still live
    v = w.verdict()
    assert v.counts["claims resolved from store"] == 2
    assert any("not linearizable" in text for text in v.violations), v.violations


def test_a_batch_claim_acknowledging_a_job_the_store_does_not_show_is_flagged() -> None:
    w = World()
    batch_claim(w, "A", 1, 0.0, 0.1, [(J, 1)])
    w.ops[-1].extra["leases"].append(["job-2", 1, TTL, 1])  # acknowledged, but no claim in the store
    flagged(w, "acknowledged claim of job-2")


def test_a_job_a_batch_claimed_twice_counts_both_claims() -> None:
    """A batch of single requests (etcd) whose first lease on J ran out while it went on claims J
    again and hands out the newer lease only: the older claim happened, unacknowledged."""
    w = World()
    batch_claim(w, "A", 1, 0.0, 12.0, [(J, 2)])
    w.ops[-1].extra["leases"] = [[J, 2, 11.0 + TTL, 2]]  # its second attempt: the first lease ran out
    w.events.insert(0, tenure.HistoryEvent(J, tenure.Op.CLAIM, "A#1", 1, 0.0))
    w.finish(tenure.JobState.LEASED, 2)
    v = w.verdict()
    assert v.violations == [] and v.counts["claim:ok"] == 1 and v.counts["claim:info"] == 1
