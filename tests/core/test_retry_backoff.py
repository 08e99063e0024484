"""The retry backoff (``lifecycle.Retry.seconds``) for attempt counts far past the usual."""

from __future__ import annotations

import pytest

from tenure.core.lifecycle import MAX_ATTEMPTS, Retry


@pytest.mark.parametrize("factor", [1.0, 1.5, 3.0, 100.0])
def test_the_backoff_is_a_number_up_to_its_cap_at_any_attempt(factor: float) -> None:
    # A float power overflows (OverflowError) past about 1e308: the backoff stops at its cap first.
    for attempts in (1, 2, 10, 700, 1002, MAX_ATTEMPTS):
        wait = Retry(None, 1.0, factor, 600.0, 0.0).seconds(attempts)
        assert 0.5 <= wait <= 300.0


def test_a_constant_backoff_stays_constant() -> None:
    # retry_factor=1: every retry waits retry_base, however many attempts came before.
    assert {Retry(None, 2.0, 1.0, 600.0, 0.0).seconds(n) for n in (1, 1001, 1002, MAX_ATTEMPTS)} == {1.0}
    assert Retry(None, 0.0, 100.0, 600.0, 0.0).seconds(MAX_ATTEMPTS) == 0.0  # retry_base=0: never waits
