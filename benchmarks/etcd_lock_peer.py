"""A peer's Lock recipe in a process of its own: ``python etcd_lock_peer.py HOST:PORT``.

Runs under the interpreter of a virtualenv that holds one ``etcd3`` package (python-etcd3 0.12.0
or cslab-etcd3 0.12.1: both import as ``etcd3``), never tenure's. For each line ``N`` on stdin
it acquires and releases N locks, a fresh name each like tenure's fresh jobs, and prints the
seconds taken. The first line it prints names the protobuf runtime it runs on.
"""

from __future__ import annotations

import sys
import time
import uuid

import etcd3  # type: ignore[import-not-found]  # the peer's, from its own virtualenv
from google.protobuf.internal import api_implementation  # type: ignore[import-untyped]


def main() -> None:
    host, _, port = sys.argv[1].rpartition(":")
    client = etcd3.client(host=host, port=int(port), timeout=10)
    root = f"peer-lock-{uuid.uuid4().hex[:8]}"
    print(api_implementation.Type(), flush=True)
    done = 0
    for line in sys.stdin:
        n = int(line)
        start = time.perf_counter()
        for i in range(done, done + n):
            lock = client.lock(f"{root}-{i}", ttl=30)
            assert lock.acquire(timeout=10)
            lock.release()
        done += n
        print(time.perf_counter() - start, flush=True)
    client.close()


if __name__ == "__main__":
    main()
