"""Real etcd servers for tests: one node or a 3-node cluster on free loopback ports.

Each node runs Debian's ``etcd`` binary (or the version ``TENURE_ETCD`` selects:
``devservers/versions.py``) with its own temporary data directory. Faults are
real, through the verbs of ``devservers/control.py``: ``kill()``, ``pause()`` (SIGSTOP),
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
from pathlib import Path
from typing import Any

from devservers.availability import unavailable
from devservers.control import ServerProcess
from devservers.ports import free_port
from devservers.versions import ETCD as ETCD_SERVER
from devservers.versions import chosen

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
        unavailable(f"etcd could not start: {exc}")
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
