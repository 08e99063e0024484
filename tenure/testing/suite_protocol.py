"""The lease protocol, run against every backend."""

from __future__ import annotations

import pytest

import tenure
from tenure import JobState, Op
from tenure.testing.kit import Kit


class ProtocolTests:
    def test_seed_example_stale_completion_is_rejected_and_audited(self, kit: Kit, store: tenure.Store) -> None:
        # Worker A claims, pauses past its lease; B claims a higher generation; A's completion fails.
        store.submit("job-7")
        a = store.claim("job-7", owner="worker-a", ttl=kit.short_ttl)
        kit.expire(store, a)
        assert store.get("job-7").state is JobState.EXPIRED  # type: ignore[union-attr]
        b = store.claim("job-7", owner="worker-b", ttl=kit.ttl)
        assert b.token > a.token

        with pytest.raises(tenure.StaleLease) as info:
            store.complete(a, result=b"from A")
        rejection = info.value.rejection
        assert (rejection.job_id, rejection.op, rejection.owner, rejection.token) == ("job-7", Op.COMPLETE,
                                                                                    "worker-a", a.token)
        assert (rejection.current_owner, rejection.current_token) == ("worker-b", b.token)
        assert rejection in store.rejections()

        store.complete(b, result=b"from B")
        status = store.get("job-7")
        assert status is not None
        assert (status.state, status.owner, status.token, status.result) == (
            JobState.COMPLETED, "worker-b", b.token, b"from B")

    def test_stale_renew_and_release_are_rejected_and_audited(self, kit: Kit, store: tenure.Store) -> None:
        a = store.claim("j", owner="a", ttl=kit.short_ttl)
        kit.expire(store, a)
        b = store.claim("j", owner="b", ttl=kit.ttl)
        for op, call in ((Op.RENEW, store.renew), (Op.RELEASE, store.release)):
            with pytest.raises(tenure.StaleLease) as info:
                call(a)
            assert info.value.rejection.op is op
            assert info.value.rejection.current_token == b.token
        assert [r.op for r in store.rejections()] == [Op.RENEW, Op.RELEASE]
        assert store.get("j").owner == "b"  # type: ignore[union-attr]

    def test_expired_lease_cannot_be_renewed_even_if_nobody_claimed(self, kit: Kit, store: tenure.Store) -> None:
        a = store.claim("j", owner="a", ttl=kit.short_ttl)
        kit.expire(store, a)
        with pytest.raises(tenure.StaleLease) as info:
            store.renew(a)
        assert info.value.rejection.current_token == a.token
        assert info.value.ended_by is None and "lease expired by store time" in str(info.value)
        assert store.get("j").state is JobState.EXPIRED  # type: ignore[union-attr]

    def test_a_holder_whose_lease_an_operator_ended_is_told_who(self, kit: Kit, store: tenure.Store) -> None:
        a = store.claim("j", owner="a", ttl=kit.ttl)
        store.force_expire("j", token=a.token, actor="alice")
        for call in (store.renew, store.complete, store.release):
            with pytest.raises(tenure.StaleLease, match=r"an operator \('alice'\) ended the lease at ") as info:
                call(a)
            assert info.value.ended_by is not None and info.value.ended_by.op is Op.EXPIRE
        b = store.claim("j", owner="b", ttl=kit.ttl)
        store.force_expire("j")  # no actor: history cannot name the operator
        with pytest.raises(tenure.StaleLease, match=r"rejected: an operator ended the lease at "):
            store.renew(b)

    def test_a_token_above_the_current_one_was_never_issued(self, kit: Kit, store: tenure.Store) -> None:
        a = store.claim("j", owner="a", ttl=kit.ttl)
        forged = tenure.Lease("j", "a", a.token + 6, a.expires_at, a.ttl)
        for call in (store.renew, store.complete, store.release):
            with pytest.raises(tenure.StaleLease, match="never issued") as info:
                call(forged)
            assert "superseded" not in str(info.value)
        assert {r.reason for r in store.rejections()} == {str(tenure.Reason.NEVER_ISSUED)}
        store.complete(a)  # the real holder was never disturbed

    def test_a_lease_given_back_is_refused_as_not_leased(self, kit: Kit, store: tenure.Store) -> None:
        a = store.claim("j", owner="a", ttl=kit.ttl)
        store.release(a)
        for call in (store.renew, store.complete, store.release):
            with pytest.raises(tenure.StaleLease, match=r"rejected: job is not leased \(no current owner, ") as info:
                call(a)
            assert info.value.rejection.reason == str(tenure.Reason.NOT_LEASED)
        assert store.get("j").state is JobState.PENDING  # type: ignore[union-attr]

    def test_claim_of_held_job_raises_already_claimed(self, kit: Kit, store: tenure.Store) -> None:
        a = store.claim("j", owner="a", ttl=kit.ttl)
        with pytest.raises(tenure.AlreadyClaimed) as info:
            store.claim("j", owner="b", ttl=kit.ttl)
        assert (info.value.owner, info.value.token) == ("a", a.token)
        with pytest.raises(tenure.AlreadyClaimed):
            store.claim("j", owner="a", ttl=kit.ttl)  # the owner itself does not get a second lease

    def test_claim_of_completed_job_raises_job_completed(self, kit: Kit, store: tenure.Store) -> None:
        store.complete(store.claim("j", owner="a", ttl=kit.ttl))
        with pytest.raises(tenure.JobCompleted):
            store.claim("j", owner="b", ttl=kit.ttl)

    def test_renew_extends_the_lease(self, kit: Kit, store: tenure.Store) -> None:
        a = store.claim("j", owner="a", ttl=kit.ttl)
        renewed = store.renew(a)
        assert (renewed.job_id, renewed.owner, renewed.token) == (a.job_id, a.owner, a.token)
        assert renewed.expires_at >= a.expires_at
        assert store.get("j").expires_at == pytest.approx(renewed.expires_at, abs=0.5)  # type: ignore[union-attr]

    def test_forged_owner_is_rejected(self, kit: Kit, store: tenure.Store) -> None:
        a = store.claim("j", owner="a", ttl=kit.ttl)
        forged = tenure.Lease(a.job_id, "mallory", a.token, a.expires_at, a.ttl)
        with pytest.raises(tenure.StaleLease):
            store.complete(forged)
        assert store.get("j").state is JobState.LEASED  # type: ignore[union-attr]
        assert store.rejections()[-1].owner == "mallory"

    def test_release_lets_the_next_claim_in_with_a_higher_token(self, kit: Kit, store: tenure.Store) -> None:
        a = store.claim("j", owner="a", ttl=kit.ttl)
        store.release(a)
        assert store.get("j").state is JobState.PENDING  # type: ignore[union-attr]
        b = store.claim("j", owner="b", ttl=kit.ttl)
        assert b.token > a.token

    def test_tokens_increase_across_release_expiry_and_resubmission(self, kit: Kit, store: tenure.Store) -> None:
        tokens = []
        lease = store.claim("j", owner="a", ttl=kit.ttl)
        tokens.append(lease.token)
        store.release(lease)
        lease = store.claim("j", owner="a", ttl=kit.short_ttl)
        tokens.append(lease.token)
        kit.expire(store, lease)
        lease = store.claim("j", owner="b", ttl=kit.ttl)
        tokens.append(lease.token)
        store.complete(lease)
        store.submit("j")
        lease = store.claim("j", owner="c", ttl=kit.ttl)
        tokens.append(lease.token)
        assert tokens == sorted(set(tokens)), tokens
        assert store.get("j").token == tokens[-1]  # type: ignore[union-attr]

    def test_submit_is_a_no_op_on_pending_and_leased_jobs(self, kit: Kit, store: tenure.Store) -> None:
        store.submit("j")
        store.submit("j")
        assert store.get("j").state is JobState.PENDING  # type: ignore[union-attr]
        a = store.claim("j", owner="a", ttl=kit.ttl)
        store.submit("j")
        status = store.get("j")
        assert status is not None
        assert (status.state, status.owner, status.token) == (JobState.LEASED, "a", a.token)
        store.renew(a)  # the lease survived the submit

    def test_submit_after_completion_starts_a_new_run(self, kit: Kit, store: tenure.Store) -> None:
        a = store.claim("j", owner="a", ttl=kit.ttl)
        store.complete(a, result="done")
        assert store.get("j").result == b"done"  # type: ignore[union-attr]
        store.submit("j")
        status = store.get("j")
        assert status is not None
        assert (status.state, status.owner, status.result) == (JobState.PENDING, None, None)
        assert status.runs == 2
        with pytest.raises(tenure.StaleLease):
            store.complete(a)  # the old run's lease stays stale

    def test_claim_next_never_returns_a_completed_job(self, kit: Kit, store: tenure.Store) -> None:
        for name in ("a", "b", "c"):
            store.submit(name)
        first = store.claim_next(owner="w", ttl=kit.ttl)
        assert first is not None
        store.complete(first)
        taken = {first.job_id}
        while (lease := store.claim_next(owner="w", ttl=kit.ttl)) is not None:
            assert lease.job_id not in taken
            taken.add(lease.job_id)
        assert taken == {"a", "b", "c"}
        assert store.claim_next(owner="w", ttl=kit.ttl) is None

    def test_claim_next_takes_expired_leases(self, kit: Kit, store: tenure.Store) -> None:
        a = store.claim("j", owner="a", ttl=kit.short_ttl)
        assert store.claim_next(owner="b", ttl=kit.ttl) is None
        kit.expire(store, a)
        b = store.claim_next(owner="b", ttl=kit.ttl)
        assert b is not None and (b.job_id, b.owner) == ("j", "b") and b.token > a.token

    def test_get_of_unknown_job_is_none_and_jobs_lists_all(self, store: tenure.Store) -> None:
        assert store.get("nope") is None
        for name in ("x", "y", "z"):
            store.submit(name)
        assert sorted(j.job_id for j in store.jobs()) == ["x", "y", "z"]

    @pytest.mark.parametrize("job_id", ["a/b/c", "with space", "ünïcødé-日本語", "/leading", "trailing/",
                                        "..", "%2F", "x" * 256, "a\u00a0b", "😀"])
    def test_job_ids_round_trip_unchanged(self, kit: Kit, store: tenure.Store, job_id: str) -> None:
        lease = store.claim(job_id, owner="o/w n€r", ttl=kit.ttl)
        assert lease.job_id == job_id
        assert [j.job_id for j in store.jobs()] == [job_id]
        assert store.get(job_id).owner == "o/w n€r"  # type: ignore[union-attr]
        store.complete(lease)

    def test_store_reopened_keeps_records_and_tokens(self, kit: Kit) -> None:
        kit.require_processes()  # a store of one process lives and dies with it
        with kit.connect() as first:
            lease = first.claim("j", owner="a", ttl=kit.ttl)
            first.complete(lease)
        with kit.connect() as second:
            assert second.get("j").state is JobState.COMPLETED  # type: ignore[union-attr]
            second.submit("j")
            assert second.claim("j", owner="b", ttl=kit.ttl).token > lease.token

    def test_force_expire_makes_the_job_claimable(self, kit: Kit, store: tenure.Store) -> None:
        a = store.claim("j", owner="a", ttl=kit.ttl)
        store.force_expire("j")
        b = store.claim("j", owner="b", ttl=kit.ttl)
        assert b.token > a.token
        with pytest.raises(tenure.StaleLease):
            store.complete(a)

    def test_history_records_accepted_operations(self, kit: Kit, store: tenure.Store) -> None:
        store.submit("j")
        lease = store.claim("j", owner="a", ttl=kit.ttl)
        store.renew(lease)
        store.complete(lease)
        events = store.history("j")
        assert [e.op for e in events] == [Op.SUBMIT, Op.CLAIM, Op.RENEW, Op.COMPLETE]
        assert {(e.owner, e.token) for e in events[1:]} == {("a", lease.token)}

    def test_a_claim_keeps_one_renewal_event_its_latest(self, kit: Kit, store: tenure.Store) -> None:
        # A renewal's event replaces the claim's earlier one, where it happened: the newest.
        first = store.claim("j", owner="a", ttl=kit.ttl)
        store.renew(first)
        store.submit("other")
        latest = store.renew(first, ttl=kit.ttl * 2)
        events = store.history()
        assert [(e.job_id, e.op) for e in events] == [("j", Op.CLAIM), ("other", Op.SUBMIT), ("j", Op.RENEW)]
        renewal = events[-1]
        assert (renewal.owner, renewal.token, renewal.expires_at) == ("a", first.token, latest.expires_at)
        assert renewal.at >= events[1].at
        store.complete(latest)
        # A new claim's renewal leaves its own event; the earlier claim's stays.
        store.submit("j")
        second = store.claim("j", owner="b", ttl=kit.ttl)
        store.renew(second)
        store.renew(second)
        renewals = [(e.owner, e.token) for e in store.history("j") if e.op is Op.RENEW]
        assert renewals == [("a", first.token), ("b", second.token)]
        assert [e.op for e in store.history("j")] == [Op.CLAIM, Op.RENEW, Op.COMPLETE, Op.SUBMIT, Op.CLAIM, Op.RENEW]
        assert [e.op for e in store.history("j", limit=1)] == [Op.RENEW]

    def test_submit_many_validates_everything_before_writing(self, store: tenure.Store) -> None:
        with pytest.raises(tenure.InvalidArgument):
            store.submit_many(["a", "b", ""])
        assert list(store.jobs()) == []
        store.submit_many(f"job-{i}" for i in range(5))
        assert sorted(j.job_id for j in store.jobs()) == [f"job-{i}" for i in range(5)]

    def test_force_expire_with_a_confirmed_token_refuses_a_newer_holder(self, kit: Kit, store: tenure.Store) -> None:
        # The operator looked at holder a's token; the job changed hands before the click landed.
        a = store.claim("j", owner="a", ttl=kit.short_ttl)
        kit.expire(store, a)
        b = store.claim("j", owner="b", ttl=kit.ttl)
        with pytest.raises(tenure.TokenChanged) as info:
            store.force_expire("j", token=a.token, actor="operator")
        assert (info.value.expected, info.value.current) == (a.token, b.token)
        status = store.get("j")
        assert status is not None and status.state is JobState.LEASED and status.owner == "b"
        store.renew(b)  # b still holds the job: nothing was changed
        store.force_expire("j", token=b.token, actor="operator")
        assert store.get("j").state is JobState.EXPIRED  # type: ignore[union-attr]
        with pytest.raises(tenure.InvalidArgument):
            store.force_expire("j", token="7")  # type: ignore[arg-type]
