"""etcd's floor and the peers' Lock recipes, measured on the same server as tenure.

The floor is two bare transactions through tenure's own connection (the same generated code
and runtime as tenure). The peers are the Lock recipe of two packages that both import as
``etcd3``, so each runs in a process and virtualenv of its own (``.bench-venvs/``, made on
first use with pip):

- python-etcd3 0.12.0, whose protobuf 3 generated code runs only on protobuf's pure-Python
  runtime: its process is started with that runtime chosen, as its users must;
- cslab-etcd3 0.12.1, the same recipe on current generated code and protobuf's C (upb)
  runtime: the peer at its best.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from benchmarks.processes import ROOT, LineProcess
from tenure.backends.etcd import client as ec

VENVS = ROOT / ".bench-venvs"
PEER = Path(__file__).with_name("etcd_lock_peer.py")
# (label, virtualenv, requirement, the environment its etcd3 needs)
PEERS = [("python-etcd3 0.12.0 Lock (pure-Python protobuf)", "etcd3-0.12.0", "etcd3==0.12.0",
          {"PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python"}),
         ("cslab-etcd3 0.12.1 Lock (upb protobuf)", "cslab-etcd3-0.12.1", "cslab-etcd3==0.12.1", {})]


def floor(endpoint: str, n: int) -> float:
    """Two transactions per cycle with the writes of a tenure claim and completion.

    Claim: if the lease key is absent, put the job key, the lease key (on an etcd lease) and a
    history key, and delete the end key; completion: if the lease key is as created, put the
    end key and a history key and delete the lease key. The etcd lease is granted once up
    front: what is left is the bare cost of the two transactions.
    """
    host, _, port = endpoint.rpartition(":")
    conn = ec.Connection([(host, int(port))], timeout=10)
    try:
        root = f"/floor-{uuid.uuid4().hex[:8]}"
        lease, _ = conn.grant(60)
        record = json.dumps({"state": "leased", "owner": "bench", "ttl": 30}).encode()
        start = time.perf_counter()
        for i in range(n):
            job, held, end = (f"{root}/{name}/{i}".encode() for name in ("job", "lease", "end"))
            claimed = conn.txn([ec.compare(held, "create", "==", 0)],
                               [ec.put(job, record), ec.put(held, record, lease), ec.delete(end),
                                ec.put(f"{root}/history/{uuid.uuid4().hex}".encode(), record)], [])
            assert claimed.succeeded
            done = conn.txn([ec.compare(held, "create", "==", claimed.revision)],
                            [ec.put(end, record), ec.delete(held),
                             ec.put(f"{root}/history/{uuid.uuid4().hex}".encode(), record)], [])
            assert done.succeeded
        return time.perf_counter() - start
    finally:
        conn.close()


def _python(venv: str, requirement: str) -> Path:
    """The interpreter of the peer's own virtualenv, made (and filled by pip) on first use."""
    python = VENVS / venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENVS / venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", requirement], check=True)
    return python


class LockPeer(LineProcess):
    """One peer's process: ``cycles(n)`` asks it for n acquire+release cycles and their seconds."""

    def __init__(self, label: str, venv: str, requirement: str, env: dict[str, str], endpoint: str) -> None:
        # Only the peer's own variables: nothing of tenure's environment (PYTHONPATH) leaks in.
        clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",) and not k.startswith("PROTOCOL_")}
        super().__init__(label, [str(_python(venv, requirement)), str(PEER), endpoint], {**clean, **env})
        self.runtime = self.first

    def cycles(self, n: int) -> float:
        return float(self.ask(str(n)))


def lock_peers(endpoint: str) -> list[LockPeer]:
    return [LockPeer(label, venv, requirement, env, endpoint) for label, venv, requirement, env in PEERS]
