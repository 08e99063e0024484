"""The ZooKeeper index of claimable jobs: kept with the records, read by claim_next, never trusted."""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import threading
import time
from typing import Any

import pytest
from kazoo.protocol.serialization import Transaction

import tenure
from tenure.backends.zookeeper import layout as zl
from tenure.core import contention
from tenure.core.backend import Backend
from tenure.core.records import JobRecord, JobState
from tests.servers.zookeeper import ZooKeeperHarness


@pytest.fixture(autouse=True)
def _index_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests check the index's own order: claim_next starts at its first place."""
    monkeypatch.setattr(contention, "SPREAD", 1)


def _index(store: tenure.Store) -> tuple[dict[str, list[str]], set[str]]:
    """Pending entries by job (their ``<bucket>/<entry>``), and the jobs with a leased entry."""
    client, layout = store.backend.client, store.backend.layout  # type: ignore[attr-defined]
    pending: dict[str, list[str]] = {}
    for bucket in client.get_children(layout.pending):
        for name in client.get_children(f"{layout.pending}/{bucket}"):
            pending.setdefault(zl.entry_job(name), []).append(f"{bucket}/{name}")
    return pending, {zl.decode(n) for n in client.get_children(layout.leased)}


def _places(store: tenure.Store) -> dict[str, list[str]]:
    """Every index entry by job: its slot (``pending/<bucket>/<entry>``, ``scheduled/...``)
    or its directory (``leased``, ``last``, ``parked``)."""
    client, layout = store.backend.client, store.backend.layout  # type: ignore[attr-defined]
    found: dict[str, list[str]] = {}
    for kind in ("pending", "scheduled"):
        for bucket in client.get_children(f"{layout.root}/{kind}"):
            for name in client.get_children(f"{layout.root}/{kind}/{bucket}"):
                found.setdefault(zl.entry_job(name), []).append(f"{kind}/{bucket}/{name}")
    for kind in ("leased", "last", "parked"):
        for name in client.get_children(f"{layout.root}/{kind}"):
            found.setdefault(zl.decode(name), []).append(kind)
    return found


def _assert_consistent(store: tenure.Store) -> None:
    """Every pending record has exactly the entry it names (under ``scheduled/`` if it has a
    claimable_at), every leased one a leased entry (``last/`` on its last attempt), every
    parked one a parked entry, and nothing else is indexed."""
    client, layout = store.backend.client, store.backend.layout  # type: ignore[attr-defined]
    want: dict[str, list[str]] = {}
    for name in client.get_children(layout.jobs):
        job_id = zl.decode(name)
        data, _ = client.get(f"{layout.jobs}/{name}")
        rec = zl.load_record(data, "", job_id)
        if rec.state is tenure.JobState.PENDING:
            slot = zl.entry_slot(data)
            assert slot is not None and slot.startswith("scheduled/" if rec.claimable_at else "pending/"), slot
            want[job_id] = [slot]
        elif rec.state is tenure.JobState.LEASED:
            want[job_id] = ["last" if rec.out_of_attempts else "leased"]
        elif rec.state is tenure.JobState.PARKED:
            want[job_id] = ["parked"]
    assert _places(store) == want


def test_index_follows_every_state_change(zk_harness: ZooKeeperHarness) -> None:
    with zk_harness.connect() as store:
        ttl = zk_harness.ttl
        store.submit("a")
        store.submit("a")  # a no-op: no second entry
        store.submit_many(["b", "c"])
        _assert_consistent(store)
        assert set(_index(store)[0]) == {"a", "b", "c"}

        lease = store.claim("a", owner="w", ttl=ttl)
        _assert_consistent(store)
        assert _index(store) [1] == {"a"} and "a" not in _index(store)[0]
        lease = store.renew(lease)
        store.force_expire("a")
        _assert_consistent(store)
        assert _index(store)[1] == {"a"}  # expired, still leased: found through leased/
        again = store.claim("a", owner="x", ttl=ttl)  # expired -> leased: the entry stays
        _assert_consistent(store)
        store.complete(again, "done")
        _assert_consistent(store)
        assert _index(store) == ({"b": _index(store)[0]["b"], "c": _index(store)[0]["c"]}, set())

        store.submit("a")  # a new run: queued again, at the back
        _assert_consistent(store)
        b = store.claim("b", owner="w", ttl=ttl)
        store.release(b)
        _assert_consistent(store)
        store.claim("fresh", owner="w", ttl=ttl)  # claiming a job nobody submitted
        _assert_consistent(store)
        assert _index(store)[1] == {"fresh"}


