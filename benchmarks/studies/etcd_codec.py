"""``python -m benchmarks.studies.etcd_codec [--baseline REV] [--jobs N] [--n N]``: hand encoding or generated code?

tenure's etcd client once wrote and read ``Txn`` and ``Range`` messages by hand, because the
only generated code it had (etcd3 0.12's) ran on protobuf's pure-Python runtime. This runs the
client of ``--baseline`` (a git revision with the hand encoding; default: the commit before
generated code) and this tree's (generated messages on the upb runtime) side by side on one
private etcd, each in its own process, and reports the whole operations: claim+complete
cycles, and a listing of ``--jobs`` jobs. A hand-written path stays only where it is at least
10 % faster on the whole operation (docs/performance.md). The baseline needs etcd3 0.12.0 in
this interpreter's environment (it chooses protobuf's pure-Python runtime in its own process).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import textwrap
import uuid
from pathlib import Path

from benchmarks.processes import ROOT, LineProcess, archived

HAND_ENCODING = "1e5a961"  # the last commit whose etcd client encodes by hand

WORKER = textwrap.dedent("""
    import sys, time
    import tenure
    cycles, listing = tenure.connect(sys.argv[1] + "-cycles"), tenure.connect(sys.argv[1] + "-list")
    from google.protobuf.internal import api_implementation  # after connecting: the baseline chooses
    print(api_implementation.Type(), flush=True)
    done = 0
    for line in sys.stdin:
        command, n = line.split()
        n = int(n)
        start = time.perf_counter()
        if command == "cycles":
            for i in range(done, done + n):
                cycles.complete(cycles.claim(f"c-{i}", owner="bench", ttl=30.0))
            done += n
        elif command == "seed":
            for first in range(0, n, 2000):
                listing.submit_many([f"scale-{i:07d}" for i in range(first, min(n, first + 2000))])
        else:
            assert sum(1 for _ in listing.jobs()) == n
        print(time.perf_counter() - start, flush=True)
""")


class Worker(LineProcess):
    """A tenure client from ``tree`` in a process of its own."""

    def __init__(self, tree: Path, url: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PROTOCOL_")}
        env["PYTHONPATH"] = str(tree)
        super().__init__(str(tree), [sys.executable, "-c", WORKER, url], env, cwd=tree)
        self.runtime = self.first

    def ask_seconds(self, command: str, n: int) -> float:
        return float(self.ask(f"{command} {n}"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", default=HAND_ENCODING, help="git revision with the hand encoding")
    parser.add_argument("--jobs", type=int, default=100_000, help="jobs in the listing")
    parser.add_argument("--n", type=int, default=1000, help="claim+complete cycles per run")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    from devservers.etcd import EtcdCluster

    with tempfile.TemporaryDirectory(prefix="tenure-codec-") as tmp:
        baseline = archived(args.baseline, Path(tmp) / "baseline")
        cluster = EtcdCluster(Path(tmp) / "etcd", size=1)
        cluster.start()
        try:
            base = f"etcd://{cluster.endpoints}/codec-{uuid.uuid4().hex[:6]}"
            hand, generated = Worker(baseline, base + "-hand"), Worker(ROOT, base + "-generated")
            print(f"hand encoding ({args.baseline}, other messages on protobuf's {hand.runtime} runtime) "
                  f"vs generated code on {generated.runtime}")
            for worker in (hand, generated):
                worker.ask_seconds("cycles", max(10, args.n // 10))  # warm up
            ratios = []
            for _ in range(args.runs):  # alternating slices: a change in load falls on both alike
                mine = theirs = 0.0
                for _ in range(10):
                    theirs += hand.ask_seconds("cycles", args.n // 10)
                    mine += generated.ask_seconds("cycles", args.n // 10)
                ratios.append(theirs / mine)
                print(f"  claim+complete x {args.n}: hand {theirs:.2f} s, generated {mine:.2f} s")
            print(f"claim+complete: hand takes {statistics.median(ratios):.2f} x the generated code's time "
                  f"(runs: {', '.join(f'{r:.2f}' for r in ratios)})")
            for worker in (hand, generated):
                print(f"  seeding {args.jobs:,} jobs: {worker.ask_seconds('seed', args.jobs):.1f} s")
            listings: dict[str, list[float]] = {"hand": [], "generated": []}
            for _ in range(3):
                listings["hand"].append(hand.ask_seconds("list", args.jobs))
                listings["generated"].append(generated.ask_seconds("list", args.jobs))
            h, g = (statistics.median(listings[k]) for k in ("hand", "generated"))
            print(f"listing {args.jobs:,} jobs: hand {h:.2f} s, generated {g:.2f} s "
                  f"(hand takes {h / g:.2f} x; runs hand {listings['hand']}, generated {listings['generated']})")
            hand.close()
            generated.close()
        finally:
            cluster.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
