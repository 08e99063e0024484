"""``python -m benchmarks.fence_proof [--n 20000] [--url sqlite:///bench.db]``

What proving a fencing token costs a destination, per request: the HMAC signature alone, and
the store's word (one ``store.get`` per check) on the store at ``--url`` (memory by default).
The HTTP fence runs one of them, or both, before it asks its SQL fence.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable

import tenure
from tenure.fencing import Proof, Request, sign
from tenure.fencing.claims import FenceClaim

SECRET = "a benchmark's fencing secret"


def timed(call: Callable[[], object], n: int) -> list[float]:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return samples


def show(name: str, samples: list[float]) -> None:
    ordered = sorted(samples)
    p50, p99 = statistics.median(ordered), ordered[int(0.99 * (len(ordered) - 1))]
    print(f"  {name:<38} p50 {p50 * 1e6:8.1f} us   p99 {p99 * 1e6:8.1f} us   ({len(samples)} runs)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fence_proof", description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--url", default=f"memory://fence-proof-{uuid.uuid4().hex}")
    args = parser.parse_args(argv)
    with tenure.connect(args.url) as store:
        lease = store.claim(f"bench-{uuid.uuid4().hex}", owner="worker-a", ttl=600.0)
        claim = FenceClaim("/accounts/42", lease.job_id, lease.token, lease.owner)
        request = Request("POST", "/accounts/42")
        signature = sign(SECRET, lease.job_id, lease.owner, lease.token, request=request)
        by_secret, by_store = Proof(secret=SECRET), Proof(store=store)
        print(f"## proving one token ({store.characteristics.name})")
        show("sign (worker side)", timed(lambda: sign(SECRET, lease.job_id, lease.owner, lease.token,
                                                      request=request), args.n))
        show("check signature", timed(lambda: by_secret.check(claim, signature, request), args.n))
        n_store = args.n if store.characteristics.name in ("memory", "sqlite") else max(200, args.n // 50)
        show("check with the store (one get)", timed(lambda: by_store.check(claim, None), n_store))
        store.release(lease)


if __name__ == "__main__":
    main()
