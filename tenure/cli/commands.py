"""The store commands of ``tenure``: each takes an open store and parsed arguments and
returns an exit status (see ``tenure.cli.exits``)."""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import sys
import threading
from typing import Any

import tenure
from tenure.cli import exits
from tenure.cli.format import render, table, when
from tenure.cli.signals import Interrupts
from tenure.core.records import Change, JobState
from tenure.core.shown import attempts, first_line
from tenure.views.export import plain, to_jsonl

# States whose job holds no lease to end (a scheduled job was given back, failed or delayed; a
# parked one failed, or its last lease ran out).
NO_LEASE = (JobState.COMPLETED, JobState.PENDING, JobState.SCHEDULED, JobState.PARKED)


def emit(args: argparse.Namespace, value: Any, human: Any) -> None:
    print(render(args.output, value, human), flush=True)


def _lease(store: tenure.Store, args: argparse.Namespace) -> tenure.Lease:
    """The lease named on the command line. complete and release take no --ttl and ignore the
    lease's; it must still be one the store accepts (etcd refuses TTLs below 2 s)."""
    ttl = getattr(args, "ttl", None) or max(1.0, store.characteristics.min_ttl)
    return tenure.Lease(args.job_id, args.owner, args.token, 0.0, ttl)


def operator(args: argparse.Namespace) -> str:
    """Who runs an operator command, for the history: ``--actor`` or the login name."""
    if args.actor:
        return str(args.actor)
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name (a container without a passwd entry)
        return "operator"


def cmd_submit(store: tenure.Store, args: argparse.Namespace) -> int:
    store.submit_many(args.job_ids, max_attempts=args.max_attempts, delay=args.delay)
    emit(args, {"submitted": args.job_ids}, lambda: f"submitted {len(args.job_ids)} job(s)")
    return exits.OK


def refuse_unknown(store: tenure.Store, args: argparse.Namespace) -> None:
    """``--existing``: JobNotFound for a job the store does not have, which claim and run would
    otherwise create (a typo would start a new job)."""
    if getattr(args, "existing", False) and args.job_id is not None and store.get(args.job_id) is None:
        raise tenure.JobNotFound(args.job_id)


def cmd_claim(store: tenure.Store, args: argparse.Namespace) -> int:
    refuse_unknown(store, args)
    interrupts = Interrupts()
    with interrupts.catching():  # Ctrl-C while the claim is on its way: give the lease back
        if args.wait:
            interrupts.announce = f"tenure: waiting up to {args.wait:g} s for {args.job_id or 'a claimable job'!r}"
        if args.job_id is None:
            found = interrupts.claim(lambda wait: store.claim_next(args.owner, args.ttl, wait=wait),
                                     args.wait or 0.0, store.release)
        else:
            found = interrupts.claim(lambda wait: store.claim(args.job_id, args.owner, args.ttl, wait=wait),
                                     args.wait or 0.0, store.release)
    if interrupts.signalled is not None:
        print(f"tenure: signal {interrupts.signalled}; nothing claimed", file=sys.stderr)
        return 128 + interrupts.signalled
    if found is None:
        print("tenure: nothing to claim", file=sys.stderr)
        return exits.NOTHING
    lease = found
    if args.output == "table":
        print(lease.token)  # what a shell script captures: TOKEN=$(tenure claim ...)
        print(f"claimed {lease.job_id!r}: token {lease.token}, expires {when(lease.expires_at, store.now())}",
              file=sys.stderr)
    else:
        emit(args, _lease_record(lease), str)
    return exits.OK


def _lease_record(lease: tenure.Lease) -> dict[str, Any]:
    """A lease for -o json: without ``deadline``, a moment on this process's monotonic clock that
    means nothing once the command has exited (a script would read it as a time)."""
    record: dict[str, Any] = plain(lease)
    del record["deadline"]
    return record


def cmd_renew(store: tenure.Store, args: argparse.Namespace) -> int:
    lease = store.renew(_lease(store, args), args.ttl)
    now = store.now()
    emit(args, _lease_record(lease),
         lambda: f"renewed {lease.job_id!r} (token {lease.token}): expires {when(lease.expires_at, now)}")
    return exits.OK


