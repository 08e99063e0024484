"""How far one operation travels through tenure's own code: one ``Store.claim`` of a submitted job.

    python -m benchmarks.call_trace                        # this tree, every store
    python -m benchmarks.call_trace --tree DIR --stores etcd,zk   # another checkout (e.g. f54a6b0)

Issue 27 measures the protocol's layering by what one claim enters, traced with
``sys.setprofile`` in the calling thread (a store's own threads, kazoo's connection thread
for one, are not traced): Python functions defined in tenure's package only, so the standard
library, grpc, kazoo and psycopg are left out.

- files: tenure modules entered;
- functions: distinct tenure functions entered;
- calls: tenure function calls (a generator resumed counts as a call, as the profiler sees it);
- switches: calls from one tenure file into another (the caller is the nearest tenure frame
  on the stack, so a call through contextlib or functools counts as its tenure caller's).

On main f54a6b0 this counts memory 13 / 51 / 54 / 32, PostgreSQL 11 / 38 / 42 / 20, etcd
18 / 136 / 323 / 153 and ZooKeeper 22 / 99 / 191 / 119: the issue's files, functions and calls
for memory, PostgreSQL and ZooKeeper, and fewer switches than the issue's (33, 22, 218, 131),
whose counting it did not say.

The claim traced is the second of its kind in the process (one claim, complete and claim of
other jobs warm the process up first: imports, connections, clock stamps, pooled etcd leases),
and each figure is the median of ``--rounds`` claims of fresh submitted jobs. Servers are
private, started like the tests' (PostgreSQL: the machine's, a fresh schema dropped after).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from benchmarks.trees import use_tree

HERE = Path(__file__).resolve().parents[1]


@dataclass
class Trace:
    files: int
    functions: int
    calls: int
    switches: int


class Tracer:
    """Counts what the profiler sees of the code under ``package`` in this thread."""

    def __init__(self, package: Path) -> None:
        self._package = str(package) + "/"
        self._files: set[str] = set()
        self._functions: set[Any] = set()
        self._calls = 0
        self._switches = 0

    def _profile(self, frame: FrameType, event: str, arg: object) -> None:
        code = frame.f_code
        if event != "call" or not code.co_filename.startswith(self._package):
            return  # returns, C calls and code not tenure's
        self._calls += 1
        self._functions.add(code)
        self._files.add(code.co_filename)
        back = frame.f_back
        while back is not None and not back.f_code.co_filename.startswith(self._package):
            back = back.f_back  # through the standard library's frames (contextlib, functools)
        if back is not None and back.f_code.co_filename != code.co_filename:
            self._switches += 1

    @contextlib.contextmanager
    def tracing(self) -> Iterator[None]:
        sys.setprofile(self._profile)
        try:
            yield
        finally:
            sys.setprofile(None)

    def result(self) -> Trace:
        return Trace(len(self._files), len(self._functions), self._calls, self._switches)


def trace_claims(url: str, rounds: int, package: Path) -> Trace:
    import tenure

    tag = uuid.uuid4().hex[:6]
    with contextlib.closing(tenure.connect(url)) as store:
        lease = store.claim(f"{tag}-warm", owner="w", ttl=30)
        store.complete(lease, b"done")
        store.claim(f"{tag}-warm2", owner="w", ttl=30)
        found: list[Trace] = []
        for r in range(rounds):
            job = f"{tag}-{r}"
            store.submit(job)
            tracer = Tracer(package)
            with tracer.tracing():
                store.claim(job, owner="w", ttl=30)
            found.append(tracer.result())
    return Trace(*(int(statistics.median(getattr(t, field) for t in found))
                   for field in ("files", "functions", "calls", "switches")))


@contextlib.contextmanager
def store_urls(wanted: list[str]) -> Iterator[dict[str, str]]:
    """A URL per wanted store, on private servers that live as long as the block."""
    from devservers.etcd import EtcdCluster
    from devservers.postgres import MACHINE_URL, admin
    from devservers.zookeeper import ZooKeeperServer

    urls: dict[str, str] = {}
    schema = f"trace_{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory(prefix="tenure-trace-") as tmp, contextlib.ExitStack() as stack:
        if "memory" in wanted:
            urls["memory"] = "memory://"
        if "sqlite" in wanted:
            urls["sqlite"] = f"sqlite:///{tmp}/trace.db"
        if "postgres" in wanted:
            urls["postgres"] = f"{MACHINE_URL}?schema={schema}"

            def drop() -> None:
                with admin(MACHINE_URL) as conn:
                    conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

            stack.callback(drop)
        if "etcd" in wanted:
            cluster = EtcdCluster(Path(tmp) / "etcd", size=1)
            stack.callback(cluster.close)  # before start: a start that fails half-way stops what it began
            cluster.start()
            urls["etcd"] = f"etcd://{cluster.endpoints}/trace-{uuid.uuid4().hex[:6]}"
        if "zk" in wanted:
            server = ZooKeeperServer(Path(tmp) / "zk")
            stack.callback(server.kill)
            server.start()
            server.wait_serving()
            urls["zk"] = f"zk://{server.hosts}/trace-{uuid.uuid4().hex[:6]}"
        yield urls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=HERE, help="the checkout whose tenure is traced")
    parser.add_argument("--stores", default="memory,sqlite,postgres,etcd,zk")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))  # devservers from this tree
    tree = args.tree.resolve()
    use_tree(tree)
    import tenure

    package = Path(tenure.__file__).resolve().parent
    print(f"tenure from {package.parent}: one Store.claim of a submitted job, median of {args.rounds}")
    print(f"{'store':10} {'files':>6} {'functions':>10} {'calls':>6} {'switches':>9}")
    with store_urls(args.stores.split(",")) as urls:
        for name, url in urls.items():
            t = trace_claims(url, args.rounds, package)
            print(f"{name:10} {t.files:6} {t.functions:10} {t.calls:6} {t.switches:9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
