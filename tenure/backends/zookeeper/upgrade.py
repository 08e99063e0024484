"""``build_indexes``: the claimable index for a store made before it (docs/backends/zookeeper.md,
"The claimable index", says how and why it is safe).

Refused while another client is connected (it would go on without the index). The job
records are read before the entries; every change is in a multi that checks the job znode's
version read, so a job changed meanwhile is planned again; repeated until nothing changes.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import NodeExistsError, RolledBackError, RuntimeInconsistency

from tenure.backends.zookeeper import layout as zl
from tenure.backends.zookeeper.errors import mapped_errors
from tenure.backends.zookeeper.index import ONE_EACH, QUEUED, Index, home
from tenure.backends.zookeeper.multiread import read_together
from tenure.backends.zookeeper.session import Session
from tenure.core.errors import BackendUnavailable, CorruptRecord

ROUNDS = 20  # reads of the whole store before giving up on jobs that keep changing
READ_BATCH = 1000  # job znodes (data and stat) per read-only multi
MULTI_BYTES = 256 * 1024  # of paths and data per multi: well under jute.maxbuffer (1 MB)


@dataclass
class _Job:
    """One job's index repair: the record's version it assumes, and the multi's operations."""

    job_id: str
    path: str
    version: int
    queued_ms: int = 0  # for a pending job that needs an entry: when it became (or becomes) claimable
    kind: str = "pending"  # the entry's directory: pending, or scheduled (by ``claimable_at``)
    data: bytes | None = None  # the record to rewrite with its new entry's name
    creates: list[str] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)


def build_indexes(session: Session, index: Index) -> int:
    """Give the store the claimable index (see the module's docstring); how many jobs' index
    entries were added or corrected. ``index``: the client's own, which keeps it from then on."""
    layout, client = session.layout, session.client
    _refuse_other_clients(session)
    with mapped_errors("creating the index"):
        for path in layout.index_dirs:
            if client.exists(path) is None:
                with contextlib.suppress(NodeExistsError):
                    client.create(path, b"")
    index.enabled = True
    fixed = 0
    for _ in range(ROUNDS):
        plan = _plan(session)
        if not plan:
            return fixed
        fixed += _apply(session, plan)
    raise BackendUnavailable(f"jobs kept changing while their index was built ({ROUNDS} reads of "
                             "the store); run the build again")


def _refuse_other_clients(session: Session) -> None:
    own = session.clock_path.rsplit("/", 1)[1]
    with mapped_errors("listing connected clients"):
        others = [n for n in session.client.get_children(session.layout.clocks) if n != own]
    if others:
        raise BackendUnavailable(
            f"{len(others)} other client(s) are connected to {session.layout.root} (znodes under "
            f"{session.layout.clocks}): clients connected before the index exists would not keep "
            "it; stop them (an ended session's znode goes when ZooKeeper expires it), then build")


def _records(session: Session) -> Iterator[tuple[str, str, bytes, Any]]:
    """(job id, path, data, stat) of every job znode tenure named, a read-only multi per batch."""
    layout, client, timeout = session.layout, session.client, session.config.timeout
    with mapped_errors("listing jobs"):
        names = sorted(client.get_children(layout.jobs))
    for start in range(0, len(names), READ_BATCH):
        batch = names[start:start + READ_BATCH]
        with mapped_errors("reading jobs"):
            answers = read_together(client, [f"{layout.jobs}/{n}" for n in batch], timeout)
        read = {name: answer for name, answer in zip(batch, answers, strict=True) if answer is not None}
        for name, job_id in zl.named(read):
            yield job_id, f"{layout.jobs}/{name}", read[name][0], read[name][1]


def _entries(session: Session) -> tuple[dict[str, list[str]], dict[str, set[str]]]:
    """Pending and scheduled entries by job id (their paths), and by directory of one entry
    per job (``leased``, ``last``, ``parked``) the job ids with an entry there."""
    layout, client = session.layout, session.client
    pending: dict[str, list[str]] = {}
    with mapped_errors("listing the index"):
        listed = []
        for kind in QUEUED:
            directory = f"{layout.root}/{kind}"
            buckets = [b for b in client.get_children(directory) if zl.bucket_opened(b) is not None]
            listed += [(f"{directory}/{b}", client.get_children_async(f"{directory}/{b}")) for b in buckets]
        each = {kind: {job_id for _, job_id in zl.named(client.get_children(f"{layout.root}/{kind}"))}
                for kind in ONE_EACH}
        for bucket, result in listed:
            for name, job_id in zl.named(session.wait(result), zl.entry_job):
                pending.setdefault(job_id, []).append(f"{bucket}/{name}")
    return pending, each


