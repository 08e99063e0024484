"""``python -m benchmarks.studies.relay_trace [--rtt MS] [--n N]``: where a claim+complete's time goes.

Runs N of tenure's claim+complete cycles on a private etcd through a delay relay (in this
process) at the RTT given, and prints each operation's time and the relay's log of chunks:
when each arrived at the relay, and which way. A request the server can answer is one that
has arrived there; what an operation takes beyond the RTT is the server's time and the
client's own, which the log's gaps show.
"""

from __future__ import annotations

import argparse
import time
import uuid

import tenure
from benchmarks.relay import Relay
from benchmarks.servers import private_etcd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rtt", type=float, default=10.0, help="ms (default 10: far above the fixed costs)")
    parser.add_argument("--n", type=int, default=4)
    args = parser.parse_args()
    with private_etcd("tenure-trace-") as cluster:
        host, _, port = cluster.endpoints.rpartition(":")
        relay = Relay((host, int(port)))
        relay.one_way = args.rtt / 2000
        with tenure.connect(f"etcd://{relay.address}/trace-{uuid.uuid4().hex[:6]}") as store:
            for i in range(3):  # connections, the pooled etcd lease, the retention lease
                store.complete(store.claim(f"warm-{i}", owner="trace", ttl=30))
            relay.log = []
            start = time.monotonic()
            for i in range(args.n):
                sent = time.monotonic()
                lease = store.claim(f"job-{i}", owner="trace", ttl=30)
                claimed = time.monotonic()
                store.complete(lease)
                print(f"cycle {i} at {(sent - start) * 1000:7.2f} ms: claim {(claimed - sent) * 1000:.2f} ms, "
                      f"complete {(time.monotonic() - claimed) * 1000:.2f} ms")
            for at, upstream, _, _ in relay.log:
                print(f"{(at - start) * 1000:9.3f} ms  {'client -> etcd' if upstream else '      etcd -> client'}")
        relay.close()


if __name__ == "__main__":
    main()
