"""What is particular to ``tenure.aio``: cancellation, the renewal task, how it is opened.

Everything else (values, errors, validation, the protocol) is the conformance suite's, which
runs on tenure.aio too (tests/conformance/conftest.py). The memory store stands in for a store
whose requests hang where the subject is the event-loop machinery, the same over every
backend; the cancellation of a claim and of a held block also run on SQLite, PostgreSQL,
ZooKeeper and etcd.
Waits are bounded by generous timeouts that only a broken implementation runs into.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import random
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

import tenure
import tenure.aio
from devservers.control import ServerProcess
from devservers.etcd import EtcdCluster, start_or_fail
from devservers.postgres import PostgresServer, admin
from devservers.zookeeper import ZooKeeperServer
from tenure.aio import AsyncStore, ThreadedBackend
from tenure.backends.memory import MemoryBackend
from tenure.backends.zookeeper import session as zk_session
from tenure.testing.suite_hold import RENEWED_TTL
from tests.aio.test_bridge import suspended_calls
from tests.conftest import BACKENDS
from tests.harness import Harness

T = TypeVar("T")
PATIENCE = 20.0  # seconds: far beyond every wait below; reached only when something is broken
AIO_BACKENDS = [b for b in ("memory", "sqlite", "postgres", "zk", "etcd") if b in BACKENDS]


def run(scenario: Callable[[], Awaitable[T]]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(scenario(), PATIENCE * 2)

    return asyncio.run(bounded())


class SlowBackend(MemoryBackend):
    """Claims and renewals of jobs in ``slow`` wait until ``proceed`` is set, like a store whose
    answer is on its way; ``entered`` says one is waiting."""

    def __init__(self, clock: tenure.Clock) -> None:
        super().__init__(clock)
        self.slow: set[str] = set()
        self.entered = threading.Event()
        self.proceed = threading.Event()

    def _maybe_wait(self, job_id: str) -> None:
        if job_id in self.slow:
            self.entered.set()
            self.proceed.wait(PATIENCE)

    def claim(self, job_id: str, owner: str, ttl: float) -> tenure.Lease:
        self._maybe_wait(job_id)
        return super().claim(job_id, owner, ttl)

    def renew(self, lease: tenure.Lease, ttl: float) -> tenure.Lease:
        self._maybe_wait(lease.job_id)
        return super().renew(lease, ttl)

    def renew_many(self, renewals: Sequence[tuple[tenure.Lease, float]]) -> list[tenure.Lease | tenure.LeaseError]:
        for lease, _ in renewals:  # one request: it waits for any of them
            self._maybe_wait(lease.job_id)
        return super().renew_many(renewals)


@pytest.fixture
def slow() -> Iterator[tuple[AsyncStore, SlowBackend, tenure.ManualClock]]:
    clock = tenure.ManualClock()
    backend = SlowBackend(clock)
    yield AsyncStore(ThreadedBackend(backend), clock=clock), backend, clock
    backend.proceed.set()


Opener = Callable[..., tenure.aio.Connecting]


@pytest.fixture(params=AIO_BACKENDS)
def opener(request: pytest.FixtureRequest) -> Opener:
    """Opens a new, empty tenure.aio store on each backend tenure.aio serves."""
    harness: Harness = request.getfixturevalue(f"{request.param}_harness")
    return lambda **options: tenure.aio.connect(harness.url(), **{**harness.options(), **options})


async def until(check: Callable[[], Awaitable[bool]]) -> None:
    while not await check():
        await asyncio.sleep(0.01)  # real time: what is awaited happens in the background


# -- cancellation --------------------------------------------------------------------------------
def test_a_claim_cancelled_in_flight_releases_what_it_won(
        slow: tuple[AsyncStore, SlowBackend, tenure.ManualClock]) -> None:
    store, backend, _ = slow
    backend.slow.add("j")

    async def scenario() -> None:
        claiming = asyncio.ensure_future(store.claim("j", owner="a", ttl=60.0))
        assert await asyncio.to_thread(backend.entered.wait, PATIENCE)  # the request is on its way
        claiming.cancel()
        with pytest.raises(asyncio.CancelledError):
            await claiming
        backend.proceed.set()  # now it lands, after the caller gave up on it

        async def released() -> bool:
            return [e.op for e in await store.history("j")] == [tenure.Op.CLAIM, tenure.Op.RELEASE]

        await asyncio.wait_for(until(released), PATIENCE)
        status = await store.get("j")
        assert status is not None and status.state is tenure.JobState.PENDING
        assert (await store.claim("j", owner="b", ttl=60.0)).owner == "b"  # free at once, not after 60 s
        await store.close()

    run(scenario)


def released_once_it_lands(url: str, server: PostgresServer | ZooKeeperServer | ServerProcess) -> None:
    """A claim sent to a paused server and cancelled: the server answers once resumed (within
    its timeout), the claim lands, and the store releases it."""
    async def scenario() -> None:
        async with tenure.aio.connect(url) as store:
            await store.submit("j")
            await store.get("j")  # a pooled connection (PostgreSQL), idle and ready
            server.pause()  # the claim's requests reach the server's socket, the answers wait
            try:
                claiming = asyncio.ensure_future(store.claim("j", owner="a", ttl=60.0))
                await asyncio.sleep(0.3)  # real time: the requests are sent
                claiming.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await claiming
            finally:
                server.resume()  # within the statement's or session's timeout: the claim lands now

            async def released() -> bool:
                return [e.op for e in await store.history("j")][-2:] == [tenure.Op.CLAIM, tenure.Op.RELEASE]

            await asyncio.wait_for(until(released), PATIENCE)
            status = await store.get("j")
            assert status is not None and status.state is tenure.JobState.PENDING

    run(scenario)


def test_a_claim_cancelled_on_a_stopped_postgresql_server_is_released_once_it_lands(
        postgres_private: PostgresServer) -> None:
    released_once_it_lands(f"{postgres_private.url}?schema=aio_cancel", postgres_private)


def test_a_claim_cancelled_on_a_stopped_zookeeper_server_is_released_once_it_lands(
        zk_private: ZooKeeperServer) -> None:
    released_once_it_lands(f"zk://{zk_private.hosts}/aio-cancel", zk_private)


@pytest.fixture
def etcd_private(tmp_path: Path) -> Iterator[EtcdCluster]:
    cluster = start_or_fail(tmp_path / "etcd", 1)
    yield cluster
    cluster.close()


def test_a_claim_cancelled_on_a_stopped_etcd_server_is_released_once_it_lands(etcd_private: EtcdCluster) -> None:
    """The claim's read and its grant (no pooled etcd lease yet) wait on the stopped server; once
    it answers, the Txn lands on an etcd lease of the TTL (plus its slack), and the store releases
    it: were the release lost too, etcd would delete the key with that lease, held by nobody."""
    released_once_it_lands(f"etcd://{etcd_private.endpoints}/aio-cancel", etcd_private.nodes[0])


def cancelled_in_its_read(url: str, server: ZooKeeperServer | ServerProcess) -> None:
    """The backend's claim (no AsyncStore to carry it on in the background) cancelled while its
    step waits for its read: the step unwinds from the read, nothing is written, no greenlet is
    left in it, and the job's next claim is its first."""
    async def scenario() -> None:
        async with tenure.aio.connect(url) as store:
            await store.submit("j")
            server.pause()  # the read reaches the server's socket, its answer waits
            try:
                claiming = asyncio.ensure_future(store.backend.claim("j", owner="a", ttl=60.0))
                await asyncio.sleep(0.3)  # real time: the read is sent
                assert suspended_calls() == 1  # the step, in its read
                claiming.cancel()
            finally:
                server.resume()
            with pytest.raises(asyncio.CancelledError):
                await claiming
            assert suspended_calls() == 0
            assert [e.op for e in await store.history("j")] == [tenure.Op.SUBMIT]
            status = await store.get("j")
            assert status is not None and status.state is tenure.JobState.PENDING
            assert (await store.claim("j", owner="b", ttl=5.0)).attempt == 1
            assert [e.op for e in await store.history("j")] == [tenure.Op.SUBMIT, tenure.Op.CLAIM]

    run(scenario)


