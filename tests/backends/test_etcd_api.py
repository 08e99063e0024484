"""tenure's generated etcd API: regenerated identically, etcd's wire names, and no process-wide switch.

The etcd backend must live beside any other protobuf user: a process that loaded protobuf's
C (upb) runtime and grpc first uses etcd through tenure (claim, renew, complete, listing,
watch, credentials, TLS) and keeps its runtime and environment as they were.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from devservers.availability import in_ci
from devservers.etcd import EtcdCluster, make_certificates, start_or_fail
from tests.servers.etcd import EtcdHarness

ROOT = Path(__file__).resolve().parents[2]


def test_regenerating_gives_the_committed_files() -> None:
    if not in_ci():
        pytest.importorskip("grpc_tools", reason="grpcio-tools (the dev extra) generates the etcd API")
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "generate_etcd_api.py"), "--check"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_service_paths_and_field_numbers_are_etcds() -> None:
    """A few of the numbers etcd's rpc.proto and kv.proto fix, read back from the generated code."""
    from tenure.backends.etcd.api import kv_pb2, rpc_pb2

    services = {s.full_name: [m.name for m in s.methods] for s in rpc_pb2.DESCRIPTOR.services_by_name.values()}
    assert services["etcdserverpb.KV"] == ["Range", "Put", "DeleteRange", "Txn"]
    assert services["etcdserverpb.Lease"] == ["LeaseGrant", "LeaseRevoke", "LeaseKeepAlive", "LeaseTimeToLive",
                                              "LeaseLeases"]
    assert set(services) == {f"etcdserverpb.{name}" for name in ("KV", "Watch", "Lease", "Cluster",
                                                                 "Maintenance", "Auth")}

    def numbers(message: object) -> dict[str, int]:
        return {f.name: f.number for f in message.DESCRIPTOR.fields}  # type: ignore[attr-defined]

    assert numbers(kv_pb2.KeyValue) == {"key": 1, "create_revision": 2, "mod_revision": 3, "version": 4,
                                        "value": 5, "lease": 6}
    assert numbers(rpc_pb2.Compare) == {"result": 1, "target": 2, "key": 3, "version": 4, "create_revision": 5,
                                        "mod_revision": 6, "value": 7, "lease": 8, "range_end": 64}
    assert numbers(rpc_pb2.RequestOp) == {"request_range": 1, "request_put": 2, "request_delete_range": 3,
                                          "request_txn": 4}
    assert numbers(rpc_pb2.WatchResponse)["events"] == 11


def test_ops_naming_only_their_set_fields_are_the_bytes_of_ops_naming_all() -> None:
    """``put``, ``delete``, ``get`` and ``compare`` leave proto3's defaults out of their dicts:
    the request's bytes are those of the messages with every field given (0, empty, False),
    a compare's target number of 0 included (a oneof member is sent even when 0)."""
    from tenure.backends.etcd import client as ec
    from tenure.backends.etcd.api import rpc_pb2

    r = rpc_pb2
    for lease, prev in ((0, False), (7, True), (2**40, False)):
        assert ec.txn_request([], [ec.put(b"k", b"", lease, prev), ec.delete(b"d", prev)], []).SerializeToString() == \
            r.TxnRequest(success=[r.RequestOp(request_put=r.PutRequest(key=b"k", value=b"", lease=lease, prev_kv=prev)),
                                  r.RequestOp(request_delete_range=r.DeleteRangeRequest(key=b"d", prev_kv=prev))]
                         ).SerializeToString()
    for options in ({}, {"revision": 5}, {"keys_only": True, "limit": 3}, {"count_only": True, "created_after": 9}):
        given = {"end": b"", "keys_only": False, "revision": 0, "limit": 0, "count_only": False, "created_after": 0}
        given.update(options)
        full = r.RangeRequest(key=b"g", range_end=given["end"], keys_only=given["keys_only"],
                              revision=given["revision"], limit=given["limit"], count_only=given["count_only"],
                              min_create_revision=given["created_after"] + 1 if given["created_after"] else 0)
        assert ec.txn_request([], [], [ec.get(b"g", **options)]).SerializeToString() == \
            r.TxnRequest(failure=[r.RequestOp(request_range=full)]).SerializeToString()
    for target, op, value in (("mod", "==", 0), ("create", "==", 0), ("create", ">", 4), ("value", "<", b"")):
        field = {"mod": "mod_revision", "create": "create_revision", "value": "value"}[target]
        results = {"==": r.Compare.EQUAL, ">": r.Compare.GREATER, "<": r.Compare.LESS}
        targets = {"mod": r.Compare.MOD, "create": r.Compare.CREATE, "value": r.Compare.VALUE}
        full_compare = r.Compare(result=results[op], target=targets[target], key=b"c", **{field: value})
        sent = ec.txn_request([ec.compare(b"c", target, op, value)], [], []).SerializeToString()
        assert sent == r.TxnRequest(compare=[full_compare]).SerializeToString()
        assert r.TxnRequest.FromString(sent).compare[0].WhichOneof("target_union") == field  # sent, even as 0


