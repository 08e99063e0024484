"""Where tenure keeps things under a ZooKeeper root, and how each znode's data is encoded.

    <root>/jobs/<enc>        the job record (JSON); its version changes on every write
    <root>/gen/<enc>         written only by claims: its version IS the fencing token
    <root>/events/<segment>/e-<seq>      accepted changes (history), trimmed to ``retention``
    <root>/rejections/<segment>/r-<seq>  audited stale operations, trimmed to ``retention``
                             (segments: see ``zookeeper_audit``)
    <root>/clocks/<uuid>     one ephemeral znode per client; writing it reads the leader's clock
    <root>/pending/<bucket>/<ms><seq>.<enc>
                             the index of pending jobs: one entry per pending job, in buckets
                             of at most about BUCKET_SIZE entries created within BUCKET_SPAN
                             seconds, named by the store time they were opened
                             (``<ms>-<seq><rand>``); an entry's ``<ms>`` is when it was queued
                             and ``<seq>`` its place in its multi, so names sort oldest first
    <root>/leased/<enc>      the index of leased jobs (live or expired): one empty znode each

``<enc>`` is the job id's UTF-8 in unpadded base64url, so any Unicode id (``/``, ``..``,
spaces) is a legal znode name and round-trips exactly.

The two indexes are written in the same multi as the record they describe (submit, claim,
complete, release; renew and force_expire leave them as they are), so they change only
together with it. They only propose candidates to ``claim_next``: the claim reads the record
and commits against its version as any claim does. A pending record names its own entry
(``"queued": "<bucket>/<entry>"``), so the multi that takes it out of the queue deletes
exactly that entry. A store created before the index (``jobs/`` without ``pending/``) is used
without it: ``claim_next`` scans every job, as before.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import re
import secrets
from typing import Any

from tenure.core.errors import CorruptRecord, InvalidArgument
from tenure.core.records import HistoryEvent, JobState, JobStatus, Op, Rejection, RejectionKind
from tenure.core.transitions import STORED_STATES, JobRecord

FORMAT = 1  # "tenure" field of every record; a znode without it was not written by tenure
DEFAULT_ROOT = "/tenure"
BUCKET_SIZE = 500  # pending entries per bucket (a soft cap: concurrent submitters may pass it)
BUCKET_SPAN = 10.0  # seconds a bucket takes new entries after it was opened: FIFO is this rough
_SEGMENT = re.compile(r"^[A-Za-z0-9_.:@+=-]+$")
_SLOT = re.compile(r"[0-9]{13}-[0-9]{4}[0-9a-f]{6}/[0-9]{17}\.[A-Za-z0-9_-]+")


def root_path(path: str) -> str:
    """The URL path as a ZooKeeper root; conservative so no server rejects it later."""
    if path in ("", "/"):
        return DEFAULT_ROOT
    parts = path.rstrip("/").split("/")[1:] if path.startswith("/") else None
    if not parts or any(p in ("", ".", "..") or not _SEGMENT.match(p) for p in parts):
        raise InvalidArgument(f"bad ZooKeeper root path {path!r}: use /name or /a/b with letters, "
                              "digits and _.:@+=-")
    return "/" + "/".join(parts)


def encode(job_id: str) -> str:
    return base64.urlsafe_b64encode(job_id.encode("utf-8")).decode("ascii").rstrip("=")


def decode(name: str) -> str:
    """The job id of a znode name; ValueError for a name tenure did not make."""
    if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
        raise ValueError("not base64url")
    try:
        text = base64.urlsafe_b64decode(name + "=" * (-len(name) % 4)).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise ValueError(str(exc)) from None
    if encode(text) != name:
        raise ValueError("not the canonical encoding of any job id")
    return text


class Layout:
    def __init__(self, root: str) -> None:
        self.root = root
        self.jobs = f"{root}/jobs"
        self.gens = f"{root}/gen"
        self.events = f"{root}/events"
        self.rejections = f"{root}/rejections"
        self.clocks = f"{root}/clocks"
        self.pending = f"{root}/pending"
        self.leased = f"{root}/leased"
        self.dirs = (root, self.jobs, self.gens, self.events, self.rejections, self.clocks)
        self.index_dirs = (self.pending, self.leased)

    def job(self, job_id: str) -> str:
        return f"{self.jobs}/{encode(job_id)}"

    def gen(self, job_id: str) -> str:
        return f"{self.gens}/{encode(job_id)}"

    def leased_entry(self, job_id: str) -> str:
        return f"{self.leased}/{encode(job_id)}"

    def queued(self, slot: str) -> str:
        """The znode of a pending entry, from the ``<bucket>/<entry>`` its record names."""
        return f"{self.pending}/{slot}"


# -- the pending index ------------------------------------------------------------------------
def millis(now: float) -> int:
    return round(now * 1000)


def new_bucket(now: float, seq: int = 0) -> str:
    """A bucket name that sorts by the store time it was opened, then by ``seq`` (its place
    among the buckets one multi opens); the random suffix keeps two clients apart."""
    return f"{millis(now):013d}-{seq % 10_000:04d}{secrets.token_hex(3)}"


def bucket_opened(name: str) -> float | None:
    """The store time a bucket was opened, None for a name tenure did not make."""
    ms, _, _ = name.partition("-")
    return int(ms) / 1000.0 if ms.isdigit() else None


def entry(job_id: str, now: float, seq: int = 0) -> str:
    """A pending entry's name: sorts by the store time it was queued, then by ``seq`` (its
    place among the jobs one multi queues)."""
    return f"{millis(now):013d}{seq % 10_000:04d}.{encode(job_id)}"


def entry_job(name: str) -> str:
    """The job id of a pending entry's name; ValueError for a name tenure did not make."""
    ms, dot, enc = name.partition(".")
    if not dot or not ms.isdigit():
        raise ValueError("not a pending entry")
    return decode(enc)