def test_a_claim_cancelled_in_its_read_on_zookeeper_writes_nothing_and_leaves_no_greenlet(
        zk_private: ZooKeeperServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zk_session, "FRESH", 0.0)  # no guess: the claim reads the job
    cancelled_in_its_read(f"zk://{zk_private.hosts}/aio-cancel-read", zk_private)


def test_a_claim_cancelled_in_its_read_on_etcd_writes_nothing_and_leaves_no_greenlet(
        etcd_private: EtcdCluster) -> None:
    """No pooled etcd lease yet: the claim reads the job, its grant sent beside the read."""
    cancelled_in_its_read(f"etcd://{etcd_private.endpoints}/aio-cancel-read", etcd_private.nodes[0])


def test_a_claim_cancelled_while_it_waits_for_a_holder_holds_nothing(
        opener: Opener) -> None:
    async def scenario() -> None:
        async with opener() as store:
            first = await store.claim("j", owner="a", ttl=60.0)
            waiting = asyncio.ensure_future(store.claim("j", owner="b", ttl=60.0, wait=PATIENCE))
            await asyncio.sleep(0.3)  # real time: the claim has tried once and is waiting
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            await store.release(first)
            await asyncio.sleep(0.3)  # real time: a claim left running would take the job now
            status = await store.get("j")
            assert status is not None and status.state is tenure.JobState.PENDING

    run(scenario)


