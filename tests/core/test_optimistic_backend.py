"""RecordBackend's optimistic transactions: a store with versioned reads and one conditional
commit gets the protocol from the core, which retries a lost race with fresh reads, decides
again what it decided on a cached guess, and gives up with Outraced.

The store here is a dict behind a lock standing in for a server; ``interfere`` makes the next
commits lose their race as if another client had written first. Like ZooKeeper, it keeps a
job's generation when its record is deleted by hand, and the epoch of the clock that stamped
each record; like etcd, it can end a lease early (``ended``) (``read_facts``: what the core
makes of each)."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import tenure
from tenure.core import contention, read_facts, transitions
from tenure.core.backend import Characteristics, RecordBackend
from tenure.core.record_transaction import Transaction
from tenure.core.records import HistoryEvent, JobRecord, JobState, JobStatus, Rejection


class CasTransaction(Transaction):
    def __init__(self, b: CasBackend, fresh: bool) -> None:
        self._b, self._fresh = b, fresh
        self.now = b.clock.time()
        self.injected = b.injected
        self._read: dict[str, int] = {}
        self._writes: dict[str, JobRecord] = {}
        self._ops: dict[str, tenure.Op] = {}
        self._events: list[HistoryEvent] = []
        self._rejections: list[Rejection] = []
        self._passed: list[read_facts.Loaded] = []

    def record(self, job_id: str) -> JobRecord | None:
        if not self._fresh and job_id in self._b.cache:  # what this process last wrote
            rec, version = self._b.cache[job_id]
            self.guessed = True
        else:
            rec, version = self.read(job_id)
        self._read[job_id] = version
        return rec

    def load(self, job_id: str, op: tenure.Op, lease: tenure.Lease | None = None) -> read_facts.Loaded:
        return self._fact(job_id, self.record(job_id))

    def _fact(self, job_id: str, rec: JobRecord | None) -> read_facts.Loaded:
        """A record, one an earlier clock stamped, a lease the store ended early, or the
        generation a deleted record left."""
        b = self._b
        if rec is None:
            return None if job_id not in b.generations else read_facts.Vanished(job_id, b.generations[job_id])
        if job_id in b.ended and rec.state is JobState.LEASED:  # shown ended, as etcd shows it
            shown = dataclasses.replace(rec, lease_until=min(rec.lease_until or self.now, self.now))
            return read_facts.EndedEarly(shown, b.ended[job_id])
        return rec if b.stamps.get(job_id, b.epoch) == b.epoch else read_facts.OtherClock(rec)

    def passed_over(self) -> list[read_facts.Loaded]:
        return self._passed

    def read(self, job_id: str) -> tuple[JobRecord | None, int]:
        """The job's record and version, from the store."""
        with self._b.lock:
            self._b.reads += 1
            return self._b.records.get(job_id, (None, 0))

    def claimable(self) -> list[tuple[float, str, int]]:
        """(submitted_at, job id, version) of the claimable jobs, from the store, oldest first."""
        with self._b.lock:
            return sorted((r.submitted_at or 0.0, r.job_id, v) for r, v in self._b.records.values()
                          if transitions.is_claimable(r, self.now))

    def save(self, record: JobRecord, op: tenure.Op, event: HistoryEvent | None) -> None:
        self._writes[record.job_id] = record
        self._ops[record.job_id] = op
        if event is not None:
            self._events.append(event)

    def next_claimables(self, n: int) -> list[str]:  # one at a time
        for _, job_id, version in self.claimable():
            self._read[job_id] = version  # the claim's load reads it again; this pins what was seen
            fact = self._fact(job_id, self._b.records[job_id][0])
            if transitions.is_claimable(read_facts.seen(fact, tenure.Op.CLAIM, self.now), self.now):
                return [job_id]
            self._passed.append(fact)
        return []

    def add_rejection(self, rejection: Rejection) -> None:
        self._rejections.append(rejection)

    def commit(self) -> None:
        b = self._b
        with b.lock:
            if b.resends:  # the store found a write already done: nothing written, nothing collided
                b.resends -= 1
                self.conflict = self.resend = True
                return
            if b.interfere:
                b.interfere -= 1
                for job_id in self._read:  # another client wrote every job read
                    rec, version = b.records.get(job_id, (None, 0))
                    if rec is not None:
                        b.records[job_id] = (rec, version + 1)
            if any(b.records.get(j, (None, 0))[1] != v for j, v in self._read.items()):
                self.conflict = True
                return
            for job_id, rec in self._writes.items():
                version = b.records.get(job_id, (None, 0))[1] + 1
                b.records[job_id] = (rec, version)
                b.cache[job_id] = (rec, version)
                b.stamps[job_id], b.generations[job_id] = b.epoch, rec.token
                b.ended.pop(job_id, None)  # a lease ended early and written since is restored (or gone)
            b.saves += self._ops.items()
            b.events += self._events
            b.audit += self._rejections


