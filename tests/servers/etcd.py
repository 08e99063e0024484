"""The etcd harness for tests and its fixtures: the shared node (``etcd_server``), a private
one (``etcd_private``), one with authentication (``etcd_auth``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import tenure
from devservers.control import ServerProcess
from devservers.etcd import EtcdCluster, start_or_fail
from tenure.backends.etcd import layout
from tenure.core.store_rules import DEFAULT_DRIFT_MARGIN
from tenure.testing.kit import Tampering
from tests.harness import ServerHarness, undecodable_name


class EtcdHarness(ServerHarness):
    name = scheme = "etcd"
    short_ttl = 2.0  # etcd refuses shorter leases
    # etcd (3.5.16 too) may end a lease early (etcd-io/etcd#15247); the holder restores it
    # only while its safe deadline runs (docs/protocol.md), which the workers' default keeps.
    early_end_margin = DEFAULT_DRIFT_MARGIN
    # A delay's etcd lease under faults: the workload's waits (at most 1 s) get etcd's minimum
    # TTL of 2 s and end on its 0.5 s tick (Characteristics.delay_late: 3 s); a leader paused
    # or killed for up to 1.5 s, an election of about 1 s, and the new leader's lessor giving
    # every lease its whole TTL again (2 s) add 4.5 s at most: 8 s.
    delay_late = 8.0

    def __init__(self, cluster: EtcdCluster, query: str = "", owned: bool = False) -> None:
        super().__init__(query)
        self.cluster = cluster
        self.owned = owned  # started and closed by the harness (the fault suite's)

    def nodes(self) -> list[ServerProcess]:
        return list(self.cluster.nodes)

    def leader(self) -> ServerProcess:
        return self.cluster.leader()

    def endpoints(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", n.client_port) for n in self.cluster.nodes]

    def start(self) -> None:
        if self.owned:
            self.cluster.start()

    def close(self) -> None:
        super().close()
        if self.owned:
            self.cluster.close()

    def expire(self, store: tenure.Store, lease: tenure.Lease) -> None:
        """Past the lease's end, and past the wait before a claim of a lease etcd ended.

        The store shows the lease live while etcd keeps its key: the first read that shows it
        expired comes when etcd deletes the key (the lease's ``expires_at`` is the latest moment,
        up to EXPIRY_GRACE later). A claimer of a lease etcd ended waits one TTL after first
        seeing it ended (see ``EtcdBackend._wait_out_holder``): that sighting, here, starts the
        wait for ``store``.
        """
        while (status := store.get(lease.job_id)) is not None and status.state is tenure.JobState.LEASED:
            time.sleep(0.05)  # polling for etcd's deletion of the key
        if status is not None and status.state in (tenure.JobState.EXPIRED, tenure.JobState.PARKED):
            time.sleep(lease.ttl)  # the claimer's wait, in real time: etcd's leases are real time
        super().expire(store, lease)  # past expires_at by the store's clock too (by now it is)

    def corrupt(self, store: tenure.Store, job_id: str) -> None:
        key = store.backend.keys.job(job_id)  # type: ignore[attr-defined]
        self.cluster.nodes[0].put(key, b"\x00not json")

    def plant(self, store: tenure.Store, job_id: str, tampering: Tampering) -> bool:
        if tampering is not Tampering.UNDECODABLE_ID:
            return super().plant(store, job_id, tampering)
        keys, now = store.backend.keys, store.now()  # type: ignore[attr-defined]
        name = undecodable_name(job_id).encode()
        value = layout.JobValue(tenure.JobState.PENDING, None, 0, None, now, None, None, 1)
        self.cluster.nodes[0].put(keys.section("job") + name, layout.job_value(job_id, value))
        self.cluster.nodes[0].put(keys.section("queue") + b"%020d/" % round(now * 1e6) + name, b"")  # queued first
        return True

    def set_token(self, store: tenure.Store, job_id: str, token: int) -> bool:
        submitted = store.get(job_id).submitted_at  # type: ignore[union-attr]
        value = layout.JobValue(tenure.JobState.PENDING, None, token, None, submitted, None, None, 1)
        self.cluster.nodes[0].put(store.backend.keys.job(job_id), layout.job_value(job_id, value))  # type: ignore[attr-defined]
        return True


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    cluster = start_or_fail(tmp_path_factory.mktemp("etcd"), 1)
    yield cluster
    cluster.close()


@pytest.fixture
def etcd_private(tmp_path: Path) -> Iterator[EtcdCluster]:
    """A single etcd node of the test's own, for tests that freeze, stop or fill it."""
    cluster = start_or_fail(tmp_path, 1)
    yield cluster
    cluster.close()


@pytest.fixture
def etcd_auth(tmp_path: Path) -> Iterator[EtcdCluster]:
    """A node of the test's own with authentication on: user root, password s3cret, and auth
    tokens that expire after 1 s idle (5 min by default), so tests see a client log in again."""
    cluster = start_or_fail(tmp_path, 1, extra=("--auth-token-ttl", "1"))
    node = cluster.nodes[0]
    node.api("/v3/auth/role/add", {"name": "root"})
    node.api("/v3/auth/user/add", {"name": "root", "password": "s3cret"})
    node.api("/v3/auth/user/grant", {"user": "root", "role": "root"})
    node.api("/v3/auth/enable", {})
    yield cluster
    cluster.close()


@pytest.fixture
def etcd_harness(etcd_server: EtcdCluster) -> EtcdHarness:
    return EtcdHarness(etcd_server)