def test_cancelling_the_task_inside_hold_releases_the_job(opener: Opener) -> None:
    async def scenario() -> None:
        async with opener() as store:
            inside = asyncio.Event()

            async def work() -> None:
                async with store.hold("j", owner="a", ttl=30.0) as held:
                    assert held.token
                    inside.set()
                    await asyncio.sleep(3600)  # cancelled long before

            task = asyncio.ensure_future(work())
            await inside.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            status = await store.get("j")
            assert status is not None and status.state is tenure.JobState.PENDING
            assert [e.op for e in await store.history("j")][-1] is tenure.Op.RELEASE
            assert (await store.claim("j", owner="b", ttl=30.0)).owner == "b"

    run(scenario)


@pytest.mark.parametrize("then", ["retry", "leave"])
def test_a_complete_cancelled_on_a_postgresql_row_lock_leaves_the_lease_held(
        postgres_harness: Harness, then: str) -> None:
    """The statement waits on a row another transaction locked; cancelled, it does not land.
    The lease is held and renewed still: complete() may be retried, and leaving the block
    releases it, rather than the job staying leased, by nobody, until its TTL runs out."""
    url = postgres_harness.url()
    schema = postgres_harness.prefix  # type: ignore[attr-defined]

    async def scenario() -> None:
        async with tenure.aio.connect(url, **postgres_harness.options()) as store:
            locker = await asyncio.to_thread(admin, url)
            try:
                async with store.hold("j", owner="a", ttl=30.0) as held:
                    await asyncio.to_thread(locker.execute, "BEGIN")
                    lock_row = f'SELECT 1 FROM "{schema}".jobs WHERE job_id = %s FOR UPDATE'
                    await asyncio.to_thread(locker.execute, lock_row, ("j",))
                    completing = asyncio.ensure_future(held.complete(b"done"))

                    async def waits_on_the_lock() -> bool:
                        # The completion's statement itself (it sets the state to completed), not
                        # a renewal of the held lease. The locker is inside a transaction, where
                        # PostgreSQL keeps the first snapshot of pg_stat_activity: cleared first,
                        # or every poll sees the moment before the completion arrived.
                        def waiting() -> bool:
                            locker.execute("SELECT pg_stat_clear_snapshot()")
                            rows = locker.execute(
                                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                                " AND query LIKE %s AND query LIKE %s",
                                (f'%"{schema}".jobs%', f"%state = '{tenure.JobState.COMPLETED.value}'%")).fetchone()
                            return bool(rows and rows[0])

                        return await asyncio.to_thread(waiting)

                    await asyncio.wait_for(until(waits_on_the_lock), PATIENCE)
                    completing.cancel()
                    with pytest.raises(asyncio.CancelledError):
                        await completing
                    await asyncio.to_thread(locker.execute, "ROLLBACK")
                    assert not held.finished and not held.lost.is_set()
                    held.check()
                    status = await store.get("j")
                    assert status is not None and status.state is tenure.JobState.LEASED  # it did not land
                    if then == "retry":
                        await held.complete(b"done")
            finally:
                await asyncio.to_thread(locker.close)
            status = await store.get("j")
            assert status is not None
            assert status.state is (tenure.JobState.COMPLETED if then == "retry" else tenure.JobState.PENDING)

    run(scenario)


CANCELLED_LIVES = 16  # per backend: cheap (well under a second), seeded, so a failure replays


async def hold_life(store: AsyncStore, job: str, completes: bool, phase: dict[str, str]) -> None:
    """What a holder does, saying in ``phase`` where it is: claim, work inside the block, then
    complete() or leave without it (the release on the way out)."""
    phase[job] = "claim"
    async with store.hold(job, owner="a", ttl=30.0) as held:
        phase[job] = "inside"
        held.check()
        await asyncio.sleep(0)
        phase[job] = "complete" if completes else "release"
        if completes:
            await held.complete(b"done")


async def phase_turns(store: AsyncStore, job: str, completes: bool) -> dict[str, int]:
    """One uncancelled life: how many of the loop's turns each phase of it lasted."""
    phase: dict[str, str] = {}
    life = asyncio.ensure_future(hold_life(store, job, completes, phase))
    turns: dict[str, int] = {}
    while not life.done():
        now = phase.get(job, "claim")
        turns[now] = turns.get(now, 0) + 1
        await asyncio.sleep(0)
    await life
    return turns


