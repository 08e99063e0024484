"""The one record codec: how a job record, a rejection and a history event become data and
come back, with the checks every stored record must pass.

Each store decides where the pieces live (SQLite columns, etcd keys, one znode per job);
what a readable record is, the JSON field names of audit records, and how a job id is
written into a key are decided here, once. A record that fails a check raises
``CorruptRecord`` naming the store's key: reads of that job show it as CORRUPT, and audit
readers skip it with a warning (``tenure.core.audit``).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import sys
from typing import Any

from tenure.core import validation
from tenure.core.errors import CorruptRecord, quoted
from tenure.core.records import (
    STORED_STATES,
    HistoryEvent,
    JobRecord,
    JobState,
    JobStatus,
    Op,
    Rejection,
    RejectionKind,
    fast_status,
    lease_over,
)
from tenure.core.transitions import judge as _judge
from tenure.core.transitions import shown_times as _shown_times

# A rejection recorded before its reason was known (etcd writes the reason in a later step).
UNKNOWN_REASON = "unknown (the rejecting client stopped before recording why)"
_BASE64URL = re.compile(r"[A-Za-z0-9_-]*")


# -- job ids in keys ---------------------------------------------------------------------------
def encode_job_id(job_id: str) -> str:
    """The job id's UTF-8 in unpadded base64url: any id is a legal key or znode name."""
    return base64.urlsafe_b64encode(job_id.encode("utf-8")).decode("ascii").rstrip("=")


def decode_job_id(text: str) -> str:
    """The job id ``encode_job_id`` made ``text`` from; ValueError for any other text."""
    if not text or not _BASE64URL.fullmatch(text):
        raise ValueError("not base64url")
    try:
        job_id = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise ValueError(str(exc)) from None
    if encode_job_id(job_id) != text:
        raise ValueError("not the canonical encoding of any job id")
    return job_id


def job_id_problem(value: Any) -> str | None:
    """What makes a stored job id one no caller could have given (``validation.job_id``), in
    words that never quote it; None for a good one."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"the job id is {len(value)} bytes of binary, not text"
    if type(value) is not str:
        return f"the job id is a {type(value).__name__}, not text"
    if not 1 <= len(value) <= validation.MAX_JOB_ID:
        return f"the job id has {len(value)} characters, not 1 to {validation.MAX_JOB_ID}"
    if (value.isascii() and value.isprintable()) or validation.find_refused(value) is None:  # (as validation's)
        return None
    refused = validation.refused_character(value)
    if any("\ud800" <= c <= "\udfff" for c in value):  # how Python reads stored text that is not UTF-8
        return f"the job id is not UTF-8 text ({refused})"
    return f"the job id contains {refused}"


def shown_job_id(value: Any) -> str:
    """A stored job id as listings show it: itself when a caller could name it, else escaped
    and cut, so a listing never carries binary, a line break or megabytes."""
    if job_id_problem(value) is None:
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        return f"x'{data[:32].hex()}'" + ("" if len(data) <= 32 else f"... ({len(data)} bytes)")
    return quoted(value)


def stored_job_id(key: str, value: Any) -> str:
    """A stored job id, checked as a caller's is; CorruptRecord naming ``key`` otherwise."""
    problem = job_id_problem(value)
    if problem is not None:
        raise CorruptRecord(key, problem)
    return str(value)


def key_of(table: str, job_id: Any) -> str:
    """A row's key for CorruptRecord: the table and the job id as listings show it."""
    return f"{table}/{shown_job_id(job_id)}"


def corrupt_status(job_id: Any, key: str, exc: CorruptRecord) -> JobStatus:
    """How a job whose record cannot be read is listed, on every backend. ``job_id``: the id as
    stored, whatever it is (bytes, text no caller could give, an undecodable key's raw bytes):
    listings show it escaped and cut short; ``key``: where the store keeps the record (``key_of``)."""
    return JobStatus(job_id=shown_job_id(job_id), state=JobState.CORRUPT, problem=exc.problem, key=key)


# -- stored values -----------------------------------------------------------------------------
_decode_json = json.JSONDecoder().decode  # json.loads without its argument checks: listings read many


def json_value(data: bytes) -> Any:
    """The JSON value in a stored value; ValueError for anything else, arrays nested deeper
    than Python recurses included (a foreign value must not crash a listing)."""
    try:
        return _decode_json(data.decode("utf-8"))  # JSONDecodeError, UnicodeDecodeError: ValueErrors
    except RecursionError:
        raise ValueError("nested too deeply") from None