def test_a_claims_ops_written_out_are_the_builders() -> None:
    """The claim's reads and compares are written out as dicts (``transaction.reads``,
    ``Read.compares``): the same as ``get`` and ``compare`` build, so the same bytes."""
    from tenure.backends.etcd import client as ec
    from tenure.backends.etcd.api import kv_pb2
    from tenure.backends.etcd.layout import JobValue, Keys, end_value, job_value, lease_value
    from tenure.backends.etcd.transaction import Read, reads
    from tenure.core import codec
    from tenure.core.records import JobRecord, JobState

    k = Keys("/t")
    keys = k.of("j")
    assert reads(k, "j") == [ec.get(key) for key in keys[:5]]
    kv = kv_pb2.KeyValue
    job = kv(key=keys.job, value=json.dumps({"tenure": 1, "job": "j", "state": "pending", "token": 0, "runs": 0,
                                             "submitted_at": 1.0}).encode(), mod_revision=7, create_revision=7)
    # Keys present, each with create and mod revisions apart: a compare of the wrong revision,
    # or of an absent key's 0 for a present one, shows. A leased job, live or completed.
    leased = kv(key=keys.job, mod_revision=7, create_revision=3, value=job_value("j", JobValue(
        JobState.LEASED, "a", 0, 5.0, 1.0, 2.0, 7.0, 0, codec.life_fields(JobRecord("j", JobState.LEASED)))))
    side = [[kv(key=keys.held, create_revision=15, mod_revision=16)],
            [kv(key=keys.delay, create_revision=17, mod_revision=18)]]
    live = [[leased], [kv(key=keys.lease, value=lease_value("a", 5.0, None, 7.0), create_revision=11,
                          mod_revision=12)], [], *side]
    completed = [[leased], [], [kv(key=keys.end, value=end_value("completed", 7, 3.0, None), create_revision=13,
                                   mod_revision=14)], *side]
    for kvs in (None, [[job], [], [], [], []], [[job], [], [], [kv(key=keys.held, mod_revision=9)],
                                                [kv(key=keys.delay, mod_revision=8)]], live, completed):
        read = Read("j", kvs, 5.0)
        got = {key: r[0] for key, r in zip(keys[:5], kvs, strict=True) if r} if kvs else {}

        mod = {key: got[key].mod_revision if key in got else 0 for key in keys}
        created = got[keys.lease].create_revision if keys.lease in got else 0
        assert read.compares(k, "j") == [
            ec.compare(keys.job, "mod", "==", mod[keys.job]), ec.compare(keys.lease, "create", "==", created),
            ec.compare(keys.end, "mod", "==", mod[keys.end]), ec.compare(keys.held, "mod", "==", mod[keys.held]),
            ec.compare(keys.delay, "mod", "==", mod[keys.delay])]


UPB_FIRST = textwrap.dedent("""
    import json, os, sys, threading
    from google.protobuf import descriptor_pb2, timestamp_pb2  # another protobuf user, loaded first
    from google.protobuf.internal import api_implementation
    import grpc
    runtime, environ = api_implementation.Type(), dict(os.environ)

    import tenure
    plain, auth, tls, ca, cert, key = sys.argv[1:]
    out = {"runtime_before": runtime}
    with tenure.connect(plain) as store:
        store.submit("queued")
        stop = threading.Event()
        # A broken watch ends the loop instead of hanging; a daemon, so the process need not
        # wait the 30 s out to exit when the watch worked.
        timer = threading.Timer(30, stop.set)
        timer.daemon = True
        timer.start()
        changes = store.watch(stop, interval=0.05)
        next(changes)  # the watch has listed the store and follows etcd from here
        lease = store.claim("j", owner="a", ttl=5.0)
        lease = store.renew(lease)
        store.complete(lease, result=b"done")
        seen = []
        for change in changes:
            if change.job is not None and change.job.job_id == "j":
                seen.append(change.job.state.value)
                if change.job.state is tenure.JobState.COMPLETED:
                    break
        stop.set()
        out["watched"] = seen
        out["listed"] = sorted((s.job_id, s.state.value) for s in store.jobs())
        out["result"] = store.get("j").result.decode()
    with tenure.connect(auth, user="root", password="s3cret") as store:
        store.complete(store.claim("a", owner="a", ttl=5.0))
        out["auth"] = store.get("a").state.value
    with tenure.connect(tls, ca_cert=ca, cert_cert=cert, cert_key=key) as store:
        store.complete(store.claim("t", owner="a", ttl=5.0))
        out["tls"] = store.get("t").state.value
    out["runtime_after"] = api_implementation.Type()
    out["environ_unchanged"] = dict(os.environ) == environ
    out["etcd3_loaded"] = "etcd3" in sys.modules
    print(json.dumps(out), flush=True)
""")


