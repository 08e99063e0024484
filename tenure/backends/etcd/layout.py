"""Keys and values of the etcd backend: where each record lives under the prefix, and its JSON
(docs/backends/etcd.md, "Key layout", says what each holds and why). Per job ``<id>``
(``codec.encode_job_id``):

``<prefix>/job/<id>``        the run; while leased its mod revision is the token
``<prefix>/lease/<id>``      the live lease, on an etcd lease with the job's TTL
``<prefix>/end/<id>``        how the current claim ended (completed, released, expired)
``<prefix>/queue/<µs>/<id>`` index: a pending job, oldest first
``<prefix>/sched/<µs>/<id>`` index: a pending job with a ``claimable_at`` (a delay, a retry's
                             backoff), in its place instead, by that time
``<prefix>/held/<id>``       index: a leased job (its lease ended when no lease key is beside it)
``<prefix>/last/<id>``       index: a job on its last attempt, leased (parked once its lease
                             ends) or parked; a job neither held nor queued with it is
                             parked, one without it completed
``<prefix>/delay/<id>``      a delayed pending job's wait, on an etcd lease of that many
                             seconds (rounded up): claimable once etcd has deleted it

The job life cycle's fields (``codec.LIFE_FIELDS``) are in the job key's value. A failed or
requeued job's value is rewritten (state ``pending`` or ``parked``, its last token in it, as
a submitted job's); a released job keeps the claim's value, its attempt given back when read
(``record``). A pending job's queue key is at when it became pending (``queued``, else
``submitted_at``), by its writer's clock; a scheduled one's ``sched/`` key is at its
``claimable_at``, and claim_next reads those up to its own now only.

Audit: ``<prefix>/history/<id>/<uuid>`` (a claim's renewal event: ``renew-<token>``,
overwritten by each renewal) and ``<prefix>/rejection/<uuid>``, on a shared retention lease.
Anything under the prefix that does not decode raises ``CorruptRecord``.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from tenure.backends.etcd.client import KV
from tenure.core import codec
from tenure.core.errors import CorruptRecord, InvalidArgument
from tenure.core.records import HistoryEvent, JobRecord, JobState, JobStatus, Rejection

VERSION = 1
_ENCODER = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=False)  # made once
# ``_ENCODER.encode`` makes a C encoder per call: this one is made once, with what it would be
# made with (less the check for circular values, which a record's never are).
_MAKE_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)  # None without json's C speedups
_C_ENCODE: Any = None if _MAKE_ENCODER is None else _MAKE_ENCODER(
    None, _ENCODER.default, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, False)


def _next(key: bytes) -> bytes:
    """The end of the range of keys that start with ``key``."""
    return key[:-1] + bytes([key[-1] + 1])


@functools.lru_cache(maxsize=16_384)  # a renewal names its job's keys a dozen times; a worker holds thousands
def _encoded(job_id: str) -> bytes:
    return codec.encode_job_id(job_id).encode("ascii")


_KEYS_KEPT = 1024  # jobs whose keys ``Keys.of`` keeps (under 1 MB for ids of tens of characters)
_SECTIONS = ("job", "lease", "end", "queue", "sched", "held", "last", "delay", "history", "rejection")


class JobKeys(NamedTuple):
    """One job's keys (``Keys.of``); the first five are those a transaction reads (``KEYS_READ``)."""

    job: bytes
    lease: bytes
    end: bytes
    held: bytes
    delay: bytes
    last: bytes