class CasBackend(RecordBackend):
    characteristics = Characteristics(name="cas-test", store_clock="a test clock",
                                      shared_between_processes=False)

    def __init__(self, clock: tenure.ManualClock) -> None:
        self.clock = clock
        self.lock = threading.Lock()
        self.records: dict[str, tuple[JobRecord, int]] = {}
        self.cache: dict[str, tuple[JobRecord, int]] = {}
        self.events: list[HistoryEvent] = []
        self.saves: list[tuple[str, tenure.Op]] = []  # each write committed, with its operation
        self.audit: list[Rejection] = []
        self.interfere = 0
        self.resends = 0
        self.reads = 0
        self.epoch = 0  # of the clock that stamps what is written now
        self.stamps: dict[str, int] = {}  # the epoch each record was written in
        self.generations: dict[str, int] = {}  # each job's last token: kept when its record is deleted
        # Leases the store ended early (etcd-io/etcd#15247), each with how long its holder may
        # still act by this process's watch; and the clock holders' deadlines are on (the tests').
        self.ended: dict[str, float] = {}
        self.injected: tenure.Clock | None = clock

    @classmethod
    def from_url(cls, url: Any, options: Any, clock: Any) -> CasBackend:
        raise NotImplementedError  # built directly by the tests

    @contextlib.contextmanager
    def transaction(self, fresh: bool = False) -> Iterator[Transaction]:
        tx = CasTransaction(self, fresh)
        yield tx
        tx.commit()

    def get(self, job_id: str) -> JobStatus | None:
        found = self.records.get(job_id)
        return None if found is None else transitions.status(found[0], self.now())

    def jobs(self) -> Iterator[JobStatus]:
        return iter([transitions.status(r, self.now()) for r, _ in self.records.values()])

    def rejections(self, since: float | None, limit: int | None) -> list[Rejection]:
        return list(self.audit)

    def history(self, job_id: str | None, since: float | None, limit: int | None) -> list[HistoryEvent]:
        return [e for e in self.events if job_id is None or e.job_id == job_id]

    def now(self) -> float:
        return self.clock.time()


@pytest.fixture
def backend() -> CasBackend:
    return CasBackend(tenure.ManualClock())


@pytest.fixture
def store(backend: CasBackend) -> tenure.Store:
    return tenure.Store(backend, clock=backend.clock)