def test_a_hold_cancelled_at_any_moment_leaves_its_job_unleased_by_it(opener: Opener) -> None:
    """Cancelled in a phase drawn at random (the claim, inside the block, complete(), the
    release on the way out), after a random number of the loop's turns within it, so every
    await of a hold's life is hit on every backend. Afterwards the job is never leased by that
    holder (completed, or free at once: not left to its 30 s TTL) and no task of the hold
    remains."""
    rng = random.Random(25)

    async def scenario() -> None:
        async with opener() as store:
            for completes in (True, False):  # connections open, pools filled, tables warm
                await phase_turns(store, f"warm-up-{completes}", completes)
            turns = {completes: await phase_turns(store, f"measured-{completes}", completes)
                     for completes in (True, False)}
            before = asyncio.all_tasks()
            phase: dict[str, str] = {}
            for case in range(CANCELLED_LIVES):
                completes = case % 2 == 0
                target = rng.choice(sorted(turns[completes]))
                after = rng.randrange(turns[completes][target])
                job = f"j{case}"
                life = asyncio.ensure_future(hold_life(store, job, completes, phase))
                while phase.get(job, "claim") != target and not life.done():
                    await asyncio.sleep(0)
                for _ in range(after):
                    await asyncio.sleep(0)
                life.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await life

                async def settled() -> bool:  # the release on the way out, of a cancelled claim
                    for _ in range(2):  # a task just done may still start another from its done callbacks
                        if asyncio.all_tasks() - before - {asyncio.current_task()}:  # but this wait's own
                            return False
                        await asyncio.sleep(0)
                    return True

                await asyncio.wait_for(until(settled), PATIENCE)
                status = await store.get(job)
                assert status is None or status.state is not tenure.JobState.LEASED, (case, phase.get(job), status)

    run(scenario)


# -- the renewal task --------------------------------------------------------------------------
def test_lost_is_set_at_the_safe_deadline_while_a_renewal_hangs(
        slow: tuple[AsyncStore, SlowBackend, tenure.ManualClock], monkeypatch: pytest.MonkeyPatch) -> None:
    store, backend, clock = slow
    monkeypatch.setattr("tenure.aio.holding.MAX_SLEEP", 0.02)  # the task looks at the clock this often

    async def scenario() -> None:
        held = await store.hold("j", owner="a", ttl=9.0)
        backend.slow.add("j")
        clock.advance(3.5)  # past a third of the TTL: the task renews, and the renewal hangs
        assert await asyncio.to_thread(backend.entered.wait, PATIENCE)
        await asyncio.sleep(0.1)  # real time: several of the task's looks at the clock
        assert not held.lost.is_set()
        clock.advance(5.2)  # past the safe deadline: 9 s less the 5% drift margin, from the claim
        await asyncio.wait_for(held.lost.wait(), PATIENCE)
        assert not backend.proceed.is_set()  # the renewal still hangs
        assert held.lost_reason is not None and "deadline" in held.lost_reason
        with pytest.raises(tenure.LeaseLost, match="deadline"):
            held.check()
        backend.proceed.set()
        await held.release()  # a lost lease is not given back: nothing is sent
        await store.close()

    run(scenario)


def test_the_task_renews_past_the_ttl_and_complete_ends_it(opener: Opener) -> None:
    async def scenario() -> None:
        async with opener(clock=tenure.SystemClock()) as store:
            if store.backend.characteristics.min_ttl > RENEWED_TTL:
                pytest.skip("etcd's TTLs start at 2 s: the conformance suite's hold cases renew there")
            # A TTL a shared CI machine's stalls cannot eat (tenure.testing.suite_hold.RENEWED_TTL).
            async with store.hold("j", owner="a", ttl=RENEWED_TTL) as held:
                first = held.lease.expires_at
                await asyncio.sleep(RENEWED_TTL * 2.5)  # real time: the task must keep the lease alive
                held.check()
                assert held.lease.expires_at > first
                await held.complete(b"ok")
            status = await store.get("j")
            assert status is not None and status.state is tenure.JobState.COMPLETED
            assert await store.rejections() == []

    run(scenario)