class Keys:
    def __init__(self, prefix: str) -> None:
        text = "/" + prefix.strip("/")
        if text == "/":
            text = "/tenure"
        if any(ord(ch) < 32 or ord(ch) == 127 for ch in text):
            raise InvalidArgument(f"etcd prefix {prefix!r} contains a control character")
        self.prefix = text
        self.root = text.encode() + b"/"
        self.retention = self.root + b"meta/retention"
        self._sections = {name: self.root + name.encode() + b"/" for name in _SECTIONS}  # built once
        self._of: dict[str, JobKeys] = {}  # ``of``'s, by job id

    def section(self, name: str) -> bytes:
        found = self._sections.get(name)
        return found if found is not None else self.root + name.encode() + b"/"

    def span(self, name: str) -> tuple[bytes, bytes]:
        start = self.section(name)
        return start, _next(start)

    def _key(self, name: str, job_id: str) -> bytes:
        return self._sections[name] + _encoded(job_id)

    def of(self, job_id: str) -> JobKeys:
        """The job's own keys at once (a claim+complete names them six times: made once)."""
        found = self._of.get(job_id)
        if found is None:
            if len(self._of) >= _KEYS_KEPT:
                self._of.clear()  # a worker's jobs come and go: start again rather than keep order
            e, s = _encoded(job_id), self._sections
            found = self._of[job_id] = JobKeys(s["job"] + e, s["lease"] + e, s["end"] + e, s["held"] + e,
                                               s["delay"] + e, s["last"] + e)
        return found

    def job(self, job_id: str) -> bytes:
        return self._key("job", job_id)

    def lease(self, job_id: str) -> bytes:
        return self._key("lease", job_id)

    def end(self, job_id: str) -> bytes:
        return self._key("end", job_id)

    def queue(self, job_id: str, since: float) -> bytes:
        return self._sections["queue"] + b"%020d/" % round(since * 1e6) + _encoded(job_id)

    def held(self, job_id: str) -> bytes:
        return self._key("held", job_id)

    def last(self, job_id: str) -> bytes:
        return self._key("last", job_id)

    def delay(self, job_id: str) -> bytes:
        return self._key("delay", job_id)

    def scheduled(self, job_id: str, at: float) -> bytes:
        return self._sections["sched"] + b"%020d/" % round(at * 1e6) + _encoded(job_id)

    def sched_cut(self, at: float) -> bytes:
        """Where the ``sched/`` keys of jobs not yet claimable at ``at`` start."""
        return self.section("sched") + b"%020d/" % round(at * 1e6) + b"\xff"

    def queued_job_id(self, key: bytes, section: str = "queue") -> str:
        """The job id in a ``queue/`` (or ``sched/``) key."""
        return self.job_id(self.section(section) + key[len(self.section(section)) + 21:], section)

    def history(self, job_id: str, uid: str) -> bytes:
        return self._sections["history"] + _encoded(job_id) + b"/" + uid.encode()

    def history_span(self, job_id: str | None) -> tuple[bytes, bytes]:
        if job_id is None:
            return self.span("history")
        start = self._key("history", job_id) + b"/"
        return start, _next(start)

    def rejection(self, uid: str) -> bytes:
        return self.section("rejection") + uid.encode()

    def job_id(self, key: bytes, section: str) -> str:
        """The job id in a key of ``section``; CorruptRecord for a key tenure did not make."""
        try:
            job_id = codec.decode_job_id(key[len(self.section(section)):].decode("ascii"))
        except ValueError as exc:  # UnicodeDecodeError is a ValueError too
            raise CorruptRecord(key.decode(errors="replace"), "the key does not name a job id") from exc
        return codec.stored_job_id(key.decode(errors="replace"), job_id)  # one a caller could give


# -- values ------------------------------------------------------------------------------------
def dump(value: dict[str, Any]) -> bytes:
    if _C_ENCODE is None:
        return _ENCODER.encode(value).encode()
    return "".join(_C_ENCODE(value, 0)).encode()


@functools.lru_cache(maxsize=1024)  # a process has few owners; each operation names its owner's twice
def owner_prefix(owner: str) -> bytes:
    """Lease values start with this, so a transaction can check the owner by a byte range."""
    return b'{"owner":' + json.dumps(owner, ensure_ascii=True).encode() + b","


