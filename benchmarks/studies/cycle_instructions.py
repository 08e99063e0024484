"""One process's claim + complete cycles, for counting their CPU instructions (issue 27).

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        python -m benchmarks.studies.cycle_instructions --tree DIR --url URL --n 200   # and --n 1200

``benchmarks/before_after.py --no-renew`` times the same cycles in process CPU, which a shared
machine's load still moves by 10 % or more. Callgrind counts instructions instead (every
thread's, in tenure, Python, the client library and its C code): those of ``--n 1200`` minus
those of ``--n 200``, over 1,000, are one cycle's, the start-up and the warm-up cancelled. They
do not see cache misses, so a wider record costs somewhat more time than instructions. ``--aio``
runs the cycles through ``tenure.aio``. Printed: this process's CPU per cycle (under callgrind,
only a rough guide).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from benchmarks.trees import use_tree

HERE = Path(__file__).resolve().parents[2]
WARM = 50  # cycles before the count: connections, caches, the interpreter's specialisation


def sync_cycles(url: str, n: int) -> float:
    import tenure

    with tenure.connect(url) as store:
        for i in range(WARM):
            store.complete(store.claim(f"w-{i}", owner="bench", ttl=30.0), result=b"done")
        cpu = time.process_time()
        for i in range(n):
            store.complete(store.claim(f"c-{i}", owner="bench", ttl=30.0), result=b"done")
        return time.process_time() - cpu


async def aio_cycles(url: str, n: int) -> float:
    import tenure.aio

    async with tenure.aio.connect(url) as store:
        for i in range(WARM):
            await store.complete(await store.claim(f"w-{i}", owner="bench", ttl=30.0), result=b"done")
        cpu = time.process_time()
        for i in range(n):
            await store.complete(await store.claim(f"c-{i}", owner="bench", ttl=30.0), result=b"done")
        return time.process_time() - cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=HERE, help="the checkout whose tenure is measured")
    parser.add_argument("--url", required=True, help="a fresh store (memory://, sqlite:///..., postgresql://...)")
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--aio", action="store_true")
    args = parser.parse_args()
    use_tree(args.tree)
    cpu = asyncio.run(aio_cycles(args.url, args.n)) if args.aio else sync_cycles(args.url, args.n)
    print(f"{cpu / max(args.n, 1) * 1e6:.1f} us CPU a cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
