"""Real ZooKeeper servers for tests: a standalone server and a 3-node ensemble.

Started from Debian's ``zookeeper`` package (``QuorumPeerMain``; ``TENURE_ZOOKEEPER`` selects
another version's two jars, ``devservers/versions.py``) on free loopback ports with
temporary data directories. A short ``tickTime`` keeps elections and session expiry fast.
In CI a server that cannot start fails the test; elsewhere the test is skipped.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

from devservers.availability import unavailable
from devservers.control import ServerProcess
from devservers.ports import free_port
from devservers.versions import ZOOKEEPER, chosen

# The version's own jars, jute first: zookeeper.jar's manifest names the machine's
# /usr/share/java/zookeeper-jute.jar, which the JVM puts right after it on the class path.
OWN_JARS = ("zookeeper-jute", "zookeeper")
JARS = ("slf4j-api", "slf4j-simple", "metrics-core", "snappy-java",
        "commons-cli", "netty-buffer", "netty-codec", "netty-common", "netty-handler", "netty-resolver",
        "netty-transport", "netty-transport-native-unix-common")
JAVA_FLAGS = ("-Xss512k", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
              "-XX:-UsePerfData", "-Djava.net.preferIPv4Stack=true",
              "-Dzookeeper.admin.enableServer=false", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
TICK_MS = 100  # sessions may last 2 to 20 ticks by default; we widen it below


def four_letter(port: int, word: str, timeout: float = 1.0) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(word.encode())
        chunks = []
        while data := s.recv(4096):
            chunks.append(data)
    return b"".join(chunks).decode(errors="replace")


def classpath() -> str:
    own = chosen(ZOOKEEPER)
    return ":".join([*(str(own / f"{jar}.jar") for jar in OWN_JARS), *(f"/usr/share/java/{jar}.jar" for jar in JARS)])


def cannot_start(reason: str) -> NoReturn:
    unavailable(f"ZooKeeper could not start: {reason}")


class ZooKeeperServer(ServerProcess):
    """One ``QuorumPeerMain`` process; ``peers`` makes it a member of an ensemble."""

    name = "ZooKeeper"

    def __init__(self, directory: Path, *, sid: int = 0, peers: dict[int, tuple[int, int]] | None = None,
                 client_port: int | None = None, env: dict[str, str] | None = None,
                 wrapper: tuple[str, ...] = (), heap: str = "128m") -> None:
        self.directory = directory
        self.heap = heap  # enough for the tests; benchmarks of 100,000 jobs need more
        self.sid = sid
        self.port = client_port or free_port()
        self.env = env or {}
        self.wrapper = wrapper  # e.g. ("faketime", "+30s") to run the JVM on another clock
        self.tls_port: int | None = None
        data = directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        lines = [f"tickTime={TICK_MS}", "initLimit=20", "syncLimit=10", f"dataDir={data}",
                 f"clientPort={self.port}", "clientPortAddress=127.0.0.1",
                 "admin.enableServer=false", "4lw.commands.whitelist=srvr,ruok,mntr,stat",
                 "minSessionTimeout=200", "maxSessionTimeout=60000", "autopurge.purgeInterval=0"]
        if peers:
            (data / "myid").write_text(str(sid))
            lines += ["electionPortBindRetry=20", "cnxTimeout=500"]
            lines += [f"server.{i}=127.0.0.1:{p}:{e}" for i, (p, e) in peers.items()]
        self.cfg = directory / "zoo.cfg"
        self.cfg.write_text("\n".join(lines) + "\n")

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def enable_tls(self, directory: Path) -> int:
        """Add a TLS port with a fresh self-signed certificate for 127.0.0.1; returns the port.

        The certificate is ``directory / "cert.pem"``, for clients' ``ca=`` option.
        """
        key, cert = directory / "key.pem", directory / "cert.pem"
        try:
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                            "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
                            "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            cannot_start(f"openssl could not make a test certificate: {exc}")
        keystore = directory / "keystore.pem"
        keystore.write_bytes(key.read_bytes() + cert.read_bytes())
        self.tls_port = free_port()
        with open(self.cfg, "a") as cfg:
            cfg.write(f"secureClientPort={self.tls_port}\n"
                      "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n"
                      f"ssl.keyStore.location={keystore}\nssl.keyStore.type=PEM\n"
                      f"ssl.trustStore.location={cert}\nssl.trustStore.type=PEM\nssl.clientAuth=none\n")
        return self.tls_port

    def launch(self) -> None:
        log = open(self.directory / "server.log", "ab")  # noqa: SIM115 - the child keeps it
        cmd = [*self.wrapper, "java", f"-Xmx{self.heap}", *JAVA_FLAGS, "-cp", classpath(),
               "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(self.cfg)]
        try:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                         env={**os.environ, **self.env}, start_new_session=True)
        except OSError as exc:
            cannot_start(f"{cmd[0]}: {exc}")
        finally:
            log.close()

    def mode(self) -> str | None:
        """'standalone', 'leader' or 'follower' once serving, else None."""
        try:
            text = four_letter(self.port, "srvr")
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None

    def serving(self) -> bool:
        return self.mode() is not None

    def zxid(self) -> str | None:
        """The last transaction this member applied (``srvr``'s Zxid), None if it does not answer."""
        try:
            text = four_letter(self.port, "srvr")
        except OSError:
            return None
        return next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Zxid:")), None)

    def wait_serving(self, timeout: float = 30.0) -> None:
        try:
            super().wait_serving(timeout)
        except RuntimeError as exc:
            cannot_start(f"{exc} on port {self.port}; see {self.directory / 'server.log'}")

    def set_child_counters(self, counters: dict[str, int]) -> None:
        """Stop the server, set the child counter (which names sequential children) of each
        znode path, and start it again: billions of creations skipped, for tests of the limit."""
        self.kill()
        args = [f"{v}" if i % 2 else k for k, v in counters.items() for i in (0, 1)]
        tool = Path(__file__).with_name("ZkChildCounter.java")
        done = subprocess.run(["java", "-cp", classpath(), str(tool), str(self.directory / "data"), *args],
                              capture_output=True, text=True)
        if done.returncode != 0:
            cannot_start(f"{tool.name} failed: {done.stderr[-2000:]}")
        self.start()


class Ensemble:
    """Three servers on loopback; ``leader()`` finds the current leader.

    ``wrappers`` runs some members' JVMs under a command, e.g. ``{3: ("faketime", "-f",
    "+30s")}`` for a member whose clock runs 30 s ahead.
    """

    def __init__(self, directory: Path, size: int = 3,
                 wrappers: dict[int, tuple[str, ...]] | None = None) -> None:
        peers = {i: (free_port(), free_port()) for i in range(1, size + 1)}
        self.servers = [ZooKeeperServer(directory / f"zk{i}", sid=i, peers=peers,
                                        wrapper=(wrappers or {}).get(i, ())) for i in peers]

    @property
    def hosts(self) -> str:
        return ",".join(s.hosts for s in self.servers)

    def server(self, sid: int) -> ZooKeeperServer:
        return self.servers[sid - 1]

    def start(self, sids: tuple[int, ...] | None = None) -> None:
        chosen = [self.server(i) for i in sids] if sids else self.servers
        for s in chosen:
            s.launch()  # all at once: a member alone cannot elect a leader
        for s in chosen:
            s.wait_serving(timeout=60)

    def leader(self, timeout: float = 90.0) -> ZooKeeperServer:
        # Elections here take a second or two, but one took over 30 s in a CI run with four
        # test workers on two cores; the wait is generous and a failure shows each member's log.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for s in self.servers:
                if s.proc is not None and s.mode() == "leader":
                    return s
            time.sleep(0.05)  # waiting for an election
        raise AssertionError(f"no leader elected in {timeout:g} s\n{self.log_tails()}")

    def in_step(self, timeout: float = 30.0) -> None:
        """Return once every running member has applied the same last transaction (``srvr``'s
        Zxid): an election between them is then decided by their ids alone."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            zxids = {s.zxid() for s in self.servers if s.proc is not None and s.proc.poll() is None}
            if len(zxids) == 1 and None not in zxids:
                return
            time.sleep(0.05)  # a follower applying the leader's last commits
        raise AssertionError(f"the members' last transactions differ after {timeout:g} s\n{self.log_tails()}")

    def log_tails(self, lines: int = 15) -> str:
        tails = []
        for s in self.servers:
            log = s.directory / "server.log"
            text = log.read_text(errors="replace").splitlines()[-lines:] if log.exists() else []
            tails.append(f"--- member {s.sid} ({log}):\n" + "\n".join(text))
        return "\n".join(tails)

    def close(self) -> None:
        for s in self.servers:
            s.kill()


@contextlib.contextmanager
def running(directory: Path, heap: str = "128m") -> Iterator[ZooKeeperServer]:
    """A standalone server, serving until the block ends (tests and benchmarks alike)."""
    server = ZooKeeperServer(directory, heap=heap)
    try:
        server.start()
        yield server
    finally:
        server.kill()
