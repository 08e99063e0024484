"""Claims and completions in batches (claim_next_many, hold_next_many, complete_many): each
lease as a single claim or completion would be, in as few round trips as the store allows."""

from __future__ import annotations

import pytest

import tenure
from tenure import Op
from tenure.testing.kit import Kit
from tenure.testing.suite_order import ORDER_TOLERANCE, queue


def _claim_events(store: tenure.Store) -> list[tuple[str, int]]:
    return [(e.job_id, e.token) for e in store.history() if e.op is Op.CLAIM]


class BatchTests:
    def test_claim_next_many_takes_up_to_n_in_claim_next_order_each_its_own_claim(
            self, kit: Kit, store: tenure.Store) -> None:
        waiting = [f"q{i:02d}" for i in range(8)]
        queue(store, waiting)
        before = store.claim("overdue", owner="a", ttl=kit.ttl * 20)
        store.force_expire("overdue")
        first = store.claim_next_many("b", kit.ttl * 20, 4)
        assert [lease.job_id for lease in first][:1] == ["overdue"], "an expired lease comes first"
        assert first[0].token > before.token and first[0].attempt == 2  # its second claim, counted
        taken = [lease.job_id for lease in first[1:]]
        assert len(taken) == 3 and set(taken) <= set(waiting[:3 + ORDER_TOLERANCE - 1]), taken
        rest = store.claim_next_many("b", kit.ttl * 20, 100)  # fewer than n: all that is left
        assert sorted(taken + [lease.job_id for lease in rest]) == waiting
        for lease in first[1:] + rest:
            assert (lease.owner, lease.attempt, lease.ttl) == ("b", 1, kit.ttl * 20)
        assert store.claim_next_many("b", kit.ttl, 5) == []
        claimed = [(lease.job_id, lease.token) for lease in [before, *first, *rest]]
        assert sorted(_claim_events(store)) == sorted(claimed)  # one claim each, with its own token
        for lease in [*first, *rest]:
            store.renew(lease)  # each is current on its own

    def test_claim_next_many_passes_over_parked_delayed_and_corrupt_jobs(self, kit: Kit, store: tenure.Store) -> None:
        store.submit("parked", max_attempts=1)
        store.fail(store.claim("parked", owner="a", ttl=kit.ttl), "no")
        store.submit("later", delay=3600.0)
        if kit.corrupt_hook is not None:
            store.submit("damaged")
            kit.corrupt(store, "damaged")
        queue(store, ["ready1", "ready2"])
        claimed = store.claim_next_many("b", kit.ttl, 10)
        assert sorted(lease.job_id for lease in claimed) == ["ready1", "ready2"]
        assert store.get("parked").state is tenure.JobState.PARKED  # type: ignore[union-attr]
        assert store.get("later").state is tenure.JobState.SCHEDULED  # type: ignore[union-attr]

    def test_complete_many_completes_each_and_refuses_and_audits_a_stale_one_alone(
            self, kit: Kit, store: tenure.Store) -> None:
        queue(store, ["j1", "j2", "j3"])
        leases = sorted(store.claim_next_many("a", kit.ttl, 3), key=lambda lease: lease.job_id)
        store.force_expire("j2")
        store.claim("j2", owner="other", ttl=kit.ttl)
        found = store.complete_many(leases, ["one", b"two", None])
        assert found[0] is None and found[2] is None
        refused = found[1]
        assert isinstance(refused, tenure.StaleLease)
        assert (refused.rejection.job_id, refused.rejection.op, refused.rejection.token) == ("j2", Op.COMPLETE,
                                                                                           leases[1].token)
        assert [(r.job_id, r.op) for r in store.rejections()] == [("j2", Op.COMPLETE)]
        assert store.get("j1").result == b"one"  # type: ignore[union-attr]
        assert store.get("j3").state is tenure.JobState.COMPLETED  # type: ignore[union-attr]
        assert store.get("j2").owner == "other"  # type: ignore[union-attr]  # untouched by the refusal
        assert sorted(e.job_id for e in store.history() if e.op is Op.COMPLETE) == ["j1", "j3"]
        assert store.complete_many([]) == []

    def test_a_corrupt_record_fails_its_completion_alone(self, kit: Kit, store: tenure.Store) -> None:
        good, damaged = [store.claim(job, owner="a", ttl=kit.ttl) for job in ("good", "damaged")]
        kit.corrupt(store, "damaged")
        found = store.complete_many([good, damaged])
        assert found[0] is None and isinstance(found[1], tenure.CorruptRecord)
        assert [e.job_id for e in store.history() if e.op is Op.COMPLETE] == ["good"]

    def test_bad_batches_are_refused_before_anything_is_written(self, kit: Kit, store: tenure.Store) -> None:
        queue(store, ["j1", "j2"])
        for n in (0, -1, 1001, True, 1.5, "3", None):
            with pytest.raises(tenure.InvalidArgument):
                store.claim_next_many("a", kit.ttl, n)  # type: ignore[arg-type]
        with pytest.raises(tenure.InvalidArgument):
            store.claim_next_many("", kit.ttl, 2)
        assert _claim_events(store) == []
        good, other = store.claim_next_many("a", kit.ttl, 2)
        too_large = b"x" * (store.characteristics.max_result_bytes + 1)
        for leases, results in (([good, "not a lease"], None), ([good, good], None), (good, None), (42, None),
                                ([good, other], ["only one"]), ([good, other], [None, too_large]),
                                ([good, other], [None, 7]), ([good, other], "ab")):
            with pytest.raises(tenure.InvalidArgument):
                store.complete_many(leases, results)  # type: ignore[arg-type]
        assert [e for e in store.history() if e.op is Op.COMPLETE] == []
        assert store.rejections() == []
        assert store.complete_many([good, other]) == [None, None]

    def test_hold_next_many_holds_each_lease(self, kit: Kit, store: tenure.Store) -> None:
        queue(store, ["h1", "h2", "h3"])
        held = store.hold_next_many("a", kit.ttl, 2)
        assert len(held) == 2 and len({h.job_id for h in held}) == 2
        for one in held:
            one.check()
        held[0].complete("done")
        with held[1]:
            pass  # leaving the block releases it
        assert store.get(held[0].job_id).state is tenure.JobState.COMPLETED  # type: ignore[union-attr]
        assert store.get(held[1].job_id).state is tenure.JobState.PENDING  # type: ignore[union-attr]
        assert store.hold_next_many("a", kit.ttl, 5, wait=0) != []
        assert store.hold_next_many("a", kit.ttl, 5) == []