@pytest.fixture
def auth_and_tls(tmp_path: Path) -> Iterator[tuple[EtcdCluster, EtcdCluster, dict[str, Path]]]:
    if not shutil.which("openssl"):
        pytest.skip("openssl is needed to make test certificates")
    (tmp_path / "certs").mkdir()
    tls = make_certificates(tmp_path / "certs")
    auth = start_or_fail(tmp_path / "auth", 1)
    node = auth.nodes[0]
    node.api("/v3/auth/role/add", {"name": "root"})
    node.api("/v3/auth/user/add", {"name": "root", "password": "s3cret"})
    node.api("/v3/auth/user/grant", {"user": "root", "role": "root"})
    node.api("/v3/auth/enable", {})
    secure = start_or_fail(tmp_path / "tls", 1, tls=tls)
    yield auth, secure, tls
    auth.close()
    secure.close()


def test_etcd_in_a_process_that_loaded_protobufs_upb_runtime_and_grpc_first(
        etcd_harness: EtcdHarness, auth_and_tls: tuple[EtcdCluster, EtcdCluster, dict[str, Path]]) -> None:
    auth, secure, tls = auth_and_tls
    # The child's environment chooses no runtime, so protobuf picks its default (upb).
    env = {k: v for k, v in os.environ.items() if k != "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"}
    env["PYTHONPATH"] = str(ROOT)
    args = [etcd_harness.url(), f"etcd://{auth.endpoints}/auth", f"etcd://{secure.endpoints}/tls",
            str(tls["ca"]), str(tls["client_cert"]), str(tls["client_key"])]
    done = subprocess.run([sys.executable, "-c", UPB_FIRST, *args], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["runtime_before"] == out["runtime_after"] == "upb"
    assert out["environ_unchanged"] and not out["etcd3_loaded"]
    assert out["watched"][-1] == "completed"  # changes re-read as they are now: "leased" may be skipped
    assert out["listed"] == [["j", "completed"], ["queued", "pending"]] and out["result"] == "done"
    assert out["auth"] == out["tls"] == "completed"


def test_nothing_in_tenure_chooses_a_protobuf_runtime() -> None:
    """The package (with its CLI and dashboard) and scripts never name the runtime switch; the
    tests name it only to keep it out of a child's environment, never to set it. (The benchmark
    sets it for python-etcd3's process alone: that peer needs it, tenure does not.)"""
    switch = "PROTOCOL_BUFFERS_" + "PYTHON_IMPLEMENTATION"  # split, so this file does not match itself
    setting = re.compile(re.escape(switch) + r"""["']?\]?\s*[=:,)]\s*["'](python|upb|cpp)""")
    named = [str(p.relative_to(ROOT)) for folder in ("tenure", "scripts")
             for p in (ROOT / folder).rglob("*.py") if switch in p.read_text(encoding="utf-8")]
    set_by_tests = [str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("*.py")
                    if setting.search(p.read_text(encoding="utf-8")) or
                    f"setdefault({switch!r}" in p.read_text(encoding="utf-8")]
    assert named == [] and set_by_tests == []


ANOTHER_ETCD_CLIENT = textwrap.dedent("""
    import sys
    from google.protobuf import descriptor_pb2, descriptor_pool

    def another_etcd_client():  # what python-etcd3 or cslab-etcd3 puts in protobuf's default pool
        fd = descriptor_pb2.FileDescriptorProto(name="kv.proto", package="mvccpb", syntax="proto3")
        fd.message_type.add(name="KeyValue").field.add(name="key", number=1, type=12, label=1)
        descriptor_pool.Default().AddSerializedFile(fd.SerializeToString())

    if sys.argv[1] == "first":
        another_etcd_client()
    from tenure.backends.etcd import client as etcd_client
    if sys.argv[1] == "after":
        another_etcd_client()
    print(etcd_client.txn_request([etcd_client.compare(b"k", "mod", "==", 3)], [], []).SerializeToString())
""")


@pytest.mark.parametrize("order", ["first", "after"])
def test_another_etcd_clients_generated_code_in_the_same_process(order: str) -> None:
    """etcd's message names, defined by another library too, do not collide with tenure's."""
    env = {k: v for k, v in os.environ.items() if k != "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-c", ANOTHER_ETCD_CLIENT, order], capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == repr(b"\n\x07\x10\x02\x1a\x01k0\x03")
