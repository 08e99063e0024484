"""Idempotency keys: an effect retried after a crash applies once."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import tenure
from tenure.fencing import IdempotencyKeys, SQLFence
from tests.fencing.databases import Database

CHARGE = "INSERT INTO charges (invoice, cents) VALUES (?, ?)"


@pytest.fixture
def store() -> Iterator[tenure.Store]:
    s = tenure.connect(f"memory://effects-{uuid.uuid4().hex}", clock=tenure.ManualClock())
    yield s
    s.close()


@pytest.fixture
def charges(db: Database) -> Database:
    db.execute("CREATE TABLE charges (invoice TEXT NOT NULL, cents INTEGER NOT NULL)")
    return db


def _charge(db: Database) -> Any:
    return lambda cur: cur.execute(db.q(CHARGE), ("inv-1", 500))


def test_an_effect_retried_after_a_crash_before_completion_applies_once(
        charges: Database, store: tenure.Store) -> None:
    store.submit("bill-1")
    a = store.claim("bill-1", owner="worker-a", ttl=10.0)
    conn = charges.connect()
    assert IdempotencyKeys(conn).apply_once("charge inv-1", a, _charge(charges)) is True
    conn.close()  # worker A crashes here: the charge committed, the job was never completed
    assert isinstance(store.clock, tenure.ManualClock)
    store.clock.advance(11)
    b = store.claim("bill-1", owner="worker-b", ttl=10.0)  # the job runs again, from the top
    conn = charges.connect()
    keys = IdempotencyKeys(conn)
    assert keys.apply_once("charge inv-1", b, _charge(charges)) is False
    assert keys.apply_once("send receipt", b, lambda cur: None) is True  # other effects still run
    store.complete(b)
    assert charges.rows("SELECT invoice, cents FROM charges") == [("inv-1", 500)]
    assert keys.applied("charge inv-1", job_id="bill-1") == a.token  # applied under A's token
    conn.close()


def test_a_crash_inside_the_effect_leaves_no_key_so_the_retry_applies(charges: Database) -> None:
    conn = charges.connect()
    keys = IdempotencyKeys(conn)

    def fails_half_way(cur: Any) -> None:
        cur.execute(charges.q(CHARGE), ("inv-2", 100))
        raise ConnectionResetError("the worker lost its connection mid-effect")

    with pytest.raises(ConnectionResetError):
        keys.apply_once("charge inv-2", 3, fails_half_way, job_id="bill-2")
    assert keys.applied("charge inv-2", job_id="bill-2") is None
    assert keys.apply_once("charge inv-2", 4, _charge(charges), job_id="bill-2") is True
    assert charges.rows("SELECT cents FROM charges") == [(500,)]
    conn.close()


def test_keys_and_a_fence_share_one_transaction(charges: Database) -> None:
    conn = charges.connect()
    fence, keys = SQLFence(conn), IdempotencyKeys(conn)
    for _ in range(2):  # the same holder retrying: the fence admits it, the key stops it
        with fence.fenced("invoices/inv-3", 5, job_id="bill-3", owner="w") as cur:
            if keys.record("charge inv-3", 5, job_id="bill-3", owner="w"):
                cur.execute(charges.q(CHARGE), ("inv-3", 700))
    with pytest.raises(tenure.StaleToken), fence.fenced("invoices/inv-3", 4, job_id="bill-3"):
        pass
    assert charges.rows("SELECT invoice FROM charges") == [("inv-3",)]
    conn.close()


def test_two_holders_racing_on_one_key_apply_the_effect_once(charges: Database) -> None:
    setup = charges.connect()
    IdempotencyKeys(setup)  # the table exists before the race
    setup.close()
    start = threading.Barrier(4)
    outcomes: list[bool] = []

    def retry(token: int) -> None:
        conn = charges.connect()
        try:
            keys = IdempotencyKeys(conn, create=False)
            start.wait(timeout=30)
            outcomes.append(keys.apply_once("charge inv-4", token, _charge(charges), job_id="bill-4"))
        finally:
            conn.close()

    threads = [threading.Thread(target=retry, args=(t,)) for t in (1, 2, 3, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(outcomes) == [False, False, False, True]
    assert charges.rows("SELECT COUNT(*) FROM charges") == [(1,)]