def cmd_complete(store: tenure.Store, args: argparse.Namespace) -> int:
    store.complete(_lease(store, args), args.result)
    emit(args, {"completed": args.job_id, "token": args.token},
         lambda: f"completed {args.job_id!r} (token {args.token})")
    return exits.OK


def cmd_release(store: tenure.Store, args: argparse.Namespace) -> int:
    store.release(_lease(store, args))
    emit(args, {"released": args.job_id, "token": args.token},
         lambda: f"released {args.job_id!r} (token {args.token})")
    return exits.OK


def cmd_fail(store: tenure.Store, args: argparse.Namespace) -> int:
    store.fail(_lease(store, args), args.error, retry_in=args.retry_in)
    status = store.get(args.job_id)
    now = store.now()
    emit(args, {"failed": args.job_id, "token": args.token, "state": None if status is None else status.state,
                "attempts": None if status is None else status.attempts,
                "claimable_at": None if status is None else status.claimable_at},
         lambda: f"failed {args.job_id!r} (token {args.token}): {_after_fail(status, now)}")
    return exits.OK


def _after_fail(status: tenure.JobStatus | None, now: float) -> str:
    """What became of a job just failed, as read back (it may have moved on since)."""
    if status is None:
        return "the job is gone"
    if status.state is JobState.PARKED:
        return f"parked after {status.attempts} attempt(s); requeue it to run it again"
    if status.state is JobState.SCHEDULED:
        return f"claimable again {when(status.claimable_at, now)}"
    return f"now {status.state.value}"


def cmd_requeue(store: tenure.Store, args: argparse.Namespace) -> int:
    store.requeue(args.job_id, actor=operator(args), delay=args.delay, token=args.token)
    status = store.get(args.job_id)
    claimable_at = None if status is None else status.claimable_at
    now = store.now()
    emit(args, {"requeued": args.job_id, "claimable_at": claimable_at},
         lambda: f"requeued {args.job_id!r}: attempts reset, claimable "
                 f"{'now' if claimable_at is None else when(claimable_at, now)}")
    return exits.OK


def cmd_expire(store: tenure.Store, args: argparse.Namespace) -> int:
    """The store ends only a live lease. A job at the token given that is completed, or pending
    (given back), has none: nothing changed, and saying "expired" would tell the operator it had.
    Read after the write, so a lease claimed or renewed meanwhile is never reported as absent."""
    store.force_expire(args.job_id, token=args.token, actor=operator(args))  # TokenChanged if claimed since
    status = store.get(args.job_id)
    if status is not None and status.token == args.token and status.state in NO_LEASE:
        # like "nothing to claim": nothing to do, nothing written
        print(f"tenure: {args.job_id!r} has no live lease (state {status.state.value}): nothing to end",
              file=sys.stderr)
        return exits.NOTHING
    emit(args, {"expired": args.job_id, "token": args.token},
         lambda: f"the lease on {args.job_id!r} (token {args.token}) has ended; the job can be claimed")
    return exits.OK


def cmd_get(store: tenure.Store, args: argparse.Namespace) -> int:
    status = store.get(args.job_id)
    if status is None:
        raise tenure.JobNotFound(args.job_id)
    now = store.now()
    emit(args, status, lambda: "\n".join(
        f"{f.name:>13}: {_field(f.name, v, now)}"
        for f in dataclasses.fields(status) if (v := getattr(status, f.name)) is not None or f.name == "owner"))
    return exits.OK


def _field(name: str, value: object, now: float) -> str:
    """One field of ``get`` as people read it: store times as tables show them, a result as
    text (as ``-o json`` gives it), not Python's ``b'...'``."""
    if name.endswith("_at"):
        return when(float(value) if isinstance(value, (int, float)) else None, now)
    if isinstance(value, bytes):
        text = plain(value)
        return text if isinstance(text, str) else f"base64:{text['base64']} (not UTF-8 text)"
    return "-" if value is None else str(value)


