"""``ConformanceSuite``: the protocol's tests, for any backend, in one pytest class to subclass.

A backend's test module subclasses it and overrides the ``store_url`` fixture; the other
fixtures are optional hooks with working or skipping defaults:

``store_url``          the URL of a new, empty store, one per test (required)
``connect_options``    keyword arguments for ``tenure.connect`` (e.g. an injected ``clock``)
``expire_lease``       ``(store, lease) -> None``: return once the lease expired by the store's
                       clock and may be claimed; by default advances an injected ManualClock or
                       waits in real time
``corrupt_record``     ``(store, job_id) -> None``: plant bytes tenure did not write; None skips
``plant_raw_record``   ``(store, job_id, tampering) -> bool``: plant a pending job ``job_id`` (for
                       the id kinds, one named from it) as something else would have written it,
                       each ``Tampering`` the backend can hold; False where it cannot (the case
                       skips), None skips them all
``restartable_store``  a ``Restartable`` (url, restart) on a server the test may crash and start
                       again; None skips (a volatile store skips saying so). Requested only by
                       the test that needs it.
``unreachable_url``    the test's store (``store_url``'s) at an address where nothing listens,
                       with a password in it if the store takes one; None (the default) skips,
                       for stores with no server (memory, SQLite). Requested only by its test.
``open_store``         ``(url, **options) -> Store`` that the tests open stores with;
                       ``tenure.connect`` by default (an adapter may run the cases through
                       another API of the same contract, as tenure's own tests do for tenure.aio)
``pause_holder``       a ``Pauser`` (pause(pid), resume(pid)) that freezes a holder process; by
                       default SIGSTOP and SIGCONT, None (skips) where there are none

``ttl`` and ``short_ttl`` (class attributes) are the TTLs of leases that must outlive a test
and of leases a test waits out; raise ``short_ttl`` for a store with a minimum lease.
``unreachable_within`` (30 s) bounds how long an unreachable server may take to be reported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import pytest

import tenure
from tenure.testing.kit import CorruptHook, ExpireHook, Kit, Pauser, PlantHook, Restartable, signal_pauser, wait_out
from tenure.testing.suite_audit import AuditTests
from tenure.testing.suite_batches import BatchTests
from tenure.testing.suite_blocking_claims import BlockingClaimTests
from tenure.testing.suite_bounds import BoundsTests
from tenure.testing.suite_competing import CompetingTests
from tenure.testing.suite_durability import DurabilityTests
from tenure.testing.suite_hold import HoldTests
from tenure.testing.suite_input import InputTests
from tenure.testing.suite_issued_tokens import IssuedTokenTests
from tenure.testing.suite_lifecycle import LifecycleTests
from tenure.testing.suite_order import OrderTests
from tenure.testing.suite_outages import OutageTests
from tenure.testing.suite_protocol import ProtocolTests
from tenure.testing.suite_queries import QueryTests
from tenure.testing.suite_renewals import RenewalTests
from tenure.testing.suite_tampered import TamperedRecordTests


class Hooks:
    """The fixtures a backend's subclass overrides; see the module docstring."""

    ttl: ClassVar[float] = 5.0
    short_ttl: ClassVar[float] = 0.5
    unreachable_within: ClassVar[float] = 30.0

    @pytest.fixture
    def store_url(self) -> str:
        raise NotImplementedError(f"{type(self).__name__} must override the store_url fixture")

    @pytest.fixture
    def connect_options(self) -> dict[str, Any]:
        return {}

    @pytest.fixture
    def expire_lease(self) -> ExpireHook:
        return wait_out

    @pytest.fixture
    def corrupt_record(self) -> CorruptHook | None:
        return None

    @pytest.fixture
    def plant_raw_record(self) -> PlantHook | None:
        return None

    @pytest.fixture
    def restartable_store(self) -> Restartable | None:
        return None

    @pytest.fixture
    def unreachable_url(self) -> str | None:
        return None

    @pytest.fixture
    def pause_holder(self) -> Pauser | None:
        return signal_pauser()

    @pytest.fixture
    def open_store(self) -> Callable[..., tenure.Store]:
        return tenure.connect

    @pytest.fixture
    def kit(self, request: pytest.FixtureRequest, store_url: str, connect_options: dict[str, Any],
            expire_lease: ExpireHook, corrupt_record: CorruptHook | None, plant_raw_record: PlantHook | None,
            pause_holder: Pauser | None, open_store: Callable[..., tenure.Store]) -> Kit:
        def restartable() -> Restartable | None:  # only the restart test starts such a server
            found: Restartable | None = request.getfixturevalue("restartable_store")
            return found

        def unreachable() -> str | None:
            found: str | None = request.getfixturevalue("unreachable_url")
            return found

        return Kit(type(self).__name__, store_url, dict(connect_options), ttl=self.ttl, short_ttl=self.short_ttl,
                   unreachable_within=self.unreachable_within,
                   expire_hook=expire_lease, corrupt_hook=corrupt_record, plant_hook=plant_raw_record,
                   restartable_factory=restartable, unreachable_factory=unreachable,
                   pauser=pause_holder, opener=open_store)

    @pytest.fixture
    def store(self, kit: Kit) -> Iterator[tenure.Store]:
        with kit.connect() as opened:
            yield opened


class ConformanceSuite(Hooks, ProtocolTests, AuditTests, HoldTests, RenewalTests, BatchTests, BlockingClaimTests,
                       BoundsTests, CompetingTests, DurabilityTests, InputTests, IssuedTokenTests, LifecycleTests,
                       OrderTests, QueryTests, OutageTests, TamperedRecordTests):
    """Every conformance test; a backend's ``TestMyStore(ConformanceSuite)`` runs them all."""