def json_object(key: str, data: bytes) -> dict[str, Any]:
    """The JSON object a store keeps at ``key``; CorruptRecord for anything else. The message
    names the key, never the value (it may hold anything: a secret, megabytes)."""
    try:
        value = json_value(data)
    except ValueError:
        raise CorruptRecord(key, "the value is not JSON") from None
    if not isinstance(value, dict):
        raise CorruptRecord(key, "the value is not a JSON object")
    return value


# -- fields ------------------------------------------------------------------------------------
_FLOAT_MAX = sys.float_info.max  # NaN and the infinities fail a comparison with it too
def number(key: str, name: str, value: Any, optional: bool = True) -> float | None:
    if value is None and optional:
        return None
    if type(value) is float and math.isfinite(value):  # the common case first (listings)
        return value
    # A range check, not math.isfinite: an int too large for a float would raise OverflowError.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not -_FLOAT_MAX <= value <= _FLOAT_MAX:
        raise CorruptRecord(key, f"field {name!r} is {value!r}")
    return float(value)


def stored_numbers(key: str, value: dict[str, Any], names: tuple[str, ...]) -> list[Any]:
    """The optional number fields ``names`` of a stored JSON object, each as stored (an int stays
    an int; None if absent); CorruptRecord for one that is not a finite number. One call for all
    of a record's numbers, where ``number`` is a call each."""
    found: list[Any] = []
    for name in names:
        item = value.get(name)
        if item is not None and not (type(item) in (int, float) and -_FLOAT_MAX <= item <= _FLOAT_MAX):
            raise CorruptRecord(key, f"field {name!r} is {item!r}")  # a bool, a string, NaN, 1e400...
        found.append(item)
    return found


def text(key: str, name: str, value: Any, optional: bool = True) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise CorruptRecord(key, f"field {name!r} is {value!r}")
    return value


