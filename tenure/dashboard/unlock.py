"""The admin unlock's rate limit: per client address, under one ceiling for the whole server.

Each client address gets a few tries; after that each wrong secret doubles the wait before
that address's next try is even compared (up to ``MAX_WAIT``), whichever browser session it
comes from: a new tab buys no new tries. Per address, so that a guesser cannot push the
operator's next try out to ``MAX_WAIT``; an IPv6 client counts by its /64 network, which one
machine is commonly given whole. Above that, at most ``CEILING_TRIES`` wrong secrets are heard
per ``CEILING_WINDOW`` from all addresses together, so a guesser with many addresses is held to
that rate; while the ceiling is reached no try is compared, the operator's included, for at
most the rest of one window. Tries from the machine itself (loopback: a browser there, an SSH
tunnel) have their own count but are never held by the ceiling, nor counted in it: a guesser
with many networks can keep the ceiling full, and the operator still gets in through a tunnel.
The right secret resets its address's count.
"""

from __future__ import annotations

import collections
import hmac
import ipaddress
import threading
from dataclasses import dataclass

from tenure.core.bounded import Bounded
from tenure.core.clock import SYSTEM_CLOCK, Clock

FREE_TRIES = 3  # typos before any wait
FIRST_WAIT = 1.0  # seconds after the first wrong try beyond the free ones; doubles each time
MAX_WAIT = 300.0
CEILING_TRIES = 30  # wrong secrets heard per window from every address together
CEILING_WINDOW = 60.0
ADDRESSES_KEPT = 10_000  # the oldest address's count goes first: it had its tries
LOCAL = "local"  # the same machine: a loopback address, or none (Streamlit gives none there)
_IPV6_NETWORK = 64


@dataclass(frozen=True)
class Attempt:
    """The outcome of one try: unlocked, or not, and how long until the next try is heard."""

    unlocked: bool
    heard: bool = True  # False: refused during a backoff, without comparing
    retry_after: float = 0.0  # seconds until the next try is heard
    ceiling: bool = False  # refused because the server-wide ceiling was reached, not this address's count


def client_key(address: str | None) -> str:
    """Whose count a try goes to: an IPv4 address, an IPv6 /64 network, or ``LOCAL`` (loopback)."""
    if not address or not isinstance(address, str):
        return LOCAL
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address[:64]  # not an address (a Unix socket's name): counted as given, bounded
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is not None:
        parsed = parsed.ipv4_mapped  # ::ffff:203.0.113.7 is 203.0.113.7
    if parsed.is_loopback:
        return LOCAL
    if isinstance(parsed, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((parsed, _IPV6_NETWORK), strict=False))
    return str(parsed)


@dataclass
class _Backoff:
    failures: int = 0
    next_try: float = 0.0


class UnlockLimiter:
    """Compares secrets in constant time, refusing tries while an address's backoff runs or the
    server-wide ceiling is reached."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._clients: Bounded[str, _Backoff] = Bounded(ADDRESSES_KEPT)
        self._heard: collections.deque[float] = collections.deque()  # when each recent wrong try was heard

    def attempt(self, given: str, expected: str, address: str | None = None) -> Attempt:
        """One try from ``address`` (``st.context.ip_address``; None: the local machine)."""
        key = client_key(address)
        with self._lock:  # one try at a time, so concurrent sessions cannot race the counts
            now = self.clock.monotonic()
            backoff = self._clients.get(key) or _Backoff()
            if now < backoff.next_try:
                return Attempt(False, False, backoff.next_try - now)
            while self._heard and self._heard[0] <= now - CEILING_WINDOW:
                self._heard.popleft()
            if key != LOCAL and len(self._heard) >= CEILING_TRIES:
                return Attempt(False, False, self._heard[0] + CEILING_WINDOW - now, ceiling=True)
            if hmac.compare_digest(given.encode(), expected.encode()):
                self._clients.pop(key)
                return Attempt(True)
            if key != LOCAL:  # nor may local tries fill the ceiling against remote operators
                self._heard.append(now)
            backoff.failures += 1
            beyond = backoff.failures - FREE_TRIES
            wait = 0.0 if beyond <= 0 else min(MAX_WAIT, FIRST_WAIT * 2 ** (beyond - 1))
            backoff.next_try = now + wait
            self._clients.put(key, backoff, refresh=True)
            return Attempt(False, True, wait)

    def reset(self) -> None:
        with self._lock:
            self._clients = Bounded(ADDRESSES_KEPT)
            self._heard.clear()


LIMITER = UnlockLimiter()  # the server's one limiter
