"""Rejections: recorded once per stale operation, filtered by time and count; watch()."""

from __future__ import annotations

import threading

import pytest

import tenure
from tenure import Op, RejectionKind
from tenure.testing.kit import Kit

WATCH_LIMIT = 60.0  # seconds a watch may take to report one change before the case fails


def _stale_lease(kit: Kit, store: tenure.Store, job_id: str) -> tenure.Lease:
    lease = store.claim(job_id, owner="a", ttl=kit.ttl)
    store.force_expire(job_id)
    store.claim(job_id, owner="b", ttl=kit.ttl)
    return lease


class AuditTests:
    def test_each_stale_operation_is_recorded_exactly_once(self, kit: Kit, store: tenure.Store) -> None:
        stale = _stale_lease(kit, store, "j")
        assert store.rejections() == []  # claims and expiries are not rejections
        for _ in range(3):
            with pytest.raises(tenure.StaleLease):
                store.complete(stale)
        records = store.rejections()
        assert len(records) == 3
        assert {(r.op, r.kind, r.token) for r in records} == {(Op.COMPLETE, RejectionKind.STORE, stale.token)}

    def test_rejections_since_and_limit(self, kit: Kit, store: tenure.Store) -> None:
        stale = _stale_lease(kit, store, "j")
        with pytest.raises(tenure.StaleLease):
            store.renew(stale)
        middle = store.rejections()[-1].at
        for _ in range(3):
            with pytest.raises(tenure.StaleLease):
                store.complete(stale)
        assert [r.op for r in store.rejections(limit=2)] == [Op.COMPLETE, Op.COMPLETE]
        assert store.rejections(limit=0) == []
        after = store.rejections(since=middle)
        assert all(r.at >= middle for r in after) and len(after) >= 3
        assert store.rejections(since=store.now() + 3600) == []
        with pytest.raises(tenure.InvalidArgument):
            store.rejections(limit=-1)

    def test_rejections_of_one_job(self, kit: Kit, store: tenure.Store) -> None:
        """``job_id`` keeps that job's rejections (native where the store indexes them), with
        ``since`` and ``limit`` as for the whole audit; a bad id writes nothing and raises."""
        one, other = _stale_lease(kit, store, "one"), _stale_lease(kit, store, "one-more")
        with pytest.raises(tenure.StaleLease):
            store.renew(one)
        for _ in range(2):
            with pytest.raises(tenure.StaleLease):
                store.complete(other)
        store.report_rejection("one", "a", one.token, resource="ledger", highest=one.token + 1)
        mine = store.rejections(job_id="one")
        assert [(r.job_id, r.op) for r in mine] == [("one", Op.RENEW), ("one", Op.EFFECT)]
        assert [r.op for r in store.rejections(job_id="one", limit=1)] == [Op.EFFECT]
        assert store.rejections(job_id="one", since=mine[-1].at) == [r for r in mine if r.at >= mine[-1].at]
        assert len(store.rejections(job_id="one-more")) == 2 and store.rejections(job_id="on") == []
        with pytest.raises(tenure.InvalidArgument):
            store.rejections(job_id="")
        assert len(store.rejections()) == 4

    def test_destination_rejections_join_the_audit(self, kit: Kit, store: tenure.Store) -> None:
        lease = store.claim("j", owner="a", ttl=kit.ttl)
        store.report_rejection("j", "a", lease.token, resource="accounts/7", highest=lease.token + 5)
        (record,) = store.rejections()
        assert (record.kind, record.resource, record.current_token) == (
            RejectionKind.DESTINATION, "accounts/7", lease.token + 5)

    def test_watch_reports_new_jobs_changes_and_rejections(self, kit: Kit, store: tenure.Store) -> None:
        stop = threading.Event()
        changes = store.watch(stop, interval=0.05)
        limit = threading.Timer(WATCH_LIMIT, stop.set)  # a change never reported fails, not hangs
        limit.daemon = True
        limit.start()
        store.submit("w")
        seen: list[tenure.Change] = []

        def until(what: str, predicate: object) -> None:
            for change in changes:
                seen.append(change)
                if predicate(change):  # type: ignore[operator]
                    return
            pytest.fail(f"watch() did not report {what} within {WATCH_LIMIT:g} s; it reported {seen!r}")

        until("the new job", lambda c: c.job is not None and c.job.job_id == "w")
        stale = _stale_lease(kit, store, "w")
        until("the new claim", lambda c: c.job is not None and c.job.owner == "b")
        with pytest.raises(tenure.StaleLease):
            store.complete(stale)
        until("the rejection (is it written to the audit?)", lambda c: c.rejection is not None)
        stop.set()
        limit.cancel()
        assert seen[-1].rejection is not None and seen[-1].rejection.token == stale.token
