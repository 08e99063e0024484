"""summary() and page() from the indexes on etcd and ZooKeeper agree with a listing of every
job, also while other clients keep changing the jobs (issue 15)."""

from __future__ import annotations

import base64
import contextlib
import itertools
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import tenure
from tenure import JobState
from tenure.core.backend import Backend
from tests.harness import Harness

ORDERS = ("expiry", "job")
STATE_SETS: list[frozenset[JobState] | None] = [
    None, frozenset({JobState.LEASED}), frozenset({JobState.EXPIRED}), frozenset({JobState.PENDING}),
    frozenset({JobState.COMPLETED}), frozenset({JobState.LEASED, JobState.EXPIRED}),
    frozenset({JobState.PENDING, JobState.LEASED}), frozenset({JobState.PENDING, JobState.COMPLETED}),
]


@pytest.fixture(params=["etcd", "zk"])
def indexed(request: pytest.FixtureRequest) -> Harness:
    harness: Harness = request.getfixturevalue(f"{request.param}_harness")
    return harness


@pytest.fixture
def store(indexed: Harness) -> Iterator[tenure.Store]:
    with indexed.connect() as s:
        assert s.backend.characteristics.counts_from_indexes
        yield s


def _listed(store: tenure.Store, now: float, soon: float) -> tenure.Summary:
    """The summary a listing of every job gives (the default every backend inherits)."""
    return Backend.summary(store.backend, now, soon)


def _seed(indexed: Harness, store: tenure.Store) -> None:
    """Every way a job gets where it is: ids that sort differently from their encodings."""
    ids = ["b", "B", "a/b", "zz", "é", "日本", "a b", "A", "-x", "_y", "0", "~", "p1", "p2", "p3"]
    store.submit_many(ids)
    short = store.claim("b", owner="Short", ttl=indexed.short_ttl)  # left to run out
    store.claim("B", owner="alice", ttl=indexed.ttl * 20)
    store.claim("a/b", owner="bob", ttl=indexed.ttl * 10)
    store.claim("new-1", owner="bob", ttl=indexed.ttl * 10)  # claimed without a submit
    store.complete(store.claim("zz", owner="carol", ttl=indexed.ttl), b"done")
    store.complete(store.claim("é", owner="carol", ttl=indexed.ttl))
    store.submit("é")  # a second run: pending again
    store.release(store.claim("日本", owner="dave", ttl=indexed.ttl))  # pending again
    store.claim("a b", owner="erin", ttl=indexed.ttl * 10)
    store.force_expire("a b", actor="ops")  # expired by an operator
    store.complete(store.claim("A", owner="frank", ttl=indexed.ttl))
    indexed.expire(store, short)


def test_summary_and_every_page_agree_with_a_listing(indexed: Harness, store: tenure.Store) -> None:
    _seed(indexed, store)
    now = store.now()
    for soon in (0.0, indexed.ttl * 15, 1e6):
        assert store.backend.summary(now, soon) == _listed(store, now, soon)
    counted = store.summary()
    assert (counted.pending, counted.leased, counted.expired, counted.completed) == (9, 3, 2, 2)
    for states, order in itertools.product(STATE_SETS, ORDERS):
        for offset, limit in ((0, 50), (0, 3), (2, 4), (14, 5), (40, 5)):
            args: tuple[Any, ...] = (now, states, None, None, order, offset, limit)
            got, want = store.backend.page(*args), Backend.page(store.backend, *args)
            assert (got.total, got.jobs) == (want.total, want.jobs), (states, order, offset, limit)
    for job, owner in (("B", None), ("a", None), (None, "BOB"), ("new", "bob"), (None, "nobody")):
        for states in (None, frozenset({JobState.LEASED, JobState.EXPIRED}), frozenset({JobState.PENDING})):
            for order in ORDERS:
                args = (now, states, job, owner, order, 0, 50)
                got, want = store.backend.page(*args), Backend.page(store.backend, *args)
                assert (got.total, got.jobs) == (want.total, want.jobs), (states, job, owner, order)


def test_pages_by_id_see_jobs_created_since_the_last_page(store: tenure.Store) -> None:
    store.submit_many([f"j{i:02d}" for i in range(10)])
    assert [j.job_id for j in store.page(order="job", limit=3).jobs] == ["j00", "j01", "j02"]
    store.submit("j000")  # between j00 and j01: the ids read before must not be reused
    store.claim("a-first", owner="w", ttl=30.0)
    first = store.page(order="job", limit=3)
    assert [j.job_id for j in first.jobs] == ["a-first", "j00", "j000"] and first.total == 12


