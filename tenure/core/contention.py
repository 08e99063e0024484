"""Optimistic writes on a shared store, retried the same way on every backend.

An operation reads, decides with ``transitions``, and writes on the condition that nothing it
read has changed (an etcd compare, a ZooKeeper version check). When another writer got there
first, the write fails as a whole and the operation reads again: after a short random pause,
so two writers that collided do not collide again in step, growing while they keep colliding.
After ``ATTEMPTS`` it gives up with ``Outraced``: nothing was written.

This module holds the numbers (``ATTEMPTS``, the pauses) and the one error; when an operation
attempts again, after what pause, and when it gives up is decided once, by ``steps.Tries``, for
record transactions and for a store whose attempt is one request (``steps.attempted``: an
attempt tells it what happened by raising ``Collided`` or ``Resend``, and it yields a ``Pause``
for its driver to sleep).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from tenure.core.errors import Outraced

ATTEMPTS = 20  # reads of one operation before it gives up
# claim_next's: a race it lost is another claimer's win, so the queue moved on. With N
# claimers after the same oldest job each wins a round about once in N, so 20 attempts end
# in Outraced for a sizeable share of calls at 16 claimers; this bound is for a store that
# keeps refusing, not for a busy queue.
CLAIM_NEXT_ATTEMPTS = 200
# claim_next's concurrent callers start up to this many queue places apart (protocol.md's
# promise: each call takes one of the SPREAD oldest claimable pending jobs queued by a client;
# tenure.core.order.spread_start applies it).
SPREAD = 4
FIRST_PAUSE = 0.002  # seconds, at most, before the first retry; doubles per retry
LONGEST_PAUSE = 0.1  # seconds, at most, of any one pause


def pause(retry: int, rand: Callable[[], float] = random.random) -> float:
    """The pause before retry number ``retry`` (1 for the first): full jitter, capped."""
    return rand() * min(LONGEST_PAUSE, FIRST_PAUSE * 2.0 ** (retry - 1))


def wait(retry: int) -> None:
    """Sleep the pause before retry number ``retry`` (1 for the first)."""
    time.sleep(pause(retry))


def outraced(job_id: str, count: int = ATTEMPTS) -> Outraced:
    """The one error of an operation that lost the race on every attempt."""
    return Outraced(job_id, count)


class Collided(Exception):
    """Raised by one attempt that lost a race and wrote nothing (another writer changed what it
    judged, or the store rolled it back): ``steps.attempted`` runs it again after a pause."""


class Resend(Exception):
    """Raised by one attempt that wrote nothing and collided with no one (etcd: an etcd lease it
    named was gone): ``steps.attempted`` makes it again at once, uncounted. The store makes
    sure its resends end (etcd's: once)."""


@dataclass(frozen=True)
class Pause:
    """Yielded by ``steps.attempted`` before a retry: the driver sleeps ``seconds`` (its own way)."""

    seconds: float
