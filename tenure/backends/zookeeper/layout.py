"""Where tenure keeps things under a ZooKeeper root, and how each znode's data is encoded
(docs/backends/zookeeper.md, "Layout", says why):

    <root>/jobs/<enc>        the job record (JSON); its version changes on every write
    <root>/gen/<enc>         written only by claims: its version IS the fencing token
    <root>/events/<segment>/e-<seq>, <root>/rejections/<segment>/r-<seq>   the audit (``audit``)
    <root>/clocks/<uuid>     one ephemeral znode per client; writing it reads the leader's clock
    <root>/pending/<bucket>/<ms><seq>.<enc>   the index of pending jobs, oldest first (``index``)
    <root>/scheduled/<bucket>/<ms><seq>.<enc> pending jobs with a ``claimable_at``, by it
    <root>/leased/<enc>      leased jobs (live or expired) that their lease's end makes claimable
    <root>/last/<enc>        leased jobs on their last attempt: parked, not claimable, at its end
    <root>/parked/<enc>      parked jobs (never claimable; counted for operators)

``<enc>`` is the job id's UTF-8 in unpadded base64url (``codec.encode_job_id``). A pending
record names its own entry (``"queued": "<bucket>/<entry>"``, or ``"scheduled": ...``); in
code that entry is a *slot*, its path below the root (``pending/<bucket>/<entry>``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import secrets
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from tenure.core import codec
from tenure.core.codec import corrupt_status
from tenure.core.errors import CorruptRecord, InvalidArgument
from tenure.core.records import (
    HistoryEvent,
    JobRecord,
    JobState,
    JobStatus,
    Rejection,
)

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


# A claim and its completion name the job in six paths (job, generation, index entry each):
# the few ids in hand are encoded once.
encode = functools.lru_cache(maxsize=256)(codec.encode_job_id)
decode = codec.decode_job_id  # ValueError for a name tenure did not make


class Layout:
    def __init__(self, root: str) -> None:
        self.root = root
        self.jobs = f"{root}/jobs"
        self.gens = f"{root}/gen"
        self.events = f"{root}/events"
        self.rejections = f"{root}/rejections"
        self.clocks = f"{root}/clocks"
        self.pending = f"{root}/pending"
        self.scheduled = f"{root}/scheduled"
        self.leased = f"{root}/leased"
        self.last = f"{root}/last"
        self.parked = f"{root}/parked"
        self.dirs = (root, self.jobs, self.gens, self.events, self.rejections, self.clocks)
        self.record_dirs = (f"{self.jobs}/", f"{self.gens}/")  # prefixes of a record's two znodes
        self.index_dirs = (self.pending, self.leased, self.scheduled, self.last, self.parked)

    def job(self, job_id: str) -> str:
        return f"{self.jobs}/{encode(job_id)}"

    def znodes(self, job_id: str) -> tuple[str, str]:
        """The job's znode and its generation znode (one call where a step needs both)."""
        name = encode(job_id)
        return f"{self.jobs}/{name}", f"{self.gens}/{name}"

    def gen(self, job_id: str) -> str:
        return f"{self.gens}/{encode(job_id)}"

    def leased_entry(self, job_id: str) -> str:
        return f"{self.leased}/{encode(job_id)}"

    def entry_in(self, directory: str, job_id: str) -> str:
        """A job's entry in one of the per-job directories (``leased``, ``last``, ``parked``)."""
        return f"{self.root}/{directory}/{encode(job_id)}"

    def slot_path(self, slot: str) -> str:
        """The znode of a pending or scheduled entry, from its slot (``pending/<bucket>/<entry>``)."""
        return f"{self.root}/{slot}"


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


def named(names: Iterable[str], parse: Callable[[str], str] = decode) -> list[tuple[str, str]]:
    """(name, job id) of each znode name tenure made (``decode``, or ``entry_job``); the rest
    are skipped: never indexed nor proposed, a listing shows them as corrupt."""
    found = []
    for name in names:
        with contextlib.suppress(ValueError):
            found.append((name, parse(name)))
    return found


def entry_millis(name: str) -> int | None:
    """The store time in a pending entry's name (ms): when it was queued, or, under
    ``scheduled/``, when it becomes claimable; None for a name tenure did not make."""
    ms = name[:13]
    return int(ms) if len(name) > 17 and ms.isdigit() else None


def entry_job(name: str) -> str:
    """The job id of a pending entry's name; ValueError for a name tenure did not make."""
    ms, dot, enc = name.partition(".")
    if not dot or not ms.isdigit():
        raise ValueError("not a pending entry")
    return decode(enc)


# -- the audit's sequential znodes (audit) ------------------------------------------
_NUMBER = re.compile(r"-?[0-9]{10}|-[0-9]{9}")  # "%010d" of a signed 32-bit int
_AUDIT_SEGMENT = re.compile(r"[0-9]{10}")


