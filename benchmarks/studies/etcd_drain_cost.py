"""``python -m benchmarks.studies.etcd_drain_cost [--jobs 10000] [--workers 16] [--n 1] [--compact]``

Where an etcd drain's time goes (issue 29): ``benchmarks.drain``'s workers, each with its
requests counted by kind on the wire (every Range, and every range inside a Txn, named by the
section it reads and its shape: a whole section, a bounded window of ``queue/``, one key), the
RPCs timed by what they are (claim_next's index read, the candidates' keys, a claim's Txn, a
completion), and etcd's own CPU (``/proc/<pid>/stat``) per slice of the drain. Beside the
drain, every ``--every`` seconds, one Range(limit=1) over each section it reads is timed, so
the cost of a walk can be set against what the section holds (live keys, and the deleted keys
etcd keeps in its index until a compaction). ``--compact``: etcd runs with the auto-compaction
docs/backends/etcd.md advises (``--compaction`` sets its flags).
"""

from __future__ import annotations

import argparse
import collections
import os
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import tenure
from benchmarks.drain import SUBMIT_BATCH, drain_loop
from benchmarks.workloads import in_processes
from tenure.backends.etcd.api import rpc_pb2 as rpc

SECTIONS = ("job", "lease", "end", "queue", "sched", "held", "last", "delay", "history", "rejection")


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Counted:
    """A worker's requests by kind: ranges by section and shape, RPCs by what they are."""

    def __init__(self, root: bytes) -> None:
        self.root = root
        self.ranges: collections.Counter[str] = collections.Counter()
        self.rpcs: collections.Counter[str] = collections.Counter()
        self.seconds: collections.Counter[str] = collections.Counter()

    def range_kind(self, r: Any) -> str:
        key = bytes(r.key)
        rest = key[len(self.root):]
        section = rest.split(b"/", 1)[0].decode(errors="replace")
        if not r.range_end:
            return f"{section} one key"
        end = bytes(r.range_end)
        whole = end == self.root + section.encode() + b"0"
        if section == "queue" and not whole:
            return "queue window"
        if section == "queue" and key == self.root + b"queue/":
            return "queue whole"
        if section == "queue":
            return "queue from a key to the end"
        return f"{section} span{' (limit)' if r.limit else ''}"

    def section_of(self, key: bytes) -> str:
        return key[len(self.root):].split(b"/", 1)[0].decode(errors="replace")

    def ops(self, ops: Any, kinds: list[str]) -> None:
        for op in ops:
            which = op.WhichOneof("request")
            if which == "request_range":
                kinds.append(self.range_kind(op.request_range))
            elif which == "request_txn":
                self.ops(op.request_txn.success, kinds)
            elif which == "request_put":
                kinds.append(f"put {self.section_of(bytes(op.request_put.key))}")
            else:
                kinds.append(f"delete {self.section_of(bytes(op.request_delete_range.key))}")

    def rpc_kind(self, method: str, request: Any) -> tuple[str, list[str]]:
        if method == "Range":
            kind = self.range_kind(request)
            return f"Range {kind}", [kind]
        kinds: list[str] = []
        self.ops(request.success, kinds)
        if "put held" in kinds:
            label = "Txn claims" if any(op.WhichOneof("request") == "request_txn" for op in request.success) \
                else "Txn claim"
        elif "delete held" in kinds:
            label = "Txn completes" if len(request.compare) == 0 else "Txn complete"
        elif any(kind.startswith(("put", "delete")) for kind in kinds):
            label = "Txn other writes"
        elif "held span" in kinds:
            label = "Txn index read"
        elif any(kind.endswith("one key") for kind in kinds):
            label = "Txn keys read"
        else:
            label = "Txn other read"
        return label, kinds

    def wrap(self, store: tenure.Store) -> None:
        conn = store.backend._conn
        for ep in conn._endpoints:
            methods = list(ep.methods)
            for i, name in enumerate(("Txn", "Range")):
                methods[i] = self._timed(name, methods[i])
            ep.methods = tuple(methods)

    def _timed(self, name: str, stub: Any) -> Any:
        def call(request: Any, **kwargs: Any) -> Any:
            kind, kinds = self.rpc_kind(name, request)
            began = time.perf_counter()
            try:
                resp = stub(request, **kwargs)
            finally:
                self.rpcs[kind] += 1
                self.seconds[kind] += time.perf_counter() - began
            for one in kinds:
                if not one.startswith(("put", "delete")):
                    self.ranges[one] += 1
            if kind in ("Txn claim", "Txn claims"):
                groups = [op.response_txn for op in resp.responses if op.WhichOneof("response") == "response_txn"]
                results = [op.response_txn for group in groups for op in group.responses
                           if op.WhichOneof("response") == "response_txn"] if groups else [resp]
                won = sum(1 for r in results if r.succeeded)
                self.rpcs["(claims won)"] += won
                self.rpcs["(claims lost)"] += len(results) - won
            return resp

        return call


def _worker(url: str, root: bytes, n: int, barrier: Any, out: Any) -> None:
    counted = Counted(root)
    with tenure.connect(url) as store:
        counted.wrap(store)
        barrier.wait()
        done = drain_loop(store, f"drain-{os.getpid()}", n)
    out.put((done, dict(counted.ranges), dict(counted.rpcs), dict(counted.seconds)))


