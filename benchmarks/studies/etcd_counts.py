"""What exact job counts cost on etcd: counting a section per query, or a counter per write.

    PYTHONPATH=. python -m benchmarks.studies.etcd_counts [--sizes 1000,10000,100000] [--writers 1,8,32]
                                                  [--seconds 5]

``summary()`` on etcd asks etcd to count the ``job/`` and ``queue/`` keys (``count_only``
ranges, etcd.query): no key crosses the wire, but etcd 3.4 walks its index over the whole
range. Part 1 times one ``count_only`` range over N keys. The alternative that makes the count
O(1) is a counter key that every submit/claim/complete transaction updates. etcd has no
increment, so the transaction must compare the counter's revision with the one it read and
write the next value: every writer of the cluster then commits through one key. Part 2 times
claim-like transactions (compare the lease key is absent, put a job, a lease and a history
key) from W threads, as they are, and with such a counter (one key, or 16 keys picked by the
job's hash and summed by the reader): transactions per second and failed compares per commit.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
import uuid
import zlib

from benchmarks.servers import private_etcd
from tenure.backends.etcd import client as ec

RECORD = b'{"state":"leased","owner":"bench","ttl":30}'


def count_cost(conn: ec.Connection, sizes: list[int]) -> None:
    root = f"/counts-{uuid.uuid4().hex[:8]}/job/".encode()
    have = 0
    for size in sizes:
        for start in range(have, size, 100):
            conn.txn([], [ec.put(root + b"%08d" % i, RECORD) for i in range(start, min(size, start + 100))], [])
        have = size
        end = root[:-1] + b"0"
        times = []
        for _ in range(7):
            began = time.perf_counter()
            res = conn.txn([], [ec.get(root, end, count_only=True)], [])
            times.append(time.perf_counter() - began)
            assert res.counts == [size]
        print(f"  count_only over {size:>7,} keys: {min(times) * 1000:6.1f} ms (best of 7)", flush=True)


def writes(conn: ec.Connection, writers: int, counters: int, seconds: float) -> tuple[float, float]:
    """(commits per second, failed compares per commit) of claim-like transactions."""
    root = f"/writes-{uuid.uuid4().hex[:8]}".encode()
    keys = [root + b"/count/%02d" % i for i in range(counters)]
    stop = time.monotonic() + seconds
    done, conflicts = [0] * writers, [0] * writers

    def writer(n: int) -> None:
        seen = dict.fromkeys(keys, (0, 0))  # counter key -> (mod revision, value) last read
        i = 0
        while time.monotonic() < stop:
            job = b"%s/%d-%d" % (root, n, i)
            ops = [ec.put(job + b"/job", RECORD), ec.put(job + b"/lease", RECORD),
                   ec.put(job + b"/history/" + uuid.uuid4().hex.encode(), RECORD)]
            compares = [ec.compare(job + b"/lease", "create", "==", 0)]
            if keys:
                key = keys[zlib.crc32(job) % len(keys)]
                mod, value = seen[key]
                compares.append(ec.compare(key, "mod", "==", mod))
                ops.append(ec.put(key, b"%d" % (value + 1)))
            res = conn.txn(compares, ops, [ec.get(key)] if keys else [])
            if res.succeeded:
                done[n] += 1
                i += 1
                if keys:
                    seen[key] = (res.revision, value + 1)
            else:
                conflicts[n] += 1
                kv = res.ranges[0][0] if res.ranges and res.ranges[0] else None
                seen[key] = (kv.mod_revision, int(kv.value)) if kv is not None else (0, 0)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = sum(done)
    return total / seconds, sum(conflicts) / max(total, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--writers", default="1,8,32")
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    with private_etcd("tenure-counts-") as cluster:
        host, _, port = cluster.endpoints.split(",")[0].rpartition(":")
        conn = ec.Connection([(host, int(port))], timeout=30)
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n1. counting", flush=True)
        count_cost(conn, [int(s) for s in args.sizes.split(",")])
        print("2. claim-like transactions from W threads", flush=True)
        for writers in (int(w) for w in args.writers.split(",")):
            for counters, what in ((0, "as today"), (1, "+ one counter"), (16, "+ 16 counters")):
                rate, conflicts = writes(conn, writers, counters, args.seconds)
                print(f"  W={writers:<3} {what:<15} {rate:7.0f} commits/s, {conflicts:5.2f} failed "
                      "compares per commit", flush=True)
        conn.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