def cmd_ls(store: tenure.Store, args: argparse.Namespace) -> int:
    page = store.page(states=args.state, owner=args.owner, job=args.job, order=args.order,
                      offset=args.offset, limit=args.limit)
    now = store.now()
    emit(args, page.jobs, lambda: table(
        ["job", "state", "owner", "token", "expires", "runs", "attempts", "claimable", "last error"],
        [(j.job_id, j.state.value, j.owner, j.token, when(j.expires_at, now), j.runs,
          attempts(j.attempts, j.max_attempts), when(j.claimable_at, now), _short(j.last_error))
         for j in page.jobs]))
    if args.output == "table" and page.total > len(page.jobs):
        first = page.offset + 1 if page.jobs else page.offset
        print(f"jobs {first}-{page.offset + len(page.jobs)} of {page.total} (--offset, --limit for others)",
              file=sys.stderr)
    return exits.OK


LAST_ERROR_SHOWN = 40  # characters of a last error in a table row (get and -o json give it whole)


def _short(text: str | None) -> str | None:
    """A last error on one line of a table: its first line, cut short ("..." where cut)."""
    if text is None:
        return None
    line = first_line(text)
    return line if len(line) <= LAST_ERROR_SHOWN else line[:LAST_ERROR_SHOWN - 3] + "..."


def _known(store: tenure.Store, job_id: str | None, found: list[Any]) -> None:
    """JobNotFound for a job named that the store does not have: no records, and no job."""
    if job_id is not None and not found and store.get(job_id) is None:
        raise tenure.JobNotFound(job_id)


def cmd_rejections(store: tenure.Store, args: argparse.Namespace) -> int:
    records = store.rejections(since=args.since, limit=args.limit, job_id=args.job)
    _known(store, args.job, records)
    now = store.now()
    emit(args, records, lambda: table(
        ["at", "job", "op", "owner", "token", "current owner", "current token", "kind", "reason"],
        [(when(r.at, now), r.job_id, r.op.value, r.owner, r.token, r.current_owner, r.current_token,
          r.kind.value, r.reason) for r in records]))
    return exits.OK


def cmd_history(store: tenure.Store, args: argparse.Namespace) -> int:
    events = store.history(args.job_id, limit=args.limit)
    _known(store, args.job_id, events)
    now = store.now()
    emit(args, events, lambda: table(
        ["at", "job", "op", "owner", "token", "expires"],
        [(when(e.at, now), e.job_id, e.op.value, e.owner, e.token, when(e.expires_at, now)) for e in events]))
    return exits.OK


def cmd_health(store: tenure.Store, args: argparse.Namespace) -> int:
    facts = store.health()
    emit(args, facts, lambda: "\n".join(f"{k:>14}: {v}" for k, v in facts.items()))
    return exits.OK


def cmd_build_indexes(store: tenure.Store, args: argparse.Namespace) -> int:
    """Give a store written before its query indexes those indexes (etcd, ZooKeeper): pages and
    counts stop falling back to listing every job. Other stores keep theirs in their schema."""
    build = getattr(store.backend, "build_indexes", None)
    if build is None:
        name = store.backend.characteristics.name
        emit(args, {"indexed": 0}, lambda: f"{name} keeps its indexes in its schema: nothing to build")
        return exits.OK
    count: int = build()
    emit(args, {"indexed": count}, lambda: f"indexed {count} job(s)")
    return exits.OK


def cmd_watch(store: tenure.Store, args: argparse.Namespace) -> int:
    """Print each change as it happens: every job first, then changes and new rejections."""
    stop = threading.Event()
    for seen, change in enumerate(store.watch(stop, interval=args.interval), start=1):
        print(_change_line(change) if args.output == "table" else to_jsonl([change]), flush=True)
        if args.count is not None and seen >= args.count:
            stop.set()
            break
    return exits.OK


def _change_line(change: Change) -> str:
    if change.job is not None:
        j = change.job
        return f"job        {j.job_id}  {j.state.value}  owner={j.owner or '-'}  token={j.token}"
    if change.rejection is not None:
        r = change.rejection
        return f"rejection  {r.job_id}  {r.op.value} by {r.owner} token={r.token}: {r.reason}"
    return f"removed    {change.removed}"