def test_claim_next_takes_pending_jobs_oldest_first(zk_harness: ZooKeeperHarness) -> None:
    with zk_harness.connect() as store:
        for job_id in ("j3", "j1", "j2"):
            store.submit(job_id)
        store.submit_many(["k2", "k1"])
        got = [store.claim_next(owner="w", ttl=zk_harness.ttl) for _ in range(6)]
        assert [g.job_id if g else None for g in got] == ["j3", "j1", "j2", "k2", "k1", None]
        _assert_consistent(store)


def test_claim_next_takes_expired_leases_first(zk_harness: ZooKeeperHarness) -> None:
    with zk_harness.connect() as store:
        store.submit_many(["p1", "p2"])
        first = store.claim("gone", owner="dead", ttl=zk_harness.short_ttl)
        store.claim("alive", owner="busy", ttl=zk_harness.ttl)
        time.sleep(zk_harness.short_ttl + 0.2)
        got = store.claim_next(owner="w", ttl=zk_harness.ttl)
        assert got is not None and got.job_id == "gone" and got.token == first.token + 1
        assert [store.claim_next(owner="w", ttl=zk_harness.ttl).job_id for _ in range(2)] == ["p1", "p2"]  # type: ignore[union-attr]
        assert store.claim_next(owner="w", ttl=zk_harness.ttl) is None  # "alive" is held
        _assert_consistent(store)


def test_claim_next_reads_a_leased_record_again_once_its_bytes_change(zk_harness: ZooKeeperHarness) -> None:
    """claim_next keeps the leased jobs' records it decoded (``layout.KnownRecords``): a lease
    ended since (force_expire), or the job claimed again for a shorter time, is seen at once."""
    with zk_harness.connect() as store:
        store.submit("p1")
        store.claim("forced", owner="a", ttl=zk_harness.ttl)
        store.complete(store.claim("again", owner="a", ttl=zk_harness.ttl))
        store.submit("again")
        long = store.claim("again", owner="a", ttl=zk_harness.ttl)
        assert store.claim_next(owner="w", ttl=zk_harness.ttl).job_id == "p1"  # type: ignore[union-attr]
        assert store.claim_next(owner="w", ttl=zk_harness.ttl) is None  # both held: records now known
        store.force_expire("forced")
        got = store.claim_next(owner="w", ttl=zk_harness.ttl)
        assert got is not None and got.job_id == "forced"
        store.complete(long)
        store.submit("again")
        short = store.claim("again", owner="a", ttl=zk_harness.short_ttl)
        time.sleep(zk_harness.short_ttl + 0.2)  # the store's clock must pass the short lease's end
        got = store.claim_next(owner="w", ttl=zk_harness.ttl)
        assert got is not None and got.job_id == "again" and got.token == short.token + 1
        _assert_consistent(store)