# -- opening ---------------------------------------------------------------------------------------
def test_connect_is_awaitable_or_an_async_context_and_checks_like_the_sync_one() -> None:
    async def scenario() -> None:
        store = await tenure.aio.connect("memory://")
        assert "tenure.aio" in repr(store)
        await store.close()
        await store.close()  # idempotent
        with pytest.raises(tenure.InvalidArgument, match="drift_margin"):
            await tenure.aio.connect("memory://", drift_margin=2)
        with pytest.raises(tenure.BackendUnavailable, match=r"127\.0\.0\.1:1 is unavailable"):
            await tenure.aio.connect("etcd://127.0.0.1:1/x?timeout=2")  # served natively: reached for
        async with tenure.aio.connect("memory://") as opened:
            assert (await opened.health())["io"] == "in the event loop (no I/O)"

    run(scenario)


def test_the_aio_surface_is_exported_and_awaitable_where_it_does_io() -> None:
    assert sorted(tenure.aio.__all__) == sorted(set(tenure.aio.__all__))
    for name in tenure.aio.__all__:
        assert hasattr(tenure.aio, name), name
    # No I/O: hold() returns what is entered or awaited, jobs() and watch() async iterators,
    # hold_lease() starts a task.
    not_coroutines = {"hold", "hold_lease", "jobs", "watch"}
    for name, member in inspect.getmembers(tenure.Store):
        if name.startswith("_") or not callable(member):
            continue
        mirrored: Any = getattr(AsyncStore, name, None)
        assert mirrored is not None, f"AsyncStore has no {name}()"
        assert inspect.iscoroutinefunction(mirrored) is (name not in not_coroutines), name


def test_watch_polls_on_postgresql_when_writes_do_not_notify(postgres_harness: Harness) -> None:
    async def scenario() -> None:
        # timeout=30: a LISTEN-based watch would see the job only at its full re-read after 31 s.
        async with tenure.aio.connect(f"{postgres_harness.url()}&notify=false&timeout=30") as store:
            seen = asyncio.Event()
            changes = store.watch(interval=0.05)

            async def follow() -> None:
                async for change in changes:
                    if change.job is not None and change.job.job_id == "w":
                        seen.set()
                        return

            following = asyncio.ensure_future(follow())
            await asyncio.sleep(0.3)  # real time: the watch has read the empty store
            await store.submit("w")
            await asyncio.wait_for(seen.wait(), 5.0)
            await following
            await changes.aclose()  # type: ignore[attr-defined]

    run(scenario)


def test_closing_the_store_gives_a_held_lease_back_and_leaving_the_block_after_sends_nothing(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"

    async def scenario() -> None:
        store = await tenure.aio.connect(url)
        held = await store.hold("j", owner="a", ttl=30.0)
        await store.close()  # ends the lease: lost, then given back
        assert held.lost.is_set() and "the store was closed" in (held.lost_reason or "")
        await held.__aexit__(None, None, None)  # what leaving the block does: no exception
        assert held.finished
        with pytest.raises(tenure.BackendUnavailable, match="closed"):
            await store.get("j")
        async with tenure.aio.connect(url) as other:
            status = await other.get("j")
            assert status is not None and status.state is tenure.JobState.PENDING
            assert [e.op for e in await other.history("j")] == [tenure.Op.CLAIM, tenure.Op.RELEASE]

    run(scenario)
    assert "failed" not in caplog.text


def test_a_holder_that_releases_on_hearing_the_store_closed_still_frees_the_job(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"

    async def scenario() -> None:
        store = await tenure.aio.connect(url)
        held = await store.hold("j", owner="a", ttl=30.0)

        async def holder() -> None:  # gives the job back the moment it is told the lease is lost
            await held.lost.wait()
            await held.release()

        told = asyncio.create_task(holder())
        await asyncio.sleep(0)  # the holder waits on lost
        await store.close()
        await told
        async with tenure.aio.connect(url) as other:
            status = await other.get("j")
            assert status is not None and status.state is tenure.JobState.PENDING, status

    run(scenario)


def test_concurrent_claimers_in_one_loop_take_each_job_once(opener: Opener) -> None:
    async def scenario() -> None:
        async with opener() as store:
            jobs = [f"job-{i:02d}" for i in range(40)]
            await store.submit_many(jobs)

            async def claimer(name: str) -> list[tuple[str, int]]:
                won = []
                while (lease := await store.claim_next(owner=name, ttl=30.0)) is not None:
                    won.append((lease.job_id, lease.token))
                    await asyncio.sleep(0)  # let the others in between a claim and its completion
                    await store.complete(lease)
                return won

            results = await asyncio.gather(*(claimer(f"w{i}") for i in range(16)))
            wins = [win for result in results for win in result]
            assert sorted(job for job, _ in wins) == jobs  # every job, each once
            assert await store.rejections() == []
            assert (await store.summary()).completed == len(jobs)

    run(scenario)
