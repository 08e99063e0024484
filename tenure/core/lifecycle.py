"""A job's life cycle beyond one lease: attempts, retries after a failure, parking.

``Lifecycle`` is a store's policy, from its URL (``max_attempts``, ``retry_base``,
``retry_factor``, ``retry_max``): the attempts a job gets when its submitter does not say,
and the backoff before a failed job may be claimed again when its holder does not say.
The decisions on one record (count, park, schedule) are in ``tenure.core.transitions``.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from tenure.core.options import Options

RETRY_BASE = 1.0  # seconds before the first retry, before jitter
RETRY_FACTOR = 2.0  # each further attempt waits this many times longer
RETRY_MAX = 600.0  # no backoff waits longer than this
MAX_ATTEMPTS = 1_000_000  # the most a job (or a store default) may allow
MAX_DELAY = 366 * 24 * 3600.0  # a delay or retry_in of at most a year (a later one is a mistake)
MAX_ERROR = 4096  # characters of a fail()'s error kept with the job
# Past factor ** exponent = e ** GROWTH the backoff is its cap: the power is never computed
# where a float (Python's, PostgreSQL's float8) would overflow.
GROWTH = 600.0


@dataclass(frozen=True)
class Lifecycle:
    max_attempts: int | None = None  # for jobs submitted (or first claimed) without one; None: unlimited
    retry_base: float = RETRY_BASE
    retry_factor: float = RETRY_FACTOR
    retry_max: float = RETRY_MAX

    @classmethod
    def from_options(cls, options: Options) -> Lifecycle:
        limit = options.integer("max_attempts", 0, low=0, high=MAX_ATTEMPTS)  # 0 (the default): unlimited
        base = options.number("retry_base", RETRY_BASE, low=0.0, high=MAX_DELAY)
        factor = options.number("retry_factor", RETRY_FACTOR, low=1.0, high=100.0)
        ceiling = options.number("retry_max", RETRY_MAX, low=0.0, high=MAX_DELAY)
        assert base is not None and factor is not None and ceiling is not None
        return cls(limit or None, base, factor, ceiling)

    def run(self, max_attempts: int | None, delay: float) -> dict[str, float | int]:
        """A new run's keywords for a backend's submit (or a claim that creates the job): the
        caller's limit or this default, and the delay; those at their defaults left out, so a
        backend written before them still takes the call."""
        limit = self.max_attempts if max_attempts is None else max_attempts
        found: dict[str, float | int] = {} if limit is None else {"max_attempts": limit}
        if delay:
            found["delay"] = delay
        return found

    @functools.cached_property
    def creating(self) -> Mapping[str, int]:
        """A claim's keywords: the limit of a job the claim creates, when there is a default
        (worked out once: every claim passes them)."""
        return MappingProxyType({} if self.max_attempts is None else {"max_attempts": self.max_attempts})

    def retry(self, retry_in: float | None = None, draw: float | None = None) -> Retry:
        """When a failed job may be claimed again: after ``retry_in`` seconds if the holder
        said, else after this policy's backoff for its attempts (``draw``: the jitter's share
        in [0, 1), random by default; drawn once, so a step run again decides the same)."""
        share = random.random() if draw is None else draw
        return Retry(retry_in, self.retry_base, self.retry_factor, self.retry_max, share)


@dataclass(frozen=True)
class Retry:
    """A fail()'s wait before the next claim, decided in the store's atomic step, where the
    job's attempts are known. PostgreSQL's statement computes ``seconds`` in SQL from the same
    fields (a test holds the two to the same cases)."""

    after: float | None  # the holder's retry_in; None: the backoff below
    base: float = RETRY_BASE
    factor: float = RETRY_FACTOR
    cap: float = RETRY_MAX
    draw: float = 0.5  # the jitter's share, in [0, 1)

    def seconds(self, attempts: int) -> float:
        """``after``, or ``base * factor ** (attempts - 1)`` at most ``cap``, jittered down to
        between half of it and all of it (so the jobs of one outage do not come back in step)."""
        if self.after is not None:
            return self.after
        exponent = max(attempts, 1) - 1
        if exponent * math.log(self.factor) <= GROWTH:
            full = min(self.cap, self.base * self.factor ** exponent)
        else:
            full = self.cap if self.base > 0 else 0.0
        return full * (0.5 + 0.5 * self.draw)


DEFAULT = Lifecycle()
