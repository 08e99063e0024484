"""Round trips per operation on etcd, ZooKeeper and PostgreSQL: what each call makes the caller wait for.

    python -m benchmarks.round_trips                 # this tree
    python -m benchmarks.round_trips --tree DIR      # another checkout (e.g. the commit before)

Starts a private single-node etcd and a standalone ZooKeeper like the tests do (their servers
come from this tree's devservers/; PostgreSQL is the machine's, ``TENURE_TEST_PG_URL``, a
fresh schema dropped afterwards), imports tenure from ``--tree``, and counts:

- etcd: requests the caller waits for on the backend's connection (``txn``, ``range``,
  ``grant``, ``time_to_live`` ...); a request started alongside another (``*_started``: a
  keep-alive sent with a transaction) is not a round trip of its own, as in
  tests/backends/test_etcd.py::test_round_trips_per_operation.
- ZooKeeper: send-then-wait phases on the kazoo client: requests sent before the caller
  waits for any answer travel together (pipelined), so a round trip starts with the first
  request sent after a wait.
- PostgreSQL: statements the backend runs (``execute``, one query on a pooled connection,
  in autocommit: one round trip each).

Each figure is the median over ``--rounds`` repetitions (fast paths that depend on a fresh
stamp of the leader's clock may take the general path when the machine is slow).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.trees import use_tree

HERE = Path(__file__).resolve().parents[1]


class EtcdCounter:
    def __init__(self, store: Any) -> None:
        self.count = 0
        conn = store.backend._conn  # the benchmark watches the wire, not the API
        for name in ("txn", "range", "grant", "time_to_live", "status"):
            setattr(conn, name, self._counted(getattr(conn, name)))
        try:  # tenure.aio awaits the same requests on AioConnection (a tree without it: sync only)
            from tenure.backends.etcd.client import AioConnection
        except ImportError:
            return
        for name in ("txn", "range", "grant", "time_to_live"):
            setattr(AioConnection, name, self._awaited(getattr(AioConnection, name)))

    def _counted(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return method(*args, **kwargs)

        return counted

    def _awaited(self, method: Callable[..., Any]) -> Callable[..., Any]:
        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return await method(*args, **kwargs)

        return counted


class ZooKeeperCounter:
    def __init__(self, store: Any) -> None:
        import kazoo.handlers.utils as kazoo_utils

        self.count = 0
        self._waited = True
        client = store.backend.client
        call = client._call  # every request kazoo sends goes through it

        def sent(request: Any, async_object: Any) -> Any:
            if self._waited:
                self.count += 1
                self._waited = False
            return call(request, async_object)

        client._call = sent
        get = kazoo_utils.AsyncResult.get

        def waited(result: Any, *args: Any, **kwargs: Any) -> Any:
            self._waited = True
            return get(result, *args, **kwargs)

        kazoo_utils.AsyncResult.get = waited  # type: ignore[method-assign]
        try:  # tenure.aio awaits results instead of get()ting them (a tree without it: sync only)
            from tenure.backends.zookeeper import calls
        except ImportError:
            return
        awaited = calls.awaited

        async def awaited_counted(result: Any, timeout: float) -> Any:
            self._waited = True
            return await awaited(result, timeout)

        calls.awaited = awaited_counted  # type: ignore[assignment]


class PostgresCounter:
    def __init__(self, store: Any) -> None:
        self.count = 0
        backend = store.backend
        execute = backend.execute  # the sync backend's, or the asyncio one's coroutine function

        def counted(query: Any) -> Any:
            self.count += 1
            return execute(query)

        backend.execute = counted


Counter = type[EtcdCounter] | type[ZooKeeperCounter] | type[PostgresCounter]


def operations(store: Any, tag: str) -> dict[str, Callable[[], object]]:
    """Each named operation as a call; they run in this order, each on the state the last left."""
    state: dict[str, Any] = {}
    steps: dict[str, Callable[[], object]] = {
        "submit (new job)": lambda: store.submit(f"{tag}-s"),
        "submit (pending job)": lambda: store.submit(f"{tag}-s"),
        "claim (new job)": lambda: state.__setitem__("lease", store.claim(f"{tag}-c", owner="w", ttl=30)),
        "renew (holder)": lambda: state.__setitem__("lease", store.renew(state["lease"])),
        "complete (holder)": lambda: store.complete(state["lease"], b"done"),
        "claim (pending job)": lambda: state.__setitem__("lease", store.claim(f"{tag}-s", owner="w", ttl=30)),
        "release (holder)": lambda: store.release(state["lease"]),
        "claim_next": lambda: state.__setitem__("lease", store.claim_next(owner="w", ttl=30)),
        "renew (not the holder)": lambda: _stale(store, state["lease"]),
        "force_expire": lambda: store.force_expire(state["lease"].job_id),
        "get": lambda: store.get(f"{tag}-s"),
        "submit_many (100 new)": lambda: store.submit_many([f"{tag}-m{i}" for i in range(100)]),
    }
    if hasattr(store, "fail"):  # issue 28's operations (a tree before them: not measured)
        steps.update({
            "claim (to fail)": lambda: state.__setitem__("lease", store.claim(f"{tag}-f", owner="w", ttl=30)),
            "fail (holder)": lambda: store.fail(state["lease"], "boom", retry_in=60),
            "requeue": lambda: store.requeue(f"{tag}-f", actor="ops"),
            "requeue (delayed)": lambda: store.requeue(f"{tag}-f", actor="ops", delay=60),
            "submit (delayed new job)": lambda: store.submit(f"{tag}-d", delay=60),
        })
    if hasattr(store, "renew_many"):  # issue 29's coalesced renewals: what a held lease's renewals cost
        steps.update({
            "claim (100 to renew)": lambda: state.__setitem__(
                "many", [store.claim(f"{tag}-h{i}", owner="w", ttl=30) for i in range(100)]),
            "renew_many (100 leases)": lambda: state.__setitem__("many", store.renew_many(state["many"])),
        })
    if hasattr(store, "claim_next_many"):  # issue 29's claims in batches (32 of the 100 submitted above)
        steps.update({
            "claim_next_many (32)": lambda: state.__setitem__("batch", store.claim_next_many("w", 30, 32)),
            "complete_many (32)": lambda: store.complete_many(state["batch"]),
        })
    return steps


def _stale(store: Any, lease: Any) -> None:
    import dataclasses

    import tenure

    try:
        store.renew(dataclasses.replace(lease, owner="not-the-holder"))
    except tenure.StaleLease:
        return
    raise AssertionError("a stale renew was accepted")


def measure(url: str, counter: Counter, rounds: int, aio: bool = False) -> dict[str, float]:
    """With ``aio``, through tenure.aio (an event loop behind the sync shape, tests/aio_sync.py)."""
    import contextlib

    import tenure
    from tests.aio_sync import SyncStore

    found: dict[str, list[int]] = {}
    opened: Any = SyncStore.open(url) if aio else tenure.connect(url)
    with contextlib.closing(opened) as store:
        store.submit("warm-up")  # one-time work per process (etcd's retention lease, a clock znode)
        count = counter(store)
        for r in range(rounds):
            for name, step in operations(store, f"r{r}").items():
                before = count.count
                step()
                found.setdefault(name, []).append(count.count - before)
    return {name: statistics.median(values) for name, values in found.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=HERE, help="the checkout whose tenure is measured")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backends", default="etcd,zk,postgres",
                        help="comma-separated: etcd, etcd-aio, zk, zk-aio, postgres, postgres-aio")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))  # devservers from this tree
    from devservers.etcd import EtcdCluster
    from devservers.postgres import MACHINE_URL, admin
    from devservers.zookeeper import ZooKeeperServer

    use_tree(args.tree)
    import tenure

    print(f"tenure from {Path(tenure.__file__).parent.parent}")
    wanted = args.backends.split(",")
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="tenure-rt-") as tmp:
        if "etcd" in wanted or "etcd-aio" in wanted:
            cluster = EtcdCluster(Path(tmp) / "etcd", size=1)
            cluster.start()
            try:
                if "etcd" in wanted:
                    results["etcd"] = measure(f"etcd://{cluster.endpoints}/rt-{uuid.uuid4().hex[:6]}", EtcdCounter,
                                              args.rounds)
                if "etcd-aio" in wanted:
                    results["etcd-aio"] = measure(f"etcd://{cluster.endpoints}/rt-{uuid.uuid4().hex[:6]}",
                                                  EtcdCounter, args.rounds, aio=True)
            finally:
                cluster.close()
        if "zk" in wanted or "zk-aio" in wanted:
            server = ZooKeeperServer(Path(tmp) / "zk")
            server.start()
            server.wait_serving()
            try:
                results["zk"] = measure(f"zk://{server.hosts}/rt-{uuid.uuid4().hex[:6]}", ZooKeeperCounter,
                                        args.rounds)
                if "zk-aio" in wanted:
                    results["zk-aio"] = measure(f"zk://{server.hosts}/rt-{uuid.uuid4().hex[:6]}", ZooKeeperCounter,
                                                args.rounds, aio=True)
            finally:
                server.kill()
    for flavour in ("postgres", "postgres-aio"):
        if flavour in wanted:
            schema = f"rt_{uuid.uuid4().hex[:8]}"
            try:
                results[flavour] = measure(f"{MACHINE_URL}?schema={schema}", PostgresCounter, args.rounds,
                                           aio=flavour.endswith("-aio"))
            finally:
                with admin(MACHINE_URL) as conn:
                    conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    print(f"{'operation':24}" + "".join(f" {name:>6}" for name in results))
    for op in next(iter(results.values())):
        print(f"{op:24}" + "".join(f" {found.get(op, float('nan')):6g}" for found in results.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