def test_known_records_answer_only_for_the_bytes_they_were_read_from() -> None:
    layout = zl.Layout("/t")
    known = zl.KnownRecords()
    record = JobRecord(job_id="j", state=JobState.PENDING, submitted_at=1.0)
    later = dataclasses.replace(record, submitted_at=2.0)
    path, other = f"{layout.jobs}/{zl.encode('j')}", f"{layout.jobs}/{zl.encode('k')}"
    first, second = zl.dump_record(record, epoch=1), zl.dump_record(later, epoch=1)

    def read(*found: tuple[str, bytes, int]) -> list[JobRecord]:
        records = [rec for _, rec, _, _ in zl.readable(layout.jobs, list(found), known)]
        known.settle()  # as claim_next does after each read of the leased jobs
        return records

    [rec] = read((path, first, 0))
    assert rec == record
    assert read((path, first, 1))[0] is rec  # the same bytes: the record decoded before
    [changed] = read((path, second, 2))
    assert changed == later  # other bytes: decoded
    assert read((path, second, 3))[0] is changed
    assert read((other, zl.dump_record(dataclasses.replace(record, job_id="k"), epoch=1), 0))[0].job_id == "k"
    assert read((path, second, 4))[0] is not changed  # not read by the call before: forgotten
    assert read((path, b"{", 5)) == []  # corrupt: skipped, as readable does


def test_buckets_roll_over_and_empty_ones_are_removed(zk_harness: ZooKeeperHarness,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zl, "BUCKET_SIZE", 3)
    monkeypatch.setattr(zl, "BUCKET_SPAN", 0.0)
    with zk_harness.connect() as store:
        client, layout = store.backend.client, store.backend.layout  # type: ignore[attr-defined]
        ids = [f"job-{i:02d}" for i in range(10)]
        store.submit_many(ids[:7])
        for job_id in ids[7:]:
            store.submit(job_id)
        assert len(client.get_children(layout.pending)) >= 4
        _assert_consistent(store)
        got = []
        while (lease := store.claim_next(owner="w", ttl=zk_harness.ttl)) is not None:
            got.append(lease.job_id)
            store.complete(lease)
        assert got == ids
        assert client.get_children(layout.pending) == []
        _assert_consistent(store)


# -- an index that is wrong proposes, it never decides ----------------------------------------------
def test_stale_entries_are_never_claimed_and_are_tidied(zk_harness: ZooKeeperHarness) -> None:
    with zk_harness.connect() as store:
        client, layout = store.backend.client, store.backend.layout  # type: ignore[attr-defined]
        ttl = zk_harness.ttl
        held = store.claim("held", owner="a", ttl=ttl)
        done = store.claim("done", owner="a", ttl=ttl)
        store.complete(done)
        store.submit("queued")
        real = _index(store)[0]["queued"][0]
        bucket = real.split("/")[0]
        # Entries describing what the records do not say: a leased job, a completed one, a
        # pending job under a second, wrong entry, a job that does not exist.
        stale = [f"{layout.pending}/{bucket}/{zl.entry(j, 1.0)}" for j in ("held", "done", "queued", "ghost")]
        stale.append(layout.leased_entry("done"))
        for path in stale:
            client.create(path, b"")
        got = store.claim_next(owner="b", ttl=ttl)
        assert got is not None and got.job_id == "queued"  # the stale entries came first, in vain
        assert store.claim_next(owner="b", ttl=ttl) is None
        assert store.get("held").owner == "a" and store.get("held").token == held.token  # type: ignore[union-attr]
        assert store.get("done").state is tenure.JobState.COMPLETED  # type: ignore[union-attr]
        assert store.get("ghost") is None  # never created by a claim
        for path in stale:
            assert client.exists(path) is None, path
        _assert_consistent(store)


def test_missing_entries_cost_a_retry_never_a_failure(zk_harness: ZooKeeperHarness) -> None:
    with zk_harness.connect() as store:
        client, layout = store.backend.client, store.backend.layout  # type: ignore[attr-defined]
        ttl = zk_harness.ttl
        store.submit_many(["lost", "kept"])
        client.delete(layout.slot_path(_places(store)["lost"][0]))  # an operator's slip
        assert store.claim_next(owner="w", ttl=ttl).job_id == "kept"  # type: ignore[union-attr]
        assert store.claim_next(owner="w", ttl=ttl) is None  # unindexed: invisible to claim_next ...
        lease = store.claim("lost", owner="w", ttl=ttl)  # ... but claim(job_id) works
        client.delete(layout.leased_entry("lost"))
        store.complete(lease)  # its leased entry is gone too: the multi learns and goes on
        assert store.get("lost").state is tenure.JobState.COMPLETED  # type: ignore[union-attr]
        client.create(layout.leased_entry("new"), b"")  # left over by someone
        store.claim("new", owner="w", ttl=ttl)
        _assert_consistent(store)


