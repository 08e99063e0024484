"""One adapter per backend, for every test that needs a store: the conformance suite's hooks
(``tests/conformance/test_backends.py``), the fault suite (``tests/faults/``), the dashboard.

A harness hands out isolated stores (a new file, prefix, chroot or schema per ``url()``),
knows how to make time pass for a lease and how to plant a corrupt record. For the fault
suite it also gives each worker its own URL (through that worker's proxies on a server, so
one worker can be cut off alone), injects server faults with the verbs of
``devservers/control.py``, and undoes every fault (``heal``) before the final state is read.
"""

from __future__ import annotations

import base64
import random
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any

import tenure
from devservers.control import ServerProcess
from devservers.ports import free_port
from tenure.core.validation import LAST_TOKEN, MAX_TOKEN
from tenure.testing.kit import Tampering, wait_out
from tests.faults import catalog
from tests.faults.proxy import Proxy

WORKER_FAULTS = catalog.names(catalog.WORKER)
UNREACHABLE_SECRET = "unreachable-pw-7q2"  # the password of unreachable_url: no error may show it
NEWLINE_ID_TAIL = "\nx"  # Tampering.NEWLINE_ID: the job's id, then this


def undecodable_name(job_id: str) -> str:
    """Tampering.UNDECODABLE_ID in a store that names jobs by base64url in keys (etcd,
    ZooKeeper): the name of the job id's UTF-8 and a byte that is not UTF-8."""
    return base64.urlsafe_b64encode(job_id.encode() + b"\xff").decode().rstrip("=")
TAMPERED_TOKENS = {Tampering.TOP_TOKEN: MAX_TOKEN, Tampering.LAST_TOKEN: LAST_TOKEN}


def tampered_row(tampering: Tampering, placeholder: str) -> tuple[str, tuple[str, ...]]:
    """The SET clause, and its parameters, that make a SQL store's row of a pending job one
    with ``tampering`` (binary and undecodable ids only where the column takes any bytes: SQLite)."""
    if tampering is Tampering.NEWLINE_ID:
        return f"job_id = job_id || {placeholder}", (NEWLINE_ID_TAIL,)
    if tampering in TAMPERED_TOKENS:
        return f"token = {TAMPERED_TOKENS[tampering]}", ()
    return {Tampering.BINARY_ID: "job_id = CAST(job_id AS BLOB)",
            Tampering.UNDECODABLE_ID: "job_id = CAST(CAST(job_id AS BLOB) || x'ff' AS TEXT)"}[tampering], ()