def sequence(name: str, prefix: str) -> int | None:
    """The number ZooKeeper appended to the sequential znode ``name`` (``prefix`` then
    ``%010d`` of a signed 32-bit counter, so ``e-0000000042`` or, after a wrap that some
    versions document, ``e--2147483648``); None for a name tenure did not make."""
    if not name.startswith(prefix):
        return None
    digits = name[len(prefix):]
    if len(digits) == 10 and digits.isascii() and digits.isdigit():  # the usual name: no regex (trims list thousands)
        return int(digits)
    return int(digits) if _NUMBER.fullmatch(digits) else None


def segment_rank(name: str) -> int | None:
    """The index of an audit segment's directory name; None for any other name."""
    return int(name) if _AUDIT_SEGMENT.fullmatch(name) else None


def segment_name(rank: int) -> str:
    return f"{rank:010d}"


# -- job records -----------------------------------------------------------------------------
QUEUES = {"pending": "queued", "scheduled": "scheduled"}  # entry directory -> the record's key naming it


# One encoder for every znode written: json.dumps with separators builds a new one per call.
_COMPACT = json.JSONEncoder(separators=(",", ":"))
# ``_COMPACT.encode`` makes a C encoder per call: this one is made once, with what it would be
# made with (less the check for circular values, which a record's never are).
_MAKE_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)  # None without json's C speedups
_C_ENCODE: Any = None if _MAKE_ENCODER is None else _MAKE_ENCODER(
    None, _COMPACT.default, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, True)
_STRING = json.encoder.encode_basestring_ascii
_KEYS: dict[str, str] = {}  # '"name":' per key written
# A float's shortest repr is most of a record's encoding, and a cycle writes the same few
# times (claimed_at, submitted_at, an event's at) a dozen times: their texts, kept a while.
_FLOATS: dict[float, str] = {}
_FLOATS_KEPT = 1024
_INF = float("inf")


def _value(v: Any) -> str:
    """``v`` as ``_COMPACT`` writes it."""
    if _C_ENCODE is None:
        return _COMPACT.encode(v)
    return "".join(_C_ENCODE(v, 0))


def compact(d: dict[str, Any]) -> bytes:
    """``_COMPACT.encode(d)``, the same text: the flat values of a record or an event written
    here, each as json writes it (positive floats from ``_FLOATS``), anything else by json."""
    parts = []
    for k, v in d.items():
        key = _KEYS.get(k)
        if key is None:
            if type(k) is not str:
                return _value(d).encode()
            key = _KEYS[k] = _STRING(k) + ":"
        kind = type(v)
        if v is None:
            parts.append(key + "null")
        elif kind is str:
            parts.append(key + _STRING(v))
        elif kind is int:
            parts.append(key + int.__repr__(v))
        elif kind is float and 0.0 < v < _INF:  # not 0.0 and -0.0 (equal keys), nor NaN
            text = _FLOATS.get(v)
            if text is None:
                if len(_FLOATS) >= _FLOATS_KEPT:
                    _FLOATS.clear()
                text = _FLOATS[v] = float.__repr__(v)
            parts.append(key + text)
        else:  # booleans, other floats, nested values
            parts.append(key + _value(v))
    return ("{" + ",".join(parts) + "}").encode()


def dump_record(r: JobRecord, epoch: int, slot: str | None = None) -> bytes:
    """``epoch`` is the leader epoch whose clock stamped the record's times; ``slot`` the
    entry (``pending/<bucket>/<entry>`` or ``scheduled/...``) of a pending record in an
    indexed store. The life cycle's fields are written only when not at their defaults."""
    d = {
        "tenure": FORMAT, "epoch": epoch, "job_id": r.job_id, "state": r.state.value, "owner": r.owner,
        "token": r.token, "lease_until": r.lease_until, "ttl": r.ttl,
        "submitted_at": r.submitted_at, "claimed_at": r.claimed_at, "renewed_at": r.renewed_at,
        "completed_at": r.completed_at, "runs": r.runs, "result": codec.result_text(r.result),
        **codec.life_fields(r),
    }
    if slot is not None:
        directory, _, entry_slot = slot.partition("/")
        d[QUEUES[directory]] = entry_slot
    return compact(d)


def _slot(d: Any) -> str | None:
    """The entry a decoded record names, as a slot; None for none or one tenure did not make."""
    for directory, key in QUEUES.items():
        value = d.get(key)
        if isinstance(value, str) and _SLOT.fullmatch(value):
            return f"{directory}/{value}"
    return None


def _load(data: bytes, key: str) -> dict[str, Any]:
    """A JSON object tenure wrote; CorruptRecord for anything else."""
    d = codec.json_object(key, data)
    if d.get("tenure") != FORMAT:
        raise CorruptRecord(key, "not a tenure record")
    return d