def integer(key: str, name: str, value: Any, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if type(value) is not int:
        raise CorruptRecord(key, f"field {name!r} is {value!r}")
    return value


def stored_token(key: str, value: Any) -> int:
    """A stored token: an int from 0 to the highest a claim issues (``validation.LAST_TOKEN``)."""
    if type(value) is not int or value < 0:
        raise CorruptRecord(key, f"field 'token' is {quoted(value)}")
    if value > validation.LAST_TOKEN:
        raise CorruptRecord(key, f"token {quoted(value)} is above the highest a claim issues ({validation.LAST_TOKEN})")
    return value


_STORED = {state.value: state for state in STORED_STATES}


def state(key: str, value: Any) -> JobState:
    """A stored state (pending, leased, completed)."""
    if type(value) is str and value in _STORED:  # listings decode one per job: the quick way first
        return _STORED[value]
    try:
        found = JobState(value)
    except ValueError:
        raise CorruptRecord(key, f"unknown state {value!r}") from None
    if found not in STORED_STATES:
        raise CorruptRecord(key, f"state {found.value!r} is never stored")
    return found


# -- job records -------------------------------------------------------------------------------
# The job life cycle's fields (issue 28), by the names every store that writes JSON uses; a
# record written before them has none, and reads as attempts 0, no limit, claimable now.
LIFE_FIELDS = ("attempts", "max_attempts", "last_error", "claimable_at", "failed_at")


def life_fields(rec: JobRecord) -> dict[str, Any]:
    """The life cycle's fields of ``rec`` that are not at their defaults, for a JSON record."""
    found: dict[str, Any] = {}
    if rec.attempts:
        found["attempts"] = rec.attempts
    for name in LIFE_FIELDS[1:]:
        value = getattr(rec, name)
        if value is not None:
            found[name] = value
    return found


def life(key: str, attempts: Any = 0, max_attempts: Any = None, last_error: Any = None, claimable_at: Any = None,
         failed_at: Any = None) -> dict[str, Any]:
    """The life cycle's stored fields, checked (``None`` attempts reads as 0: a record written
    before them); only those not at their defaults, as ``JobRecord``'s and ``JobStatus``'s keywords."""
    found: dict[str, Any] = {}
    if attempts is not None and attempts != 0:
        if type(attempts) is not int or attempts < 0:
            raise CorruptRecord(key, f"field 'attempts' is {quoted(attempts)}")
        found["attempts"] = attempts
    if max_attempts is not None:
        if type(max_attempts) is not int or max_attempts < 1:
            raise CorruptRecord(key, f"field 'max_attempts' is {quoted(max_attempts)}")
        found["max_attempts"] = max_attempts
    if last_error is not None:
        found["last_error"] = text(key, "last_error", last_error)
    for name, value in (("claimable_at", claimable_at), ("failed_at", failed_at)):
        if value is not None:
            found[name] = number(key, name, value)
    return found


def job_record(key: str, job_id: Any, state_value: Any, owner: Any, token: Any, lease_until: Any,
               ttl: Any, submitted_at: Any, claimed_at: Any, renewed_at: Any, completed_at: Any,
               runs: Any, result: Any, attempts: Any = 0, max_attempts: Any = None, last_error: Any = None,
               claimable_at: Any = None, failed_at: Any = None) -> JobRecord:
    """A JobRecord from stored values, checked: the invariants every backend's records keep
    (a job id a caller could name, a token a claim can have issued, runs never below 0).
    The last five: the stored ``LIFE_FIELDS`` (``life``), by name or in that order. (Named
    here rather than taken as ``**`` keywords: Python matches a keyword that is no parameter
    by comparing it with each parameter's name, 65 string comparisons a record.)"""
    job_id = stored_job_id(key, job_id)
    found = state(key, state_value)
    token = stored_token(key, token)
    if type(runs) is not int or runs < 0:
        raise CorruptRecord(key, f"field 'runs' is {quoted(runs)}")
    owner = text(key, "owner", owner)
    until, span = number(key, "lease_until", lease_until), number(key, "ttl", ttl)
    if found is JobState.LEASED and (owner is None or until is None or span is None):
        raise CorruptRecord(key, "leased without owner or expiry")
    if result is not None and not isinstance(result, bytes):
        raise CorruptRecord(key, "result is not bytes")
    return JobRecord(job_id, found, owner, token, until, span, number(key, "submitted_at", submitted_at),
                     number(key, "claimed_at", claimed_at), number(key, "renewed_at", renewed_at),
                     number(key, "completed_at", completed_at), runs, result,
                     **life(key, attempts, max_attempts, last_error, claimable_at, failed_at))


_LAST_TOKEN, _MAX_JOB_ID, _refused = validation.LAST_TOKEN, validation.MAX_JOB_ID, validation.find_refused


def listed_status(job_id: Any, state_value: Any, owner: Any, token: Any, runs: Any, lease_until: Any, ttl: Any,
                  submitted_at: Any, claimed_at: Any, renewed_at: Any, completed_at: Any, now: float,
                  *checked: Any, attempts: Any = 0, max_attempts: Any = None, last_error: Any = None,
                  claimable_at: Any = None, failed_at: Any = None) -> JobStatus | None:
    """For listings, which decode a record per job: the status at ``now`` of stored values that
    ``job_record`` takes as they are (times as floats; ``checked``: other stored times the
    store's general way checks too; the keywords: the stored ``LIFE_FIELDS``), built without
    the record; None for anything else, which the store then reads the general way, explaining
    what is wrong. Written out rather than a loop over fields: a listing of 100,000 jobs spends
    most of its time here."""
    stored = _STORED.get(state_value) if type(state_value) is str else None
    if (stored is None or type(job_id) is not str or type(token) is not int or not 0 <= token <= _LAST_TOKEN
            or type(runs) is not int or runs < 0 or not 0 < len(job_id) <= _MAX_JOB_ID
            or _refused(job_id) is not None
            or (owner is not None and type(owner) is not str)
            or (stored is JobState.LEASED and (owner is None or lease_until is None or ttl is None))):
        return None
    for t in (lease_until, ttl, submitted_at, claimed_at, renewed_at, completed_at, *checked):
        if t is not None and (type(t) is not float or not math.isfinite(t)):  # (a loop, not all(): faster)
            return None
    if not attempts and max_attempts is None and last_error is None and claimable_at is None and failed_at is None:
        if stored is JobState.LEASED and lease_over(lease_until, now):  # as transitions.status judges
            stored = JobState.EXPIRED
        return fast_status(job_id, stored, owner, token, lease_until, submitted_at, claimed_at, renewed_at,
                           completed_at, runs)
    try:  # a job with a life cycle, judged as transitions.status judges it (without the record)
        found = life("", attempts, max_attempts, last_error, claimable_at, failed_at)
    except CorruptRecord:
        return None
    spent = max_attempts is not None and found.get("attempts", 0) >= max_attempts  # None reads as 0
    state = _judge(stored, lease_until, claimable_at, spent, now)
    shown: dict[str, Any] = {name: found[name] for name in ("attempts", "max_attempts", "last_error") if name in found}
    shown["claimable_at"], shown["parked_at"] = _shown_times(stored, state, lease_until, claimable_at, failed_at)
    return fast_status(job_id, state, owner, token, lease_until, submitted_at, claimed_at, renewed_at,
                       completed_at, runs, shown)


def result_text(result: bytes | None) -> str | None:
    """A job result in JSON: base64."""
    return None if result is None else base64.b64encode(result).decode("ascii")


def result_bytes(key: str, value: Any) -> bytes | None:
    """A job result as ``result_text`` wrote it (base64 text, or None); CorruptRecord naming
    ``key`` for anything else."""
    encoded = text(key, "result", value)
    if encoded is None:
        return None
    try:
        return base64.b64decode(encoded, validate=True)
    except binascii.Error:
        raise CorruptRecord(key, "field 'result' is not base64") from None


# -- audit records: the same JSON field names on every store that writes JSON ----------------
# Each pair has one shape: ``x_fields(value)`` is the JSON object, ``x(key, fields)`` reads it
# back (CorruptRecord naming ``key`` for anything else), and ``x(key, x_fields(v)) == v``.


def rejection_fields(r: Rejection) -> dict[str, Any]:
    """The rejection as a JSON object, the same field names on every store that writes JSON;
    ``rejection(key, rejection_fields(r)) == r``."""
    return {"job_id": r.job_id, "op": r.op.value, "owner": r.owner, "token": r.token,
            "current_owner": r.current_owner, "current_token": r.current_token, "at": r.at,
            "reason": r.reason, "kind": r.kind.value, "resource": r.resource}


def rejection(key: str, d: dict[str, Any]) -> Rejection:
    """The rejection in ``d`` (``rejection_fields``'s object); CorruptRecord naming ``key`` for
    anything else. Also reads etcd's earlier shape ("job" for "job_id", and stubs
    whose reason was to follow: ``UNKNOWN_REASON``)."""
    try:
        op, kind = Op(d.get("op")), RejectionKind(d.get("kind", RejectionKind.STORE.value))
    except ValueError:
        raise CorruptRecord(key, "unknown operation or kind") from None
    job_id = text(key, "job_id", d.get("job_id", d.get("job")), optional=False)
    reason = text(key, "reason", d.get("reason"))
    return Rejection(job_id or "", op, text(key, "owner", d.get("owner"), False) or "",
                     integer(key, "token", d.get("token")) or 0, text(key, "current_owner", d.get("current_owner")),
                     integer(key, "current_token", d.get("current_token"), True) or 0,
                     number(key, "at", d.get("at"), False) or 0.0, reason or UNKNOWN_REASON, kind,
                     text(key, "resource", d.get("resource")))


def event_fields(e: HistoryEvent) -> dict[str, Any]:
    """The history event as a JSON object, the same field names on every store that writes
    JSON; ``event(key, event_fields(e)) == e``. A store that keeps the job id or the token
    elsewhere (etcd: in the key, and a claim's token is its write's revision) drops or replaces
    those fields, and puts them back before ``event`` reads them."""
    return {"job_id": e.job_id, "op": e.op.value, "owner": e.owner, "token": e.token, "at": e.at,
            "expires_at": e.expires_at}


def event(key: str, d: dict[str, Any]) -> HistoryEvent:
    """The history event in ``d`` (``event_fields``'s object); CorruptRecord naming ``key`` for
    anything else."""
    try:
        op = Op(d.get("op"))
    except ValueError:
        raise CorruptRecord(key, "unknown operation") from None
    return HistoryEvent(text(key, "job_id", d.get("job_id"), False) or "", op, text(key, "owner", d.get("owner")),
                        integer(key, "token", d.get("token")) or 0, number(key, "at", d.get("at"), False) or 0.0,
                        number(key, "expires_at", d.get("expires_at")))
