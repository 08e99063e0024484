"""tenure's own CPU per ZooKeeper claim+complete, its multis answered in the process.

    python -m benchmarks.studies.zk_client_cpu [--tree DIR] [--n N] [--slices K]
    valgrind --tool=callgrind python -m benchmarks.studies.zk_client_cpu --slices 1 --n 100   # and --n 600

Issue 29 item 4 asks what of a cycle's CPU is tenure's. Through a real server that is mixed with
kazoo's (its connection thread serialises each multi and reads each answer) and with the load
of a shared machine. Here a private server serves the connection and a few warm-up cycles; then
kazoo's ``TransactionRequest.commit_async`` answers each multi at once, in this thread, as the
server would have (created paths, stats, checks passed), so what is left is tenure's code and
the building of kazoo's request objects. Printed: this thread's CPU per cycle (the best of
``--slices``). Under callgrind the instruction count of ``--slices 1 --n 600`` minus that of
``--n 100``, over 500, is the same per cycle and does not move with the machine's load. The
audit's numbers run from 1 and stay below its trim period (10,000 records), as in a store
with nothing to tidy.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[2]


class _Answered:
    """A kazoo result already there."""

    def __init__(self, value: Any) -> None:
        self._value = value

    def get(self, timeout: float | None = None) -> Any:
        return self._value


_NUMBERS = itertools.count(1)  # the audit's sequential znodes


def _answer(tx: Any) -> _Answered:
    """What the server answers a multi that succeeds, op by op."""
    from kazoo.protocol.serialization import Create, SetData
    from kazoo.protocol.states import ZnodeStat

    out: list[Any] = []
    for op in tx.operations:
        if isinstance(op, Create):
            out.append(f"{op.path}{next(_NUMBERS):010d}" if op.flags & 2 else op.path)  # 2: sequential
        elif isinstance(op, SetData):
            ms = int(time.time() * 1000)  # the leader's clock in a stamp: an epoch of 1
            out.append(ZnodeStat(1, 1 << 32, ms, ms, max(op.version, 0) + 1, 0, 0, 0, 0, 0, 1 << 32))
        else:
            out.append(True)
    return _Answered(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=HERE, help="the checkout whose tenure is measured")
    parser.add_argument("--n", type=int, default=2000, help="cycles per slice")
    parser.add_argument("--slices", type=int, default=5)
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))  # devservers from this tree
    sys.path.insert(0, str(args.tree.resolve()))
    for name in [m for m in sys.modules if m == "tenure" or m.startswith("tenure.")]:
        del sys.modules[name]
    from kazoo.client import TransactionRequest

    import tenure
    from devservers.zookeeper import ZooKeeperServer

    server = ZooKeeperServer(Path(tempfile.mkdtemp(prefix="tenure-zk-cpu-")) / "zk")
    server.start()
    try:
        server.wait_serving()
        with tenure.connect(f"zk://{server.hosts}/cpu-{uuid.uuid4().hex[:6]}") as store:
            def cycles(n: int) -> float:
                prefix, cpu = uuid.uuid4().hex[:6], time.thread_time()
                for i in range(n):
                    store.complete(store.claim(f"{prefix}-{i}", owner="bench", ttl=30.0))
                return time.thread_time() - cpu

            cycles(50)  # through the server: connection, stamps, the audit's segment
            TransactionRequest.commit_async = _answer  # type: ignore[assignment,method-assign]
            cycles(500)
            best = min(cycles(args.n) for _ in range(args.slices))
            print(f"tenure from {tenure.__file__}: {best / args.n * 1e6:.1f} us of CPU per claim+complete "
                  f"(multis answered in the process, best of {args.slices} x {args.n})")
    finally:
        server.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
