"""PostgreSQL's statements run again under the core's retry policy (``steps.attempted``): as
many attempts as every store's step, the same pauses, ``Outraced`` at the end.

The plans are free of I/O, so they are driven here by the core's driver (``io_drivers.run``)
with the answers the server gives: a row changed between the statement's judgement and its
write ('retry', or no row yet for a first claim), or a statement it rolled back (a serialization
failure: the backend raises ``Collided``, tests/backends/test_postgres.py has the real one).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import tenure
from tenure.backends.postgres.ops import Effect, Plan, Plans, Query, Rows
from tenure.core import contention, io_drivers
from tenure.core.records import Lease

LEASE = Lease("j", "w1", 3, 100.0, 30.0)
Answer = Callable[[Query], Rows]


class Driven:
    """The statements a plan sent and the pauses it asked for, each query answered by ``answer``."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.queries: list[Query] = []
        self.pauses: list[float] = []

    def __call__(self, effect: Effect) -> Rows:
        if isinstance(effect, contention.Pause):
            self.pauses.append(effect.seconds)
            return []
        self.queries.append(effect)
        return self.answer(effect)

    def run(self, plan: Plan[Any]) -> Any:
        return io_drivers.run(plan, self)


@pytest.fixture(autouse=True)
def numbered_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each pause is its retry's number (the core's jitter drawn away), to count them in order."""
    monkeypatch.setattr(contention, "pause", lambda retry: float(retry))


@pytest.fixture
def plans() -> Plans:
    return Plans("tenure", '"tenure"', "")


def rolled_back(query: Query) -> Rows:
    raise contention.Collided  # what the backend raises for SQLSTATE 40001 / 40P01


def renewed(query: Query) -> Rows:
    return [("done", 130.0, 30.0, 1, 100.0, None)]


def test_a_claim_that_never_sees_the_row_runs_the_cores_attempts_then_is_outraced(plans: Plans) -> None:
    driven = Driven(lambda query: [])  # another session's first claim, never visible to ours
    with pytest.raises(tenure.Outraced) as info:
        driven.run(plans.claim("j", "w1", 30.0))
    assert (info.value.job_id, info.value.attempts) == ("j", contention.ATTEMPTS)
    assert len(driven.queries) == contention.ATTEMPTS
    assert driven.pauses == [float(retry) for retry in range(1, contention.ATTEMPTS)]  # before each retry


def test_a_statement_the_server_rolled_back_runs_again_after_the_cores_pause(plans: Plans) -> None:
    answers = iter([rolled_back, rolled_back, renewed])
    driven = Driven(lambda query: next(answers)(query))
    lease = driven.run(plans.renew(LEASE, 30.0))
    assert lease == Lease("j", "w1", 3, 130.0, 30.0, attempt=1)
    assert len(driven.queries) == 3 and driven.pauses == [1.0, 2.0]


def test_a_holder_statement_whose_row_keeps_changing_is_outraced(plans: Plans) -> None:
    driven = Driven(lambda query: [("retry", None, None, None, 100.0, None, None)])
    with pytest.raises(tenure.Outraced) as info:
        driven.run(plans.complete(LEASE, b"done"))
    assert (info.value.job_id, info.value.attempts) == ("j", contention.ATTEMPTS)
    assert len(driven.queries) == contention.ATTEMPTS and len(driven.pauses) == contention.ATTEMPTS - 1


def test_claim_next_outlasts_rollbacks_as_long_as_the_cores_claim_next(plans: Plans) -> None:
    driven = Driven(rolled_back)
    with pytest.raises(tenure.Outraced) as info:
        driven.run(plans.claim_next("w1", 30.0))
    assert info.value.attempts == contention.CLAIM_NEXT_ATTEMPTS == len(driven.queries)


def test_a_batch_asks_again_only_for_the_leases_whose_rows_changed(plans: Plans) -> None:
    # renew_many judges each lease alone: 'a' is renewed at once; 'b' lost its race every time
    # (judged current, changed before written: the statement returns no row for it) and alone
    # is Outraced, after the core's attempts and pauses.
    def answer(query: Query) -> Rows:
        return [(n, "done", 130.0, 30.0, 100.0, None) for n, job in enumerate(query.params["jobs"], 1)
                if job == "a"]

    driven = Driven(answer)
    a, b = Lease("a", "w1", 1, 100.0, 30.0), Lease("b", "w1", 2, 100.0, 30.0)
    found = driven.run(plans.renew_many([(a, 30.0), (b, 30.0)]))
    assert found[0] == Lease("a", "w1", 1, 130.0, 30.0)
    assert isinstance(found[1], tenure.Outraced) and found[1].job_id == "b"
    assert [q.params["jobs"] for q in driven.queries] == [["a", "b"]] + [["b"]] * (contention.ATTEMPTS - 1)
    assert driven.pauses == [float(retry) for retry in range(1, contention.ATTEMPTS)]


def test_a_read_is_asked_once_when_it_is_answered(plans: Plans) -> None:
    driven = Driven(lambda query: [(1234.5,)])
    assert driven.run(plans.now()) == 1234.5
    assert len(driven.queries) == 1 and driven.pauses == []
