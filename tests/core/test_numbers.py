"""Numbers and durations from callers: a clear InvalidArgument, never OverflowError or TypeError.

Every number a caller hands tenure goes through ``tenure.core.validation.number`` or
``seconds``: an int too large for a float (10**400), a bool, nan or infinity, a Decimal or a
str is refused in the same words, and nothing is written.
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Callable, Iterator

import pytest

import tenure
from tenure.core import validation

HOSTILE = [10**400, -(10**400), True, math.nan, math.inf, -math.inf, decimal.Decimal("1.5"), "10", None, b"1"]


def _id(value: object) -> str:
    huge = isinstance(value, int) and not isinstance(value, bool)
    return f"int-of-{value.bit_length()}-bits" if huge else repr(value)


@pytest.mark.parametrize("value", HOSTILE, ids=_id)
def test_the_helpers_refuse_hostile_numbers(value: object) -> None:
    checks: list[Callable[[], object]] = [
        lambda: validation.number("x", value),
        lambda: validation.seconds("wait", value, maximum=validation.MAX_WAIT),
        lambda: validation.ttl(value),
        lambda: validation.store_time("since", value),
    ]
    if not (isinstance(value, float) and value == math.inf):  # a deadline of +inf means "not stamped"
        checks.append(lambda: validation.deadline(value))
    for check in checks:
        with pytest.raises(tenure.InvalidArgument, match="must be a"):
            check()


def test_durations_are_bounded_above() -> None:
    with pytest.raises(tenure.InvalidArgument, match="above the maximum"):
        validation.seconds("wait", validation.MAX_WAIT * 2, maximum=validation.MAX_WAIT)
    with pytest.raises(tenure.InvalidArgument, match=r"ttl .* above the maximum"):
        validation.ttl(1e300, maximum=math.inf)  # whatever a backend declares, MAX_TTL holds
    assert validation.seconds("wait", 0, maximum=1.0) == 0.0
    assert validation.number("x", 2**80) == float(2**80)


@pytest.fixture
def store() -> Iterator[tenure.Store]:
    with tenure.connect("memory://") as s:
        yield s


@pytest.mark.parametrize("value", HOSTILE, ids=_id)
def test_store_calls_refuse_hostile_numbers_and_write_nothing(store: tenure.Store, value: object) -> None:
    calls: list[Callable[[], object]] = [
        lambda: store.claim("j", "a", value),  # type: ignore[arg-type]
        lambda: store.claim_next("a", value),  # type: ignore[arg-type]
        lambda: store.summary(value),  # type: ignore[arg-type]
        lambda: store.watch(interval=value),  # type: ignore[arg-type]
    ]
    if value is not None:  # None means "no wait" and "from the start"
        calls += [lambda: store.claim("j", "a", 5.0, wait=value),  # type: ignore[arg-type]
                  lambda: store.claim_next("a", 5.0, wait=value),  # type: ignore[arg-type]
                  lambda: store.rejections(since=value),  # type: ignore[arg-type]
                  lambda: store.history(since=value)]  # type: ignore[arg-type]
    for call in calls:
        with pytest.raises(tenure.InvalidArgument):
            call()
    assert list(store.jobs()) == [] and store.history() == []


@pytest.mark.parametrize("value", [10**400, math.inf, "x", decimal.Decimal("0.1"), True, 0.9, -0.1])
def test_drift_margin_is_a_bounded_fraction(value: object) -> None:
    backend = tenure.connect("memory://").backend
    with pytest.raises(tenure.InvalidArgument, match="drift_margin"):
        tenure.Store(backend, drift_margin=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("option", [{"timeout": 10**400}, {"retention": math.inf}, {"drift_margin": 10**400}])
def test_connect_options_refuse_numbers_that_overflow(tmp_path: object, option: dict[str, object]) -> None:
    with pytest.raises(tenure.InvalidArgument, match="option"):
        tenure.connect(f"sqlite:///{tmp_path}/x.db", **option)
