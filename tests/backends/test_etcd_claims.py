"""etcd's claims in batches (``tenure.backends.etcd.claims``) and completions in batches
(``holders``): a request's claims in one Txn, each won or lost alone; what the conformance
suite's batch cases cannot see from outside."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import tenure
import tenure.aio
from tenure.backends.etcd import claims
from tenure.backends.etcd import client as ec
from tenure.core import contention
from tenure.core.clock import boot_clock
from tests.aio_sync import outside
from tests.backends.test_etcd_aio import sent_rpcs
from tests.backends.test_etcd_renewals import _counting, _lease_keys
from tests.servers.etcd import EtcdHarness


@pytest.fixture
def store(etcd_harness: EtcdHarness) -> Iterator[tenure.Store]:
    with etcd_harness.connect() as s:
        yield s


def test_a_batch_is_three_requests_and_each_claim_writes_what_a_single_claim_does(
        etcd_harness: EtcdHarness, store: tenure.Store) -> None:
    store.submit_many([f"j{i:02d}" for i in range(40)])
    overdue = store.claim("overdue", owner="a", ttl=5.0)
    store.force_expire("overdue")
    sent = _counting(store)
    leases = store.claim_next_many("b", 5.0, 32)
    # The indexes, every candidate's keys, the claims; each claim's etcd lease asked for beside the read.
    assert sent.count("txn") == 3 and "grant" not in sent and "range" not in sent, sent
    assert len(leases) == 32 and leases[0].job_id == "overdue" and leases[0].attempt == 2
    # One Txn: every claim's token is its revision, above every earlier token of its job.
    assert len({lease.token for lease in leases}) == 1 and leases[0].token > overdue.token
    claimed = {lease.job_id for lease in leases}
    events = [(e.job_id, e.token) for e in store.history() if e.op is tenure.Op.CLAIM]
    assert sorted(events) == sorted([("overdue", overdue.token)] + [(lease.job_id, lease.token) for lease in leases])
    keys = _lease_keys(etcd_harness, store)
    assert len(keys) == 32 and len({etcd_id for etcd_id, _ in keys.values()}) == 32  # an etcd lease each
    for lease in leases:
        status = store.get(lease.job_id)
        assert status is not None and status.state is tenure.JobState.LEASED and status.token == lease.token
    # The queue and held indexes moved with the claims: the rest is what is left, in one more batch.
    rest = store.claim_next_many("c", 5.0, 100)
    assert sorted(lease.job_id for lease in rest) == sorted({f"j{i:02d}" for i in range(40)} - claimed)
    for lease in leases:
        store.renew(lease)  # each is current on its own


def _beaten_once(monkeypatch: pytest.MonkeyPatch, steal: Callable[[list[Any]], list[str]]) -> list[str]:
    """Once, between a claim_next_many request's read and its commit, ``steal(taken)`` (the
    candidates it took) claims some of them elsewhere; the job ids it stole, filled then."""
    taking = claims.Request._taking
    stolen: list[str] = []
    done = threading.Event()  # set before ``steal`` runs: its own claims pass here too

    def beaten(self: claims.Request, job_ids: list[str]) -> Any:
        taken = yield from taking(self, job_ids)
        if not done.is_set():
            done.set()
            stolen.extend(steal(taken))
        return taken

    monkeypatch.setattr(claims.Request, "_taking", beaten)
    return stolen


def test_a_claim_another_claimer_took_meanwhile_fails_alone(etcd_harness: EtcdHarness,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    url = etcd_harness.url()
    store, other = etcd_harness.connect(url), etcd_harness.connect(url)
    store.submit_many([f"j{i}" for i in range(10)])

    def steal_one(taken: list[Any]) -> list[str]:
        other.claim(taken[1].read.job_id, owner="other", ttl=5.0)
        return [taken[1].read.job_id]

    stolen = _beaten_once(monkeypatch, steal_one)
    sent = _counting(store)
    leases = store.claim_next_many("b", 5.0, 4)
    assert len(leases) == 4 and stolen[0] not in {lease.job_id for lease in leases}
    assert sent.count("txn") == 3 + 3, sent  # the lost one alone is asked for again, in a request of its own
    assert len({lease.token for lease in leases}) == 2  # three won together, then one
    assert [(e.owner, e.op) for e in store.history(stolen[0])] == [(None, tenure.Op.SUBMIT), ("other", tenure.Op.CLAIM)]
    assert store.rejections() == []
    for lease in leases:
        store.renew(lease)
    store.close()
    other.close()


def test_complete_many_is_one_txn_and_gives_each_etcd_lease_back_to_the_pool(store: tenure.Store) -> None:
    store.submit_many([f"j{i}" for i in range(40)])
    leases = store.claim_next_many("b", 5.0, 20)
    sent = _counting(store)
    assert store.complete_many(leases) == [None] * 20
    assert sent == ["txn"], sent
    completed = sorted(e.job_id for e in store.history() if e.op is tenure.Op.COMPLETE)
    assert completed == sorted(lease.job_id for lease in leases)
    sent.clear()
    again = store.claim_next_many("b", 5.0, 20)
    assert len(again) == 20 and "grant_started" not in sent and "grant" not in sent, sent  # pooled leases
    stale = again[3]
    store.force_expire(stale.job_id)
    store.claim(stale.job_id, owner="other", ttl=5.0)
    sent.clear()
    found = store.complete_many(again)
    assert isinstance(found[3], tenure.StaleLease) and found[:3] + found[4:] == [None] * 19
    # The batch, then the refused one alone as complete() goes: its guess fails, and it is refused on
    # the keys the failure branch read, audited.
    assert sent.count("txn") == 1 + 2, sent
    assert [(r.job_id, r.op) for r in store.rejections()] == [(stale.job_id, tenure.Op.COMPLETE)]


def test_a_batch_of_250_fits_one_commit(store: tenure.Store) -> None:
    store.submit_many([f"j{i:03d}" for i in range(260)])
    sent = _counting(store)
    leases = store.claim_next_many("b", 5.0, claims.CLAIM_BATCH)
    assert len(leases) == claims.CLAIM_BATCH and len({lease.token for lease in leases}) == 1
    assert sent.count("txn") == 3, sent  # the queue's further pages are ranges


def test_tenure_aio_claims_a_batch_in_three_requests(etcd_harness: EtcdHarness,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    loop = threading.current_thread()
    awaited: list[list[str]] = []

    async def scenario() -> None:
        async with tenure.aio.connect(f"{etcd_harness.url()}-aio") as store:
            await store.submit_many([f"j{i}" for i in range(12)])
            monkeypatch.setattr(ec.Connection, "run", outside(loop, ec.Connection.run))  # every blocking request
            awaited.append(sent_rpcs(monkeypatch))
            leases = await store.claim_next_many("b", 5.0, 8)
            assert len(leases) == 8 and len({lease.token for lease in leases}) == 1
            assert await store.complete_many(leases) == [None] * 8
            for pooled in store.backend.sync._leases._pool.values():  # type: ignore[attr-defined]
                for lease in pooled:
                    lease.confirmed -= 1.0  # too old to serve a claim alone
            assert len(await store.claim_next_many("b", 5.0, 4)) == 4

    asyncio.run(scenario())
    # The claims' three requests, the completions' one, then three more with one keep-alive
    # stream for the four pooled etcd leases beside the read.
    assert awaited[0].count("Txn") == 3 + 1 + 3 and awaited[0].count("LeaseKeepAlive") == 1, awaited
    assert awaited[0].count("LeaseGrant") == 8, awaited  # the first batch's, none for the second


def test_batch_claimers_racing_for_one_queue_claim_each_job_once(etcd_harness: EtcdHarness) -> None:
    url = etcd_harness.url()
    jobs = [f"j{i:03d}" for i in range(200)]
    with etcd_harness.connect(url) as store:
        store.submit_many(jobs)
    won: list[list[tenure.Lease]] = [[] for _ in range(6)]

    def claimer(mine: list[tenure.Lease]) -> None:
        with etcd_harness.connect(url) as store:  # a connection, and its etcd leases, each
            while batch := store.claim_next_many(f"w{id(mine)}", 30.0, 16):
                mine.extend(batch)

    threads = [threading.Thread(target=claimer, args=(mine,)) for mine in won]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    leases = [lease for mine in won for lease in mine]
    assert sorted(lease.job_id for lease in leases) == jobs  # each job once, none left
    with etcd_harness.connect(url) as store:
        claims_made = sorted((e.job_id, e.token) for e in store.history() if e.op is tenure.Op.CLAIM)
        assert claims_made == sorted((lease.job_id, lease.token) for lease in leases)  # no claim unreported
        for lease in leases:
            store.complete(lease)  # each is the job's current lease


def test_stale_pooled_etcd_leases_are_kept_alive_on_one_stream_beside_the_read(
        etcd_harness: EtcdHarness, store: tenure.Store) -> None:
    store.submit_many([f"j{i}" for i in range(20)])
    store.complete_many(store.claim_next_many("b", 5.0, 8))  # eight etcd leases back in the pool
    pool: Any = store.backend._leases._pool  # type: ignore[attr-defined]
    pooled = [lease for leases in pool.values() for lease in leases]
    assert len(pooled) == 8
    for lease in pooled:
        lease.confirmed -= 1.0  # half the slack ago and more: a claim may not use it alone
    gone = pooled[-1]  # taken first
    store.backend._conn.revoke_later(gone.id)  # type: ignore[attr-defined]
    time.sleep(0.5)  # real time: a revoke is sent without waiting for its answer
    sent = _counting(store)
    leases = store.claim_next_many("b", 5.0, 8)
    assert len(leases) == 8
    # One keep-alive stream for the eight, a grant for the one etcd no longer has; no keep-alive each.
    assert sent.count("keepalives_started") == 1 and "keepalive_started" not in sent, sent
    assert sent.count("grant_started") == 1 and sent.count("txn") == 3, sent
    keys = _lease_keys(etcd_harness, store)
    assert len({etcd_id for etcd_id, _ in keys.values()}) == 8 and gone.id not in {i for i, _ in keys.values()}
    for lease in leases:
        store.renew(lease)


def test_a_request_that_named_an_etcd_lease_gone_is_sent_once_more_on_new_grants(
        etcd_harness: EtcdHarness, store: tenure.Store) -> None:
    """A fresh pooled etcd lease revoked behind our back: the claims' Txn is refused whole (etcd
    applied nothing), and the core sends it again at once, each claim decided again on a grant
    of its own beside the retention lease's lookup: one more Txn, no read again."""
    store.submit_many([f"j{i}" for i in range(20)])
    store.complete_many(store.claim_next_many("b", 5.0, 8))  # eight etcd leases back in the pool
    pool: Any = store.backend._leases._pool  # type: ignore[attr-defined]
    pooled = [lease for leases in pool.values() for lease in leases]
    for lease in pooled:
        lease.confirmed = boot_clock()  # fresh: a claim uses it without a keep-alive
    gone = pooled[-1]
    etcd_harness.cluster.nodes[0].api("/v3/lease/revoke", {"ID": gone.id})
    sent = _counting(store)
    leases = store.claim_next_many("b", 5.0, 8)
    assert len(leases) == 8
    assert sent.count("txn") == 3 + 1 and sent.count("grant_started") == 8, sent
    assert sent.count("range") == sent.count("time_to_live") == 1, sent  # the retention lease, looked up again
    keys = _lease_keys(etcd_harness, store)
    assert len({etcd_id for etcd_id, _ in keys.values()}) == 8 and gone.id not in {i for i, _ in keys.values()}
    assert not {lease.id for lease in pooled} & {i for i, _ in keys.values()}  # none pooled again
    for lease in leases:
        store.renew(lease)


def test_a_request_whose_claims_all_lost_is_made_again_from_the_indexes_read_beside_them(
        etcd_harness: EtcdHarness, monkeypatch: pytest.MonkeyPatch) -> None:
    url = etcd_harness.url()
    store, other = etcd_harness.connect(url), etcd_harness.connect(url)
    store.submit_many([f"j{i}" for i in range(8)])

    def steal_all(taken: list[Any]) -> list[str]:
        assert len(other.claim_next_many("other", 5.0, 4)) == 4
        return [one.read.job_id for one in taken]

    stolen = _beaten_once(monkeypatch, steal_all)
    monkeypatch.setattr(contention, "SPREAD", 1)  # no spread: both claimers after the same four
    sent = _counting(store)
    leases = store.claim_next_many("b", 5.0, 4)
    assert sorted(lease.job_id for lease in leases) == sorted({f"j{i}" for i in range(8)} - set(stolen))
    assert sent.count("txn") == 3 + 2, sent  # the second request starts from the first one's index read
    store.close()
    other.close()
