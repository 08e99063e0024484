"""How many refusals of unproven requests a fence forwards to the store's audit.

Anyone who can reach a fence can send a request with a made-up job id, owner and signature.
Forwarding each refusal would cost a store write per anonymous request, and enough of them
would push the real refusals out of the audit's retention. So refusals of unproven requests
are forwarded at most ``per_minute`` a minute per fence (a token bucket, full at the start);
the rest are counted, and the next one forwarded says how many were not recorded. Refusals
of requests whose proof verified are not counted here: each is forwarded.
"""

from __future__ import annotations

import threading

from tenure.core.clock import SYSTEM_CLOCK, Clock
from tenure.core.errors import InvalidArgument

UNPROVEN_PER_MINUTE = 10


class RefusalBudget:
    """A token bucket of ``per_minute`` forwards, refilled continuously."""

    def __init__(self, per_minute: int = UNPROVEN_PER_MINUTE, clock: Clock = SYSTEM_CLOCK) -> None:
        if isinstance(per_minute, bool) or not isinstance(per_minute, int) or per_minute < 1:
            raise InvalidArgument(f"unproven_per_minute must be a positive int, got {per_minute!r}")
        self.per_minute = per_minute
        self._clock = clock
        self._lock = threading.Lock()
        self._left = float(per_minute)
        self._at = clock.monotonic()
        self.unrecorded = 0  # refusals not forwarded since the last one that was

    def take(self) -> int | None:
        """None when this refusal is over the budget (it is counted); otherwise it may be
        forwarded, and the count of those not recorded before it (reset to 0)."""
        with self._lock:
            now = self._clock.monotonic()
            self._left = min(float(self.per_minute), self._left + (now - self._at) * self.per_minute / 60.0)
            self._at = now
            if self._left < 1.0:
                self.unrecorded += 1
                return None
            self._left -= 1.0
            skipped, self.unrecorded = self.unrecorded, 0
            return skipped
