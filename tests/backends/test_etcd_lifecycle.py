"""The job life cycle (issue 28) in etcd's keys: the claimable index (a scheduled job's
``sched/`` key at its claimable_at, a parked job in no queue, the ``last/`` index of jobs on
their last attempt), delays timed by etcd leases (a delayed job's ``delay/`` key), counts and
pages from the indexes, and records written before the life cycle."""

from __future__ import annotations

import base64
import itertools
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

import tenure
from tenure import JobState
from tenure.core.backend import Backend
from tests.servers.etcd import EtcdHarness


@pytest.fixture
def clock() -> tenure.ManualClock:
    return tenure.ManualClock()


@pytest.fixture
def store(etcd_harness: EtcdHarness, clock: tenure.ManualClock) -> Iterator[tenure.Store]:
    """A store on a fresh prefix whose clock only moves when a test moves it (etcd's leases
    still run in real time)."""
    with etcd_harness.connect(clock=clock) as s:
        yield s


def _keys(etcd_harness: EtcdHarness, store: tenure.Store, section: str) -> list[bytes]:
    """The names of a section's keys (after ``<prefix>/<section>/``), in key order."""
    start = store.backend.keys.section(section)  # type: ignore[attr-defined]
    return [key[len(start):] for key in etcd_harness.cluster.nodes[0].keys(start)]


def _ids(etcd_harness: EtcdHarness, store: tenure.Store, section: str) -> list[str]:
    keys, names = store.backend.keys, _keys(etcd_harness, store, section)  # type: ignore[attr-defined]
    if section in ("queue", "sched"):
        return [keys.queued_job_id(keys.section(section) + name, section) for name in names]
    return sorted(keys.job_id(keys.section(section) + name, section) for name in names)


def _value(etcd_harness: EtcdHarness, key: bytes) -> dict[str, Any]:
    out = etcd_harness.cluster.nodes[0].api("/v3/kv/range", {"key": base64.b64encode(key).decode()})
    loaded: dict[str, Any] = json.loads(base64.b64decode(out["kvs"][0]["value"]))
    return loaded


def _queued_at(etcd_harness: EtcdHarness, store: tenure.Store, job_id: str, section: str = "queue") -> float:
    """The time in the job's ``queue/`` (or ``sched/``) key."""
    keys = store.backend.keys  # type: ignore[attr-defined]
    [name] = [n for n in _keys(etcd_harness, store, section)
              if keys.queued_job_id(keys.section(section) + n, section) == job_id]
    return int(name[:20]) / 1e6


def _end_delay(etcd_harness: EtcdHarness, store: tenure.Store, job_id: str) -> None:
    """End the etcd lease of the job's delay now (revoked), as etcd ends it when it runs out."""
    node = etcd_harness.cluster.nodes[0]
    key = store.backend.keys.delay(job_id)  # type: ignore[attr-defined]
    [kv] = node.api("/v3/kv/range", {"key": base64.b64encode(key).decode()})["kvs"]
    node.api("/v3/lease/revoke", {"ID": kv["lease"]})