def _fields(d: dict[str, Any], key: str, job_id: str) -> JobRecord:
    # The life cycle's fields in ``LIFE_FIELDS``'s order, by map: no comprehension's frame.
    named_job = d.get("job_id")
    if not isinstance(named_job, str):
        raise CorruptRecord(key, "names no job")
    if named_job != job_id:
        raise CorruptRecord(key, f"names job {named_job!r}, not the job its znode is for")
    return codec.job_record(key, named_job, d.get("state"), d.get("owner"), d.get("token"), d.get("lease_until"),
                            d.get("ttl"), d.get("submitted_at"), d.get("claimed_at"), d.get("renewed_at"),
                            d.get("completed_at"), d.get("runs"), codec.result_bytes(key, d.get("result")),
                            *map(d.get, codec.LIFE_FIELDS))


def load_record(data: bytes, key: str, job_id: str) -> JobRecord:
    """The record in a job znode; CorruptRecord for anything tenure did not write."""
    return _fields(_load(data, key), key, job_id)


Readable = tuple[str, JobRecord, bytes, int]  # (job id, record, data, version)


def readable(jobs: str, found: Iterable[tuple[str, bytes, int]],
             known: KnownRecords | None = None) -> Iterator[Readable]:
    """(job id, record, data, version) of each (path, data, version) read under ``jobs`` that
    tenure wrote; the rest is skipped here (a listing shows it as corrupt). ``known``: records
    decoded before, answered from where their bytes are unchanged."""
    prefix = len(jobs) + 1
    for path, data, version in found:
        try:
            rec = load_record(data, path, decode(path[prefix:])) if known is None else known.record(path, data, prefix)
        except (CorruptRecord, ValueError):
            continue
        yield rec.job_id, rec, data, version  # the record's job id is its znode's (``_fields``)


class KnownRecords:
    """The leased jobs' records claim_next read on its last call, by znode path, with the bytes
    they were decoded from.

    claim_next reads the record of every leased job (``index``: which leases ended is in the
    records, judged on the store's clock), and most are as they were at the last call: at
    10,000 held leases, decoding them was some 70 % of a claim_next's client CPU. The same bytes
    make the same record, so a hit is exact, never a guess. What is kept is what the last call
    read (``settle``), so it holds no more than the leases held.
    """

    def __init__(self) -> None:
        self._known: dict[str, tuple[bytes, JobRecord]] = {}
        self._read: dict[str, tuple[bytes, JobRecord]] = {}  # this call's, kept at ``settle``

    def record(self, path: str, data: bytes, prefix: int) -> JobRecord:
        """The record in ``data``, read at ``path`` (its job id from ``prefix`` on); CorruptRecord
        or ValueError as ``load_record`` and ``decode`` raise them (a corrupt one is not kept)."""
        known = self._known.get(path)
        rec = known[1] if known is not None and known[0] == data else load_record(data, path, decode(path[prefix:]))
        self._read[path] = (data, rec)
        return rec

    def settle(self) -> None:
        """The records read since the last call are the ones kept (a job no longer leased is
        forgotten). Claimers in threads of one process share it: a record of another's read
        kept is still exact."""
        self._known, self._read = self._read, {}


def read_job(data: bytes, key: str, job_id: str) -> tuple[JobRecord, int | None, str | None]:
    """The record in a job znode, the leader epoch that stamped its times (None if unknown)
    and the slot of the entry it names; CorruptRecord for anything tenure did not write."""
    d = _load(data, key)
    epoch = d.get("epoch")
    return _fields(d, key, job_id), epoch if type(epoch) is int else None, _slot(d)


def decoded(jobs: str, name: str, data: bytes) -> JobRecord | JobStatus:
    """The record in job znode ``name`` under ``jobs``, or a CORRUPT status saying why not."""
    key = f"{jobs}/{name}"
    try:
        return load_record(data, key, decode(name))
    except ValueError as exc:  # CorruptRecord is not a ValueError: this is a bad name
        return JobStatus(job_id=name, state=JobState.CORRUPT, key=key,
                         problem=f"znode name is not a tenure job id: {exc}")
    except CorruptRecord as exc:
        return corrupt_status(decode(name), key, exc)


def entry_slot(data: bytes | None) -> str | None:
    """The slot of the entry a record names (None for none, or a record tenure cannot read)."""
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        return _slot(codec.json_value(data)) if data is not None else None
    return None


# -- audit ----------------------------------------------------------------------------------
def dump_rejection(r: Rejection) -> bytes:
    return compact({"tenure": FORMAT, **codec.rejection_fields(r)})


def load_rejection(data: bytes, key: str) -> Rejection:
    return codec.rejection(key, _load(data, key))


def dump_event(e: HistoryEvent) -> bytes:
    return compact({"tenure": FORMAT, **codec.event_fields(e)})


def load_event(data: bytes, key: str) -> HistoryEvent:
    return codec.event(key, _load(data, key))
