"""What the conformance suite needs from a backend, assembled from the suite's fixtures.

A test of the suite gets a ``Kit``: the URL of a fresh store, the options to open it with,
and the optional hooks a backend provides (make a lease expire, corrupt a record, plant a
tampered one, restart the server). A hook that is missing makes the tests that need it skip, saying which hook.
"""

from __future__ import annotations

import enum
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

import tenure
from tenure.core.options import parse_url
from tenure.core.registry import backend_class

ExpireHook = Callable[[tenure.Store, tenure.Lease], None]
CorruptHook = Callable[[tenure.Store, str], None]


class Tampering(str, enum.Enum):
    """How a record written by something else (a migration, a bad restore, a person) differs
    from one tenure writes: what ``plant_raw_record`` plants.

    - ``UNREADABLE``: the stored value is no record at all (not JSON, a JSON array ...).
    - ``BINARY_ID``: the job id is stored as bytes, not text (a store whose keys are text
      cannot hold it: the hook returns False).
    - ``UNDECODABLE_ID``: the job id is stored as text, but its bytes are not UTF-8 (a store
      that names jobs with ``encode_job_id``: a name whose base64 decodes to bytes that are not
      UTF-8).
    - ``NEWLINE_ID``: the job id is text no caller may give: ``job_id``, a newline, "x".
    - ``TOP_TOKEN``: the token is 2**63 - 1, above any a claim issues.
    - ``LAST_TOKEN``: the token is 2**63 - 2, the last a claim issues: readable, but no claim
      can follow.

    For the id kinds the planted job is the only one besides the test's own, and its listing
    must show the id escaped (``corrupt_status`` does that with the id as stored).
    """

    UNREADABLE = "unreadable"
    BINARY_ID = "binary-id"
    UNDECODABLE_ID = "undecodable-id"
    NEWLINE_ID = "newline-id"
    TOP_TOKEN = "top-token"
    LAST_TOKEN = "last-token"

    def __str__(self) -> str:
        return self.value


# (store, job_id, tampering) -> whether the backend can hold such a record: plants a pending
# job ``job_id`` that is not yet in the store (the hook may submit it, then change it), or, for
# the id kinds, one whose id is made from ``job_id``.
PlantHook = Callable[[tenure.Store, str, Tampering], bool]


@dataclass(frozen=True)
class Restartable:
    """A store on a server the test may restart: ``restart()`` returns once it serves again.

    The restart must keep what the server acknowledged (a crash and recovery: ``kill -9`` and a
    start on the same data), as a real outage would.
    """

    url: str
    restart: Callable[[], None]


@dataclass(frozen=True)
class Pauser:
    """Freezes a holder process, by pid, and thaws it: SIGSTOP and SIGCONT by default.

    A backend whose holders must be frozen another way (a cgroup freezer, a VM) overrides the
    ``pause_holder`` fixture with its own.
    """

    pause: Callable[[int], None]
    resume: Callable[[int], None]


def signal_pauser() -> Pauser | None:
    """SIGSTOP/SIGCONT where the platform has them (POSIX), else None."""
    stop, cont = getattr(signal, "SIGSTOP", None), getattr(signal, "SIGCONT", None)
    if stop is None or cont is None:
        return None
    return Pauser(lambda pid: os.kill(pid, stop), lambda pid: os.kill(pid, cont))


def wait_out(store: tenure.Store, lease: tenure.Lease) -> None:
    """The default ``expire_lease`` hook: advance an injected ManualClock, else wait in real time."""
    if isinstance(store.clock, tenure.ManualClock):
        store.clock.advance(max(0.0, lease.expires_at - store.now()) + 0.001)
        return
    wait = lease.expires_at - store.now()
    if wait > 0:
        time.sleep(wait + 0.05)  # real time: the store's clock is not ours to move
    while store.now() <= lease.expires_at:
        time.sleep(0.01)  # the store's clock may step coarsely


