"""PostgreSQL for tests: the machine's server for conformance, a private one for faults.

Conformance runs against the PostgreSQL on 127.0.0.1:5432 (``TENURE_TEST_PG_URL`` points
elsewhere), one fresh schema per store, all dropped when the session ends; when
``TENURE_POSTGRES`` selects another version (``devservers/versions.py``), against a private
server of that version instead. Fault tests need
a server they may SIGKILL, SIGSTOP and restart: ``PostgresServer`` runs Debian's ``initdb``
and ``postgres`` as the ``postgres`` user in a temporary directory, on a free port, in its
own process group. It also accepts one password user (``AUTH_USER``) by scram-sha-256, so
a wrong password can be tested. In CI a server that cannot start fails the test.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

from devservers.availability import unavailable
from devservers.control import ServerProcess
from devservers.ports import free_port
from devservers.versions import POSTGRES, chosen

BIN = chosen(POSTGRES)
MACHINE_URL = os.environ.get("TENURE_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
AUTH_USER, AUTH_PASSWORD = "tenure_auth", "s3cret-Pa55"


def cannot_start(reason: str) -> NoReturn:
    unavailable(f"PostgreSQL could not start: {reason}")


def admin(url: str) -> Any:
    """A plain psycopg connection for the tests' own SQL (dropping schemas, planting rows)."""
    import psycopg

    from tenure.core.options import parse_url

    u = parse_url(url)
    host, port = u.hosts[0]
    return psycopg.connect(host=host, port=port or 5432, user=u.username or "postgres",
                           dbname=u.path.strip("/"), autocommit=True, connect_timeout=5)


class PostgresServer(ServerProcess):
    """A private postmaster; the verbs of ``ServerProcess`` act on it and every backend it forked."""

    name = "PostgreSQL"

    def __init__(self, directory: Path | None = None, port: int | None = None) -> None:
        # Not under pytest's tmp_path: the postgres user must be able to reach the directory.
        self.directory = directory or Path(tempfile.mkdtemp(prefix="tenure-pg-", dir="/tmp"))
        self.data = self.directory / "data"
        self.port = port or free_port()

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @staticmethod
    def _user() -> dict[str, Any]:
        """Run as ``postgres`` when we are root (the server refuses root), as ourselves otherwise.

        The postmaster is our own child, not a ``runuser``'s: we reap it after a SIGKILL, so its
        PID in ``postmaster.pid`` is free when it restarts (this container's init reaps nothing).
        """
        return {"user": "postgres", "group": "postgres"} if os.geteuid() == 0 else {}

    def init(self) -> None:
        if not (BIN / "initdb").exists():
            cannot_start(f"no initdb in {BIN}")
        self.directory.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.directory, "postgres", "postgres")
        try:
            subprocess.run([str(BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync"],
                           check=True, capture_output=True, **self._user())
        except (OSError, subprocess.CalledProcessError) as exc:
            cannot_start(f"initdb failed: {getattr(exc, 'stderr', b'') or exc!r}")
        hba = self.data / "pg_hba.conf"
        hba.write_text(f"host all {AUTH_USER} 127.0.0.1/32 scram-sha-256\n" + hba.read_text())

    def launch(self) -> None:
        if not self.data.exists():
            self.init()
        log = open(self.directory / "server.log", "ab")  # noqa: SIM115 - the child keeps it
        cmd = [str(BIN / "postgres"), "-D", str(self.data), "-p", str(self.port), "-k", str(self.directory),
               "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=60", "-c", "shared_buffers=32MB"]
        try:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                         **self._user())
        finally:
            log.close()

    def serving(self) -> bool:
        ready = subprocess.run([str(BIN / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)], check=False)
        return ready.returncode == 0

    def wait_serving(self, timeout: float = 30.0) -> None:
        for attempt in range(3):
            try:
                super().wait_serving(timeout)
                return
            except RuntimeError as exc:
                if self.alive() or attempt == 2:  # not serving in time, or exited three times
                    cannot_start(f"{exc} on port {self.port}; see {self.directory / 'server.log'}")
            # Exited at once: a restart right after a crash can find what the crash left (a
            # dying backend's shared memory); the log says which. Clear it and start again.
            self.kill()
            time.sleep(0.5)  # for the kernel to release what the dead processes held
            self.launch()

    def add_password_user(self) -> None:
        with admin(self.url) as conn:
            conn.execute(f"DO $$ BEGIN CREATE ROLE {AUTH_USER} LOGIN SUPERUSER PASSWORD '{AUTH_PASSWORD}';"
                         " EXCEPTION WHEN duplicate_object THEN NULL; END $$")

    def pids(self) -> list[int]:
        """The server's processes: each backend calls setsid(), so no process group holds them all."""
        if self.proc is None or self.proc.poll() is not None:
            return []
        parents: dict[int, int] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError, ValueError, IndexError):
                    parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        found, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo += [child for child, parent in parents.items() if parent == pid]
        return found

    def signal(self, sig: signal.Signals) -> None:
        """To the postmaster and every backend: SIGKILL is a crash with no shutdown checkpoint,
        and the postmaster is reaped, so postmaster.pid names no live process when it restarts."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def kill(self) -> None:
        super().kill()
        # A backend forked after the scan of /proc outlives the postmaster for a moment, still
        # attached to its shared memory: the next start would fail ("pre-existing shared memory
        # block is still in use"). Every process working in the data directory is this server's.
        deadline = time.monotonic() + 10
        while (left := self._working_here()) and time.monotonic() < deadline:
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)  # until the kernel has torn them down

    def _working_here(self) -> list[int]:
        """Live processes whose working directory is the data directory (not zombies)."""
        data, found = os.path.realpath(self.data), []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError, IndexError):
                    state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                    if state != "Z" and os.readlink(entry / "cwd") == data:
                        found.append(int(entry.name))
        return found

    def close(self) -> None:
        self.resume()
        self.kill()
        shutil.rmtree(self.directory, ignore_errors=True)


@contextlib.contextmanager
def running() -> Iterator[PostgresServer]:
    server = PostgresServer()
    try:
        server.start()
        server.add_password_user()
        yield server
    finally:
        server.close()