def test_concurrent_claim_next_never_hands_a_job_out_twice(zk_harness: ZooKeeperHarness) -> None:
    with zk_harness.connect() as store:
        ids = [f"c{i:03d}" for i in range(60)]
        store.submit_many(ids)

        def drain(worker: int) -> list[str]:
            got = []
            while (lease := store.claim_next(owner=f"w{worker}", ttl=zk_harness.ttl)) is not None:
                got.append(lease.job_id)
            return got

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            results = list(pool.map(drain, range(4)))
        claimed = [j for r in results for j in r]
        assert sorted(claimed) == ids
        _assert_consistent(store)


# -- submit_many --------------------------------------------------------------------------------
def test_submit_many_batches_and_leaves_live_jobs_alone(zk_harness: ZooKeeperHarness) -> None:
    from tenure.backends.zookeeper import backend as zookeeper

    with zk_harness.connect() as store:
        held = store.claim("held", owner="a", ttl=zk_harness.ttl)
        done = store.claim("done", owner="a", ttl=zk_harness.ttl)
        store.complete(done, "r")
        client: Any = store.backend.client  # type: ignore[attr-defined]
        sent: list[Any] = []
        call = client._call  # every request kazoo sends goes through it

        def counting(request: Any, async_object: Any) -> Any:
            sent.append(request)
            return call(request, async_object)

        client._call = counting
        ids = [f"m{i:04d}" for i in range(2 * zookeeper.ZooKeeperBackend.SUBMIT_BATCH + 10)]
        store.submit_many([*ids, "held", "done", ids[0]])
        multis = [r for r in sent if isinstance(r, Transaction)]
        assert len(multis) == 3  # one multi per SUBMIT_BATCH jobs, not one per job
        listing = {j.job_id: j for j in store.jobs()}
        assert all(listing[j].state is tenure.JobState.PENDING for j in ids)
        assert listing["held"].state is tenure.JobState.LEASED and listing["held"].token == held.token
        assert listing["done"].state is tenure.JobState.PENDING and listing["done"].runs == 2
        assert len([e for e in store.history() if e.op is tenure.Op.SUBMIT]) == len(ids) + 1
        _assert_consistent(store)


def test_submit_many_with_a_bad_id_writes_nothing(zk_harness: ZooKeeperHarness) -> None:
    with zk_harness.connect() as store:
        client, layout = store.backend.client, store.backend.layout  # type: ignore[attr-defined]
        with pytest.raises(tenure.InvalidArgument):
            store.submit_many([f"ok{i}" for i in range(300)] + ["bad\x00id"])
        assert list(store.jobs()) == [] and client.get_children(layout.pending) == []
        assert store.history() == []


def test_submit_many_meets_a_corrupt_record_like_submit(zk_harness: ZooKeeperHarness) -> None:
    with zk_harness.connect() as store:
        store.submit("bad")
        zk_harness.corrupt(store, "bad")
        with pytest.raises(tenure.CorruptRecord):
            store.submit_many(["a", "bad", "b"])
        assert store.get("a").state is tenure.JobState.PENDING  # type: ignore[union-attr]
        assert store.get("b") is None


# -- stores made before the index ---------------------------------------------------------------
def test_a_store_without_the_index_is_used_by_scanning(zk_harness: ZooKeeperHarness) -> None:
    url = zk_harness.url()
    with zk_harness.connect(url) as store:
        client, layout = store.backend.client, store.backend.layout  # type: ignore[attr-defined]
        store.submit_many(["old-1", "old-2"])
        lease = store.claim("old-1", owner="w", ttl=zk_harness.ttl)
        # What the previous version left: no index directories, records without "queued".
        for path in layout.index_dirs:
            client.delete(path, recursive=True)
    with zk_harness.connect(url) as store:
        backend = store.backend
        assert backend.index.enabled is False  # type: ignore[attr-defined]
        store.submit("new")
        store.complete(lease)
        assert sorted(store.claim_next(owner="w", ttl=zk_harness.ttl).job_id for _ in range(2)) \
            == ["new", "old-2"]  # type: ignore[union-attr]
        assert store.claim_next(owner="w", ttl=zk_harness.ttl) is None
        assert backend.client.exists(backend.layout.pending) is None  # type: ignore[attr-defined]