def lease_value(owner: str, ttl: float, renewed_at: float | None, expires_at: float, shared: bool = False) -> bytes:
    """``shared``: the key hangs on an etcd lease that carries other keys (renewals'), which
    no process may revoke when the key leaves it (``on_shared_lease``)."""
    fields: dict[str, Any] = {"ttl": ttl, "renewed_at": renewed_at, "expires_at": expires_at}
    if shared:
        fields["shared"] = True
    return owner_prefix(owner) + dump(fields)[1:]


def on_shared_lease(kv: KV) -> bool:
    """Whether a lease key (a previous value a write returned) hung on a shared etcd lease."""
    return parse(kv.value).get("shared") is True


def held_value(owner: str, ttl: float) -> bytes:
    """The held index's value: the owner first (checked by a byte range like a lease value's),
    and the longest TTL the holder was given, which outlives the lease key."""
    return owner_prefix(owner) + dump({"ttl": ttl})[1:]


def held_ttl(kv: KV) -> float | None:
    """The TTL a held key names; None if it names none (CorruptRecord if unreadable)."""
    ttl: float | None = _field(kv, _load(kv), "ttl", _NUM)
    return ttl


def _load(kv: KV) -> dict[str, Any]:
    return codec.json_object(kv.key.decode(errors="replace"), kv.value)


def _field(kv: KV, value: dict[str, Any], name: str, kind: type | tuple[type, ...],
           optional: bool = True) -> Any:
    key, item = kv.key.decode(errors="replace"), value.get(name)
    if kind is str:
        return codec.text(key, name, item, optional)
    if kind is int:
        return codec.integer(key, name, item, optional)
    found = codec.number(key, name, item, optional)
    return found if found is None or type(item) is not int else item  # as stored


_NUM = (int, float)


@dataclass(frozen=True)
class JobValue:
    state: JobState  # PENDING, LEASED or PARKED
    owner: str | None
    token: int  # the last token, for a pending or parked job (a leased one's is its mod revision)
    ttl: float | None
    submitted_at: float | None
    claimed_at: float | None
    expires_at: float | None
    runs: int
    life: dict[str, Any] = field(default_factory=dict)  # codec.life: those not at their defaults
    queued: float | None = None  # when a failed or requeued job became pending (its queue key's time)
    timed: bool = False  # its delay is its ``delay/`` key's, timed by etcd (``claimable_at``: an estimate)

    def index_key(self, k: Keys, job_id: str) -> bytes | None:
        """A pending job's ``sched/`` or ``queue/`` key; None for another."""
        if self.state is not JobState.PENDING:
            return None
        at: float | None = self.life.get("claimable_at")
        if at is not None:
            return k.scheduled(job_id, at)
        since = self.queued if self.queued is not None else self.submitted_at
        return None if since is None else k.queue(job_id, since)


def job_value(job_id: str, v: JobValue) -> bytes:
    value = {"tenure": VERSION, "job": job_id, "state": v.state.value, "owner": v.owner,
             "token": v.token, "ttl": v.ttl, "submitted_at": v.submitted_at,
             "claimed_at": v.claimed_at, "expires_at": v.expires_at, "runs": v.runs, **v.life}
    if v.queued is not None:
        value["queued"] = v.queued
    if v.timed:
        value["timed"] = True
    return dump(value)


_STATES = {"pending": JobState.PENDING, "leased": JobState.LEASED, "parked": JobState.PARKED}


_JOB_NUMBERS = ("ttl", "submitted_at", "claimed_at", "expires_at", "queued")
_LIFE_FIELDS = frozenset(codec.LIFE_FIELDS)


