"""What ZooKeeper's write multis send, op by op, for a short scenario on a real server: which
znodes each operation creates, sets, checks and deletes, at which versions, with which ACL and
flags. A change to any of it fails here: update EXPECTED only for a change meant.

Masked: the store's root; store times (``T`` in entry names; the records' float fields, format
and leader epoch are left out); bucket names (B1, B2... in order of appearance: their random
part varies, which bucket an entry goes to does not). Left out: our clock znode's write (sent
when the stamp is half stale) and multis that failed (a claim that guessed its job new and
found it): both depend on timing, not on what an operation writes."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.client import TransactionRequest
from kazoo.security import OPEN_ACL_UNSAFE

from tenure.backends.zookeeper import layout as zl
from tenure.core import contention
from tests.servers.zookeeper import ZooKeeperHarness

EXPECTED = """
# claim new
create jobs/new {job_id=new state=leased owner=a token=1 runs=1 attempts=1} acl=open flags=0
create gen/new acl=open flags=0
set gen/new v=0
create leased/new acl=open flags=0
checkversion events/0000000000 v=0
create events/0000000000/e- {job_id=new op=claim owner=a token=1} acl=open flags=2
# submit j0
create jobs/j0 {job_id=j0 state=pending token=0 runs=1 queued=B1/T0001.j0} acl=open flags=0
create gen/j0 acl=open flags=0
create pending/B1 acl=open flags=0
create pending/B1/T0001.j0 acl=open flags=0
checkversion events/0000000000 v=0
create events/0000000000/e- {job_id=j0 op=submit token=0} acl=open flags=2
# claim j0
set jobs/j0 {job_id=j0 state=leased owner=a token=1 runs=1 attempts=1} v=0
set gen/j0 v=0
create leased/j0 acl=open flags=0
delete pending/B1/T0001.j0 v=-1
checkversion events/0000000000 v=0
create events/0000000000/e- {job_id=j0 op=claim owner=a token=1} acl=open flags=2
# renew j0
set jobs/j0 {job_id=j0 state=leased owner=a token=1 runs=1 attempts=1} v=1
checkversion gen/j0 v=1
checkversion events/0000000000 v=0
create events/0000000000/e- {job_id=j0 op=renew owner=a token=1} acl=open flags=2
# renew j0
set jobs/j0 {job_id=j0 state=leased owner=a token=1 runs=1 attempts=1} v=2
checkversion gen/j0 v=1
delete events/0000000000/e-0000000003 v=-1
checkversion events/0000000000 v=0
create events/0000000000/e- {job_id=j0 op=renew owner=a token=1} acl=open flags=2
# release j0
set jobs/j0 {job_id=j0 state=pending token=1 runs=1 queued=B1/T0001.j0} v=3
checkversion gen/j0 v=1
delete leased/j0 v=-1
create pending/B1/T0001.j0 acl=open flags=0
checkversion events/0000000000 v=0
create events/0000000000/e- {job_id=j0 op=release owner=a token=1} acl=open flags=2
# claim_next
set jobs/j0 {job_id=j0 state=leased owner=b token=2 runs=1 attempts=1} v=4
set gen/j0 v=1
create leased/j0 acl=open flags=0
delete pending/B1/T0001.j0 v=-1
checkversion events/0000000000 v=0
create events/0000000000/e- {job_id=j0 op=claim owner=b token=2} acl=open flags=2
# fail j0 x
set jobs/j0 {job_id=j0 state=pending token=2 runs=1 attempts=1 last_error=x scheduled=B2/T0001.j0} v=5
checkversion gen/j0 v=2
delete leased/j0 v=-1
create scheduled/B2 acl=open flags=0
create scheduled/B2/T0001.j0 acl=open flags=0
checkversion events/0000000000 v=0
create events/0000000000/e- {job_id=j0 op=fail owner=b token=2} acl=open flags=2
# submit_many m1 m2
create jobs/m1 {job_id=m1 state=pending token=0 runs=1 queued=B1/T0001.m1} acl=open flags=0
create gen/m1 acl=open flags=0
create pending/B1/T0001.m1 acl=open flags=0
checkversion events/0000000000 v=0
create events/0000000000/e- {job_id=m1 op=submit token=0} acl=open flags=2
create jobs/m2 {job_id=m2 state=pending token=0 runs=1 queued=B1/T0002.m2} acl=open flags=0
create gen/m2 acl=open flags=0
create pending/B1/T0002.m2 acl=open flags=0
create events/0000000000/e- {job_id=m2 op=submit token=0} acl=open flags=2
# claim_next_many
set jobs/m1 {job_id=m1 state=leased owner=c token=1 runs=1 attempts=1} v=0
set gen/m1 v=0
create leased/m1 acl=open flags=0
delete pending/B1/T0001.m1 v=-1
checkversion events/0000000000 v=0
create events/0000000000/e- {job_id=m1 op=claim owner=c token=1} acl=open flags=2
set jobs/m2 {job_id=m2 state=leased owner=c token=1 runs=1 attempts=1} v=0
set gen/m2 v=0
create leased/m2 acl=open flags=0
delete pending/B1/T0002.m2 v=-1
create events/0000000000/e- {job_id=m2 op=claim owner=c token=1} acl=open flags=2
# renew_many m1 m2
set jobs/m1 {job_id=m1 state=leased owner=c token=1 runs=1 attempts=1} v=1
checkversion gen/m1 v=1
checkversion events/0000000000 v=0
create events/0000000000/e- {job_id=m1 op=renew owner=c token=1} acl=open flags=2
set jobs/m2 {job_id=m2 state=leased owner=c token=1 runs=1 attempts=1} v=1
checkversion gen/m2 v=1
create events/0000000000/e- {job_id=m2 op=renew owner=c token=1} acl=open flags=2
# complete_many m1 m2
set jobs/m1 {job_id=m1 state=completed owner=c token=1 runs=1 attempts=1} v=2
checkversion gen/m1 v=1
delete leased/m1 v=-1
checkversion events/0000000000 v=0
create events/0000000000/e- {job_id=m1 op=complete owner=c token=1} acl=open flags=2
set jobs/m2 {job_id=m2 state=completed owner=c token=1 runs=1 attempts=1} v=2
checkversion gen/m2 v=1
delete leased/m2 v=-1
create events/0000000000/e- {job_id=m2 op=complete owner=c token=1} acl=open flags=2
"""


class Recorder:
    """The write multis of one client, each with the step of the scenario that sent it."""

    def __init__(self, client: Any, root: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root, self.step = root, ""
        self.multis: list[tuple[str, list[Any], Any]] = []
        self.buckets: dict[str, str] = {}
        self.names: dict[str, str] = {}
        commit_async = TransactionRequest.commit_async

        def recorded(tx: TransactionRequest) -> Any:
            answer = commit_async(tx)
            if tx.client is client:
                self.multis.append((self.step, list(tx.operations), answer))
            return answer

        monkeypatch.setattr(TransactionRequest, "commit_async", recorded)

    def run(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        jobs = [getattr(a, "job_id", a) for arg in args for a in (arg if isinstance(arg, list) else [arg])]
        self.names.update((zl.encode(j), j) for j in jobs if isinstance(j, str))
        self.step = " ".join([call.__name__, *(j for j in jobs if isinstance(j, str))])
        result = call(*args, **kwargs)
        leases = result if isinstance(result, list) else [result]
        self.names.update((zl.encode(lease.job_id), lease.job_id) for lease in leases if lease is not None)
        return result

    def _mask(self, line: str) -> str:
        line = line.replace(self.root + "/", "")
        line = re.sub(r"\d{13}-\d{4}[0-9a-f]{6}",
                      lambda m: self.buckets.setdefault(m[0], f"B{len(self.buckets) + 1}"), line)
        line = re.sub(r"\b\d{13}(\d{4})\.", r"T\1.", line)  # an entry: store time, place in its multi
        return re.sub(r"(?<=[/.])[\w-]+", lambda m: self.names.get(m[0], m[0]), line)  # job ids decoded

    def lines(self) -> list[str]:
        out = []
        for step, ops, answer in self.multis:
            if any(isinstance(r, Exception) for r in answer.get(timeout=10)):
                continue
            out.append(f"# {step}")
            for op in ops:
                kind = type(op).__name__.lower()
                if op.path.startswith(f"{self.root}/clocks/"):
                    continue
                if kind == "create":
                    acl = "open" if list(op.acl) == list(OPEN_ACL_UNSAFE) else repr(op.acl)
                    out.append(f"create {op.path}{_data(op.data)} acl={acl} flags={op.flags}")
                elif kind == "setdata":
                    out.append(f"set {op.path}{_data(op.data)} v={op.version}")
                else:
                    out.append(f"{kind} {op.path} v={op.version}")
        return [self._mask(line) for line in out]


def _data(raw: bytes) -> str:
    """A record's or event's fields that do not vary (no times, no epoch), in the order written."""
    if not raw:
        return ""
    kept = [f"{k}={v}" for k, v in json.loads(raw).items()
            if k not in ("tenure", "epoch") and v is not None and not isinstance(v, float)]
    return " {" + " ".join(kept) + "}"


def test_write_multis_send_these_ops(zk_harness: ZooKeeperHarness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(contention, "SPREAD", 1)  # claim_next(_many) takes the index's first places
    monkeypatch.setattr(zl, "BUCKET_SPAN", 3600.0)  # a slow run fills the same bucket
    with zk_harness.connect() as s:
        rec = Recorder(s.backend.client, s.backend.layout.root, monkeypatch)  # type: ignore[attr-defined]
        rec.run(s.claim, "new", owner="a", ttl=30)  # a job nobody submitted
        rec.run(s.submit, "j0")
        lease = rec.run(s.claim, "j0", owner="a", ttl=30)
        lease = rec.run(s.renew, rec.run(s.renew, lease))  # the second deletes the first's event
        rec.run(s.release, lease)
        rec.run(s.fail, rec.run(s.claim_next, owner="b", ttl=30), "x")
        rec.run(s.submit_many, ["m1", "m2"])
        leases = rec.run(s.claim_next_many, owner="c", ttl=30, n=2)
        rec.run(s.complete_many, rec.run(s.renew_many, leases))
        got = rec.lines()
    assert got == EXPECTED.strip().splitlines()