# -- reading many znodes in one request -----------------------------------------------------------
def test_multiread_answers_as_get_does(zk_harness: ZooKeeperHarness) -> None:
    from tenure.backends.zookeeper.multiread import read_many

    with zk_harness.connect() as store:
        client, layout = store.backend.client, store.backend.layout  # type: ignore[attr-defined]
        base = f"{layout.root}/mr"
        client.create(base, b"")
        paths = [f"{base}/n{i:05d}" for i in range(2300)]
        for start in range(0, len(paths), 500):
            tx = client.transaction()
            for i, path in enumerate(paths[start:start + 500], start):
                tx.create(path, b"" if i % 7 == 0 else f"data {i} \xff".encode("latin-1") * (i % 5))
            assert all(isinstance(r, str) for r in tx.commit())
        client.set(paths[3], b"changed")
        client.delete(paths[10])
        asked = [*paths, f"{base}/missing"]
        expected = []
        for path in paths:
            if path != paths[10]:
                data, stat = client.get(path)
                expected.append((path, data, stat.version))
        assert list(read_many(client, asked, 10.0, batch=1000)) == expected
        assert list(read_many(client, [], 10.0)) == []


def test_submit_many_of_the_longest_job_ids_keeps_each_multi_within_the_servers_limit(
        zk_harness: ZooKeeperHarness) -> None:
    # 256 characters outside ASCII: about 10 KB a job in the multi, so SUBMIT_BATCH of them would
    # pass jute.maxbuffer (1 MB), and the server drops the connection instead of answering.
    from tenure.backends.zookeeper import backend as zookeeper

    ids = [f"{i:04d}" + "\U0001F600" * 252 for i in range(zookeeper.ZooKeeperBackend.SUBMIT_BATCH + 10)]
    with zk_harness.connect() as store:
        store.submit_many(ids)
        assert sorted(j.job_id for j in store.jobs()) == sorted(ids)
        _assert_consistent(store)


