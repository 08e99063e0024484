"""ZooKeeper's one-round-trip paths (``zookeeper_held``): when they run, and when they must not."""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.handlers.utils import AsyncResult
from kazoo.protocol.serialization import GetData, Transaction

import tenure
from tests.servers.zookeeper import ZooKeeperHarness


@pytest.fixture
def store(zk_harness: ZooKeeperHarness) -> Iterator[tenure.Store]:
    with zk_harness.connect() as s:
        yield s


def _counted(store: tenure.Store, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Requests as ZooKeeper sees them: reads of a job znode, multis, and round trips (requests
    sent together, before the caller waits for any answer, travel in one). An audit trim the
    setup set off runs in the background: it ends before counting starts."""
    assert store.backend.session.settled(30)  # type: ignore[attr-defined]
    client: Any = store.backend.client  # type: ignore[attr-defined]
    jobs = store.backend.layout.jobs + "/"  # type: ignore[attr-defined]
    counts = {"reads": 0, "multis": 0, "trips": 0}
    waited = [True]
    call, get = client._call, AsyncResult.get

    def sent(request: Any, async_object: Any) -> Any:
        counts["reads"] += isinstance(request, GetData) and request.path.startswith(jobs)
        counts["multis"] += isinstance(request, Transaction)
        counts["trips"] += waited[0]
        waited[0] = False
        return call(request, async_object)

    def answered(result: Any, *args: Any, **kwargs: Any) -> Any:
        waited[0] = True
        return get(result, *args, **kwargs)

    client._call = sent
    monkeypatch.setattr(AsyncResult, "get", answered)
    return counts


def _sent(counts: dict[str, int], operation: Any) -> tuple[Any, int, int]:
    result, reads, multis, _ = _trips(counts, operation)
    return result, reads, multis


def _trips(counts: dict[str, int], operation: Any) -> tuple[Any, int, int, int]:
    before = dict(counts)
    result = operation()
    return result, *(counts[k] - before[k] for k in ("reads", "multis", "trips"))  # type: ignore[return-value]


def test_new_claims_and_the_holders_renew_and_complete_take_one_multi(
        zk_harness: ZooKeeperHarness, store: tenure.Store,
        monkeypatch: pytest.MonkeyPatch) -> None:
    ttl = zk_harness.ttl
    store.submit("warm-up")  # the root's first audit record lists it for a trim: not the claim's cost
    counts = _counted(store, monkeypatch)
    store.now()  # a stamp of the leader's clock to bound the next writes by
    lease, reads, multis, trips = _trips(counts, lambda: store.claim("new", owner="a", ttl=ttl))
    assert (reads, multis, trips, lease.token) == (0, 1, 1, 1)
    before = store.now()
    lease, reads, multis, trips = _trips(counts, lambda: store.renew(lease))
    assert (reads, multis, trips) == (0, 1, 1)
    # The expiry written is an upper bound of the leader's clock plus the TTL, and a tight one.
    assert before + ttl <= lease.expires_at <= before + ttl + 0.5
    _, reads, multis, trips = _trips(counts, lambda: store.complete(lease, b"done"))
    assert (reads, multis, trips) == (0, 1, 1)
    status = store.get("new")
    assert status is not None and (status.state, status.result) == (tenure.JobState.COMPLETED, b"done")
    assert [e.op for e in store.history("new")] == [tenure.Op.CLAIM, tenure.Op.RENEW, tenure.Op.COMPLETE]


def test_a_job_that_exists_is_claimed_through_a_read(zk_harness: ZooKeeperHarness, store: tenure.Store,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    store.submit_many(["old", "older"])
    counts = _counted(store, monkeypatch)
    lease, reads, multis, trips = _trips(counts, lambda: store.claim("old", owner="a", ttl=zk_harness.ttl))
    # The new-job multi fails as a whole; then the read and the claim's multi.
    assert (reads, multis, trips) == (1, 2, 3)
    assert lease.token == 1 and store.get("old").owner == "a"  # type: ignore[union-attr]
    # Having found a job existing, the next claim sends the read along with the new-job multi:
    # two round trips, not three.
    _, reads, multis, trips = _trips(counts, lambda: store.claim("older", owner="a", ttl=zk_harness.ttl))
    assert (reads, multis, trips) == (1, 2, 2)
    with pytest.raises(tenure.AlreadyClaimed):
        store.claim("old", owner="b", ttl=zk_harness.ttl)


def test_an_index_entry_already_gone_costs_the_multi_again_never_a_read(
        zk_harness: ZooKeeperHarness, store: tenure.Store, monkeypatch: pytest.MonkeyPatch) -> None:
    client: Any = store.backend.client  # type: ignore[attr-defined]
    layout: Any = store.backend.layout  # type: ignore[attr-defined]
    store.submit("warm-up")  # the root's first audit record lists it for a trim: not the claim's cost
    client.create(layout.leased_entry("new"), b"")  # left over by someone
    counts = _counted(store, monkeypatch)
    store.now()  # a fresh stamp: the claim guesses
    lease, reads, multis, trips = _trips(counts, lambda: store.claim("new", owner="a", ttl=zk_harness.ttl))
    # The multi fails on creating the entry, which is there: sent again without it, from the same guess.
    assert (reads, multis, trips, lease.token) == (0, 2, 2, 1)
    client.delete(layout.leased_entry("new"))  # an operator's slip
    _, reads, multis, trips = _trips(counts, lambda: store.complete(lease))
    assert (reads, multis, trips) == (0, 2, 2)
    assert store.get("new").state is tenure.JobState.COMPLETED  # type: ignore[union-attr]
    assert [e.op for e in store.history("new")] == [tenure.Op.CLAIM, tenure.Op.COMPLETE]


def test_whether_a_lease_expired_is_judged_on_a_fresh_read_of_the_leaders_clock(
        zk_harness: ZooKeeperHarness, store: tenure.Store,
        monkeypatch: pytest.MonkeyPatch) -> None:
    a = store.claim("j", owner="a", ttl=zk_harness.short_ttl)
    zk_harness.expire(store, a)
    store.submit("x")
    store.claim("x", owner="c", ttl=zk_harness.ttl)  # found existing: the next claim pipelines
    counts = _counted(store, monkeypatch)
    b, reads, multis = _sent(counts, lambda: store.claim("j", owner="b", ttl=zk_harness.ttl))
    # The read sent with the new-job multi has no stamp of its own; a leased record is read again.
    assert (reads, multis, b.token) == (2, 2, a.token + 1)


def test_a_record_written_by_someone_else_sends_the_holder_through_the_check(
        zk_harness: ZooKeeperHarness, store: tenure.Store,
        monkeypatch: pytest.MonkeyPatch) -> None:
    lease = store.claim("j", owner="a", ttl=zk_harness.ttl)
    store.force_expire("j", actor="op")  # the record's version moves on: the shortcut must fail
    counts = _counted(store, monkeypatch)
    with pytest.raises(tenure.StaleLease) as refused:
        store.renew(lease)
    assert counts["reads"] >= 1  # judged by the general path, on the leader's clock
    assert refused.value.rejection in store.rejections()


def test_a_job_znode_deleted_and_claimed_again_is_not_taken_back_by_the_old_holder(
        zk_harness: ZooKeeperHarness, store: tenure.Store) -> None:
    """Versions restart with a new znode: the holder's version check alone would pass."""
    a = store.claim("j", owner="a", ttl=zk_harness.ttl)  # job znode at version 0, token 1
    backend: Any = store.backend
    backend.client.delete(backend.layout.job("j"))  # an operator deletes it by hand
    with zk_harness.connect(store.url) as other:
        b = other.claim("j", owner="b", ttl=zk_harness.ttl)  # version 0 again, token 2
        with pytest.raises(tenure.StaleLease):
            store.renew(a)
        status = other.get("j")
        assert status is not None and (status.owner, status.token) == ("b", b.token)
        other.complete(b)


def test_no_shortcut_once_the_holders_deadline_has_passed(zk_harness: ZooKeeperHarness, store: tenure.Store,
        monkeypatch: pytest.MonkeyPatch) -> None:
    lease = store.claim("j", owner="a", ttl=zk_harness.ttl)
    counts = _counted(store, monkeypatch)
    late = dataclasses.replace(lease, deadline=time.monotonic() - 0.001)  # as if paused past it
    _, reads, _ = _sent(counts, lambda: store.renew(late))
    assert reads == 1  # the store's clock decides (here: still live, so renewed)


def test_a_stale_stamp_is_renewed_first_and_an_injected_clock_takes_no_shortcut(
        zk_harness: ZooKeeperHarness, store: tenure.Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stamp too old to bound the leader's clock is taken again (a clock write, no read of
    the job): a batch of renewals would otherwise read every record it renews."""
    leases = [store.claim(f"j{i}", owner="a", ttl=zk_harness.ttl) for i in range(3)]
    counts = _counted(store, monkeypatch)
    time.sleep(1.1)  # real time: the bound on the leader's clock serves one second (session.FRESH)
    before = store.backend.session.bound_now()  # type: ignore[attr-defined]
    assert before is None
    renewed, reads, multis, trips = _trips(counts, lambda: store.renew_many(leases))
    assert (reads, multis, trips) == (0, 1, 2)  # the clock write, then the multi
    assert all(isinstance(lease, tenure.Lease) for lease in renewed)
    with zk_harness.connect(clock=tenure.ManualClock()) as manual:  # deadlines not on our clock
        counts = _counted(manual, monkeypatch)
        held = manual.claim("m", owner="a", ttl=zk_harness.ttl)
        _, reads, _ = _sent(counts, lambda: manual.renew(held))
        assert reads == 1


def test_a_job_znode_deleted_and_submitted_again_is_not_overwritten_by_the_old_holder(
        zk_harness: ZooKeeperHarness, store: tenure.Store,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The re-created znode starts at the version the holder knows, and nobody claimed it."""
    a = store.claim("j", owner="a", ttl=zk_harness.ttl)  # job znode at version 0, token 1
    backend: Any = store.backend
    backend.client.delete(backend.layout.job("j"))  # an operator deletes it by hand
    with zk_harness.connect(store.url) as other:
        other.submit("j")  # pending again, at version 0
        counts = _counted(store, monkeypatch)
        with pytest.raises(tenure.StaleLease):
            store.renew(a)
        assert counts["reads"] >= 1  # the one-round-trip multi was refused; the read judged it
        status = other.get("j")
        assert status is not None and status.state is tenure.JobState.PENDING and status.owner is None
        b = other.claim("j", owner="b", ttl=zk_harness.ttl)
        assert b.token > a.token


def test_a_renewal_deletes_the_claims_earlier_renewal_event_in_its_own_multi(
        zk_harness: ZooKeeperHarness, monkeypatch: pytest.MonkeyPatch) -> None:
    ttl, url = zk_harness.ttl, zk_harness.url()
    with zk_harness.connect(url) as store:
        _renewals_replaced(store, ttl, monkeypatch)
        with zk_harness.connect(url) as other:  # another process, which knows no earlier event
            lease = other.renew(_held(store, "j"))
        # The event this process wrote stays, until trimmed.
        assert [e.op for e in store.history("j")] == [tenure.Op.CLAIM, tenure.Op.RENEW, tenure.Op.RENEW]
        assert store.history("j")[-1].expires_at == lease.expires_at


def _held(store: tenure.Store, job_id: str) -> tenure.Lease:
    status = store.get(job_id)
    assert status is not None and status.owner is not None and status.expires_at is not None
    return tenure.Lease(job_id, status.owner, status.token, status.expires_at, status.expires_at - store.now())


def _renewals_replaced(store: tenure.Store, ttl: float, monkeypatch: pytest.MonkeyPatch) -> None:
    store.submit("warm-up")
    lease = store.claim("j", owner="a", ttl=ttl)
    counts = _counted(store, monkeypatch)
    for _ in range(3):
        lease, reads, multis, trips = _trips(counts, functools.partial(store.renew, lease))
        assert (reads, multis, trips) == (0, 1, 1)  # the delete rides in the renewal's multi
    renewals = [e for e in store.history("j") if e.op is tenure.Op.RENEW]
    assert [(e.token, e.expires_at) for e in renewals] == [(lease.token, lease.expires_at)]
    # The event this process remembers is gone (a trim, here or elsewhere): the multi fails on
    # its delete and goes once more without it, one round trip more; the renewal stands.
    client: Any = store.backend.client  # type: ignore[attr-defined]
    events = store.backend.layout.events  # type: ignore[attr-defined]
    paths = [f"{events}/{segment}/{name}" for segment in client.get_children(events)
             for name in client.get_children(f"{events}/{segment}")]
    gone = [p for p in paths if b'"renew"' in client.get(p)[0]]
    assert len(gone) == 1
    client.delete(gone[0])
    lease, reads, multis, trips = _trips(counts, lambda: store.renew(lease))
    assert (reads, multis, trips) == (0, 2, 2)
    lease, reads, multis, trips = _trips(counts, lambda: store.renew(lease))  # the next replaces that one
    assert (reads, multis, trips) == (0, 1, 1)
    events = store.history("j")
    assert [e.op for e in events] == [tenure.Op.CLAIM, tenure.Op.RENEW]
    assert events[-1].expires_at == lease.expires_at
    monkeypatch.undo()