@dataclass
class Kit:
    """One backend as a test of the suite sees it."""

    name: str
    url: str
    options: dict[str, Any] = field(default_factory=dict)
    ttl: float = 5.0  # for leases that must not run out during a test
    short_ttl: float = 0.5  # for leases a test waits out
    unreachable_within: float = 30.0  # seconds an unreachable server may take to be reported
    expire_hook: ExpireHook = wait_out
    corrupt_hook: CorruptHook | None = None
    plant_hook: PlantHook | None = None
    restartable_factory: Callable[[], Restartable | None] = lambda: None
    unreachable_factory: Callable[[], str | None] = lambda: None
    pauser: Pauser | None = None
    opener: Callable[..., tenure.Store] = tenure.connect  # how the tests open a store

    def connect(self, url: str | None = None, *, own_clock: bool = False, **options: Any) -> tenure.Store:
        """A store at ``url`` (the test's store by default) with the suite's options.

        ``own_clock=True`` drops an injected clock: the store judges time by its own clock, as
        it does in another process.
        """
        merged = {**self.options, **options}
        if own_clock:
            merged.pop("clock", None)
        return self.opener(url or self.url, **merged)

    def expire(self, store: tenure.Store, lease: tenure.Lease) -> None:
        """Return once ``lease`` has expired by the store's clock and may be claimed again."""
        self.expire_hook(store, lease)

    def corrupt(self, store: tenure.Store, job_id: str) -> None:
        """Overwrite the job's record with bytes tenure did not write (skips without the hook)."""
        if self.corrupt_hook is None:
            pytest.skip(f"{self.name}: no corrupt_record hook (override the fixture to plant an unreadable record)")
        self.corrupt_hook(store, job_id)

    def plant(self, store: tenure.Store, job_id: str, tampering: Tampering) -> None:
        """Plant a pending job with ``tampering`` (skips without the hook, or where the backend
        cannot hold such a record)."""
        if self.plant_hook is None:
            pytest.skip(f"{self.name}: no plant_raw_record hook (override the fixture to plant tampered records)")
        if not self.plant_hook(store, job_id, tampering):
            pytest.skip(f"{self.name}: cannot hold a record with {tampering}")

    def restart_target(self) -> Restartable:
        """The store on a server the test may restart (skips without the hook, and for a
        volatile store, saying so)."""
        if self.durability is tenure.Durability.VOLATILE:
            pytest.skip(f"{self.name}: a volatile store (Characteristics.durability): nothing it acknowledged "
                        "survives a restart, and its health() says so")
        found = self.restartable_factory()
        if found is None:
            pytest.skip(f"{self.name}: no restartable_store hook (override the fixture with a server to restart)")
        return found

    def unreachable_url(self) -> str:
        """The test's store at an address where nothing listens (skips without the hook)."""
        found = self.unreachable_factory()
        if found is None:
            pytest.skip(f"{self.name}: no unreachable_url hook (a store with no server has none to miss)")
        return found

    def holder_pauser(self) -> Pauser:
        """How to freeze a holder process (skips without the hook)."""
        if self.pauser is None:
            pytest.skip(f"{self.name}: no pause_holder hook (this platform has no SIGSTOP)")
        return self.pauser

    @property
    def characteristics(self) -> tenure.Characteristics:
        """What the backend of the test's URL declares."""
        return backend_class(parse_url(self.url).scheme).characteristics

    @property
    def shared_between_processes(self) -> bool:
        """Whether stores at one URL in different processes share their records."""
        return self.characteristics.shared_between_processes

    @property
    def durability(self) -> tenure.Durability | None:
        """What an acknowledged write survives, as the backend declares it (None: undeclared)."""
        return self.characteristics.durability

    def require_processes(self) -> None:
        if not self.shared_between_processes:
            pytest.skip(f"{self.name}: a store of one process (its Characteristics.shared_between_processes)")
