"""Operator queries (summary, page) and operator actions with an actor, on every backend."""

from __future__ import annotations

import pytest

import tenure
from tenure import JobState, Op
from tenure.testing.kit import Kit


def _mixed(kit: Kit, store: tenure.Store) -> None:
    """p1, p2 pending; l-long leased by alice; l-short leased by bob, then expired; c completed."""
    store.submit("p1")
    store.submit("p2")
    short = store.claim("l-short", owner="bob", ttl=kit.short_ttl)
    store.claim("l-long", owner="Alice", ttl=kit.ttl * 20)
    done = store.claim("c", owner="carol", ttl=kit.ttl)
    store.complete(done)
    kit.expire(store, short)


class QueryTests:
    def test_summary_counts_each_state(self, kit: Kit, store: tenure.Store) -> None:
        _mixed(kit, store)
        stale = store.claim("r", owner="a", ttl=kit.ttl)
        store.force_expire("r")
        store.claim("r", owner="b", ttl=kit.ttl * 20)
        with pytest.raises(tenure.StaleLease):
            store.complete(stale)
        s = store.summary(soon=kit.ttl * 100)
        assert (s.pending, s.leased, s.expired, s.completed, s.corrupt) == (2, 2, 1, 1, 0)
        assert s.expiring_soon == 2 and s.total == 6
        assert s.rejections_last_hour == 1
        assert store.summary(soon=0).expiring_soon == 0
        with pytest.raises(tenure.InvalidArgument, match="soon"):
            store.summary(soon=-1)

    def test_page_filters_orders_and_counts(self, kit: Kit, store: tenure.Store) -> None:
        _mixed(kit, store)
        first = store.page(limit=2)
        assert first.total == 5 and [j.job_id for j in first.jobs] == ["l-short", "l-long"]
        rest = store.page(offset=2, limit=10)
        assert [j.job_id for j in rest.jobs] == ["c", "p1", "p2"]  # no lease: by id
        assert [j.job_id for j in store.page(order="job").jobs] == ["c", "l-long", "l-short", "p1", "p2"]
        expired = store.page(states=["expired"])
        assert [(j.job_id, j.state) for j in expired.jobs] == [("l-short", JobState.EXPIRED)]
        live = store.page(states=[JobState.LEASED, JobState.PENDING])
        assert {j.job_id for j in live.jobs} == {"l-long", "p1", "p2"} and live.total == 3
        assert [j.job_id for j in store.page(owner="alice").jobs] == ["l-long"]  # ASCII case ignored
        assert [j.job_id for j in store.page(job="P").jobs] == ["p1", "p2"]
        assert store.page(job="nothing-like-it").total == 0

    @pytest.mark.parametrize("kwargs", [
        {"states": ["sleeping"]}, {"order": "random"}, {"limit": 0}, {"limit": 100_000},
        {"offset": -1}, {"job": "x\n"}, {"owner": 7},
    ])
    def test_page_rejects_bad_arguments(self, store: tenure.Store, kwargs: dict[str, object]) -> None:
        with pytest.raises(tenure.InvalidArgument):
            store.page(**kwargs)  # type: ignore[arg-type]

    def test_operator_actions_record_the_actor(self, kit: Kit, store: tenure.Store) -> None:
        lease = store.claim("j", owner="worker", ttl=kit.ttl * 20)
        store.force_expire("j", actor="dashboard-admin")
        expire = [e for e in store.history("j") if e.op is Op.EXPIRE]
        assert [(e.owner, e.token) for e in expire] == [("dashboard-admin", lease.token)]
        store.complete(store.claim("j", owner="worker", ttl=kit.ttl))
        store.submit("j", actor="dashboard-admin")
        assert store.history("j")[-1].op is Op.SUBMIT and store.history("j")[-1].owner == "dashboard-admin"
        with pytest.raises(tenure.InvalidArgument):
            store.force_expire("j", actor="")

    def test_corrupt_record_is_counted_and_listed_with_its_key(self, kit: Kit, store: tenure.Store) -> None:
        store.submit("ok")
        store.submit("bad")
        kit.corrupt(store, "bad")
        if store.backend.characteristics.counts_from_indexes:  # no record read: counted by its index
            assert (store.summary().corrupt, store.summary().pending) == (0, 2)
        else:
            assert store.summary().corrupt == 1 and store.summary().pending == 1
        (row,) = store.page(states=["corrupt"]).jobs
        assert row.job_id == "bad" and row.state is JobState.CORRUPT and row.key and row.problem  # the backend's key
        assert store.page().total == 2