@pytest.fixture(autouse=True)
def no_pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The retries' pauses, recorded instead of slept (contention's own test times them)."""
    paused: list[float] = []
    monkeypatch.setattr(contention.time, "sleep", paused.append)
    return paused


def test_a_lost_race_is_retried_with_fresh_reads(backend: CasBackend, store: tenure.Store,
                                                 no_pauses: list[float]) -> None:
    store.submit("j")
    backend.cache.clear()  # every attempt reads: each lost race is a collision
    backend.interfere = 3
    lease = store.claim("j", owner="a", ttl=10)
    assert lease.token == 1 and len(no_pauses) == 3
    assert [e.op for e in backend.events] == [tenure.Op.SUBMIT, tenure.Op.CLAIM]  # written once


def test_a_refuted_guess_is_retried_at_once(backend: CasBackend, store: tenure.Store,
                                            no_pauses: list[float]) -> None:
    store.submit("j")  # in the cache: the claim's first attempt guesses
    backend.interfere = 2
    lease = store.claim("j", owner="a", ttl=10)
    assert lease.token == 1 and len(no_pauses) == 1  # no pause after the guess, one after the read


def test_a_resend_goes_at_once_and_is_not_counted(backend: CasBackend, store: tenure.Store,
                                                  no_pauses: list[float]) -> None:
    # Nothing collided (ZooKeeper found an index entry already as its multi would leave it):
    # the step goes again at once, as often as it takes (each resend leaves out more).
    store.submit("j")
    backend.resends = contention.ATTEMPTS + 3
    lease = store.claim("j", owner="a", ttl=10)
    assert lease.token == 1 and no_pauses == [] and backend.resends == 0
    assert [e.op for e in backend.events] == [tenure.Op.SUBMIT, tenure.Op.CLAIM]  # written once


def test_every_attempt_lost_is_outraced_and_writes_nothing(backend: CasBackend, store: tenure.Store) -> None:
    store.submit("j")
    backend.interfere = contention.ATTEMPTS
    with pytest.raises(tenure.Outraced):
        store.claim("j", owner="a", ttl=10)
    assert backend.records["j"][0].state is JobState.PENDING and len(backend.events) == 1


def test_claim_next_outlasts_a_busy_queue(backend: CasBackend, store: tenure.Store) -> None:
    # A race claim_next lost is another claimer's win (16 claimers after one oldest job each
    # win about one round in 16): it goes on past ATTEMPTS, and gives up only far beyond.
    store.submit("j")
    backend.cache.clear()
    backend.interfere = contention.ATTEMPTS + 5
    lease = store.claim_next(owner="a", ttl=10)
    assert lease is not None and lease.job_id == "j"
    store.submit("k")
    backend.interfere = contention.CLAIM_NEXT_ATTEMPTS
    with pytest.raises(tenure.Outraced):
        store.claim_next(owner="a", ttl=10)
    assert backend.records["k"][0].state is JobState.PENDING


def test_a_renewal_on_a_stale_guess_is_refused_from_fresh_reads(backend: CasBackend, store: tenure.Store) -> None:
    lease = store.claim("j", owner="a", ttl=10)
    backend.clock.advance(11)
    rec, version = backend.records["j"]
    taken = transitions.claim(rec, "j", "b", 10, backend.now())  # another client, not in our cache
    backend.records["j"] = (taken, version + 1)
    reads = backend.reads
    with pytest.raises(tenure.StaleLease) as refused:
        store.renew(lease)
    assert refused.value.rejection.current_owner == "b"
    assert backend.reads == reads + 1  # the guess said "yours", the commit said no, one fresh read
    assert len(backend.audit) == 1


def test_a_refusal_decided_on_a_guess_is_decided_again(backend: CasBackend, store: tenure.Store) -> None:
    store.claim("j", owner="a", ttl=10)
    rec, version = backend.records["j"]
    backend.records["j"] = (dataclasses.replace(rec, state=JobState.PENDING, owner=None, lease_until=None,
                                                ttl=None), version + 1)  # released by another client
    lease = store.claim("j", owner="b", ttl=10)  # our cache still says "held by a"
    assert lease.owner == "b" and lease.token == 2


def test_a_job_whose_record_was_deleted_goes_on_from_its_generation(backend: CasBackend,
                                                                    store: tenure.Store) -> None:
    first = store.claim("j", owner="a", ttl=10)
    del backend.records["j"]  # by hand: the generation stays
    backend.cache.clear()
    assert store.claim("j", owner="b", ttl=10).token == first.token + 1  # the claim sees it pending
    del backend.records["j"]
    backend.cache.clear()
    store.submit("j")  # a new run one generation on: no lease of the old one can act on it
    assert backend.records["j"][0].token == first.token + 2
    third = store.claim("j", owner="c", ttl=10)
    assert third.token == first.token + 3
    del backend.records["j"]
    backend.cache.clear()
    with pytest.raises(tenure.StaleLease) as refused:  # nothing to renew, whatever the generation
        store.renew(third)
    assert refused.value.rejection.reason == str(tenure.Reason.NOT_FOUND)


def test_a_claim_that_meets_a_lease_an_earlier_clock_stamped_re_stamps_it_in_its_commit(
        backend: CasBackend, store: tenure.Store) -> None:
    held = store.claim("j", owner="a", ttl=10)
    backend.epoch += 1  # a new clock, 30 s ahead: by it the lease ran out 20 s ago
    backend.clock.advance(30)
    backend.cache.clear()
    events = len(backend.events)
    with pytest.raises(tenure.AlreadyClaimed):
        store.claim("j", owner="b", ttl=10)
    rec = backend.records["j"][0]
    assert (rec.owner, rec.token, rec.lease_until) == ("a", held.token, backend.now() + 10)
    assert backend.stamps["j"] == backend.epoch and len(backend.events) == events  # a write, no history
    assert backend.saves[-1] == ("j", read_facts.RESTAMP)
    assert store.claim_next(owner="b", ttl=10) is None  # judged on this clock now: held
    store.renew(held)  # the holder carries on


def test_claim_next_passes_over_a_lease_an_earlier_clock_stamped_and_re_stamps_it(
        backend: CasBackend, store: tenure.Store) -> None:
    held = store.claim("j", owner="a", ttl=10)
    store.submit("k")
    backend.epoch += 1
    backend.clock.advance(30)
    lease = store.claim_next(owner="b", ttl=10)
    assert lease is not None and lease.job_id == "k"
    rec = backend.records["j"][0]
    assert (rec.owner, rec.lease_until, backend.stamps["j"]) == ("a", backend.now() + 10, backend.epoch)
    store.renew(held)


def test_each_write_carries_the_operation_its_step_performed(backend: CasBackend, store: tenure.Store) -> None:
    store.submit("j")
    lease = store.renew(store.claim("j", owner="a", ttl=10))
    store.release(lease)
    store.fail(store.claim("j", owner="a", ttl=10), "no luck")
    store.requeue("j")
    store.claim("j", owner="a", ttl=10)
    store.force_expire("j")
    store.complete(store.claim("j", owner="b", ttl=10))
    Op = tenure.Op
    done = [Op.SUBMIT, Op.CLAIM, Op.RENEW, Op.RELEASE, Op.CLAIM, Op.FAIL, Op.REQUEUE, Op.CLAIM, Op.EXPIRE, Op.CLAIM,
            Op.COMPLETE]
    assert [op for _, op in backend.saves] == [e.op for e in backend.events] == done


def _end_early(backend: CasBackend, job_id: str, left: float) -> None:
    """The store ends the job's lease now, its holder free to act ``left`` more."""
    rec, version = backend.records[job_id]
    backend.records[job_id] = (dataclasses.replace(rec, lease_until=backend.now()), version)
    backend.ended[job_id] = left