def _plan(session: Session) -> list[_Job]:
    """What each job's entries lack or have too many. The records are read BEFORE the entries:
    entries change only in the multis that change their record, so a record still at the
    version read when the plan is applied had exactly the entries listed after it."""
    layout = session.layout
    records = list(_records(session))
    pending, each = _entries(session)
    plan = []
    for job_id, path, data, stat in records:
        try:
            rec = zl.load_record(data, path, job_id)
        except CorruptRecord:
            continue  # listed as corrupt; its entries are claim_next's to tidy
        job = _Job(job_id, path, stat.version)
        entries = pending.get(job_id, [])
        where = home(rec)
        slot = zl.entry_slot(data) if where in QUEUED else None
        kept = (layout.slot_path(slot) if slot is not None and slot.startswith(f"{where}/")
                and layout.slot_path(slot) in entries else None)
        if where in QUEUED and kept is None:
            job.kind, job.data = str(where), data
            job.queued_ms = stat.mtime if rec.claimable_at is None else zl.millis(rec.claimable_at)
        job.deletes += [e for e in entries if e != kept]  # only the entry the record names is right
        for kind, indexed in each.items():
            if where == kind and job_id not in indexed:
                job.creates.append(layout.entry_in(kind, job_id))
            elif where != kind and job_id in indexed:
                job.deletes.append(layout.entry_in(kind, job_id))
        if job.data is not None or job.creates or job.deletes:
            plan.append(job)
    return plan


def _apply(session: Session, plan: list[_Job]) -> int:
    """The plan in multis of about ``MULTI_BYTES``, pending jobs oldest first; a job whose
    record changed since it was read is left out (the next round reads it again)."""
    plan.sort(key=lambda j: (j.data is None, j.kind, j.queued_ms, j.job_id))
    batches: list[list[_Job]] = [[]]
    size = 0
    for job in plan:
        first = batches[-1][0] if batches[-1] else job
        # A scheduled bucket holds entries of at most BUCKET_SPAN after it opened (index.fits).
        other = first.kind != job.kind or (job.data is not None and job.kind == "scheduled"
                                           and job.queued_ms >= first.queued_ms + zl.millis(zl.BUCKET_SPAN))
        if size >= MULTI_BYTES or len(batches[-1]) >= zl.BUCKET_SIZE or other:
            batches.append([])
            size = 0
        batches[-1].append(job)
        size += len(job.data or b"") + sum(len(p) for p in (job.path, *job.creates, *job.deletes)) + 200
    # A batch's place among them orders buckets opened in the same millisecond.
    return sum(_commit(session, batch, seq) for seq, batch in enumerate(batches) if batch)


def _commit(session: Session, jobs: list[_Job], seq: int) -> int:
    """One multi for ``jobs`` (their pending entries in a bucket of its own); without the jobs
    whose check failed, again, until it commits or none is left. Returns how many committed."""
    layout = session.layout
    while jobs:
        tx = session.client.transaction()
        owners: list[int] = []  # for each operation, the job it is for
        queued = [j for j in jobs if j.data is not None]
        bucket = zl.new_bucket(queued[0].queued_ms / 1000.0, seq) if queued else None
        kind = queued[0].kind if queued else "pending"
        if bucket is not None:
            tx.create(f"{layout.root}/{kind}/{bucket}", b"")
            owners.append(-1)
        for i, job in enumerate(jobs):
            if job.data is not None:
                assert bucket is not None
                slot = f"{kind}/{bucket}/{zl.entry(job.job_id, job.queued_ms / 1000.0, i)}"
                tx.set_data(job.path, _naming(job.data, slot), job.version)
                tx.create(layout.slot_path(slot), b"")
                owners += [i, i]
            else:
                tx.check(job.path, job.version)
                owners.append(i)
            for path in job.creates:
                tx.create(path, b"")
                owners.append(i)
            for path in job.deletes:
                tx.delete(path)
                owners.append(i)
        with mapped_errors("building the index"):
            results = tx.commit()
        if not any(isinstance(r, Exception) for r in results):
            return len(jobs)
        failed = {owners[k] for k, r in enumerate(results)
                  if isinstance(r, Exception) and not isinstance(r, (RolledBackError, RuntimeInconsistency))}
        if not failed:
            return 0  # no operation named: the next round reads every job again
        if -1 in failed:  # the bucket's name is taken (its random part too): draw another
            continue
        jobs = [j for i, j in enumerate(jobs) if i not in failed]
    return 0


def _naming(data: bytes, slot: str) -> bytes:
    """The record as it was, naming the entry it is queued under (``layout.dump_record``)."""
    record = json.loads(data)
    directory, _, entry_slot = slot.partition("/")
    for key in zl.QUEUES.values():
        record.pop(key, None)
    record[zl.QUEUES[directory]] = entry_slot
    return json.dumps(record, separators=(",", ":")).encode()
