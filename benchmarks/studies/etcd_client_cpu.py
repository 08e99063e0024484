"""tenure's own CPU per etcd (or ZooKeeper) claim+complete: the calling thread, this tree against another.

    python -m benchmarks.studies.etcd_client_cpu [--store zk] [--tree DIR ...] [--n N] [--slices K] [--rounds R]
    valgrind --tool=callgrind --collect-atstart=no --toggle-collect=functools_reduce \\
        python -m benchmarks.studies.etcd_client_cpu [--store zk] --child --endpoint HOST:PORT --n 100   # and --n 600

Issue 29 item 4: at 1 ms RTT the gap to the floor is the calling thread's CPU, not a wait
(docs/performance.md, wire_trace). One private etcd (``--store zk``: ZooKeeper) serves every tree; each round runs one
child process per tree (alternated, so the machine's load falls on all alike), each timing
``time.thread_time()`` of its calling thread over ``--slices`` slices of ``--n`` cycles and
printing the best per cycle. With ``--child`` the cycles run inside ``functools.reduce`` so
that callgrind's ``--toggle-collect=functools_reduce`` counts only them (the calling thread's
instructions; the difference of ``--n 600`` and ``--n 100``, over 500, is one cycle's count,
which the load does not move).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import subprocess
import sys
import time
import uuid
from pathlib import Path

from benchmarks.trees import use_tree

HERE = Path(__file__).resolve().parents[2]


def child(args: argparse.Namespace) -> int:
    use_tree(args.tree)
    import tenure

    with tenure.connect(f"{args.store}://{args.endpoint}/cpu-{uuid.uuid4().hex[:6]}") as store:
        def cycle(prefix: str, i: int) -> str:
            store.complete(store.claim(f"{prefix}-{i}", owner="bench", ttl=30.0))
            return prefix

        def cycles(n: int) -> float:
            prefix, cpu = uuid.uuid4().hex[:6], time.thread_time()
            functools.reduce(cycle, range(n), prefix)
            return time.thread_time() - cpu

        if args.warm:
            for _ in range(args.warm):  # connection, pooled lease, caches: outside reduce
                store.complete(store.claim(f"warm-{uuid.uuid4().hex[:6]}", owner="bench", ttl=30.0))
        best = min(cycles(args.n) for _ in range(args.slices))
        print(f"{best / args.n * 1e6:.1f}", flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, action="append", help="checkouts to compare (default: this one)")
    parser.add_argument("--n", type=int, default=300, help="cycles per slice")
    parser.add_argument("--slices", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--warm", type=int, default=50)
    parser.add_argument("--store", choices=("etcd", "zk"), default="etcd")
    parser.add_argument("--child", action="store_true", help="measure in this process (--endpoint)")
    parser.add_argument("--endpoint", default="")
    args = parser.parse_args()
    if args.child:
        args.tree = (args.tree or [HERE])[0]
        return child(args)
    sys.path.insert(0, str(HERE))
    from benchmarks.servers import private_etcd, private_zookeeper

    trees = args.tree or [HERE]
    seen: dict[Path, list[float]] = {tree: [] for tree in trees}
    with contextlib.ExitStack() as stack:
        if args.store == "zk":
            endpoint = stack.enter_context(private_zookeeper("tenure-zk-cpu-")).hosts
        else:
            endpoint = stack.enter_context(private_etcd("tenure-etcd-cpu-")).endpoints
        for _ in range(args.rounds):
            for tree in trees:
                out = subprocess.run(
                    [sys.executable, "-m", "benchmarks.studies.etcd_client_cpu", "--child", "--tree", str(tree),
                     "--store", args.store, "--endpoint", endpoint, "--n", str(args.n), "--slices", str(args.slices),
                     "--warm", str(args.warm)],
                    cwd=HERE, check=True, capture_output=True, text=True).stdout
                seen[tree].append(float(out.split()[-1]))
                time.sleep(0.2)
    for tree, values in seen.items():
        print(f"{tree}: calling thread's CPU per claim+complete, us (best of {args.slices} x {args.n}, "
              f"each round): {', '.join(f'{v:.0f}' for v in values)}; min {min(values):.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
