"""History kept for renewals, and etcd's space per renewal and per claim.

    python -m benchmarks.renewal_history                          # this tree
    python -m benchmarks.renewal_history --tree /work/main        # another checkout (before)
    python -m benchmarks.renewal_history --stores etcd --part space

**history**, every store (``--stores``): ``--leases`` leases held by one process at TTL
``--ttl`` (``Store.hold``: its renewals go in batches, a third of a TTL apart), for
``--seconds``; the history's length read once every lease has renewed (after a TTL) and again
at the end: the records it kept per second meanwhile (renewal events written, net of those a
renewal replaced), and the renewal events it then holds. Retention far above both (100,000
records; etcd's is seconds, 7 days), so no trim hides them.

**space**, etcd: a private etcd without auto-compaction. Its database size (Maintenance
Status ``dbSize``) grown by ``--renewals`` renewals (``renew_many`` of 100 leases at a time)
and by ``--cycles`` claim+complete cycles (one job each, new), each read before and after;
then compacted at its last revision and defragmented: what is left is what outlives
compaction (live keys). And the live keys under ``<prefix>/history/``.

Private servers started like the tests' (fsync on); PostgreSQL is the machine's, a fresh
schema dropped afterwards. Figures, not a timed test: docs/performance.md and
docs/backends/etcd.md ("Space").
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]
COUNTED = "retention=100000"  # stores whose retention is a number of records


def kept(url: str, leases: int, ttl: float, seconds: float) -> dict[str, float]:
    """History records kept per second while ``leases`` leases are held (see the module)."""
    import tenure

    with tenure.connect(url) as store:
        held = [store.hold(f"h{i}", owner="w", ttl=ttl) for i in range(leases)]
        time.sleep(ttl)  # every lease has renewed at least once by now
        first, at = len(store.history()), time.monotonic()
        time.sleep(max(seconds - ttl, 1.0))
        events = store.history()
        spent = time.monotonic() - at
        lost = sum(1 for h in held if h.lost.is_set())
        for h in held:
            with contextlib.suppress(tenure.LeaseError):
                h.release()
        renewals = sum(1 for e in events if e.op is tenure.Op.RENEW)
        return {"kept_per_s": (len(events) - first) / spent, "renewal_events": renewals, "lost": lost}


def _api(node: Any, path: str, body: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = node.api(path, body, timeout=60.0)
    return found


def _db(node: Any) -> int:
    return int(_api(node, "/v3/maintenance/status", {})["dbSize"])


def space(node: Any, prefix: str, renewals: int, cycles: int) -> dict[str, float]:
    """etcd's database growth per 1,000 renewals and per claim+complete cycle (see the module)."""
    import tenure

    url = f"etcd://{node.endpoint}/{prefix}"
    with tenure.connect(url) as store:
        leases = [store.claim(f"r{i}", owner="w", ttl=60) for i in range(100)]
        store.renew_many(leases)  # the history keys of a renewal exist: later ones rewrite them (or add)
        before = _db(node)
        for _ in range(renewals // 100):
            leases = [lease for lease in store.renew_many(leases) if isinstance(lease, tenure.Lease)]
        renewed = _db(node)
        for i in range(cycles):
            store.complete(store.claim(f"c{i}", owner="w", ttl=60), b"")
        cycled = _db(node)
        revision = int(_api(node, "/v3/maintenance/status", {})["header"]["revision"])
        _api(node, "/v3/kv/compaction", {"revision": revision, "physical": True})
        _api(node, "/v3/maintenance/defragment", {})
        compacted = _db(node)
        start = f"/{prefix}/history/".encode()
        end = start[:-1] + bytes([start[-1] + 1])
        history = _api(node, "/v3/kv/range", {"key": base64.b64encode(start).decode(), "count_only": True,
                                              "range_end": base64.b64encode(end).decode()})
    return {"per_1000_renewals_kb": (renewed - before) / renewals * 1000 / 1024,
            "per_cycle_kb": (cycled - renewed) / cycles / 1024, "before_kb": before / 1024,
            "compacted_kb": compacted / 1024, "history_keys": int(history.get("count", 0))}


@contextlib.contextmanager
def _url(kind: str, tmp: Path) -> Iterator[tuple[str, Any]]:
    from devservers.etcd import EtcdCluster
    from devservers.postgres import MACHINE_URL, admin
    from devservers.zookeeper import ZooKeeperServer

    name = f"rh{uuid.uuid4().hex[:6]}"
    if kind in ("memory", "sqlite"):
        yield (f"memory://{name}?{COUNTED}" if kind == "memory" else f"sqlite:///{tmp}/{name}.db?{COUNTED}"), None
    elif kind == "postgres":
        try:
            yield f"{MACHINE_URL}?schema={name}&{COUNTED}", None
        finally:
            with admin(MACHINE_URL) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
    elif kind == "zk":
        server = ZooKeeperServer(tmp / f"zk-{name}")
        server.start()
        server.wait_serving()
        try:
            yield f"zk://{server.hosts}/{name}?{COUNTED}", None
        finally:
            server.kill()
    else:
        cluster = EtcdCluster(tmp / f"etcd-{name}", size=1)
        cluster.start()
        try:
            yield f"etcd://{cluster.endpoints}/{name}", cluster.nodes[0]
        finally:
            cluster.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=HERE, help="the checkout whose tenure is measured")
    parser.add_argument("--stores", default="memory,sqlite,postgres,zk,etcd")
    parser.add_argument("--part", default="history,space", help="history, space or both")
    parser.add_argument("--leases", type=int, default=1000)
    parser.add_argument("--ttl", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--renewals", type=int, default=10_000)
    parser.add_argument("--cycles", type=int, default=1000)
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))  # devservers from this tree
    sys.path.insert(0, str(args.tree.resolve()))
    for name in [m for m in sys.modules if m == "tenure" or m.startswith("tenure.")]:
        del sys.modules[name]
    import tenure

    print(f"tenure from {Path(tenure.__file__).parent.parent}")
    with tempfile.TemporaryDirectory(prefix="tenure-rh-") as tmp:
        for kind in args.stores.split(","):
            if "history" in args.part:
                with _url(kind, Path(tmp)) as (url, _):
                    found = kept(url, args.leases, args.ttl, args.seconds)
                print(f"{kind:8} history: {found['kept_per_s']:7.1f} records kept/s while {args.leases} leases "
                      f"renew; {found['renewal_events']:6d} renewal events held; {found['lost']} lost", flush=True)
            if "space" in args.part and kind == "etcd":
                with _url(kind, Path(tmp)) as (url, node):
                    got = space(node, url.rsplit("/", 1)[1], args.renewals, args.cycles)
                print(f"etcd     space: {got['per_1000_renewals_kb']:.0f} KiB per 1,000 renewals, "
                      f"{got['per_cycle_kb']:.2f} KiB per claim+complete cycle (db {got['before_kb']:.0f} KiB "
                      f"before; {got['compacted_kb']:.0f} KiB after compaction and defrag); "
                      f"{got['history_keys']} history keys live", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