def read_job(kv: KV, job_id: str) -> JobValue:
    """The job key's value, checked (CorruptRecord): the common case's fields without a call each."""
    key = kv.key.decode(errors="replace")
    v = codec.json_object(key, kv.value)
    if v.get("tenure") != VERSION or v.get("job") != job_id:
        raise CorruptRecord(key, "not a tenure job record for this key")
    state = _STATES.get(v.get("state"))  # type: ignore[arg-type]
    if state is None:
        raise CorruptRecord(key, f"unknown state {v.get('state')!r}")
    owner = v.get("owner")
    runs: Any = v.get("runs")
    if type(owner) is not str:
        owner = codec.text(key, "owner", owner, optional=state is not JobState.LEASED)
    if type(runs) is not int:
        codec.integer(key, "runs", runs)  # not an int: raises CorruptRecord
    ttl, submitted_at, claimed_at, expires_at, queued = codec.stored_numbers(key, v, _JOB_NUMBERS)
    # A record written before the life cycle's fields, or with all of them at their defaults, has none.
    life = {} if _LIFE_FIELDS.isdisjoint(v) else codec.life(
        key, v.get("attempts"), v.get("max_attempts"), v.get("last_error"), v.get("claimable_at"), v.get("failed_at"))
    return JobValue(state, owner, codec.stored_token(key, v.get("token")), ttl, submitted_at, claimed_at,
                    expires_at, runs, life, queued, v.get("timed") is True)


def listed_pending(kv: KV, encoded: bytes, now: float) -> JobStatus | None:
    """For listings: the status at ``now`` of a pending or parked job whose job key ends in
    ``encoded`` and that has no lease or outcome key, the quick way (``codec.listed_status``)
    with the checks ``read_job`` and ``Keys.job_id`` make; None for anything else, which the
    general path then explains."""
    try:
        v = codec.json_value(kv.value)
    except ValueError:
        return None
    if type(v) is not dict or v.get("tenure") != VERSION or (state := v.get("state")) not in ("pending", "parked"):
        return None
    get = v.get
    fast = codec.listed_status(get("job"), state, get("owner"), get("token"), get("runs"), None, None,
                               get("submitted_at"), get("claimed_at"), None, None, now,
                               get("ttl"), get("expires_at"), get("queued"), attempts=get("attempts"),
                               max_attempts=get("max_attempts"), last_error=get("last_error"),
                               claimable_at=get("claimable_at"), failed_at=get("failed_at"))
    return None if fast is None or _encoded(fast.job_id) != encoded else fast


def parse(value: bytes) -> dict[str, Any]:
    """A JSON object, or an empty one for anything else."""
    try:
        loaded = codec.json_value(value)
    except ValueError:
        return {}
    return loaded if isinstance(loaded, dict) else {}


def end_value(how: str, token: int, at: float, result: bytes | None) -> bytes:
    return dump({"tenure": VERSION, "how": how, "token": token, "at": at,
                 "result": codec.result_text(result)})


def index_key(k: Keys, job_id: str, job: JobValue | None, end: KV | None) -> bytes | None:
    """The job's ``queue/`` or ``sched/`` key, or None if it has none (it is not pending).

    ``job``: its job key's value (``read_job``), None without one. Call after ``record``
    accepted the keys: they are known to decode and agree.
    """
    if job is None:
        return None
    if job.state is not JobState.LEASED:
        return job.index_key(k, job_id)
    if end is not None:
        o = _load(end)
        if o.get("how") == "released":
            return k.queue(job_id, float(_field(end, o, "at", _NUM, False)))
    return None


# How far ahead of now a job whose delay key etcd still keeps after its claimable_at is put:
# etcd ends leases on a 500 ms tick; a claim waiting on it tries again then (a watch wakes it sooner).
DELAY_TICK = 0.5


def _delayed(v: JobValue, delay_kept: bool | None, now: float) -> dict[str, Any]:
    """A pending job's life fields with its ``claimable_at`` as etcd has it: not yet while etcd
    keeps its delay key, at the latest now once it is gone. ``delay_kept`` None: not read (listings
    go by the writer's estimate), as for a value without ``timed``."""
    at: float | None = v.life.get("claimable_at")
    if not v.timed or delay_kept is None or v.state is not JobState.PENDING:
        return v.life
    if delay_kept:
        return {**v.life, "claimable_at": now + DELAY_TICK if at is None or at <= now else at}
    return {**v.life, "claimable_at": None if at is None else min(at, now)}


