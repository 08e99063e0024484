"""renew_many and coalesced renewals: many leases renewed in one call, each judged alone."""

from __future__ import annotations

import time

import pytest

import tenure
from tenure import Op
from tenure.testing.kit import Kit
from tenure.testing.suite_hold import PATIENCE, RENEWED_TTL


def _claimed(kit: Kit, store: tenure.Store, jobs: list[str], owner: str = "a") -> list[tenure.Lease]:
    return [store.claim(job, owner=owner, ttl=kit.ttl) for job in jobs]


def _made_stale(kit: Kit, store: tenure.Store, job_id: str) -> None:
    store.force_expire(job_id)
    store.claim(job_id, owner="other", ttl=kit.ttl)


class RenewalTests:
    def test_renew_many_renews_every_lease(self, kit: Kit, store: tenure.Store) -> None:
        leases = _claimed(kit, store, ["j1", "j2", "j3"])
        renewed = store.renew_many(leases)
        assert [type(r) for r in renewed] == [tenure.Lease] * 3
        for before, after in zip(leases, renewed, strict=True):
            assert isinstance(after, tenure.Lease)
            assert (after.job_id, after.owner, after.token) == (before.job_id, before.owner, before.token)
            assert after.expires_at >= before.expires_at
            store.renew(after)  # still current: it may go on
        again = store.renew_many(renewed)  # type: ignore[arg-type]  # all leases, checked above
        # Each claim keeps one renewal event, its latest (the third renewal's).
        renewals = sorted((e.job_id, e.token, e.expires_at) for e in store.history() if e.op is Op.RENEW)
        assert renewals == [(r.job_id, r.token, r.expires_at) for r in again]  # type: ignore[union-attr]
        assert store.rejections() == []
        assert store.renew_many([]) == []

    def test_one_stale_lease_in_a_batch_is_refused_and_audited_alone(self, kit: Kit, store: tenure.Store) -> None:
        leases = _claimed(kit, store, ["j1", "j2", "j3"])
        _made_stale(kit, store, "j2")
        renewed = store.renew_many(leases)
        assert isinstance(renewed[0], tenure.Lease) and isinstance(renewed[2], tenure.Lease)
        refused = renewed[1]
        assert isinstance(refused, tenure.StaleLease)
        assert (refused.rejection.job_id, refused.rejection.token, refused.rejection.op) == ("j2", leases[1].token,
                                                                                           Op.RENEW)
        assert refused.rejection.current_owner == "other"
        records = store.rejections()
        assert [(r.job_id, r.op, r.token) for r in records] == [("j2", Op.RENEW, leases[1].token)]
        renewals = [e for e in store.history() if e.op is Op.RENEW]
        assert sorted(e.job_id for e in renewals) == ["j1", "j3"]
        assert store.get("j2").owner == "other"  # type: ignore[union-attr]  # untouched by the refusal

    def test_each_renewed_deadline_counts_from_when_its_renewal_was_sent(self, kit: Kit,
                                                                         store: tenure.Store) -> None:
        short, long = store.claim("short", owner="a", ttl=kit.ttl), store.claim("long", owner="a", ttl=kit.ttl * 2)
        if isinstance(store.clock, tenure.ManualClock):
            store.clock.advance(kit.ttl / 4)
        else:
            time.sleep(0.05)  # real time: the renewal is sent later than the claims
        sent_after = store.clock.monotonic()
        renewed = store.renew_many([short, long])
        answered = store.clock.monotonic()
        for before, after in zip((short, long), renewed, strict=True):
            assert isinstance(after, tenure.Lease)
            assert after.ttl == before.ttl
            sent_at = after.deadline - after.ttl * (1 - store.drift_margin)
            assert sent_after <= sent_at <= answered  # its own renewal's send, not the claim's
            assert after.deadline > before.deadline
        current = [r for r in renewed if isinstance(r, tenure.Lease)]
        every = store.renew_many(current, ttl=kit.ttl * 3)  # one TTL for all of them when given
        assert [r.ttl for r in every if isinstance(r, tenure.Lease)] == [kit.ttl * 3] * 2

    def test_renew_many_checks_every_lease_before_anything_is_written(self, kit: Kit, store: tenure.Store) -> None:
        good, other = _claimed(kit, store, ["j1", "j2"])
        for bad in ([good, "not a lease"], [good, good], good, 42):
            with pytest.raises(tenure.InvalidArgument):
                store.renew_many(bad)  # type: ignore[arg-type]
        with pytest.raises(tenure.InvalidArgument):
            store.renew_many([good, other], ttl=-1)
        assert [e for e in store.history() if e.op is Op.RENEW] == []
        assert store.rejections() == []

    def test_a_corrupt_record_fails_its_lease_alone(self, kit: Kit, store: tenure.Store) -> None:
        good, damaged = _claimed(kit, store, ["good", "damaged"])
        kit.corrupt(store, "damaged")
        renewed = store.renew_many([good, damaged])
        assert isinstance(renewed[0], tenure.Lease)
        assert isinstance(renewed[1], tenure.CorruptRecord)
        assert [e.job_id for e in store.history() if e.op is Op.RENEW] == ["good"]

    def test_held_leases_renew_together_and_a_refused_one_is_lost_alone(self, kit: Kit) -> None:
        with kit.connect(clock=tenure.SystemClock()) as store:
            ttl = max(kit.short_ttl, RENEWED_TTL)  # see suite_hold: renewals in real time
            held = [store.hold(f"j{i}", owner="a", ttl=ttl) for i in range(5)]
            _made_stale(kit, store, "j2")
            assert held[2].lost.wait(PATIENCE), "the refused renewal did not set lost"
            time.sleep(ttl)  # real time: every other lease renews again meanwhile
            for i, one in enumerate(held):
                if i != 2:
                    one.check()
                    one.release()
            assert [(r.job_id, r.op) for r in store.rejections()] == [("j2", Op.RENEW)]
            # Renewed more than once each (a third of a TTL apart), each claim keeps one event.
            renewals = sorted(e.job_id for e in store.history() if e.op is Op.RENEW)
            assert renewals == ["j0", "j1", "j3", "j4"] or renewals == ["j0", "j1", "j2", "j3", "j4"], renewals