class Harness:
    name = ""
    shared_between_processes = True
    ttl = 5.0  # a TTL for tests where the lease must not expire on its own
    short_ttl = 0.5  # a TTL for tests that wait for expiry in real time
    fault_ttl = 1.0  # the fault suite's workers' TTL
    faults: tuple[str, ...] = ()  # what the fault suite may inject
    leader_fault_ttls = (0.5, 1.5)  # how long a leader is paused or kept dead, in TTLs
    # A store that may end a lease early and restores it only while the holder's safe deadline
    # runs: the drift margin that deadline keeps (the fault checker's ``deadline_margin``).
    early_end_margin: float | None = None
    # Seconds a delayed job (submit, fail, requeue) may become claimable after its window under
    # the fault suite's faults (the fault checker's ``delay_late``): 0 where the store's clock
    # judges claimable_at; etcd times a delay by an etcd lease (below, EtcdHarness).
    delay_late: float = 0.0
    size = 1  # servers

    def __init__(self, query: str = "") -> None:
        self.query = query  # options every URL of this harness carries (the fault suite's)
        self.workdir = Path(".")  # where the fault suite keeps its runs

    def url(self) -> str:
        """A URL of a new, empty store."""
        raise NotImplementedError

    def options(self) -> dict[str, Any]:
        """Keyword arguments every store of the harness is opened with."""
        return {}

    def connect(self, url: str | None = None, **options: Any) -> tenure.Store:
        return tenure.connect(url or self.url(), **{**self.options(), **options})

    def expire(self, store: tenure.Store, lease: tenure.Lease) -> None:
        """Return once ``lease`` has expired by the store's clock (advancing a ManualClock)."""
        wait_out(store, lease)

    def corrupt(self, store: tenure.Store, job_id: str) -> None:
        """Overwrite the job's record with bytes tenure did not write."""
        raise NotImplementedError

    def plant(self, store: tenure.Store, job_id: str, tampering: Tampering) -> bool:
        """The conformance suite's ``plant_raw_record``: a pending job ``job_id`` as something
        else would have written it; False where this store cannot hold such a record."""
        if tampering is Tampering.UNREADABLE:
            store.submit(job_id)
            self.corrupt(store, job_id)
            return True
        if tampering is Tampering.NEWLINE_ID:
            self.submit_unchecked(store, job_id + NEWLINE_ID_TAIL)
            return True
        if tampering in TAMPERED_TOKENS:
            store.submit(job_id)
            return self.set_token(store, job_id, TAMPERED_TOKENS[tampering])
        return False

    def unreachable(self, url: str) -> str | None:
        """The conformance suite's ``unreachable_url``: the store at ``url`` where nothing
        listens; None for a store with no server."""
        return None

    def set_token(self, store: tenure.Store, job_id: str, token: int) -> bool:
        """Give the pending job ``job_id`` the token ``token`` behind tenure's back; False where
        this store cannot."""
        return False

    def submit_unchecked(self, store: tenure.Store, job_id: str) -> None:
        """Submit ``job_id`` through the backend of another store at ``store``'s URL, which
        writes what ``Store`` would refuse (a job id with a newline)."""
        with tenure.connect(store.url, **self.options()) as other:
            other.backend.submit(job_id)

    # -- the fault suite ------------------------------------------------------------------------
    def start(self) -> None:
        """Start the servers this harness owns (the fault suite's; fixtures start their own)."""

    def new_store(self) -> str:
        """A fresh store for one fault run; workers reach it through ``worker_url``."""
        self.current = self.url()
        return self.current

    def worker_url(self, worker: str) -> str:
        return self.current

    def side_url(self) -> str:
        """Another fresh store beside the run's, for processes its checker does not watch."""
        return self.url()

    def server_fault(self, fault: str, rng: random.Random, seconds: float) -> str:
        raise NotImplementedError(fault)

    def net_fault(self, worker: str, mode: str, delay: float = 0.0) -> None:
        raise NotImplementedError(mode)

    def heal(self) -> None:
        """Undo every fault still in force."""

    def close(self) -> None:
        """Stop what ``start`` started."""


class MemoryHarness(Harness):
    name = "memory"
    shared_between_processes = False

    def __init__(self) -> None:
        super().__init__()
        self.clock = tenure.ManualClock()

    def url(self) -> str:
        return f"memory://t-{uuid.uuid4().hex}"

    def options(self) -> dict[str, Any]:
        return {"clock": self.clock}

    def corrupt(self, store: tenure.Store, job_id: str) -> None:
        pytest_skip("the memory store holds Python objects; nothing can corrupt them")

    def plant(self, store: tenure.Store, job_id: str, tampering: Tampering) -> bool:
        return False  # Python objects: nothing else writes them


class SQLiteHarness(MemoryHarness):
    """A store file shared by processes; in the fault suite its faults are the workers' own."""

    name = "sqlite"
    shared_between_processes = True
    faults = WORKER_FAULTS

    def __init__(self, directory: Path, query: str = "") -> None:
        super().__init__()
        self.directory = self.workdir = directory
        self.query = query

    def url(self) -> str:
        return f"sqlite:///{self.directory / (uuid.uuid4().hex[:12] + '.db')}{self.query}"

    def corrupt(self, store: tenure.Store, job_id: str) -> None:
        path = store.backend.path  # type: ignore[attr-defined]
        with sqlite3.connect(path) as db:
            db.execute("UPDATE tenure_jobs SET state = 'bogus', token = 'x' WHERE job_id = ?", (job_id,))

    def plant(self, store: tenure.Store, job_id: str, tampering: Tampering) -> bool:
        if tampering is Tampering.UNREADABLE:
            return Harness.plant(self, store, job_id, tampering)
        store.submit(job_id)
        change, params = tampered_row(tampering, "?")
        with sqlite3.connect(store.backend.path) as db:  # type: ignore[attr-defined]
            db.execute(f"UPDATE tenure_jobs SET {change} WHERE job_id = ?", (*params, job_id))
        return True