def _requests(store: tenure.Store) -> list[str]:
    """The requests the store's connection sends from now on, by name (reads and Txns)."""
    conn: Any = store.backend._conn  # type: ignore[attr-defined]  # the test watches the wire
    sent: list[str] = []

    def counting(name: str) -> Any:
        real = getattr(conn, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            sent.append(name)
            return real(*args, **kwargs)

        return counted

    for name in ("txn", "range"):
        setattr(conn, name, counting(name))
    return sent


def test_a_scheduled_job_is_not_a_candidate_before_its_time(
        etcd_harness: EtcdHarness, store: tenure.Store, clock: tenure.ManualClock) -> None:
    ttl = etcd_harness.ttl
    store.submit("later", delay=60.0)
    store.submit("ready")  # submitted after, queued before: claimable now
    claimable_at = store.get("later").claimable_at  # type: ignore[union-attr]
    assert claimable_at is not None
    assert _queued_at(etcd_harness, store, "later", "sched") == pytest.approx(claimable_at, abs=1e-6)
    assert _ids(etcd_harness, store, "queue") == ["ready"] and _ids(etcd_harness, store, "sched") == ["later"]
    first = store.claim_next(owner="w", ttl=ttl)
    assert first is not None and first.job_id == "ready"
    assert store.claim_next(owner="w", ttl=ttl) is None  # (the queue's cursor finds it empty: reads below)
    sent = _requests(store)
    assert store.claim_next(owner="w", ttl=ttl) is None
    assert sent == ["txn"]  # the indexes only: the scheduled job's keys were not read
    clock.advance(30.0)
    store.submit("also-ready")  # below the scheduled key, after claim_next's last read
    second = store.claim_next(owner="w", ttl=ttl)
    assert second is not None and second.job_id == "also-ready"
    assert store.claim_next(owner="w", ttl=ttl) is None
    clock.advance(30.0)  # due by the clock, but its delay is etcd's lease, 60 s of etcd's time
    assert _ids(etcd_harness, store, "delay") == ["later"]
    assert store.claim_next(owner="w", ttl=ttl) is None
    with pytest.raises(tenure.JobScheduled):
        store.claim("later", owner="w", ttl=ttl)
    assert store.get("later").state is JobState.SCHEDULED  # type: ignore[union-attr]
    _end_delay(etcd_harness, store, "later")  # as etcd does when the lease runs out
    third = store.claim_next(owner="w", ttl=ttl)
    assert third is not None and third.job_id == "later"
    assert _ids(etcd_harness, store, "queue") == [] and _ids(etcd_harness, store, "sched") == []


def test_a_failed_job_is_queued_at_its_retry_and_a_parked_one_only_in_the_last_index(
        etcd_harness: EtcdHarness, store: tenure.Store, clock: tenure.ManualClock) -> None:
    ttl = etcd_harness.ttl
    keys = store.backend.keys  # type: ignore[attr-defined]
    store.submit("j", max_attempts=2)
    first = store.claim("j", owner="w", ttl=ttl)
    assert _ids(etcd_harness, store, "last") == []  # one attempt left
    store.fail(first, "once", retry_in=1.0)
    assert _queued_at(etcd_harness, store, "j", "sched") == pytest.approx(store.now() + 1.0, abs=1e-6)
    assert _ids(etcd_harness, store, "queue") == [] and _ids(etcd_harness, store, "delay") == ["j"]
    assert _ids(etcd_harness, store, "held") == [] and _ids(etcd_harness, store, "lease") == []
    value = _value(etcd_harness, keys.job("j"))
    assert (value["state"], value["token"], value["attempts"], value["last_error"], value["timed"]) == (
        "pending", first.token, 1, "once", True)
    clock.advance(1.0)  # the clock says claimable; etcd's lease (2 s, its minimum TTL) decides
    started = time.monotonic()
    last = store.claim("j", owner="w", ttl=ttl, wait=30)  # waits for etcd to delete the delay key
    assert time.monotonic() - started <= store.characteristics.delay_late
    assert _ids(etcd_harness, store, "last") == ["j"] and _ids(etcd_harness, store, "held") == ["j"]
    assert _ids(etcd_harness, store, "sched") == [] and _ids(etcd_harness, store, "delay") == []
    store.fail(last, "twice")
    value = _value(etcd_harness, keys.job("j"))
    assert (value["state"], value["token"], value["attempts"], value["max_attempts"]) == (
        "parked", last.token, 2, 2)
    assert _ids(etcd_harness, store, "last") == ["j"]
    for section in ("queue", "sched", "held", "lease", "end"):
        assert _ids(etcd_harness, store, section) == [], section
    assert store.summary().parked == 1 and store.summary().completed == 0
    store.requeue("j", actor="ops")
    assert _ids(etcd_harness, store, "last") == [] and _ids(etcd_harness, store, "queue") == ["j"]
    assert _queued_at(etcd_harness, store, "j") == pytest.approx(store.now(), abs=1e-6)
    again = store.claim_next(owner="w", ttl=ttl)
    assert again is not None and again.attempt == 1 and again.token > last.token
    store.complete(again)
    assert [_ids(etcd_harness, store, s) for s in ("last", "queue", "sched", "held")] == [[], [], [], []]


def test_a_lease_that_ran_out_on_its_last_attempt_is_passed_over_by_the_index(
        etcd_harness: EtcdHarness) -> None:
    with etcd_harness.connect() as store:  # etcd ends the lease in real time
        store.submit("poison", max_attempts=1)
        lease = store.claim("poison", owner="w", ttl=etcd_harness.short_ttl)
        store.submit("next")
        etcd_harness.expire(store, lease)
        assert _ids(etcd_harness, store, "held") == ["poison"] and _ids(etcd_harness, store, "lease") == []
        assert store.get("poison").state is JobState.PARKED  # type: ignore[union-attr]
        counted = store.summary()
        assert (counted.parked, counted.expired, counted.pending) == (1, 0, 1)
        sent = _requests(store)
        taken = store.claim_next(owner="w", ttl=etcd_harness.ttl)
        assert taken is not None and taken.job_id == "next"
        assert sent == ["txn"] * 3  # the indexes, next's keys, the claim: poison's keys never read
        assert store.claim_next(owner="w", ttl=etcd_harness.ttl) is None


def test_a_claim_waits_out_a_last_attempt_etcd_ended_before_calling_it_parked(
        etcd_harness: EtcdHarness) -> None:
    """A lease etcd ended (early, perhaps: etcd-io/etcd#15247) is judged parked by a claim only
    once its TTL has passed since this process saw it gone, as an expiry is."""
    with etcd_harness.connect() as store:
        store.submit("j", max_attempts=1)
        lease = store.claim("j", owner="w", ttl=etcd_harness.ttl)
        node = etcd_harness.cluster.nodes[0]
        key = base64.b64encode(store.backend.keys.lease("j")).decode()  # type: ignore[attr-defined]
        etcd_lease = node.api("/v3/kv/range", {"key": key})["kvs"][0]["lease"]
        node.api("/v3/lease/revoke", {"ID": etcd_lease})  # etcd ends the lease at once
        with pytest.raises(tenure.NotYetClaimable):
            store.backend.claim("j", owner="b", ttl=etcd_harness.ttl)
        with pytest.raises(tenure.AlreadyClaimed):  # the holder may still act: not requeued
            store.requeue("j")
        store.complete(lease)  # within its deadline the holder restores and completes it
        assert store.get("j").state is JobState.COMPLETED  # type: ignore[union-attr]


def _put(etcd_harness: EtcdHarness, key: bytes, value: dict[str, Any] | bytes) -> None:
    raw = value if isinstance(value, bytes) else json.dumps(value, separators=(",", ":")).encode()
    etcd_harness.cluster.nodes[0].put(key, raw)


def test_records_written_before_the_life_cycle_read_as_a_first_attempt(
        etcd_harness: EtcdHarness, store: tenure.Store) -> None:
    """The values the version before issue 28 wrote: no attempts, no limit, claimable now."""
    ttl, keys, now = etcd_harness.ttl, store.backend.keys, store.now()  # type: ignore[attr-defined]
    old = {"tenure": 1, "state": "pending", "owner": None, "token": 0, "ttl": None, "submitted_at": now,
           "claimed_at": None, "expires_at": None, "runs": 1}
    _put(etcd_harness, keys.job("old"), {**old, "job": "old"})
    _put(etcd_harness, keys.queue("old", now), b"")
    # A released one: the claim's leased value and its outcome key, queued when released.
    _put(etcd_harness, keys.job("given-back"), {**old, "job": "given-back", "state": "leased", "owner": "w",
                                                "ttl": ttl, "claimed_at": now, "expires_at": now + ttl})
    token = store.get("given-back").token  # type: ignore[union-attr]
    ahead = now + 1.0  # the releasing writer's clock was ahead of ours: pending all the same
    _put(etcd_harness, keys.end("given-back"), {"tenure": 1, "how": "released", "token": token, "at": ahead,
                                                "result": None})
    _put(etcd_harness, keys.queue("given-back", ahead), b"")
    for job_id in ("old", "given-back"):
        job = store.get(job_id)
        assert job is not None and job.state is JobState.PENDING, job_id
        assert (job.attempts, job.max_attempts, job.last_error, job.claimable_at) == (0, None, None, None)
    assert [j.attempts for j in store.jobs()] == [0, 0]
    assert store.summary().pending == 2
    first, second = store.claim("old", owner="w", ttl=ttl), store.claim("given-back", owner="w", ttl=ttl)
    assert (first.attempt, second.attempt) == (1, 1) and second.token > token
    assert _ids(etcd_harness, store, "queue") == []
    store.fail(second, "now with a life cycle", retry_in=0)
    assert _value(etcd_harness, keys.job("given-back"))["attempts"] == 1
    assert store.get("given-back").attempts == 1  # type: ignore[union-attr]
    store.release(first)
    assert store.get("old").attempts == 0  # type: ignore[union-attr]


def test_a_scheduled_job_written_before_delays_were_etcd_leases_is_judged_by_its_claimable_at(
        etcd_harness: EtcdHarness, store: tenure.Store, clock: tenure.ManualClock) -> None:
    """A value without ``timed`` (written before this version) has no delay key: its claimable_at
    decides, by the claimer's clock, as it did then."""
    ttl, keys, now = etcd_harness.ttl, store.backend.keys, store.now()  # type: ignore[attr-defined]
    _put(etcd_harness, keys.job("old"), {"tenure": 1, "job": "old", "state": "pending", "owner": None, "token": 0,
                                         "ttl": None, "submitted_at": now, "claimed_at": None, "expires_at": None,
                                         "runs": 1, "claimable_at": now + 60.0})
    _put(etcd_harness, keys.scheduled("old", now + 60.0), b"")
    with pytest.raises(tenure.JobScheduled):
        store.claim("old", owner="w", ttl=ttl)
    assert store.claim_next(owner="w", ttl=ttl) is None
    clock.advance(60.0)
    lease = store.claim_next(owner="w", ttl=ttl)
    assert lease is not None and lease.job_id == "old"


STATE_SETS: list[frozenset[JobState] | None] = [
    None, frozenset({JobState.PARKED}), frozenset({JobState.SCHEDULED}), frozenset({JobState.PENDING}),
    frozenset({JobState.EXPIRED, JobState.PARKED}), frozenset({JobState.PENDING, JobState.COMPLETED}),
    frozenset({JobState.SCHEDULED, JobState.PARKED, JobState.LEASED}), frozenset({JobState.COMPLETED}),
]


def test_counts_and_pages_of_scheduled_and_parked_jobs_agree_with_a_listing(etcd_harness: EtcdHarness) -> None:
    ttl = etcd_harness.ttl
    with etcd_harness.connect() as store:
        store.submit_many(["p1", "p2", "done"])
        store.submit_many(["s1", "s2"], delay=3600.0)
        store.submit("failed-last", max_attempts=1)
        store.fail(store.claim("failed-last", owner="a", ttl=ttl), "poison")
        store.fail(store.claim("retrying", owner="a", ttl=ttl), "again", retry_in=3600.0)
        store.fail(store.claim("retry-now", owner="a", ttl=ttl), retry_in=0)
        store.complete(store.claim("done", owner="a", ttl=ttl))
        store.claim("held", owner="b", ttl=ttl * 10)
        short = store.claim("ran-out", owner="c", ttl=etcd_harness.short_ttl)
        with etcd_harness.connect(_url(store), max_attempts=1) as limited:  # one attempt by default
            limited.claim("held-last", owner="b", ttl=ttl * 10)
            limited.submit("ran-out-last")
            ran_out_last = limited.claim("ran-out-last", owner="c", ttl=etcd_harness.short_ttl)
        etcd_harness.expire(store, short)
        etcd_harness.expire(store, ran_out_last)
        now = store.now()
        counted = store.summary()
        assert store.backend.summary(now, 0.0) == Backend.summary(store.backend, now, 0.0)
        assert (counted.pending, counted.scheduled, counted.parked, counted.leased, counted.expired,
                counted.completed) == (3, 3, 2, 2, 1, 1)
        for states, order in itertools.product(STATE_SETS, ("expiry", "job")):
            for offset, limit in ((0, 50), (0, 2), (1, 3), (12, 5)):
                args: tuple[Any, ...] = (now, states, None, None, order, offset, limit)
                got, want = store.backend.page(*args), Backend.page(store.backend, *args)
                assert (got.total, got.jobs) == (want.total, want.jobs), (states, order, offset, limit)


def _url(store: tenure.Store) -> str:
    backend: Any = store.backend
    hosts = ",".join(f"{h}:{p}" for h, p in backend.hosts)
    return f"etcd://{hosts}{backend.keys.prefix}"


def test_a_fail_is_one_transaction_from_the_process_that_claimed(etcd_harness: EtcdHarness,
                                                                 store: tenure.Store) -> None:
    """A fail needs the job's attempts and limit, which the lease does not carry: the claim's
    own process knows them (its guess is checked by the Txn), another reads them first."""
    ttl = etcd_harness.ttl
    store.submit("mine", max_attempts=1)
    lease = store.claim("mine", owner="w", ttl=ttl)
    sent = _requests(store)
    store.fail(lease, "poison")
    assert sent == ["txn"]
    assert store.get("mine").state is JobState.PARKED  # type: ignore[union-attr]
    passed = store.claim("passed", owner="w", ttl=ttl)
    with etcd_harness.connect(_url(store)) as other:
        sent = _requests(other)
        other.fail(passed, "from elsewhere", retry_in=0)
        assert sent.count("txn") == 2  # the job's keys, then the commit (and a new connection's retention lease)
    job = store.get("passed")
    assert job is not None and job.state is JobState.PENDING and job.attempts == 1
    assert job.last_error == "from elsewhere"