def _probe(endpoint: str, root: bytes, pid: int, stop: threading.Event, every: float, began: float) -> None:
    """Every ``every`` seconds: the jobs claimed since the last probe (the queue's live keys
    gone), etcd's CPU a job meanwhile, and one Range(limit=1, keys_only) over each section the
    claims read, timed against one of a single key (the difference: the walk), with how many
    live keys it holds."""
    import grpc

    from tenure.backends.etcd.api import rpc_pb2_grpc as rpc_grpc

    def ms(request: Any) -> float:
        t0 = time.perf_counter()
        for _ in range(3):
            kv.Range(request)
        return (time.perf_counter() - t0) / 3 * 1e3

    with grpc.insecure_channel(endpoint) as channel:
        kv = rpc_grpc.KVStub(channel)
        queue = (root + b"queue/", root + b"queue0")
        left = kv.Range(rpc.RangeRequest(key=queue[0], range_end=queue[1], count_only=True)).count
        cpu = _cpu_seconds(pid)
        at = time.perf_counter()
        print("  t s | jobs/s | etcd CPU % | etcd ms a job | one key ms | "
              + " | ".join(f"{s}: live, ms a Range(limit=1)" for s in ("queue", "held", "lease")), flush=True)
        while not stop.wait(every):
            row = []
            one = ms(rpc.RangeRequest(key=root + b"meta"))
            for section in ("queue", "held", "lease"):
                start = root + section.encode() + b"/"
                end = root + section.encode() + b"0"
                took = ms(rpc.RangeRequest(key=start, range_end=end, limit=1, keys_only=True))
                live = kv.Range(rpc.RangeRequest(key=start, range_end=end, count_only=True)).count
                if section == "queue":
                    claimed, left = left - live, live
                row.append(f"{live:>6} {took:6.2f}")
            now, cpu_now = time.perf_counter(), _cpu_seconds(pid)
            per_job = f"{1e3 * (cpu_now - cpu) / claimed:6.2f}" if claimed else "     -"
            print(f"{now - began:5.0f} | {claimed / (now - at):6.1f} | {100 * (cpu_now - cpu) / (now - at):5.0f} | "
                  f"{per_job} | {one:6.2f} | " + " | ".join(row), flush=True)
            cpu, at = cpu_now, now


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--n", default="1", help="batch sizes, drained one after another on one etcd")
    parser.add_argument("--every", type=float, default=15.0)
    parser.add_argument("--compact", action="store_true", help="run etcd with auto-compaction")
    parser.add_argument("--compaction", default="periodic,1h", help="mode,retention for --compact")
    args = parser.parse_args()
    from devservers.etcd import EtcdCluster

    mode, retention = args.compaction.split(",")
    extra = (f"--auto-compaction-mode={mode}", f"--auto-compaction-retention={retention}") if args.compact else ()
    print(f"# {args.workers} workers drain {args.jobs:,} jobs; etcd {' '.join(extra) or 'without compaction'}; "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="tenure-drain-cost-") as tmp:
        cluster = EtcdCluster(Path(tmp), size=1, extra=extra)
        cluster.start()
        try:
            endpoint = cluster.endpoints
            pid = cluster.nodes[0].proc.pid
            for n in (int(x) for x in args.n.split(",")):
                prefix = f"cost-{uuid.uuid4().hex[:8]}"
                url = f"etcd://{endpoint}/{prefix}"
                root = f"/{prefix}/".encode()
                jobs = [f"j{i:07d}" for i in range(args.jobs)]
                began = time.perf_counter()
                with tenure.connect(url) as store:
                    for start in range(0, args.jobs, SUBMIT_BATCH):
                        store.submit_many(jobs[start:start + SUBMIT_BATCH])
                print(f"## n={n}: submitted {args.jobs:,} in {time.perf_counter() - began:.1f} s; "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
                stop = threading.Event()
                cpu0 = _cpu_seconds(pid)
                probe = threading.Thread(target=_probe, args=(endpoint, root, pid, stop, args.every,
                                                              time.perf_counter()))
                probe.start()
                try:  # the probe ends with the run, a failed one too
                    elapsed, found = in_processes(_worker, (url, root, n), args.workers, timeout=7200)
                finally:
                    stop.set()
                    probe.join()
                cpu = _cpu_seconds(pid) - cpu0
                done = sum(f[0] for f in found)
                ranges: collections.Counter[str] = collections.Counter()
                rpcs: collections.Counter[str] = collections.Counter()
                seconds: collections.Counter[str] = collections.Counter()
                for _, r, c, s in found:
                    ranges.update(r)
                    rpcs.update(c)
                    seconds.update(s)
                print(f"## n={n}: {done:,} jobs in {elapsed:.0f} s, {done / elapsed:.1f} jobs/s; etcd CPU "
                      f"{cpu:.0f} s ({100 * cpu / elapsed:.0f} % of a core, {1e3 * cpu / done:.2f} ms a job); "
                      f"load {os.getloadavg()[0]:.1f}")
                print("  RPCs a job, by what they are (ms each, as the worker waited):")
                for kind, count in rpcs.most_common():
                    print(f"    {count / done:7.3f}  {1e3 * seconds[kind] / count:7.2f} ms  {kind}")
                print("  ranges a job (inside Txns too), by section and shape:")
                for kind, count in ranges.most_common():
                    print(f"    {count / done:7.3f}  {kind}")
                print(flush=True)
        finally:
            cluster.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