# -- the audit's sequential znodes (zookeeper_audit) ------------------------------------------
_NUMBER = re.compile(r"-?[0-9]{10}|-[0-9]{9}")  # "%010d" of a signed 32-bit int
_AUDIT_SEGMENT = re.compile(r"[0-9]{10}")


def sequence(name: str, prefix: str) -> int | None:
    """The number ZooKeeper appended to the sequential znode ``name`` (``prefix`` then
    ``%010d`` of a signed 32-bit counter, so ``e-0000000042`` or, after a wrap that some
    versions document, ``e--2147483648``); None for a name tenure did not make."""
    if not name.startswith(prefix) or not _NUMBER.fullmatch(name[len(prefix):]):
        return None
    return int(name[len(prefix):])


def segment_rank(name: str) -> int | None:
    """The index of an audit segment's directory name; None for any other name."""
    return int(name) if _AUDIT_SEGMENT.fullmatch(name) else None


def segment_name(rank: int) -> str:
    return f"{rank:010d}"


# -- job records -----------------------------------------------------------------------------
def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def dump_record(r: JobRecord, epoch: int, queued: str | None = None) -> bytes:
    """``epoch`` is the leader epoch whose clock stamped the record's times; ``queued`` the
    pending entry (``<bucket>/<entry>``) of a pending record in an indexed store."""
    d = {
        "tenure": FORMAT, "epoch": epoch, "job_id": r.job_id, "state": r.state.value, "owner": r.owner,
        "token": r.token, "lease_until": r.lease_until, "ttl": r.ttl,
        "submitted_at": r.submitted_at, "claimed_at": r.claimed_at, "renewed_at": r.renewed_at,
        "completed_at": r.completed_at, "runs": r.runs, "result": _b64(r.result),
    }
    if queued is not None:
        d["queued"] = queued
    return json.dumps(d, separators=(",", ":")).encode()


def _number(d: dict[str, Any], key: str) -> float | None:
    value = d.get(key)
    kind = type(value)  # JSON gives exactly these types: the common cases first (listings)
    if kind is float:
        return value
    if value is None:
        return None
    if kind is not int:  # bool included: not a number here
        raise ValueError(f"{key} is not a number")
    return float(value)


_STORED = {state.value: state for state in STORED_STATES}


_decode_json = json.JSONDecoder().decode


