"""Real etcd servers for tests: one node or a 3-node cluster on free loopback ports.

Each node runs Debian's ``etcd`` binary (or the version ``TENURE_ETCD`` selects:
``tests/servers/versions.py``) with its own temporary data directory. Faults are
real, through the verbs of ``tests/servers/control.py``: ``kill()``, ``pause()`` (SIGSTOP),
``resume()``, ``restart()``. Tests talk to a node's JSON gateway
(``/v3/...``) only to look behind tenure's back (leader, raw keys), never through tenure.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tenure
from tenure.backends.etcd import layout
from tenure.core.checks import DEFAULT_DRIFT_MARGIN
from tenure.testing.kit import Tampering
from tests.harness import ServerHarness, in_ci, undecodable_name
from tests.servers.control import ServerProcess
from tests.servers.ports import free_port
from tests.servers.versions import ETCD as ETCD_SERVER
from tests.servers.versions import chosen

ETCD = str(chosen(ETCD_SERVER) / "etcd")


class EtcdNode(ServerProcess):
    def __init__(self, name: str, data_dir: Path, tls: dict[str, Path] | None = None,
                 extra: tuple[str, ...] = ()) -> None:
        self.name = name
        self.data_dir = data_dir
        self.tls = tls  # ca, cert, key (server) and client_cert, client_key: HTTPS only
        self.extra = extra
        self.client_port = free_port()
        self.peer_port = free_port()
        self.cluster = ""  # "name=peer-url,..." for every member, set by the cluster

    @property
    def client_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    def launch(self) -> None:
        log = open(self.data_dir.parent / f"{self.name}.log", "ab")  # noqa: SIM115 - owned by Popen
        self.proc = subprocess.Popen(
            [ETCD, "--name", self.name, "--data-dir", str(self.data_dir),
             "--listen-client-urls", self.client_url, "--advertise-client-urls", self.client_url,
             "--listen-peer-urls", self.peer_url, "--initial-advertise-peer-urls", self.peer_url,
             "--initial-cluster", self.cluster or f"{self.name}={self.peer_url}",
             "--initial-cluster-state", "new", "--initial-cluster-token", self.data_dir.parent.name,
             "--log-level", "warn", "--logger", "zap", *self._tls_args(), *self.extra],
            stdout=log, stderr=log, start_new_session=True)
        log.close()

    def _tls_args(self) -> list[str]:
        if not self.tls:
            return []
        return ["--cert-file", str(self.tls["cert"]), "--key-file", str(self.tls["key"]),
                "--trusted-ca-file", str(self.tls["ca"]), "--client-cert-auth"]

    def _context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        ctx = ssl.create_default_context(cafile=str(self.tls["ca"]))
        ctx.load_cert_chain(str(self.tls["client_cert"]), str(self.tls["client_key"]))
        return ctx

    def api(self, path: str, body: dict[str, Any], timeout: float = 2.0) -> dict[str, Any]:
        req = urllib.request.Request(self.client_url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout, context=self._context()) as resp:
            result: dict[str, Any] = json.load(resp)
            return result

    def serving(self) -> bool:
        try:
            with urllib.request.urlopen(self.client_url + "/health", timeout=1,
                                        context=self._context()) as resp:
                return bool(json.load(resp).get("health") == "true")
        except (OSError, ValueError, urllib.error.URLError):
            return False

    def member_id(self) -> int:
        return int(self.api("/v3/maintenance/status", {})["header"]["member_id"])

    def leader_id(self) -> int:
        return int(self.api("/v3/maintenance/status", {}).get("leader", 0))

    def put(self, key: bytes, value: bytes) -> None:
        self.api("/v3/kv/put", {"key": base64.b64encode(key).decode(),
                                "value": base64.b64encode(value).decode()})

    def keys(self, prefix: bytes) -> list[bytes]:
        end = prefix[:-1] + bytes([prefix[-1] + 1])
        out = self.api("/v3/kv/range", {"key": base64.b64encode(prefix).decode(),
                                        "range_end": base64.b64encode(end).decode(), "keys_only": True})
        return [base64.b64decode(kv["key"]) for kv in out.get("kvs", [])]


class EtcdCluster:
    """One or three nodes; ``endpoints`` is the host list for an ``etcd://`` URL."""

    def __init__(self, base: Path, size: int = 1, **node_options: Any) -> None:
        self.base = base
        base.mkdir(parents=True, exist_ok=True)
        self.nodes = [EtcdNode(f"n{i}", base / f"n{i}", **node_options) for i in range(size)]
        members = ",".join(f"{n.name}={n.peer_url}" for n in self.nodes)
        for node in self.nodes:
            node.cluster = members

    @property
    def endpoints(self) -> str:
        return ",".join(n.endpoint for n in self.nodes)

    def start(self, timeout: float = 30.0) -> None:
        for node in self.nodes:
            node.launch()  # all at once: a member alone has no quorum to be healthy with
        self.wait_healthy(timeout)

    def wait_healthy(self, timeout: float = 30.0, nodes: list[EtcdNode] | None = None) -> None:
        deadline = time.monotonic() + timeout
        for node in nodes or self.nodes:
            while not node.serving():
                if not node.alive() or time.monotonic() > deadline:
                    raise RuntimeError(f"etcd {node.name} did not become healthy; see {self.base}")
                time.sleep(0.05)  # polling a starting server

    def leader(self) -> EtcdNode:
        for node in self.nodes:
            if node.alive():
                with contextlib.suppress(OSError):
                    lid = node.leader_id()
                    for candidate in self.nodes:
                        if candidate.alive() and candidate.member_id() == lid:
                            return candidate
        raise RuntimeError("no etcd leader")

    def close(self) -> None:
        for node in self.nodes:
            node.resume()
            node.kill()


def start_or_fail(base: Path, size: int, **node_options: Any) -> EtcdCluster:
    """A running cluster; without etcd a skip, except in CI where it is a failure."""
    cluster = EtcdCluster(base, size, **node_options)
    try:
        if not os.path.exists(ETCD):
            raise RuntimeError(f"no etcd binary at {ETCD} (Debian package etcd-server)")
        cluster.start()
    except (RuntimeError, OSError) as exc:
        cluster.close()
        if in_ci():
            pytest.fail(f"etcd could not start: {exc}")
        pytest.skip(f"etcd could not start: {exc}")
    return cluster


def make_certificates(directory: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, made with openssl."""
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=directory)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", "2", "-subj", "/CN=tenure test CA")
    for name in ("server", "client"):
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN={name}")
        (directory / f"{name}.ext").write_text(
            "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext")
    return {"ca": directory / "ca.pem", "cert": directory / "server.pem", "key": directory / "server.key",
            "client_cert": directory / "client.pem", "client_key": directory / "client.key"}


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
