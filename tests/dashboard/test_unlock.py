"""The admin unlock's limit is per client address under a server-wide ceiling: a flood of wrong
secrets from one address never locks out another."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import tenure
from tenure.dashboard import admin, unlock
from tenure.dashboard.unlock import Attempt, UnlockLimiter, client_key
from tests.dashboard.conftest import goto, plain
from tests.dashboard.seeding import JOB, seeded

SECRET = "correct horse battery"
GUESSER, OPERATOR = "203.0.113.7", "198.51.100.2"


def test_a_flood_from_one_address_does_not_lock_out_another() -> None:
    clock = tenure.ManualClock()
    limiter = UnlockLimiter(clock)
    for _ in range(1000):  # as fast as it can send: only the first few are even compared
        attempt = limiter.attempt("guess", SECRET, GUESSER)
        assert not attempt.unlocked
    assert limiter.attempt(SECRET, SECRET, GUESSER) == Attempt(False, False, 1.0)  # its own backoff
    assert limiter.attempt("typo", SECRET, OPERATOR) == Attempt(False, True, 0.0)  # heard, no wait
    assert limiter.attempt(SECRET, SECRET, OPERATOR).unlocked
    assert limiter.attempt(SECRET, SECRET, None).unlocked  # the same machine is an address of its own


def test_many_addresses_are_held_to_the_ceiling_for_at_most_one_window() -> None:
    clock = tenure.ManualClock()
    limiter = UnlockLimiter(clock)
    for i in range(unlock.CEILING_TRIES):
        assert limiter.attempt("guess", SECRET, f"203.0.113.{i}").heard
        clock.advance(1.0)
    refused = limiter.attempt(SECRET, SECRET, OPERATOR)  # even the right secret is not compared
    assert (refused.unlocked, refused.heard, refused.ceiling) == (False, False, True)
    assert refused.retry_after == unlock.CEILING_WINDOW - unlock.CEILING_TRIES
    clock.advance(refused.retry_after)  # the oldest wrong try left the window
    assert limiter.attempt(SECRET, SECRET, OPERATOR).unlocked


@pytest.mark.parametrize("local", [None, "127.0.0.1", "::1", "::ffff:127.0.0.1"])
def test_a_guesser_with_many_networks_never_locks_out_the_operator_on_the_machine(local: str | None) -> None:
    clock = tenure.ManualClock()
    limiter = UnlockLimiter(clock)
    for i in range(150):  # ~150 IPv6 /64s keep the ceiling full for as long as they try
        limiter.attempt("guess", SECRET, f"2001:db8:0:{i:x}::1")
        clock.advance(0.2)  # 30 s: the ceiling's first 30 are still in its window
    assert limiter.attempt(SECRET, SECRET, OPERATOR).ceiling  # a remote operator waits for the window
    for _ in range(unlock.FREE_TRIES):  # typos over an SSH tunnel: heard, and not held by the ceiling
        assert limiter.attempt("typo", SECRET, local) == Attempt(False, True, 0.0)
    assert limiter.attempt("typo", SECRET, local) == Attempt(False, True, unlock.FIRST_WAIT)  # its own count
    clock.advance(unlock.FIRST_WAIT)
    assert limiter.attempt(SECRET, SECRET, local).unlocked
    assert limiter.attempt(SECRET, SECRET, OPERATOR).ceiling  # local tries did not fill the ceiling either


@pytest.mark.parametrize(("one", "other", "same"), [
    ("2001:db8:1:2::1", "2001:db8:1:2:ffff::9", True),  # one /64: one machine's addresses
    ("2001:db8:1:2::1", "2001:db8:1:3::1", False),
    ("::ffff:203.0.113.7", "203.0.113.7", True),
    ("203.0.113.7", "203.0.113.8", False),
    (None, "", True),
    ("127.0.0.1", None, True),  # loopback is the machine itself, however it is spelled
    ("::1", "127.0.0.2", True),
    ("::1", "::2", False),
])
def test_whose_count_a_try_goes_to(one: str | None, other: str | None, same: bool) -> None:
    assert (client_key(one) == client_key(other)) is same


@pytest.fixture
def address(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    """Set the address the app's next try comes from; the server's limiter on a test clock."""
    saved = unlock.LIMITER.clock
    unlock.LIMITER.clock = tenure.ManualClock()
    unlock.LIMITER.reset()
    yield lambda ip: monkeypatch.setattr(admin, "client_address", lambda: ip)
    unlock.LIMITER.clock = saved
    unlock.LIMITER.reset()


def test_the_dashboard_counts_tries_by_address(tmp_path: Path, open_app: Callable[..., AppTest],
                                               address: Callable[[str], None]) -> None:
    seed = seeded("memory", tmp_path)  # the wiring is the same on every store: one is enough
    address(GUESSER)
    guesser = goto(open_app(seed.url, admin_secret=SECRET), "Job detail", job=JOB)
    for _ in range(unlock.FREE_TRIES + 3):
        guesser.text_input(key="admin_secret_input").set_value("guess").run()
    assert any("Too many wrong tries from your address" in plain(e.value) for e in guesser.error)
    address(OPERATOR)
    operator = goto(open_app(seed.url, admin_secret=SECRET), "Job detail", job=JOB)
    operator.text_input(key="admin_secret_input").set_value(SECRET).run()
    assert "Admin actions unlocked" in [s.value for s in operator.success]
    seed.store.close()


def test_the_docs_state_the_limits_the_code_keeps() -> None:
    text = " ".join((Path(__file__).resolve().parents[2] / "docs" / "dashboard.md").read_text().split())
    assert unlock.CEILING_WINDOW == 60.0 and unlock.MAX_WAIT == 300.0 and unlock.FREE_TRIES == 3
    assert f"at most {unlock.CEILING_TRIES} wrong tries are heard per minute" in text
    assert "rate-limited per client address" in text and "up to 5 minutes" in text and "/64" in text
    assert "never by the ceiling" in text and "if the dashboard is flooded, reach it through an SSH tunnel" in text
