"""``python -m benchmarks.studies.etcd_range_cost [--keys N]``: what a limited Range costs etcd.

etcd (3.4 here) walks every key of a range in its in-memory index to answer it, whatever the
limit, and a deleted key stays in that index until a compaction (etcd-io/etcd#11057, #16510).
This times ``Range(span, limit=1)`` on a private single-node etcd over ``--keys`` live keys,
then over 10 live keys with the rest deleted, then after a compaction: the figures quoted in
docs/performance.md ("Claims in batches", the 100,000-job drains).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc

from devservers.etcd import EtcdCluster
from tenure.backends.etcd.api import rpc_pb2 as rpc
from tenure.backends.etcd.api import rpc_pb2_grpc as rpc_grpc

START, END = b"/q/", b"/q0"  # the span ranged over
BATCH = 100  # keys a Txn writes or deletes


def _ms_per_range(kv: Any, times: int = 200) -> float:
    began = time.perf_counter()
    for _ in range(times):
        kv.Range(rpc.RangeRequest(key=START, range_end=END, limit=1))
    return (time.perf_counter() - began) / times * 1e3


def _in_batches(kv: Any, keys: list[bytes], op: str) -> None:
    for i in range(0, len(keys), BATCH):
        ops = [rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=b"")) if op == "put" else
               rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=key)) for key in keys[i:i + BATCH]]
        kv.Txn(rpc.TxnRequest(success=ops))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=100_000)
    n = parser.parse_args().keys
    keys = [START + b"%08d" % i for i in range(n)]
    with tempfile.TemporaryDirectory(prefix="tenure-range-") as tmp:
        cluster = EtcdCluster(Path(tmp), size=1)
        try:  # inside: a start that fails half-way is stopped too
            cluster.start()
            with grpc.insecure_channel(cluster.endpoints.split(",")[0]) as channel:
                kv = rpc_grpc.KVStub(channel)
                _in_batches(kv, keys, "put")
                print(f"{n} live keys: {_ms_per_range(kv):.2f} ms per Range(limit=1)")
                _in_batches(kv, keys[:-10], "delete")
                print(f"10 live, {n - 10} deleted, not compacted: {_ms_per_range(kv):.2f} ms")
                revision = kv.Range(rpc.RangeRequest(key=START, range_end=END, limit=1)).header.revision
                cluster.nodes[0].api("/v3/kv/compaction", {"revision": revision, "physical": True}, timeout=60.0)
                print(f"after a compaction: {_ms_per_range(kv):.2f} ms")
        finally:
            cluster.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