def test_counts_stay_exact_under_concurrent_writers(indexed: Harness, store: tenure.Store) -> None:
    """Writers keep moving jobs between pending, leased and expired, never completing one,
    while summaries are read: a summary whose counts were not read at one moment (one etcd
    revision, one ZooKeeper read-only multi) finds a job in neither place (counted as
    completed) or in both. Once the writers stop, the counts equal a listing's."""
    jobs = [f"job-{i:03d}" for i in range(120)]
    store.submit_many(jobs)
    stop = threading.Event()
    errors: list[BaseException] = []
    changes = [0, 0, 0]

    def writer(n: int) -> None:
        rnd = random.Random(n)
        try:
            with indexed.connect(store.url) as mine:
                while not stop.is_set():
                    lease = mine.claim_next(owner=f"w{n}", ttl=indexed.ttl)
                    if lease is None:
                        continue
                    roll = rnd.random()
                    if roll < 0.7:
                        mine.release(lease)
                    elif roll < 0.85:
                        mine.force_expire(lease.job_id, token=lease.token)  # claim_next takes it first
                    changes[n] += 1  # else: left held
        except BaseException as exc:  # reported by the test below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    summaries = []
    # Until enough has happened to catch a torn read: counted, not timed, so a busy machine only
    # takes longer (the cap only ends a run that makes no progress at all).
    cap = time.monotonic() + 120.0
    try:
        while (len(summaries) <= 20 or sum(changes) <= 100) and time.monotonic() < cap and not errors:
            summaries.append(store.summary())
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors
    assert len(summaries) > 20 and sum(changes) > 100, (len(summaries), changes)
    wrong = [s for s in summaries if s.completed != 0 or s.total != len(jobs)]
    assert not wrong, wrong[:3]
    store.submit("spare")  # the writers may have left every job held: a completion to count too
    store.complete(store.claim("spare", owner="last", ttl=indexed.ttl))
    now = store.now()
    assert store.backend.summary(now, 30.0) == _listed(store, now, 30.0)


def test_a_store_without_the_zookeeper_index_counts_by_listing(zk_harness: Harness) -> None:
    """A store written before the index (jobs/ without pending/) is never half-indexed: its
    summary and pages come from a listing, and still count every job."""
    url = zk_harness.url()
    with zk_harness.connect(url) as old:
        old.submit_many(["a", "b", "c"])
        old.complete(old.claim("a", owner="w", ttl=zk_harness.ttl))
        client, layout = old.backend.client, old.backend.layout  # type: ignore[attr-defined]
        for entry in client.get_children(layout.leased):
            client.delete(f"{layout.leased}/{entry}")
        client.delete(layout.pending, recursive=True)  # as a store of the version before the index
    with zk_harness.connect(url) as store:
        assert not store.backend.index.enabled  # type: ignore[attr-defined]
        s = store.summary()
        assert (s.pending, s.completed, s.total) == (2, 1, 3)
        assert [j.job_id for j in store.page(order="job", offset=1, limit=5).jobs] == ["b", "c"]


@pytest.mark.parametrize("value", [
    b'{"tenure":1,"job":"p","state":"pending","owner":null,"token":"7","ttl":null,'
    b'"submitted_at":1.0,"claimed_at":null,"expires_at":null,"runs":1}',  # a token that is text
    b'{"tenure":1,"job":"q","state":"pending","owner":null,"token":0,"ttl":null,'
    b'"submitted_at":1.0,"claimed_at":null,"expires_at":null,"runs":1}',  # another job's record
    b'{"tenure":1,"job":"p","state":"pending","owner":null,"token":0,"ttl":null,'
    b'"submitted_at":Infinity,"claimed_at":null,"expires_at":null,"runs":1}',  # not a finite time
    b"[" * 100_000,  # nested deeper than Python recurses: corrupt, not a crashed listing
])
def test_etcd_listing_reads_a_damaged_pending_record_as_corrupt(etcd_harness: Any, value: bytes) -> None:
    """The listing's fast way for pending jobs checks what the general way checks."""
    with etcd_harness.connect() as store:
        store.submit_many(["o", "p"])
        etcd_harness.cluster.nodes[0].put(store.backend.keys.job("p"), value)
        listed = {j.job_id: j.state for j in store.jobs()}
        assert listed == {"o": JobState.PENDING, "p": JobState.CORRUPT}