def record(job_id: str, job: KV | None, lease: KV | None, end: KV | None, now: float,
           delay_kept: bool | None = None, value: JobValue | None = None) -> JobRecord | None:
    """The job's record as the core's state machine sees it; CorruptRecord if keys disagree.
    ``delay_kept``: whether etcd keeps the job's ``delay/`` key (None: not read); ``value``: the
    job key's, if the caller decoded it already (``read_job``)."""
    if job is None:
        orphan = lease or end
        if orphan is not None:
            raise CorruptRecord(orphan.key.decode(errors="replace"), "a lease or outcome without its job")
        return None
    v = read_job(job, job_id) if value is None else value
    key = job.key.decode(errors="replace")
    if v.state is not JobState.LEASED:
        if lease is not None or end is not None:
            raise CorruptRecord(key, f"a {v.state} job with a lease or outcome")
        return JobRecord(job_id, v.state, v.owner, v.token, None, v.ttl, v.submitted_at, v.claimed_at,
                         runs=v.runs, **_delayed(v, delay_kept, now))
    token = job.mod_revision
    base = JobRecord(job_id, JobState.LEASED, v.owner, token, None, v.ttl, v.submitted_at,
                     v.claimed_at, runs=v.runs, **v.life)
    if end is not None:
        o = _load(end)
        how = o.get("how")
        if o.get("token") != token or how not in ("completed", "released", "expired") or lease is not None:
            raise CorruptRecord(end.key.decode(errors="replace"), "an outcome that does not match the job")
        if how == "expired":  # an operator ended the lease (force_expire): claimable at once
            return replace(base, lease_until=min(_field(end, o, "at", _NUM, False), now))
        if how == "released":  # the claim's attempt given back (transitions.release)
            return replace(base, state=JobState.PENDING, owner=None, ttl=None, claimed_at=None,
                           attempts=max(base.attempts - 1, 0))
        result = codec.result_bytes(end.key.decode(errors="replace"), o.get("result"))
        return replace(base, state=JobState.COMPLETED, ttl=None, completed_at=_field(end, o, "at", _NUM),
                       result=result)
    if lease is None:  # etcd ended the lease, or an operator did
        return replace(base, lease_until=min(v.expires_at or now, now))
    lv = _load(lease)
    # Created by the claim (create revision = token) or by a revival since (a later one).
    if lease.create_revision < token or not lease.value.startswith(owner_prefix(v.owner or "")):
        raise CorruptRecord(lease.key.decode(errors="replace"), "a lease that does not match the job")
    # While etcd keeps the key the lease is live, whatever our estimate of its end says.
    until = max(_field(lease, lv, "expires_at", _NUM, False), now + 1e-3)
    return replace(base, lease_until=until, ttl=_field(lease, lv, "ttl", _NUM),
                   renewed_at=_field(lease, lv, "renewed_at", _NUM))


# -- audit records ---------------------------------------------------------------------------
def event_value(event: HistoryEvent, token: int | None, expires_at: float | None) -> bytes:
    """``event`` with ``token`` (None: the token is the revision of the write itself, a claim's)
    and ``expires_at`` as the commit made them. The job id is in the key, not the value."""
    fields = codec.event_fields(event)
    del fields["job_id"]
    fields["token"], fields["expires_at"] = token, expires_at
    return dump(fields)


def read_event(kv: KV, job_id: str) -> HistoryEvent:
    d = _load(kv)
    token = kv.create_revision if d.get("token") is None else d["token"]
    return codec.event(kv.key.decode(errors="replace"), {**d, "job_id": job_id, "token": token})


def rejection_value(r: Rejection) -> bytes:
    return dump(codec.rejection_fields(r))


def read_rejection(kv: KV) -> tuple[Rejection, bool]:
    """The rejection and whether its reason was recorded (versions before the optimistic
    transaction wrote a stub first and its reason later)."""
    d = _load(kv)
    return codec.rejection(kv.key.decode(errors="replace"), d), d.get("reason") is not None
