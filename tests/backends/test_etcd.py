"""The etcd backend beyond the conformance suite: options, faults, corrupt keys, leases, credentials."""

from __future__ import annotations

import base64
import itertools
import json
import logging
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tenure
from devservers.etcd import EtcdCluster, make_certificates, start_or_fail
from devservers.ports import free_port
from tenure.backends.etcd import claimable
from tenure.backends.etcd.transaction import KEYS_READ, Read, reads
from tests.faults.workload import EARLY_END_LOGGER
from tests.servers.etcd import EtcdHarness


@pytest.fixture
def store(etcd_harness: EtcdHarness) -> Iterator[tenure.Store]:
    """A store on a fresh prefix of the session's etcd (this module's, not every backend's)."""
    with etcd_harness.connect() as s:
        yield s


# -- URLs and options -----------------------------------------------------------------------
@pytest.mark.parametrize(("url", "problem"), [
    ("etcd://h:99999/p", "port"),
    ("etcd://bad host/p", "bad host"),
    ("etcd://h:2379/p?timeout=0", "timeout"),
    ("etcd://h:2379/p?timeout=abc", "timeout"),
    ("etcd://h:2379/p?retention=1", "retention"),
    ("etcd://h:2379/p?colour=red", "unknown option"),
    ("etcd://h:2379/p?timeout=1&timeout=2", "twice"),
    ("etcd://alice@h:2379/p", "user and password"),
    ("etcd://h:2379/p?cert_cert=/etc/hostname", "cert_key"),
    ("etcd://h:2379/p?ca_cert=/no/such/ca.pem", "ca_cert"),
    ("etcd://h:2379/p\x01x", "control character"),
])
def test_bad_urls_and_options_name_the_problem(url: str, problem: str) -> None:
    with pytest.raises(tenure.InvalidArgument, match=problem):
        tenure.connect(url)


def test_keyword_arguments_override_the_query(etcd_harness: EtcdHarness) -> None:
    with pytest.raises(tenure.InvalidArgument, match="timeout"):
        etcd_harness.connect(etcd_harness.url() + "?timeout=5", timeout=-1)


def test_unreachable_endpoint_fails_promptly() -> None:
    start = time.monotonic()
    with pytest.raises(tenure.BackendUnavailable, match=r"unavailable|did not answer"):
        tenure.connect(f"etcd://127.0.0.1:{free_port()}/p?timeout=1")
    assert time.monotonic() - start < 1 + 4  # the configured timeout, plus slack for a busy machine


# -- the protocol on etcd's terms -----------------------------------------------------------
def test_tokens_are_revisions_ordered_across_jobs(etcd_harness: EtcdHarness, store: tenure.Store) -> None:
    a = store.claim("a", owner="w", ttl=etcd_harness.ttl)
    b = store.claim("b", owner="w", ttl=etcd_harness.ttl)
    assert b.token > a.token
    assert store.characteristics.tokens_ordered_across_jobs
    assert store.health()["revision"] >= b.token


def test_health_and_a_closed_store(etcd_harness: EtcdHarness) -> None:
    store = etcd_harness.connect()
    health = store.health()
    assert health["leader"] == "n0" and health["members"][0]["name"] == "n0"
    assert health["revision"] > 0 and health["version"].startswith("3.")
    store.close()
    store.close()  # idempotent
    with pytest.raises(tenure.BackendUnavailable, match="closed"):
        store.get("j")


def test_ttl_below_etcd_minimum_is_refused_with_the_reason(store: tenure.Store) -> None:
    with pytest.raises(tenure.InvalidArgument, match="minimum of 2s on etcd"):
        store.claim("j", owner="a", ttl=1.5)
    assert list(store.jobs()) == []


def test_round_trips_per_operation(etcd_harness: EtcdHarness, store: tenure.Store) -> None:
    """Claim two, renew and complete one each: counted as requests the caller waits for."""
    conn = store.backend._conn
    waited: list[str] = []
    for name in ("txn", "range", "grant", "grant_started", "keepalive_started"):
        method = getattr(conn, name)

        def counted(*args: Any, _m: Any = method, _n: str = name, **kwargs: Any) -> Any:
            if not _n.endswith("_started"):  # sent alongside another request, not waited for alone
                waited.append(_n)
            return _m(*args, **kwargs)

        setattr(conn, name, counted)
    store.submit("warm")  # fetches the shared retention lease once per process
    waited.clear()
    lease = store.claim("j", owner="a", ttl=etcd_harness.ttl)
    claim, waited[:] = list(waited), []
    lease = store.renew(lease)
    renew, waited[:] = list(waited), []
    store.complete(lease)
    assert (len(claim), len(renew), len(waited)) == (2, 1, 1), (claim, renew, waited)


