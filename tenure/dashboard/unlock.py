"""The admin unlock's rate limit: one per dashboard server process, shared by every browser session.

A guesser gets a few tries; after that each wrong secret doubles the wait before the next try
is even compared (up to ``MAX_WAIT``), whichever session it comes from. The right secret resets
the count. Per server, not per session: a new browser tab must not buy new tries.
"""

from __future__ import annotations

import hmac
import threading
from dataclasses import dataclass

from tenure.core.clock import SYSTEM_CLOCK, Clock

FREE_TRIES = 3  # typos before any wait
FIRST_WAIT = 1.0  # seconds after the first wrong try beyond the free ones; doubles each time
MAX_WAIT = 300.0


@dataclass(frozen=True)
class Attempt:
    """The outcome of one try: unlocked, or not, and how long until the next try is heard."""

    unlocked: bool
    heard: bool = True  # False: refused during a backoff, without comparing
    retry_after: float = 0.0  # seconds until the next try is heard


class UnlockLimiter:
    """Compares secrets in constant time, refusing tries while a backoff runs."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._failures = 0
        self._next_try = 0.0

    def attempt(self, given: str, expected: str) -> Attempt:
        with self._lock:  # one try at a time, so concurrent sessions cannot race the count
            now = self.clock.monotonic()
            if now < self._next_try:
                return Attempt(False, False, self._next_try - now)
            if hmac.compare_digest(given.encode(), expected.encode()):
                self._failures, self._next_try = 0, 0.0
                return Attempt(True)
            self._failures += 1
            beyond = self._failures - FREE_TRIES
            wait = 0.0 if beyond <= 0 else min(MAX_WAIT, FIRST_WAIT * 2 ** (beyond - 1))
            self._next_try = now + wait
            return Attempt(False, True, wait)

    def reset(self) -> None:
        with self._lock:
            self._failures, self._next_try = 0, 0.0


LIMITER = UnlockLimiter()  # the server's one limiter