def test_a_store_made_before_the_index_gets_it_built_beside_a_writer(zk_harness: ZooKeeperHarness,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """build_indexes() gives a store without the index (its directories gone, its records naming
    no entry) the index this version keeps, while a client connected after the index directories
    exist claims, renews and releases; it refuses while a client that connected before them
    is still connected; afterwards claim_next takes the expired lease and then the pending jobs
    oldest first, the counts equal a listing's, and a second build changes nothing."""
    import json

    from tenure.backends.zookeeper import upgrade

    url, ttl = zk_harness.url(), zk_harness.ttl
    jobs = [f"old-{i:03d}" for i in range(120)]
    with zk_harness.connect(url) as old:
        old.submit_many(jobs[:60])
        old.submit_many(jobs[60:])
        for job_id in jobs[:10]:
            old.claim(job_id, owner="w", ttl=ttl * 20)
        old.claim(jobs[10], owner="gone", ttl=zk_harness.short_ttl)  # left to run out
        old.release(old.claim(jobs[20], owner="w", ttl=ttl))  # pending again, behind the others
        old.complete(old.claim(jobs[21], owner="w", ttl=ttl))
        client, layout = old.backend.client, old.backend.layout  # type: ignore[attr-defined]
        for path in layout.index_dirs:  # as a store of the version before the index
            client.delete(path, recursive=True)
        for job_id in jobs[60:]:  # their records as that version wrote them: naming no entry
            data, stat = client.get(layout.job(job_id))
            record = json.loads(data)
            if record.pop("queued", None) is not None:  # (and a later mtime, in this order)
                client.set(layout.job(job_id), json.dumps(record, separators=(",", ":")).encode(), stat.version)
    time.sleep(zk_harness.short_ttl + 0.2)  # jobs[10]'s lease runs out by the store's clock

    with zk_harness.connect(url) as store:
        backend: Any = store.backend
        assert not backend.index.enabled
        with zk_harness.connect(url), pytest.raises(tenure.BackendUnavailable, match="other client"):
            backend.build_indexes()
        assert backend.client.exists(backend.layout.pending) is None  # refused before writing anything

        writing, stop, errors = threading.Event(), threading.Event(), []
        rounds = threading.Semaphore(0)  # released as each round of the build reads the store
        # A round's reading of the store (``_plan``: records, then entries, in separate reads)
        # waits for the writer's job in hand: one that read a record after a release and its
        # entries before it would see a leased entry to delete, then the next job's, one a
        # round; a loaded machine ran the 20 rounds out so (a CI run at -n 4). The build's
        # writes still meet the writer's (their versions are what the build checks).
        quiet = threading.Lock()

        def writer() -> None:
            try:
                while backend.client.exists(backend.layout.pending) is None:
                    time.sleep(0.01)  # polling for the build to start: nothing to wait on
                with zk_harness.connect(url) as other:
                    assert other.backend.index.enabled  # type: ignore[attr-defined]
                    # A few passes, one per round of the build at most, not a flood: a build
                    # beside writers that never pause may rightly give up after its rounds
                    # ("run the build again"), and a loaded machine runs many rounds in the
                    # time of one pass; this one must finish.
                    for _ in range(5):
                        if stop.is_set():
                            break
                        for job_id in jobs[100:110]:
                            with quiet, contextlib.suppress(tenure.AlreadyClaimed):
                                other.release(other.renew(other.claim(job_id, owner="x", ttl=ttl)))
                        writing.set()
                        rounds.acquire(timeout=30)  # the build reads the store again first
            except BaseException as exc:  # reported below
                errors.append(exc)
                writing.set()

        planned = upgrade._plan

        def plan_once_the_writer_writes(*args: Any) -> Any:
            writing.wait(30)
            rounds.release()
            with quiet:
                return planned(*args)

        monkeypatch.setattr(upgrade, "_plan", plan_once_the_writer_writes)
        thread = threading.Thread(target=writer)
        thread.start()
        try:
            fixed = backend.build_indexes()
        finally:
            stop.set()
            thread.join()
        assert not errors, errors
        assert 100 <= fixed <= 119  # 108 pending and 11 leased, less those the writer indexed
        assert backend.index.enabled
        _assert_consistent(store)
        now = store.now()
        assert backend.summary(now, 30.0) == Backend.summary(backend, now, 30.0)
        assert backend.build_indexes() == 0

        got = []
        while (lease := store.claim_next(owner="new", ttl=ttl)) is not None:
            got.append(lease.job_id)
        assert got[0] == jobs[10]  # the expired lease first
        # Oldest first, by when each became pending (jobs of one multi by id); the writer's last.
        by_age = [j for j in jobs[11:60] if j not in jobs[20:22]] + [jobs[20]] + jobs[60:100] + jobs[110:]
        assert got[1:len(by_age) + 1] == by_age
        assert sorted(got[len(by_age) + 1:]) == jobs[100:110]
        _assert_consistent(store)


# -- the job life cycle (issue 28): a delayed or parked job is not a candidate ---------------------
@contextlib.contextmanager
def _records_read(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The job znodes claim_next's index reads read (their paths), while the block runs."""
    from tenure.backends.zookeeper import index

    read: list[str] = []
    reading = index.reading_many

    def counted(client: Any, paths: list[str]) -> Any:
        read.extend(paths)
        return reading(client, paths)

    monkeypatch.setattr(index, "reading_many", counted)
    yield read
    monkeypatch.setattr(index, "reading_many", reading)


def test_a_scheduled_job_is_not_proposed_before_its_time_while_a_later_ready_one_is(
        zk_harness: ZooKeeperHarness, monkeypatch: pytest.MonkeyPatch) -> None:
    delay = 1.0  # ZooKeeper's store time is its leader's clock: the test waits for it to pass
    with zk_harness.connect() as store:
        layout, ttl = store.backend.layout, zk_harness.ttl  # type: ignore[attr-defined]
        store.submit("later", delay=delay)
        store.submit("ready")
        failed = store.claim("retried", owner="w", ttl=ttl)
        store.fail(failed, "boom", retry_in=delay)
        _assert_consistent(store)
        places = _places(store)
        assert places["later"][0].startswith("scheduled/") and places["retried"][0].startswith("scheduled/")
        assert places["ready"][0].startswith("pending/")
        with _records_read(monkeypatch) as read:
            got = store.claim_next(owner="w", ttl=ttl)
            assert got is not None and got.job_id == "ready"
            assert store.claim_next(owner="w", ttl=ttl) is None
        assert layout.job("later") not in read and layout.job("retried") not in read  # not even proposed
        scheduled = store.get("later")
        assert scheduled is not None and scheduled.state is tenure.JobState.SCHEDULED
        assert scheduled.claimable_at is not None
        time.sleep(max(0.0, scheduled.claimable_at - store.now()) + 0.05)
        taken = [store.claim_next(owner="w", ttl=ttl) for _ in range(3)]
        assert sorted(t.job_id for t in taken if t is not None) == ["later", "retried"] and taken[2] is None
        assert store.get("retried").attempts == 2  # type: ignore[union-attr]
        _assert_consistent(store)


def test_a_scheduled_job_behind_many_buckets_is_found_in_time_order(
        zk_harness: ZooKeeperHarness, monkeypatch: pytest.MonkeyPatch) -> None:
    """Scheduled entries go into buckets that fit their time (several, with small buckets);
    once due they are merged with the pending queue by when they became claimable (to within
    BUCKET_SPAN, here short)."""
    monkeypatch.setattr(zl, "BUCKET_SIZE", 2)
    monkeypatch.setattr(zl, "BUCKET_SPAN", 0.1)
    with zk_harness.connect() as store:
        client, layout, ttl = store.backend.client, store.backend.layout, zk_harness.ttl  # type: ignore[attr-defined]
        store.submit("first")
        store.submit_many([f"s{i}" for i in range(5)], delay=0.3)
        assert len(client.get_children(layout.scheduled)) == 3  # two, two and one
        _assert_consistent(store)
        time.sleep(0.5)  # the store's clock passes the delay
        store.submit("last")
        got = []
        while (lease := store.claim_next(owner="w", ttl=ttl)) is not None:
            got.append(lease.job_id)
        assert got[0] == "first" and sorted(got[1:6]) == [f"s{i}" for i in range(5)] and got[6:] == ["last"]
        _assert_consistent(store)


def test_a_parked_job_is_not_indexed_for_claims(zk_harness: ZooKeeperHarness,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    with zk_harness.connect() as store:
        ttl, short = zk_harness.ttl, zk_harness.short_ttl
        store.submit("poison", max_attempts=1)
        store.fail(store.claim("poison", owner="w", ttl=ttl), "crashed")  # its last attempt: parked
        store.submit("oom", max_attempts=2)
        store.fail(store.claim("oom", owner="w", ttl=ttl), retry_in=0.0)
        last = store.claim("oom", owner="w", ttl=short)  # its last attempt, left to run out
        assert _places(store) == {"poison": ["parked"], "oom": ["last"]}
        _assert_consistent(store)
        zk_harness.expire(store, last)
        with _records_read(monkeypatch) as read:
            assert store.claim_next(owner="x", ttl=ttl) is None
        assert read == []  # neither proposed: no record read
        assert {j.job_id: j.state for j in store.jobs()} == {"poison": tenure.JobState.PARKED,
                                                             "oom": tenure.JobState.PARKED}
        summary = store.summary()
        assert (summary.parked, summary.leased, summary.expired, summary.pending) == (2, 0, 0, 0)
        with pytest.raises(tenure.JobParked):
            store.claim("poison", owner="x", ttl=ttl)
        store.requeue("poison")
        store.requeue("oom")
        assert {p[0].split("/")[0] for p in _places(store).values()} == {"pending"}
        assert sorted(store.claim_next(owner="x", ttl=ttl).job_id for _ in range(2)) == ["oom", "poison"]  # type: ignore[union-attr]
        _assert_consistent(store)
        assert store.get("oom").attempts == 1  # type: ignore[union-attr]


def test_a_record_written_before_the_life_cycle_reads_with_its_defaults(zk_harness: ZooKeeperHarness) -> None:
    """Records as the version before issue 28 wrote them (no life cycle fields): attempts 0,
    no limit, claimable now; they are then counted as any other."""
    import json

    with zk_harness.connect() as store:
        client, layout, ttl = store.backend.client, store.backend.layout, zk_harness.ttl  # type: ignore[attr-defined]
        store.submit("old-pending")
        lease = store.claim("old-leased", owner="w", ttl=ttl)
        for job_id in ("old-pending", "old-leased"):
            record = json.loads(client.get(layout.job(job_id))[0])
            record.pop("attempts", None)  # the one field a record of these two has
            assert not set(record) & {"attempts", "max_attempts", "last_error", "claimable_at", "failed_at"}
            client.set(layout.job(job_id), json.dumps(record).encode())
        leased, pending = store.get("old-leased"), store.get("old-pending")
        assert leased is not None and (leased.state, leased.attempts, leased.max_attempts) == (
            tenure.JobState.LEASED, 0, None)
        assert pending is not None and (pending.state, pending.attempts, pending.claimable_at) == (
            tenure.JobState.PENDING, 0, None)
        assert {j.job_id: j.attempts for j in store.jobs()} == {"old-pending": 0, "old-leased": 0}
        store.release(store.renew(dataclasses.replace(lease, attempt=0)))
        assert store.get("old-leased").attempts == 0  # type: ignore[union-attr]  # given back, never below 0
        assert store.claim_next(owner="w", ttl=ttl).job_id == "old-pending"  # type: ignore[union-attr]
        assert store.get("old-pending").attempts == 1  # type: ignore[union-attr]
        _assert_consistent(store)


def test_build_indexes_puts_scheduled_parked_and_last_attempt_jobs_where_this_version_does(
        zk_harness: ZooKeeperHarness) -> None:
    """A store without the index, used by this version (claim_next scanning) with the life
    cycle's states, then given the index: each job where a change of this version puts it."""
    url, ttl = zk_harness.url(), zk_harness.ttl
    with zk_harness.connect(url) as store:
        client, layout = store.backend.client, store.backend.layout  # type: ignore[attr-defined]
        store.submit("warm-up")
        for path in layout.index_dirs:
            client.delete(path, recursive=True)
    with zk_harness.connect(url) as store:
        backend: Any = store.backend
        assert not backend.index.enabled
        store.submit_many(["s1", "s2"], delay=3600.0)
        store.submit("parked", max_attempts=1)
        store.fail(store.claim("parked", owner="w", ttl=ttl), "poison")
        store.submit("last", max_attempts=1)
        store.claim("last", owner="w", ttl=ttl)
        store.claim("held", owner="w", ttl=ttl)
        assert backend.build_indexes() == 6
        _assert_consistent(store)
        assert sorted(_places(store)) == ["held", "last", "parked", "s1", "s2", "warm-up"]
        now = store.now()
        assert backend.summary(now, 30.0) == Backend.summary(backend, now, 30.0)
        assert (store.summary().scheduled, store.summary().parked) == (2, 1)
        assert store.claim_next(owner="w", ttl=ttl).job_id == "warm-up"  # type: ignore[union-attr]
        assert store.claim_next(owner="w", ttl=ttl) is None
        assert backend.build_indexes() == 0