class ServerHarness(Harness):
    """Stores on real servers: a prefix (chroot, schema) per URL, and faults through proxies."""

    scheme = ""
    fault_ttl = 2.0  # etcd's own minimum lease; the same on the other servers for comparison

    def __init__(self, query: str = "") -> None:
        super().__init__(query)
        self.prefix = ""
        self.proxies: dict[str, list[Proxy]] = {}
        self._paused: list[ServerProcess] = []
        self._killed: list[ServerProcess] = []

    # Each backend says where its servers are and how its URLs look.
    def nodes(self) -> list[ServerProcess]:
        raise NotImplementedError

    def leader(self) -> ServerProcess:
        raise NotImplementedError

    def endpoints(self) -> list[tuple[str, int]]:
        raise NotImplementedError

    def store_url(self, hosts: str, prefix: str) -> str:
        return f"{self.scheme}://{hosts}/{prefix}{self.query}"

    @property
    def size(self) -> int:
        return len(self.nodes())

    @property
    def faults(self) -> tuple[str, ...]:
        scopes = (catalog.WORKER, catalog.NETWORK, catalog.SERVER, *((catalog.CLUSTER,) if self.size > 1 else ()))
        return catalog.names(*scopes)

    def url(self) -> str:
        self.prefix = f"t{uuid.uuid4().hex[:12]}"
        return self.store_url(",".join(f"{h}:{p}" for h, p in self.endpoints()), self.prefix)

    def unreachable(self, url: str) -> str | None:
        """``url``'s store (its prefix, chroot or schema) at two ports where nothing listens,
        and with a password, which no error may show."""
        scheme, _, rest = url.partition("://")
        netloc, slash, tail = rest.partition("/")
        user = netloc.rpartition("@")[0].partition(":")[0] or "tenure"
        hosts = ",".join(f"127.0.0.1:{free_port()}" for _ in range(2))
        if "timeout=" not in tail:  # every server store takes it: the case need not sit out a 10 s default
            tail += ("&" if "?" in tail else "?") + "timeout=2"
        return f"{scheme}://{user}:{UNREACHABLE_SECRET}@{hosts}{slash}{tail}"

    def side_url(self) -> str:
        prefix = self.prefix
        try:
            return self.url()
        finally:
            self.prefix = prefix  # worker_url stays on the run's store

    def worker_url(self, worker: str) -> str:
        if worker not in self.proxies:
            self.proxies[worker] = [Proxy(ep) for ep in self.endpoints()]
        return self.store_url(",".join(p.address for p in self.proxies[worker]), self.prefix)

    def net_fault(self, worker: str, mode: str, delay: float = 0.0) -> None:
        for p in self.proxies.get(worker, []):
            p.set(mode, delay)

    def server_fault(self, fault: str, rng: random.Random, seconds: float) -> str:
        node = rng.choice(self.nodes()) if fault == "server-kill" else self.leader()
        if fault == "leader-pause":
            node.pause()
            self._paused.append(node)
            time.sleep(seconds)  # the fault's length, chosen by the nemesis
            node.resume()
            self._paused.remove(node)
            return "paused"
        node.kill()
        self._killed.append(node)
        time.sleep(seconds)  # the outage's length, chosen by the nemesis
        node.start()
        self._killed.remove(node)
        return "killed"

    def heal(self) -> None:
        for ps in self.proxies.values():
            for p in ps:
                p.set("pass")
        for node in list(self._paused):
            node.resume()
            self._paused.remove(node)
        for node in list(self._killed):
            node.start()
            self._killed.remove(node)

    def close(self) -> None:
        for ps in self.proxies.values():
            for p in ps:
                p.close()
        self.proxies.clear()


def pytest_skip(reason: str) -> None:
    import pytest

    pytest.skip(reason)