def _fields(data: bytes, job_id: str | None) -> tuple[Any, ...]:
    """The record's fields in JobRecord's order, checked; ValueError (or TypeError, binascii's
    Error) for anything tenure did not write. ``job_id`` None: the record names its job."""
    d = _decode_json(data.decode("utf-8"))
    if not isinstance(d, dict) or d.get("tenure") != FORMAT:
        raise ValueError("not a tenure record")
    named = d.get("job_id")
    if job_id is not None and named != job_id:
        raise ValueError(f"names job {named!r}, not the job its znode is for")
    if not isinstance(named, str):
        raise ValueError("names no job")
    state = _STORED.get(d.get("state"))  # type: ignore[arg-type]
    if state is None:
        raise ValueError(f"state {JobState(d.get('state')).value!r} is never stored")  # or not a JobState
    token, runs, owner = d.get("token"), d.get("runs"), d.get("owner")
    if type(token) is not int or token < 0 or type(runs) is not int:
        raise ValueError(f"bad token {token!r} or runs {runs!r}")
    if owner is not None and not isinstance(owner, str):
        raise ValueError("owner is not text")
    result = d.get("result")
    lease_until, ttl = _number(d, "lease_until"), _number(d, "ttl")
    if state is JobState.LEASED and (owner is None or lease_until is None or ttl is None):
        raise ValueError("leased without owner or expiry")
    return (named, state, owner, token, lease_until, ttl, _number(d, "submitted_at"),
            _number(d, "claimed_at"), _number(d, "renewed_at"), _number(d, "completed_at"), runs,
            None if result is None else base64.b64decode(result, validate=True))


def load_record(data: bytes, key: str, job_id: str) -> JobRecord:
    """The record in a job znode; CorruptRecord for anything tenure did not write."""
    try:
        return JobRecord(*_fields(data, job_id))
    except (ValueError, TypeError, binascii.Error) as exc:
        # json.JSONDecodeError and UnicodeDecodeError are ValueErrors too.
        raise CorruptRecord(key, str(exc) or type(exc).__name__) from None


def load_status(data: bytes, name: str, now: float) -> JobStatus | None:
    """For listings: the status of the record in job znode ``name`` at store time ``now``,
    built straight from the record (one object per job, the name checked by encoding the id
    the record names); None for anything else, which ``load_record`` then explains."""
    try:
        (job_id, state, owner, token, lease_until, _, submitted_at, claimed_at, renewed_at,
         completed_at, runs, result) = _fields(data, None)
    except (ValueError, TypeError, binascii.Error):
        return None
    if encode(job_id) != name:
        return None
    if state is JobState.LEASED and lease_until is not None and lease_until <= now:
        state = JobState.EXPIRED  # as transitions.status judges it
    return JobStatus(job_id, state, owner, token, lease_until, submitted_at, claimed_at,
                     renewed_at, completed_at, runs, result)


def queued_slot(data: bytes | None) -> str | None:
    """The pending entry a record names (None for none, or a record tenure cannot read)."""
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        slot = json.loads(data).get("queued") if data is not None else None
        return slot if isinstance(slot, str) and _SLOT.fullmatch(slot) else None
    return None


def stamp_epoch(data: bytes) -> int | None:
    """The leader epoch that stamped a record's times (None if unknown)."""
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        epoch = json.loads(data).get("epoch")
        return epoch if type(epoch) is int else None
    return None


# -- audit ----------------------------------------------------------------------------------
def dump_rejection(r: Rejection) -> bytes:
    return json.dumps({
        "tenure": FORMAT, "job_id": r.job_id, "op": r.op.value, "owner": r.owner, "token": r.token,
        "current_owner": r.current_owner, "current_token": r.current_token, "at": r.at,
        "reason": r.reason, "kind": r.kind.value, "resource": r.resource,
    }, separators=(",", ":")).encode()


def load_rejection(data: bytes) -> Rejection | None:
    """None for a znode tenure did not write: the audit skips it rather than failing."""
    try:
        d = json.loads(data)
        return Rejection(d["job_id"], Op(d["op"]), d["owner"], d["token"], d["current_owner"],
                         d["current_token"], float(d["at"]), d["reason"], RejectionKind(d["kind"]),
                         d["resource"])
    except (ValueError, TypeError, KeyError):
        return None


def dump_event(e: HistoryEvent) -> bytes:
    return json.dumps({
        "tenure": FORMAT, "job_id": e.job_id, "op": e.op.value, "owner": e.owner, "token": e.token,
        "at": e.at, "expires_at": e.expires_at,
    }, separators=(",", ":")).encode()


def load_event(data: bytes) -> HistoryEvent | None:
    try:
        d = json.loads(data)
        return HistoryEvent(d["job_id"], Op(d["op"]), d["owner"], d["token"], float(d["at"]),
                            d["expires_at"])
    except (ValueError, TypeError, KeyError):
        return None
