"""ZooKeeper's one-round-trip paths (``zookeeper_held``): when they run, and when they must not."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from typing import Any

import pytest

import tenure
from tests.servers.zookeeper import ZooKeeperHarness


@pytest.fixture
def store(zk_harness: ZooKeeperHarness) -> Iterator[tenure.Store]:
    with zk_harness.connect() as s:
        yield s


def _counted(store: tenure.Store) -> dict[str, int]:
    """Counts of step-1 reads and of multis sent, the two kinds of request an operation makes."""
    backend: Any = store.backend
    counts = {"reads": 0, "multis": 0}
    read, commit = backend._send_read, backend.send_commit

    def counting_read(*args: Any, **kwargs: Any) -> Any:
        counts["reads"] += 1
        return read(*args, **kwargs)

    def counting_commit(*args: Any, **kwargs: Any) -> Any:
        counts["multis"] += 1
        return commit(*args, **kwargs)

    backend._send_read, backend.send_commit = counting_read, counting_commit
    return counts


def _sent(counts: dict[str, int], operation: Any) -> tuple[Any, int, int]:
    before = dict(counts)
    result = operation()
    return result, counts["reads"] - before["reads"], counts["multis"] - before["multis"]


def test_new_claims_and_the_holders_renew_and_complete_take_one_multi(
        zk_harness: ZooKeeperHarness, store: tenure.Store) -> None:
    ttl = zk_harness.ttl
    counts = _counted(store)
    store.now()  # a stamp of the leader's clock to bound the next writes by
    lease, reads, multis = _sent(counts, lambda: store.claim("new", owner="a", ttl=ttl))
    assert (reads, multis, lease.token) == (0, 1, 1)
    before = store.now()
    lease, reads, multis = _sent(counts, lambda: store.renew(lease))
    assert (reads, multis) == (0, 1)
    # The expiry written is an upper bound of the leader's clock plus the TTL, and a tight one.
    assert before + ttl <= lease.expires_at <= before + ttl + 0.5
    _, reads, multis = _sent(counts, lambda: store.complete(lease, b"done"))
    assert (reads, multis) == (0, 1)
    status = store.get("new")
    assert status is not None and (status.state, status.result) == (tenure.JobState.COMPLETED, b"done")
    assert [e.op for e in store.history("new")] == [tenure.Op.CLAIM, tenure.Op.RENEW, tenure.Op.COMPLETE]


def test_a_job_that_exists_is_claimed_through_a_read(zk_harness: ZooKeeperHarness, store: tenure.Store) -> None:
    store.submit_many(["old", "older"])
    counts = _counted(store)
    backend: Any = store.backend
    pipelined: list[bool] = []
    read = backend._read
    backend._read = lambda *a, **kw: pipelined.append(kw.get("sent") is not None) or read(*a, **kw)
    lease, reads, multis = _sent(counts, lambda: store.claim("old", owner="a", ttl=zk_harness.ttl))
    # The new-job multi fails as a whole; then step 1 and the claim's multi.
    assert (reads, multis, pipelined) == (1, 2, [False])
    assert lease.token == 1 and store.get("old").owner == "a"  # type: ignore[union-attr]
    # Having found a job existing, the next claim sends step 1 along with the new-job multi:
    # two round trips, not three.
    pipelined.clear()
    _, reads, multis = _sent(counts, lambda: store.claim("older", owner="a", ttl=zk_harness.ttl))
    assert (reads, multis, pipelined) == (1, 2, [True])
    with pytest.raises(tenure.AlreadyClaimed):
        store.claim("old", owner="b", ttl=zk_harness.ttl)


def test_whether_a_lease_expired_is_judged_on_a_fresh_read_of_the_leaders_clock(
        zk_harness: ZooKeeperHarness, store: tenure.Store) -> None:
    a = store.claim("j", owner="a", ttl=zk_harness.short_ttl)
    zk_harness.expire(store, a)
    store.submit("x")
    store.claim("x", owner="c", ttl=zk_harness.ttl)  # found existing: the next claim pipelines
    counts = _counted(store)
    b, reads, multis = _sent(counts, lambda: store.claim("j", owner="b", ttl=zk_harness.ttl))
    # The read sent with the new-job multi has no stamp of its own; a leased record is read again.
    assert (reads, multis, b.token) == (2, 2, a.token + 1)


def test_a_record_written_by_someone_else_sends_the_holder_through_the_check(
        zk_harness: ZooKeeperHarness, store: tenure.Store) -> None:
    lease = store.claim("j", owner="a", ttl=zk_harness.ttl)
    store.force_expire("j", actor="op")  # the record's version moves on: the shortcut must fail
    counts = _counted(store)
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


def test_no_shortcut_once_the_holders_deadline_has_passed(zk_harness: ZooKeeperHarness, store: tenure.Store) -> None:
    lease = store.claim("j", owner="a", ttl=zk_harness.ttl)
    counts = _counted(store)
    late = dataclasses.replace(lease, deadline=time.monotonic() - 0.001)  # as if paused past it
    _, reads, _ = _sent(counts, lambda: store.renew(late))
    assert reads == 1  # the store's clock decides (here: still live, so renewed)


def test_no_shortcut_with_a_stale_stamp_or_an_injected_clock(zk_harness: ZooKeeperHarness,
                                                             store: tenure.Store) -> None:
    lease = store.claim("j", owner="a", ttl=zk_harness.ttl)
    counts = _counted(store)
    time.sleep(1.1)  # real time: the bound on the leader's clock serves one second (_FRESH)
    lease, reads, _ = _sent(counts, lambda: store.renew(lease))
    assert reads == 1
    with zk_harness.connect(clock=tenure.ManualClock()) as manual:  # deadlines not on our clock
        counts = _counted(manual)
        held = manual.claim("m", owner="a", ttl=zk_harness.ttl)
        _, reads, _ = _sent(counts, lambda: manual.renew(held))
        assert reads == 1


def test_a_job_znode_deleted_and_submitted_again_is_not_overwritten_by_the_old_holder(
        zk_harness: ZooKeeperHarness, store: tenure.Store) -> None:
    """The re-created znode starts at the version the holder knows, and nobody claimed it."""
    a = store.claim("j", owner="a", ttl=zk_harness.ttl)  # job znode at version 0, token 1
    backend: Any = store.backend
    backend.client.delete(backend.layout.job("j"))  # an operator deletes it by hand
    with zk_harness.connect(store.url) as other:
        other.submit("j")  # pending again, at version 0
        counts = _counted(store)
        with pytest.raises(tenure.StaleLease):
            store.renew(a)
        assert counts["reads"] >= 1  # the one-round-trip multi was refused; the read judged it
        status = other.get("j")
        assert status is not None and status.state is tenure.JobState.PENDING and status.owner is None
        b = other.claim("j", owner="b", ttl=zk_harness.ttl)
        assert b.token > a.token