def test_etcd_listing_is_whole_whatever_the_cached_names(etcd_harness: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The listing cuts its pages at job names cached from an earlier read; a stale cut only
    changes the pages' sizes: every job is still listed once, in key order."""
    from tenure.backends.etcd import listing as etcd_listing

    monkeypatch.setattr(etcd_listing, "PAGE", 3)
    with etcd_harness.connect() as store:
        store.submit_many([f"j{i:02d}" for i in range(10)])
        assert sorted(j.job_id for j in store.jobs()) == [f"j{i:02d}" for i in range(10)]
        store.submit_many(["a", "zz", "j055"])  # after the names were cached: counted, read again
        assert sorted(j.job_id for j in store.jobs()) == sorted([f"j{i:02d}" for i in range(10)] + ["a", "zz", "j055"])
        # A job key deleted by hand and another job added: the count is the same, the cached
        # names are not, and the cuts made from them still cover every key.
        node = etcd_harness.cluster.nodes[0]
        node.api("/v3/kv/deleterange", {"key": base64.b64encode(store.backend.keys.job("j03")).decode()})
        store.submit("mm")
        listed = [j.job_id for j in store.jobs()]
        keys = [store.backend.keys.job(j) for j in listed]
        assert sorted(listed) == sorted([f"j{i:02d}" for i in range(10) if i != 3] + ["a", "zz", "j055", "mm"])
        assert keys == sorted(keys) and len(set(listed)) == len(listed)


def _etcd_index(etcd_harness: Any, store: tenure.Store) -> tuple[set[bytes], set[bytes]]:
    node, keys = etcd_harness.cluster.nodes[0], store.backend.keys
    return set(node.keys(keys.section("queue"))), set(node.keys(keys.section("held")))


def _raw(node: Any, key: bytes) -> Any:
    """A key as etcd's JSON gateway shows it, as the KeyValue tenure reads (None if absent)."""
    from tenure.backends.etcd.client import KV

    found = node.api("/v3/kv/range", {"key": base64.b64encode(key).decode()}).get("kvs", [])
    return KV(key=key, value=base64.b64decode(found[0]["value"])) if found else None


def _etcd_index_wanted(etcd_harness: Any, store: tenure.Store) -> tuple[set[bytes], set[bytes]]:
    """The index keys this version writes with each job, from the jobs' own keys."""
    from tenure.backends.etcd import layout as etcd_layout

    node, keys = etcd_harness.cluster.nodes[0], store.backend.keys
    queue, held = set(), set()
    for job in store.jobs():
        job_kv, end_kv = _raw(node, keys.job(job.job_id)), _raw(node, keys.end(job.job_id))
        if job.state is JobState.PENDING:
            value = None if job_kv is None else etcd_layout.read_job(job_kv, job.job_id)
            queue.add(etcd_layout.index_key(keys, job.job_id, value, end_kv))
        elif job.state in (JobState.LEASED, JobState.EXPIRED):
            held.add(keys.held(job.job_id))
    return queue, held


def test_etcd_store_without_indexes_is_upgraded_beside_a_writer(etcd_harness: Any) -> None:
    """A store written before the queue/ and held/ indexes (simulated: its index keys deleted)
    counts its jobs as completed; build_indexes() adds the keys this version would have
    written, while another client claims and releases jobs, and afterwards the counts equal
    a listing's, claim_next finds the jobs and a second run adds nothing."""
    with etcd_harness.connect() as store:
        jobs = [f"old-{i:03d}" for i in range(150)]
        store.submit_many(jobs)
        for job_id in jobs[:20]:
            store.claim(job_id, owner="w", ttl=etcd_harness.ttl * 20)
        store.force_expire(jobs[0])
        store.release(store.claim(jobs[30], owner="w", ttl=etcd_harness.ttl))
        store.complete(store.claim(jobs[31], owner="w", ttl=etcd_harness.ttl))
        node, keys = etcd_harness.cluster.nodes[0], store.backend.keys
        for section in ("queue", "held"):
            start = keys.section(section)
            node.api("/v3/kv/deleterange", {"key": base64.b64encode(start).decode(),
                                            "range_end": base64.b64encode(start[:-1] + b"0").decode()})
        assert store.summary().completed == 150  # what a store without the indexes shows

        stop, errors = threading.Event(), []

        def writer() -> None:
            rnd = random.Random(5)
            try:
                with etcd_harness.connect(store.url) as other:
                    while not stop.is_set():
                        job_id = rnd.choice(jobs[40:])
                        with contextlib.suppress(tenure.AlreadyClaimed):
                            other.release(other.claim(job_id, owner="x", ttl=etcd_harness.ttl))
            except BaseException as exc:  # reported below
                errors.append(exc)

        thread = threading.Thread(target=writer)
        thread.start()
        try:
            added = store.backend.build_indexes()
        finally:
            stop.set()
            thread.join()
        assert not errors, errors
        assert 100 < added <= 150
        assert _etcd_index(etcd_harness, store) == _etcd_index_wanted(etcd_harness, store)
        now = store.now()
        assert store.backend.summary(now, 30.0) == _listed(store, now, 30.0)
        assert store.summary().completed == 1
        assert store.backend.build_indexes() == 0
        lease = store.claim_next(owner="new", ttl=etcd_harness.ttl)
        assert lease is not None and lease.job_id == jobs[0]  # the expired lease first


def test_zookeeper_counts_leases_beyond_one_request(zk_harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """More leases than one counting multi carries: the rest are read after it, and counted."""
    from tenure.backends.zookeeper import query as zookeeper_query

    monkeypatch.setattr(zookeeper_query, "TOGETHER", 1)
    with zk_harness.connect() as store:
        _seed(zk_harness, store)
        now = store.now()
        assert store.backend.summary(now, 1e6) == _listed(store, now, 1e6)
        assert (store.summary().leased, store.summary().expired) == (3, 2)


def test_etcd_pages_by_id_read_only_the_job_keys_created_since(etcd_harness: Any,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the job names are cached, a page by id after new submissions asks etcd only for the
    keys created since (the whole job/ range is not sent again) and shows every job; when the
    new keys do not account for the new count (a key deleted by hand), every name is read."""
    with etcd_harness.connect() as store:
        ids = [f"j{i:03d}" for i in range(50)]
        store.submit_many(ids)
        assert [j.job_id for j in store.page(order="job", limit=3).jobs] == ids[:3]
        backend: Any = store.backend
        job_span = backend.keys.span("job")
        whole_reads = []
        reading = backend._conn.range

        def counted(*args: Any, **kwargs: Any) -> Any:
            if args[:2] == job_span:
                whole_reads.append(args)
            return reading(*args, **kwargs)

        monkeypatch.setattr(backend._conn, "range", counted)
        store.submit_many(["a", "j0105", "zz"])
        ids = sorted([*ids, "a", "j0105", "zz"])
        page = store.page(order="job", limit=100)
        assert ([j.job_id for j in page.jobs], page.total) == (ids, 53)
        assert whole_reads == []

        node = etcd_harness.cluster.nodes[0]
        node.api("/v3/kv/deleterange", {"key": base64.b64encode(backend.keys.job("j003")).decode()})
        store.submit_many(["b1", "b2"])
        ids = sorted([*(i for i in ids if i != "j003"), "b1", "b2"])
        page = store.page(order="job", limit=100)
        assert ([j.job_id for j in page.jobs], page.total) == (ids, 54)
        assert len(whole_reads) == 1


@pytest.mark.parametrize("span", [10.0, 0.1])  # a scheduled bucket that straddles now; one wholly due
def test_zookeeper_counts_and_pages_know_scheduled_and_parked_jobs(zk_harness: Harness, span: float,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28's states from the index: scheduled jobs (due or not, in the same bucket or
    not), parked ones (by fail, and by a last lease that ran out) and a live lease on its last
    attempt, counted and paged as a listing of every job judges them."""
    from tenure.backends.zookeeper import layout as zl

    monkeypatch.setattr(zl, "BUCKET_SPAN", span)
    with zk_harness.connect() as store:
        _seed(zk_harness, store)
        ttl = zk_harness.ttl
        store.submit("later", delay=3600.0)
        store.submit("due", delay=0.2)
        # With span 10: in due's bucket, which then straddles now; due only after the pages
        # below, which a listing judges at its own later time (never back to scheduled).
        store.submit("not-yet", delay=9.0)
        store.fail(store.claim("p1", owner="gina", ttl=ttl), "try later", retry_in=3600.0)
        store.submit("cap", max_attempts=1)
        store.fail(store.claim("cap", owner="gina", ttl=ttl), "poison")  # parked
        store.submit("spent", max_attempts=1)
        spent = store.claim("spent", owner="gina", ttl=zk_harness.short_ttl)
        store.submit("final", max_attempts=1)
        store.claim("final", owner="hank", ttl=ttl * 10)  # a live lease on its last attempt
        zk_harness.expire(store, spent)  # parked by its last lease running out
        time.sleep(0.3)  # the leader's clock (the store's) passes "due"'s delay
        now = store.now()
        counted = store.summary()
        assert (counted.pending, counted.scheduled, counted.parked, counted.leased, counted.expired,
                counted.completed) == (9, 3, 2, 4, 2, 2)
        for soon in (0.0, 1e6):
            assert store.backend.summary(now, soon) == _listed(store, now, soon)
        life = [frozenset({JobState.SCHEDULED}), frozenset({JobState.PARKED}),
                frozenset({JobState.PENDING, JobState.SCHEDULED}), frozenset({JobState.PARKED, JobState.EXPIRED}),
                frozenset({JobState.PENDING, JobState.COMPLETED, JobState.SCHEDULED, JobState.PARKED})]
        for states, order in itertools.product(STATE_SETS + life, ORDERS):
            for offset, limit in ((0, 50), (0, 3), (2, 4)):
                args: tuple[Any, ...] = (now, states, None, None, order, offset, limit)
                got, want = store.backend.page(*args), Backend.page(store.backend, *args)
                assert (got.total, got.jobs) == (want.total, want.jobs), (states, order, offset, limit)