def test_a_lease_the_store_ended_early_is_waited_out_and_its_holder_is_judged_on_its_clock(
        backend: CasBackend, store: tenure.Store) -> None:
    """A store reports a lease it ended (``read_facts.EndedEarly``); the steps judge it: a claim
    waits ``left`` out, claim_next passes it over, and its holder, whose deadline is on the
    test's clock (``Transaction.injected``), which vouches for nothing, is refused."""
    held = store.claim("j", owner="a", ttl=10)
    store.submit("k")
    _end_early(backend, "j", 4.0)
    with pytest.raises(tenure.NotYetClaimable) as waited:
        backend.claim("j", "b", 10)
    assert waited.value.retry_after == 4.0
    lease = store.claim_next(owner="b", ttl=10)
    assert lease is not None and lease.job_id == "k"  # "j", expired in the store, passed over
    with pytest.raises(tenure.StaleLease) as refused:
        store.renew(held)
    assert refused.value.rejection.reason == str(tenure.Reason.EXPIRED)
    backend.ended["j"] = 0.0  # its holder must have stopped by now
    assert store.claim("j", owner="b", ttl=10).token == held.token + 1


def test_the_holder_of_a_lease_the_store_ended_early_restores_it_while_its_deadline_runs(
        backend: CasBackend) -> None:
    backend.injected = None  # no clock given to connect: the holder's deadline is on the machine's
    store = tenure.Store(backend)
    held = store.claim("j", owner="a", ttl=10)
    _end_early(backend, "j", 4.0)
    renewed = store.renew(held, ttl=20)
    assert renewed.token == held.token and backend.records["j"][0].lease_until == backend.now() + 20
    assert "j" not in backend.ended and store.rejections() == []
    store.complete(renewed)