def test_renewal_from_another_connection_or_with_a_new_ttl_moves_the_etcd_lease(
        etcd_harness: EtcdHarness, store: tenure.Store) -> None:
    node = etcd_harness.cluster.nodes[0]
    key = base64.b64encode(store.backend.keys.lease("j")).decode()  # type: ignore[attr-defined]

    def etcd_lease() -> tuple[int, int]:
        kv = node.api("/v3/kv/range", {"key": key})["kvs"][0]
        info = node.api("/v3/lease/timetolive", {"ID": int(kv["lease"])})
        return int(kv["lease"]), int(info.get("grantedTTL", 0))

    lease = store.claim("j", owner="a", ttl=etcd_harness.ttl)
    first = etcd_lease()
    with etcd_harness.connect(_url_of(store)) as other:
        lease = other.renew(lease)  # no etcd lease id cached there: a new etcd lease
    second = etcd_lease()
    lease = store.renew(lease)  # the lease id cached here was revoked by the other connection
    assert etcd_lease()[1] == 5  # attached to a live etcd lease (a revoked one reads as 0)
    lease = store.renew(lease, ttl=9.5)  # etcd cannot change a lease's TTL: a new one again
    third = etcd_lease()
    assert len({first[0], second[0], third[0]}) == 3 and third[1] == 10
    store.complete(lease)
    assert store.rejections() == []


class _JumpyClock:
    """An hour ahead, and a second later at every reading: expiry estimates all look past."""

    def __init__(self) -> None:
        self._now = time.time() + 3600

    def time(self) -> float:
        self._now += 1
        return self._now

    def monotonic(self) -> float:
        return time.monotonic()


def test_a_live_lease_key_is_never_claimed_over_whatever_the_clock_says(
        etcd_harness: EtcdHarness, store: tenure.Store) -> None:
    a = store.claim("j", owner="a", ttl=etcd_harness.ttl)
    with etcd_harness.connect(_url_of(store), clock=_JumpyClock()) as late:
        assert late.get("j").state is tenure.JobState.LEASED  # type: ignore[union-attr]
        with pytest.raises(tenure.AlreadyClaimed):
            late.claim("j", owner="b", ttl=etcd_harness.ttl)
        assert late.claim_next(owner="b", ttl=etcd_harness.ttl) is None
    store.complete(a)  # etcd still had a's lease, so a is still the holder


def _indexes(etcd_harness: EtcdHarness, store: tenure.Store) -> tuple[list[str], list[str]]:
    """Job ids in the queue index (in key order) and in the held index."""
    keys = store.backend.keys  # type: ignore[attr-defined]
    node = etcd_harness.cluster.nodes[0]
    queued = [keys.queued_job_id(k) for k in node.keys(keys.section("queue"))]
    held = sorted(keys.job_id(k, "held") for k in node.keys(keys.section("held")))
    return queued, held


def test_the_indexes_follow_every_change_in_the_same_transaction(
        etcd_harness: EtcdHarness, store: tenure.Store) -> None:
    ttl = etcd_harness.ttl
    store.submit_many(["a", "b", "c"])
    assert _indexes(etcd_harness, store) == (["a", "b", "c"], [])
    a = store.claim("a", owner="w", ttl=ttl)
    b = store.claim("b", owner="w", ttl=ttl)
    assert _indexes(etcd_harness, store) == (["c"], ["a", "b"])
    store.release(a)  # back in the queue, behind c: it became pending again later
    store.complete(b)
    assert _indexes(etcd_harness, store) == (["c", "a"], [])
    store.submit("b")  # a new run of a completed job
    d = store.claim("d", owner="w", ttl=ttl)  # a job claimed without a submit first
    store.force_expire("d")  # still held: claimable as an expired lease, not as pending
    assert _indexes(etcd_harness, store) == (["c", "a", "b"], ["d"])
    x = store.claim_next(owner="x", ttl=ttl)  # expired leases first; an operator's, at once
    assert x is not None and (x.job_id, x.token > d.token) == ("d", True)
    with pytest.raises(tenure.StaleLease):
        store.renew(d)
    assert _indexes(etcd_harness, store) == (["c", "a", "b"], ["d"])


