"""A whole listing of one store, timed from several source trees alternately.

    PYTHONPATH=. python benchmarks/studies/listing_ab.py --backend zk [--jobs 100000] [--rounds 3] [--url URL] TREE...

Seeds one store (``dashboard_scale.seed``: pending jobs, 1 % leased) on a private server, then
lists it from each TREE (a checkout, e.g. ``.`` and ``git archive main | tar -x -C /tmp/main``)
in a process of its own, the trees' order reversed every other round: the machine is shared
and its load drifts by more than a change to the decoding saves, so two trees are compared on
the same store, side by side. Each run prints the best of three listings: wall and client CPU.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.dashboard_scale import seeded_store  # noqa: E402

LIST = """
import sys, time, tenure
with tenure.connect(sys.argv[1]) as store:
    runs = []
    for _ in range(3):
        cpu, wall = time.process_time(), time.perf_counter()
        count = sum(1 for _ in store.jobs())
        runs.append((time.perf_counter() - wall, time.process_time() - cpu))
print(f"{min(r[0] for r in runs):.3f} s wall, {min(r[1] for r in runs):.3f} s client CPU, {count} jobs")
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="zk")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--url", help="list this store as it is instead (--backend and --jobs unused)")
    parser.add_argument("trees", nargs="+", type=Path)
    args = parser.parse_args()
    trees = [str(t.resolve()) for t in args.trees]
    if args.url:
        compare(trees, args.url, args.rounds)
        return 0
    with seeded_store(args.backend, args.jobs) as url:
        compare(trees, url, args.rounds)
    return 0


def compare(trees: list[str], url: str, rounds: int) -> None:
    for n in range(rounds):
        for tree in trees if n % 2 == 0 else trees[::-1]:
            # In the tree's directory and on its path: that tree's tenure is imported.
            done = subprocess.run([sys.executable, "-c", LIST, url], cwd=tree, capture_output=True, text=True,
                                  env={**os.environ, "PYTHONPATH": tree}, check=False)
            shown = done.stdout.strip() or done.stderr.strip()[-300:]
            print(f"  {tree:30s} {shown}  (load average {os.getloadavg()[0]:.1f})", flush=True)


if __name__ == "__main__":
    sys.exit(main())