def test_claim_next_reads_the_indexes_not_every_job(etcd_harness: EtcdHarness, store: tenure.Store,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG", logger="tenure.etcd")
    store.submit_many(f"old-{i:02d}" for i in range(40))  # more than one queue page
    for i in range(3):
        store.submit(f"new-{i}")
    store.complete(store.claim("done", owner="w", ttl=etcd_harness.ttl))
    conn = store.backend._conn  # type: ignore[attr-defined]
    ranges: list[Any] = []
    original = conn.range
    conn.range = lambda *a, **kw: ranges.append(a) or original(*a, **kw)
    taken = []
    while (lease := store.claim_next(owner="w", ttl=etcd_harness.ttl)) is not None:
        # Oldest first, give or take the few places claimers start apart (_SPREAD).
        remaining = [f"old-{i:02d}" for i in range(40)] + [f"new-{i}" for i in range(3)]
        remaining = [j for j in remaining if j not in taken]
        queue = _indexes(etcd_harness, store)[0]
        assert lease.job_id in remaining[:4], (lease.job_id, taken, queue[:8], caplog.messages[-5:])
        taken.append(lease.job_id)
        store.complete(lease)
    jobs = store.backend.keys.section("job")  # type: ignore[attr-defined]
    assert len(taken) == 43 and not [r for r in ranges if r[0].startswith(jobs)]  # the index only


def test_claim_next_retries_a_candidate_claimed_between_its_read_and_the_txn(
        etcd_harness: EtcdHarness, store: tenure.Store) -> None:
    """The candidate's keys are read, then another writer claims that job before the claim's
    Txn: the Txn's compares fail (a conflict, nothing written) and the core runs claim_next
    again from a fresh index read, which takes the other job."""
    ttl = etcd_harness.ttl
    store.submit_many(["a", "b"])
    backend: Any = store.backend
    conn, real, jobs = backend._conn, backend._conn.txn, backend.keys.section("job")
    taken: list[tenure.Lease] = []
    with etcd_harness.connect(_url_of(store)) as other:
        def txn(compares: Any, success: Any, failure: Any, **kwargs: Any) -> Any:
            res = real(compares, success, failure, **kwargs)
            key = success[0]["request_range"]["key"] if success and "request_range" in success[0] else b""
            if not compares and not taken and key.startswith(jobs) and len(success) % KEYS_READ == 0:
                # the candidates' keys, the one claim_next takes first
                taken.append(other.claim(backend.keys.job_id(key, "job"), owner="other", ttl=ttl))
            return res

        conn.txn = txn
        lease = store.claim_next(owner="w", ttl=ttl)
        conn.txn = real
        assert lease is not None and taken and lease.job_id != taken[0].job_id
        other.renew(taken[0])  # the other writer's claim stands
    assert [e.op for e in store.history(taken[0].job_id)] == [tenure.Op.SUBMIT, tenure.Op.CLAIM, tenure.Op.RENEW]
    assert [e.owner for e in store.history(lease.job_id)][-1] == "w"


@pytest.mark.parametrize("reused_for", [3600.0, 0.0])  # reused whatever the machine's pace; never
def test_claim_next_after_a_lost_race_reads_the_leases_again_only_if_older_than_a_moment(
        etcd_harness: EtcdHarness, store: tenure.Store, monkeypatch: pytest.MonkeyPatch, reused_for: float) -> None:
    """etcd walks every key of held/ and lease/ to answer a range of them, deleted ones until a
    compaction: an attempt of claim_next after a lost race takes the leases from the attempt
    before if they were read under ``claimable.LEASED_REUSED_FOR`` ago, and reads only the
    pending jobs again. Here the first attempt takes an expired lease, which another claimer
    takes first; the second passes it over on its keys (leased again) and takes a pending job.
    The window is set to an hour (or none), so the case does not turn on how fast the machine is."""
    monkeypatch.setattr(claimable, "LEASED_REUSED_FOR", reused_for)
    ttl = etcd_harness.ttl
    store.submit_many(["a", "b", "c"])
    store.claim("x", owner="gone", ttl=ttl)
    store.force_expire("x", actor="test")  # an expired lease: claim_next's first candidate
    backend: Any = store.backend
    conn, real = backend._conn, backend._conn.txn
    held, queue = backend.keys.span("held"), backend.keys.section("queue")
    indexes: list[bool] = []  # each read of the indexes: whether it read the leases
    raced: list[tenure.Lease] = []
    with etcd_harness.connect(_url_of(store)) as other:
        def txn(compares: Any, success: Any, failure: Any, **kwargs: Any) -> Any:
            spans = [(op["request_range"]["key"], op["request_range"].get("range_end"))
                     for op in success if "request_range" in op]
            if not compares and any(key.startswith(queue) and end for key, end in spans):
                indexes.append(held in spans)
            if compares and not raced:  # the first claim's commit: another claimer gets there first
                raced.append(other.claim("x", owner="other", ttl=ttl))
            return real(compares, success, failure, **kwargs)

        conn.txn = txn
        lease = store.claim_next(owner="w", ttl=ttl)
        conn.txn = real
    assert indexes == [True, reused_for == 0.0]
    assert lease is not None and lease.job_id in ("a", "b", "c")
    assert store.get("x").owner == "other"  # type: ignore[union-attr]


def test_claim_next_reads_the_keys_of_several_candidates_in_one_request(
        etcd_harness: EtcdHarness, store: tenure.Store) -> None:
    """Between claim_next's read of the indexes and its read of the candidates' keys, another
    writer claims the 5 oldest jobs (16 claimers after the same head do): claim_next reads
    ``claimable.AHEAD`` candidates' keys in one request and takes the oldest still claimable,
    not a request per candidate passed over."""
    ttl = etcd_harness.ttl
    store.submit_many(f"old-{i:02d}" for i in range(20))
    backend: Any = store.backend
    conn, real, held = backend._conn, backend._conn.txn, backend.keys.span("held")
    keys_reads: list[int] = []
    with etcd_harness.connect(_url_of(store)) as other:
        def txn(compares: Any, success: Any, failure: Any, **kwargs: Any) -> Any:
            res = real(compares, success, failure, **kwargs)
            spans = [(op["request_range"]["key"], op["request_range"].get("range_end"))
                     for op in success if "request_range" in op]
            if not compares and held in spans and not keys_reads:  # the indexes: the others claim now
                for i in range(5):
                    other.claim(f"old-{i:02d}", owner="other", ttl=ttl)
            elif not compares and spans and all(not end for _, end in spans):  # candidates' keys
                keys_reads.append(len(success) // KEYS_READ)
            return res

        conn.txn = txn
        lease = store.claim_next(owner="w", ttl=ttl)
        conn.txn = real
    assert lease is not None and lease.job_id == "old-05"
    assert keys_reads == [claimable.AHEAD]  # one request, however many were passed over


class _HourBehind:
    def time(self) -> float:
        return time.time() - 3600

    def monotonic(self) -> float:
        return time.monotonic()


def test_claim_next_finds_jobs_queued_below_its_floor(etcd_harness: EtcdHarness, store: tenure.Store) -> None:
    """claim_next reads the queue from the oldest key it saw; a submitter whose clock is behind
    queues below that, and is found once nothing is left above it."""
    ttl = etcd_harness.ttl
    store.submit("a")
    store.submit("b")
    first = store.claim_next(owner="w", ttl=ttl)
    assert first is not None  # the floor is now a's key
    store.complete(first)
    with etcd_harness.connect(_url_of(store), clock=_HourBehind()) as behind:
        behind.submit("late")  # queued an hour before the floor
    taken = [first.job_id]
    while (lease := store.claim_next(owner="w", ttl=ttl)) is not None:
        taken.append(lease.job_id)
        store.complete(lease)
    assert sorted(taken[:2]) == ["a", "b"] and taken[2:] == ["late"]


def test_submit_many_queues_jobs_in_the_order_given(etcd_harness: EtcdHarness, store: tenure.Store) -> None:
    # Names whose keys sort otherwise ("old-04" encodes below "old-03"): only the time orders them.
    names = [f"old-{i:02d}" for i in range(60)]
    section = store.backend.keys.section("queue")  # type: ignore[attr-defined]
    node = etcd_harness.cluster.nodes[0]
    for _ in range(3):
        store.submit_many(names)
        assert _indexes(etcd_harness, store)[0] == names
        times = [int(key[len(section):len(section) + 20]) for key in node.keys(section)]
        assert all(a < b for a, b in itertools.pairwise(times)), "two jobs queued at one microsecond"
        for lease in [store.claim(name, owner="w", ttl=etcd_harness.ttl) for name in names]:
            store.complete(lease)


def test_submit_many_keeps_existing_jobs_as_they_are(etcd_harness: EtcdHarness, store: tenure.Store) -> None:
    held = store.claim("b", owner="w", ttl=etcd_harness.ttl)
    store.submit_many(["a", "b", "c", "a"])
    states = {s.job_id: (s.state, s.token) for s in store.jobs()}
    assert states == {"a": (tenure.JobState.PENDING, 0), "b": (tenure.JobState.LEASED, held.token),
                      "c": (tenure.JobState.PENDING, 0)}
    assert _indexes(etcd_harness, store) == (["a", "c"], ["b"])
    with pytest.raises(tenure.InvalidArgument):
        store.submit_many(["d", "bad\x00id"])
    assert store.get("d") is None  # validated before anything is written


def _revoke_early(etcd_harness: EtcdHarness, store: tenure.Store, job_id: str) -> None:
    """End a live claim's etcd lease now, as etcd-io/etcd#15247 lets a stale leader do."""
    node = etcd_harness.cluster.nodes[0]
    key = base64.b64encode(store.backend.keys.lease(job_id)).decode()  # type: ignore[attr-defined]
    lease_id = int(node.api("/v3/kv/range", {"key": key})["kvs"][0]["lease"])
    node.api("/v3/lease/revoke", {"ID": lease_id})


@pytest.mark.parametrize("renewed_ttl", [None, 4.0])
def test_a_lease_etcd_ends_early_is_claimed_only_after_its_holder_stopped(
        etcd_harness: EtcdHarness, store: tenure.Store, renewed_ttl: float | None) -> None:
    """etcd (3.5.16 too) can revoke a renewed lease early; a claimer waits the holder's TTL out."""
    a = store.claim("j", owner="a", ttl=etcd_harness.short_ttl)
    if renewed_ttl is not None:
        a = store.renew(a, ttl=renewed_ttl)  # a longer TTL, kept only in the renewal's history
    _revoke_early(etcd_harness, store, "j")
    with etcd_harness.connect(_url_of(store)) as other:
        assert other.get("j").state is tenure.JobState.EXPIRED  # type: ignore[union-attr]
        with pytest.raises(tenure.NotYetClaimable) as waited:
            other.backend.claim("j", "b", etcd_harness.ttl)  # the backend alone: no waiting
        assert a.ttl - 0.5 < waited.value.retry_after <= a.ttl
        assert other.claim_next(owner="b", ttl=etcd_harness.ttl) is None
        assert time.monotonic() < a.deadline  # a may still act: nobody may have claimed yet
        b = other.claim("j", owner="b", ttl=etcd_harness.ttl)  # Store.claim waits it out
        assert time.monotonic() > a.deadline and b.token > a.token
        with pytest.raises(tenure.StaleLease):
            store.complete(a)
        other.complete(b)


def test_the_holder_restores_a_lease_etcd_ended_early_while_its_deadline_runs(
        etcd_harness: EtcdHarness, store: tenure.Store, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, EARLY_END_LOGGER)  # each restore is logged: the fault runs count them
    a = store.claim("j", owner="a", ttl=etcd_harness.short_ttl)
    _revoke_early(etcd_harness, store, "j")
    with etcd_harness.connect(_url_of(store)) as other:
        assert other.get("j").state is tenure.JobState.EXPIRED  # type: ignore[union-attr]  # seen gone
        a = store.renew(a)  # etcd owed it the TTL: restored, not refused
        assert other.get("j").owner == "a" and other.get("j").state is tenure.JobState.LEASED  # type: ignore[union-attr]
        for _ in range(5):  # renewing, until other's wait from its sighting has run out
            time.sleep(a.ttl / 4)  # real time: etcd's leases count it
            a = store.renew(a)
        _revoke_early(etcd_harness, store, "j")  # and early again
        with pytest.raises(tenure.NotYetClaimable):  # a revived lease is waited out afresh
            other.backend.claim("j", "b", etcd_harness.ttl)
        store.complete(a)  # within a's deadline: completed as if etcd had kept the lease
        assert other.get("j").state is tenure.JobState.COMPLETED  # type: ignore[union-attr]
    assert store.rejections() == []
    # Six renewals, restores among them: the claim keeps one renewal event, the latest.
    assert [e.op for e in store.history("j")] == [tenure.Op.CLAIM, tenure.Op.RENEW, tenure.Op.COMPLETE]
    restored = [r.getMessage() for r in caplog.records if r.name == EARLY_END_LOGGER]
    assert len(restored) == 2 and all("early; restoring it" in m for m in restored), restored


def test_a_claim_waits_for_the_incarnation_it_writes_over(etcd_harness: EtcdHarness, store: tenure.Store) -> None:
    """A claimer's read shows a lease ended long enough ago; before its write lands the holder
    revives the lease and etcd ends it early again: the claim must not land on that one."""
    ttl = etcd_harness.short_ttl
    a = store.claim("j", owner="a", ttl=ttl)
    _revoke_early(etcd_harness, store, "j")
    with etcd_harness.connect(_url_of(store)) as other:
        backend: Any = other.backend
        conn, real = backend._conn, backend._conn.txn
        assert other.get("j").state is tenure.JobState.EXPIRED  # type: ignore[union-attr]  # seen gone
        stale = real([], reads(backend.keys, "j"), [], retry=True)
        backend._leases.ended("j", Read("j", stale.ranges, 0).incarnation, 0).first_seen -= 100  # wait over
        a = store.renew(a)  # revived: a new incarnation, a fresh deadline
        _revoke_early(etcd_harness, store, "j")  # and ended early again

        def txn(compares: Any, success: Any, failure: Any, **kwargs: Any) -> Any:
            if not compares and not failure:  # the claim's read: it goes on from the read before
                conn.txn = real
                return stale
            return real(compares, success, failure, **kwargs)

        conn.txn = txn
        with pytest.raises(tenure.NotYetClaimable):
            backend.claim("j", "b", ttl)
        assert time.monotonic() < a.deadline
        assert store.get("j").owner == "a"  # type: ignore[union-attr]


def test_force_expire_of_a_lease_etcd_ended_makes_it_claimable_at_once(
        etcd_harness: EtcdHarness, store: tenure.Store) -> None:
    a = store.claim("j", owner="a", ttl=etcd_harness.short_ttl)
    _revoke_early(etcd_harness, store, "j")
    with etcd_harness.connect(_url_of(store)) as other:
        with pytest.raises(tenure.NotYetClaimable):
            other.backend.claim("j", "b", etcd_harness.ttl)
        other.force_expire("j", actor="operator")  # the operator's word: no wait
        b = other.backend.claim("j", "b", etcd_harness.ttl)
        assert b.token > a.token
    with pytest.raises(tenure.StaleLease):  # and no revival over an operator's decision
        store.renew(a)


def test_released_and_never_claimed_jobs_are_claimed_without_waiting(
        etcd_harness: EtcdHarness, store: tenure.Store) -> None:
    store.submit("p")
    store.release(store.claim("r", owner="a", ttl=etcd_harness.ttl))
    with etcd_harness.connect(_url_of(store)) as other:
        for job_id in ("p", "r"):
            other.complete(other.backend.claim(job_id, "b", etcd_harness.ttl))


def _url_of(store: tenure.Store) -> str:
    backend = store.backend
    hosts = ",".join(f"{h}:{p}" for h, p in backend.hosts)  # type: ignore[attr-defined]
    return f"etcd://{hosts}{backend.keys.prefix}"  # type: ignore[attr-defined]


def test_watch_follows_etcd_ending_a_lease(etcd_harness: EtcdHarness, store: tenure.Store) -> None:
    import threading

    stop = threading.Event()
    threading.Timer(30, stop.set).start()  # a broken watch ends the loop below instead of hanging
    changes = store.watch(stop, interval=0.05)
    lease = store.claim("w", owner="a", ttl=etcd_harness.short_ttl)
    states = []
    for change in changes:  # no write by anyone: etcd deletes the lease key, the watch sees it
        if change.job is not None:
            states.append(change.job.state)
            if change.job.state is tenure.JobState.EXPIRED:
                break
    stop.set()
    assert states[0] is tenure.JobState.LEASED and states[-1] is tenure.JobState.EXPIRED
    assert store.get("w").token == lease.token  # type: ignore[union-attr]


def test_job_ids_cannot_escape_the_prefix(etcd_harness: EtcdHarness, store: tenure.Store) -> None:
    prefix = store.backend.keys.root
    for job_id in ("../../escape", "/", "a/../../b", "\\x"):
        store.submit(job_id)
    node = etcd_harness.cluster.nodes[0]
    outside = [k for k in node.keys(b"/") if not k.startswith(prefix)]
    assert not [k for k in outside if b"escape" in k or k.endswith(b"/b")]
    assert sorted(j.job_id for j in store.jobs()) == sorted(("../../escape", "/", "a/../../b", "\\x"))


def test_audit_records_expire_with_a_shared_retention_lease(etcd_harness: EtcdHarness) -> None:
    with etcd_harness.connect(etcd_harness.url() + "?retention=60") as store:
        lease = store.claim("j", owner="a", ttl=etcd_harness.ttl)
        store.force_expire("j")
        with pytest.raises(tenure.StaleLease):
            store.complete(lease)
        node = etcd_harness.cluster.nodes[0]
        layout = store.backend.keys  # type: ignore[attr-defined]
        keys = node.keys(layout.section("rejection")) + node.keys(layout.section("history"))
        lease_id = store.backend._leases.retention_id()
        info = node.api("/v3/lease/timetolive", {"ID": lease_id, "keys": True})
        attached = {base64.b64decode(k) for k in info.get("keys", [])}
        assert keys and set(keys) <= attached  # etcd deletes them, no scan needed
        assert 50 <= int(info["TTL"]) <= 60


def test_a_retention_lease_revoked_behind_our_back_is_replaced(etcd_harness: EtcdHarness,
                                                                store: tenure.Store) -> None:
    store.submit("a")
    first = store.backend._leases.retention_id()  # type: ignore[attr-defined]
    etcd_harness.cluster.nodes[0].api("/v3/lease/revoke", {"ID": first})
    store.submit("b")  # its history record needed a retention lease that exists
    assert store.backend._leases.retention_id() != first  # type: ignore[attr-defined]
    assert [e.job_id for e in store.history()] == ["b"]  # the revoke took a's record with it


# -- records tenure did not write --------------------------------------------------------------
def test_foreign_and_corrupt_keys_are_listed_as_corrupt_and_never_overwritten(
        etcd_harness: EtcdHarness, store: tenure.Store) -> None:
    node = etcd_harness.cluster.nodes[0]
    keys = store.backend.keys
    store.submit("good")
    planted = {
        keys.section("job") + b"not*base64": b"{}",
        keys.job("schema"): json.dumps({"tenure": 1, "job": "schema", "state": "flying"}).encode(),
        keys.job("notjson"): b"\xff\xfe",
        keys.lease("orphan"): b'{"owner":"x"}',
    }
    for key, value in planted.items():
        node.put(key, value)
    listing = {j.key or j.job_id: j for j in store.jobs()}
    corrupt = [j for j in listing.values() if j.state is tenure.JobState.CORRUPT]
    assert len(corrupt) == 4 and all(j.problem for j in corrupt)
    assert store.get("good").state is tenure.JobState.PENDING
    assert store.get("notjson").problem == "the value is not JSON"  # type: ignore[union-attr]
    for job_id in ("schema", "notjson", "orphan"):
        assert store.get(job_id).state is tenure.JobState.CORRUPT
        for call in (lambda j=job_id: store.claim(j, owner="b", ttl=etcd_harness.ttl),
                     lambda j=job_id: store.submit(j)):
            with pytest.raises(tenure.CorruptRecord):
                call()
    first = store.claim_next(owner="b", ttl=etcd_harness.ttl)  # passes over the corrupt ones
    assert first is not None and first.job_id == "good"
    assert store.claim_next(owner="b", ttl=etcd_harness.ttl) is None
    for key, value in planted.items():
        got = node.api("/v3/kv/range", {"key": base64.b64encode(key).decode()})["kvs"][0]
        assert base64.b64decode(got["value"]) == value  # untouched


# -- faults ------------------------------------------------------------------------------------------
def test_a_frozen_server_gives_a_prompt_timeout(etcd_private: EtcdCluster) -> None:
    etcd_private.nodes[0].pause()  # SIGSTOP: connections are accepted, nothing answers
    try:
        start = time.monotonic()
        with pytest.raises(tenure.BackendUnavailable, match="did not answer within 1s"):
            tenure.connect(f"etcd://{etcd_private.endpoints}/frozen?timeout=1")
        assert time.monotonic() - start < 1 + 4
    finally:
        etcd_private.nodes[0].resume()


def test_a_write_whose_answer_is_lost_is_outcome_unknown_not_refused(etcd_private: EtcdCluster) -> None:
    with tenure.connect(f"etcd://{etcd_private.endpoints}/lost?timeout=1") as store:
        store.complete(store.claim("warm", owner="a", ttl=30))  # a pooled etcd lease: a claim is one Txn
        etcd_private.nodes[0].pause()  # the claim's Txn reaches the server's socket; no answer comes back
        try:
            with pytest.raises(tenure.OutcomeUnknown, match="may or may not have been applied"):
                store.claim("j", owner="a", ttl=30)
        finally:
            etcd_private.nodes[0].resume()
        # Whether the resumed server applied it depends on whether it read the request before
        # gRPC's cancellation of it: the job is either untouched or claimed by "a", nothing else.
        status = store.get("j")
        assert status is None or (status.state is tenure.JobState.LEASED and status.owner == "a"), status
        assert store.rejections() == []


# -- credentials -----------------------------------------------------------------------------------
def test_credentials(etcd_auth: EtcdCluster) -> None:
    base = f"etcd://{etcd_auth.endpoints}/auth?timeout=2"
    with tenure.connect(base, user="root", password="s3cret") as store:
        lease = store.claim("j", owner="a", ttl=5.0)
        time.sleep(2.5)  # real time: let etcd drop the idle auth token (1 s here, 5 min by default)
        store.complete(lease)  # logs in again by itself
        assert store.get("j").state is tenure.JobState.COMPLETED
    for kwargs in ({"user": "root", "password": "wrong"}, {"user": "nobody", "password": "x"}, {}):
        start = time.monotonic()
        with pytest.raises(tenure.AuthenticationFailed) as info:
            tenure.connect(base, **kwargs)
        assert time.monotonic() - start < 2 + 4
        assert "wrong" not in str(info.value) and "s3cret" not in str(info.value)
    store = tenure.connect(f"etcd://root:s3cret@{etcd_auth.endpoints}/auth")
    assert "s3cret" not in repr(store) and store.get("j") is not None
    store.close()


# -- TLS ---------------------------------------------------------------------------------------------
def test_tls_with_client_certificates(tmp_path: Path) -> None:
    if not shutil.which("openssl"):
        pytest.skip("openssl is needed to make test certificates")
    (tmp_path / "certs").mkdir()
    tls = make_certificates(tmp_path / "certs")
    cluster = start_or_fail(tmp_path / "etcd", 1, tls=tls)
    try:
        url = f"etcd://{cluster.endpoints}/tls?timeout=2"
        files = {"ca_cert": str(tls["ca"]), "cert_cert": str(tls["client_cert"]),
                 "cert_key": str(tls["client_key"])}
        with tenure.connect(url, **files) as store:
            store.complete(store.claim("j", owner="a", ttl=5.0))
            assert store.get("j").state is tenure.JobState.COMPLETED  # type: ignore[union-attr]
        with pytest.raises(tenure.BackendUnavailable):  # no client certificate: refused
            tenure.connect(url, ca_cert=str(tls["ca"]))
        with pytest.raises(tenure.BackendUnavailable):  # plaintext to a TLS port
            tenure.connect(url)
    finally:
        cluster.close()


def test_claims_reuse_the_etcd_leases_of_ended_claims(etcd_harness: EtcdHarness, store: tenure.Store) -> None:
    """No grant or revoke on the hot path; a stale pooled lease is kept alive alongside the claim."""
    node = etcd_harness.cluster.nodes[0]
    backend: Any = store.backend

    def etcd_lease(job_id: str) -> tuple[int, int]:
        key = base64.b64encode(backend.keys.lease(job_id)).decode()
        lease_id = int(node.api("/v3/kv/range", {"key": key})["kvs"][0]["lease"])
        return lease_id, int(node.api("/v3/lease/timetolive", {"ID": lease_id}).get("TTL", -1))

    sent: list[str] = []
    for name in ("txn", "range", "grant", "grant_started", "keepalive_started"):
        method = getattr(backend._conn, name)

        def counted(*args: Any, _m: Any = method, _n: str = name, **kwargs: Any) -> Any:
            sent.append(_n)
            return _m(*args, **kwargs)

        setattr(backend._conn, name, counted)
    store.complete(store.claim("a", owner="w", ttl=5.0))
    pooled = backend._leases._pool[5][-1]
    first = pooled.id
    before = time.monotonic()  # confirmed again now, so a slow machine cannot make it stale
    assert backend._conn.keepalive_started(first).result() == 6
    pooled.confirmed = before
    sent.clear()
    b = store.claim("b", owner="w", ttl=5.0)
    assert sent == ["txn"]  # a new job, a fresh pooled lease: one transaction
    assert etcd_lease("b")[0] == first and 5 <= etcd_lease("b")[1] <= 6  # the TTL plus 1 s of slack
    store.complete(b)
    pooled.confirmed -= 0.6  # not fresh any more: the claim must hear etcd confirm it
    sent.clear()
    c = store.claim("c", owner="w", ttl=5.0)
    assert sent == ["keepalive_started", "txn"] and etcd_lease("c")[0] == first
    store.complete(c)
    node.api("/v3/lease/revoke", {"ID": first})  # behind our back: the pooled lease is gone
    d = store.claim("d", owner="w", ttl=5.0)
    assert etcd_lease("d")[0] != first and d.token > c.token
    assert [e.op for e in store.history("d")] == [tenure.Op.CLAIM]
    assert store.rejections() == []


# -- etcd leases: revokes and renewals racing etcd -------------------------------------------------
def _etcd_leases(etcd_harness: EtcdHarness) -> set[int]:
    """Every lease etcd has, from its LeaseLeases call (through tenure's generated stubs)."""
    import grpc

    from tenure.backends.etcd.api import rpc_pb2, rpc_pb2_grpc

    with grpc.insecure_channel(etcd_harness.cluster.nodes[0].endpoint) as channel:
        answer = rpc_pb2_grpc.LeaseStub(channel).LeaseLeases(rpc_pb2.LeaseLeasesRequest(), timeout=5)
        return {status.ID for status in answer.leases}


def _etcd_lease_of(etcd_harness: EtcdHarness, store: tenure.Store, job_id: str) -> int:
    key = base64.b64encode(store.backend.keys.lease(job_id)).decode()  # type: ignore[attr-defined]
    return int(etcd_harness.cluster.nodes[0].api("/v3/kv/range", {"key": key})["kvs"][0]["lease"])


def test_revokes_reach_etcd(etcd_harness: EtcdHarness, store: tenure.Store) -> None:
    """Completions from a connection that did not make the claims revoke their etcd leases.

    Before the futures were kept, gRPC cancelled the revokes still on their way when their
    futures were collected or the channel closed: 2 of 50 leases lingered, every run.
    """
    leases = [store.claim(f"r{i}", owner="a", ttl=30.0) for i in range(50)]
    ids = {_etcd_lease_of(etcd_harness, store, lease.job_id) for lease in leases}
    assert len(ids) == 50 and ids <= _etcd_leases(etcd_harness)
    with etcd_harness.connect(_url_of(store)) as other:  # knows none of them: revokes each
        for lease in leases:
            other.complete(lease)
    # Closing waits for the revokes already sent; without them the leases would live 31 s.
    assert not ids & _etcd_leases(etcd_harness)
    expired = store.claim("x", owner="a", ttl=30.0)
    etcd_id = _etcd_lease_of(etcd_harness, store, "x")
    store.force_expire("x", token=expired.token)
    deadline = time.monotonic() + 3  # the revoke is sent without waiting: give it a moment
    while etcd_id in _etcd_leases(etcd_harness):
        assert time.monotonic() < deadline, "force_expire's revoke never reached etcd"
        time.sleep(0.05)


def test_a_renewal_etcd_applied_is_reported_applied(etcd_harness: EtcdHarness, store: tenure.Store) -> None:
    """etcd ends the etcd lease between the renewal's transaction and its keep-alive: the
    renewal applied, so it is accepted (not reported as a rejection naming the holder itself)."""
    node = etcd_harness.cluster.nodes[0]
    conn: Any = store.backend._conn  # type: ignore[attr-defined]
    lease = store.claim("k", owner="a", ttl=5.0)
    etcd_id = _etcd_lease_of(etcd_harness, store, "k")
    real = conn.keepalive_started

    class RevokedFirst:
        """A keep-alive that reaches etcd after the transaction, once the etcd lease is gone."""

        def __init__(self, lease_id: int) -> None:
            self.lease_id = lease_id

        def result(self) -> int:
            node.api("/v3/lease/revoke", {"ID": self.lease_id})
            left: int = real(self.lease_id).result()
            return left

        def cancel(self) -> None:
            pass

    conn.keepalive_started = RevokedFirst
    renewed = store.renew(lease)  # applied by etcd: accepted
    conn.keepalive_started = real
    assert etcd_id not in _etcd_leases(etcd_harness)
    assert store.rejections() == []
    assert [e.op for e in store.history("k")] == [tenure.Op.CLAIM, tenure.Op.RENEW]
    renewed = store.renew(renewed)  # within its deadline: back on a live etcd lease
    assert _etcd_lease_of(etcd_harness, store, "k") != etcd_id
    store.complete(renewed, result=b"done")
    assert store.get("k").state is tenure.JobState.COMPLETED  # type: ignore[union-attr]
    assert store.rejections() == []


def test_an_outraced_claim_keeps_its_pooled_etcd_lease(etcd_harness: EtcdHarness, store: tenure.Store,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A claim that lost every race wrote nothing with its pooled etcd lease: it goes back to
    the pool for the next claim (it used to be revoked)."""
    from tenure.core import contention

    monkeypatch.setattr(contention, "ATTEMPTS", 3)
    backend: Any = store.backend
    store.complete(store.claim("a", owner="w", ttl=5.0))
    pooled = backend._leases._pool[5][-1].id
    store.submit("b")
    node, conn, real = etcd_harness.cluster.nodes[0], backend._conn, backend._conn.txn

    def txn(compares: Any, success: Any, failure: Any, **kwargs: Any) -> Any:
        if compares and success:  # another writer changes the job just before each commit lands
            key = backend.keys.job("b")
            value = base64.b64decode(node.api("/v3/kv/range", {"key": base64.b64encode(key).decode()})
                                     ["kvs"][0]["value"])
            node.put(key, value)
        return real(compares, success, failure, **kwargs)

    conn.txn = txn
    with pytest.raises(tenure.Outraced):
        store.backend.claim("b", "w", 5.0)
    conn.txn = real
    assert pooled in _etcd_leases(etcd_harness) and backend._leases._pool[5][-1].id == pooled
    lease = store.claim("b", owner="w", ttl=5.0)
    assert _etcd_lease_of(etcd_harness, store, "b") == pooled
    store.complete(lease)


def test_an_etcd_out_of_space_says_so_and_what_to_do(tmp_path: Path) -> None:
    # A quota of 2 MiB, filled by another client: etcd raises its NOSPACE alarm and refuses writes.
    cluster = start_or_fail(tmp_path, 1, extra=("--quota-backend-bytes", str(2 << 20)))
    try:
        with tenure.connect(f"etcd://{cluster.endpoints}/full") as store:
            lease = store.claim("j", owner="a", ttl=30.0)
            with pytest.raises(OSError, match="429"):  # the gateway's answer to a write refused
                for n in range(100):
                    cluster.nodes[0].put(b"/filler/%d" % n, b"x" * 200_000)
            with pytest.raises(tenure.BackendUnavailable) as info:
                store.renew(lease)
            message = str(info.value)
            assert "is out of space (etcdserver: mvcc: database space exceeded)" in message
            assert "nothing was written" in message and "--auto-compaction-retention" in message
            assert "alarm disarm" in message and "--quota-backend-bytes" in message
            status = store.get("j")  # reads still work: the lease is as the claim left it
            assert status is not None and (status.expires_at, status.renewed_at) == (lease.expires_at, None)
            assert [e.op for e in store.history("j")] == [tenure.Op.CLAIM]
    finally:
        cluster.close()
