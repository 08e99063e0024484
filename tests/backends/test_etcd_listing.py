"""The etcd listing's quick way for pending and parked jobs (``layout.listed_pending``, through
``codec.listed_status``) gives exactly what the general way gives, or leaves the key to it:
checked over job values with every field damaged in turn."""

from __future__ import annotations

import itertools
import json
from typing import Any

from tenure.backends.etcd.client import KV
from tenure.backends.etcd.layout import JobValue, Keys, job_value, listed_pending, record
from tenure.core import transitions
from tenure.core.codec import corrupt_status
from tenure.core.errors import CorruptRecord
from tenure.core.records import JobState, JobStatus

NOW = 1_800_000_000.0
KEYS = Keys("/t")
PENDING = [
    ("p", JobValue(JobState.PENDING, None, 0, None, NOW - 5, None, None, 0)),
    ("again", JobValue(JobState.PENDING, None, 7, None, NOW - 5, NOW - 9, None, 3)),  # released or resubmitted
    ("日本 /x", JobValue(JobState.PENDING, "w", 2, 10.0, NOW - 5, NOW - 9, NOW + 1, 1)),
    # The life cycle's fields (issue 28): failed and retried at once, scheduled, parked.
    ("tried", JobValue(JobState.PENDING, None, 4, None, NOW - 5, NOW - 9, None, 1,
                       {"attempts": 2, "max_attempts": 3, "last_error": "boom", "failed_at": NOW - 3}, NOW - 3)),
    ("later", JobValue(JobState.PENDING, None, 0, None, NOW - 5, None, None, 1,
                       {"attempts": 1, "claimable_at": NOW + 60.0, "failed_at": NOW - 1})),
    ("parked", JobValue(JobState.PARKED, None, 6, None, NOW - 5, NOW - 9, None, 2,
                        {"attempts": 3, "max_attempts": 3, "last_error": "x\ny", "failed_at": NOW - 1})),
]
VALUES: list[Any] = [None, 0, 1, -1, 2.5, -0.0, True, False, "x", "pending", "leased", "completed", "parked", [],
                     {}, 1e400, 10**20, "", "\x00", NOW + 60.0]


def _kv(job_id: str, value: bytes) -> Any:
    return KV(key=KEYS.job(job_id), value=value, create_revision=5, mod_revision=9)


def _general(kv: Any) -> JobStatus | None:
    """What the listing makes of a job key without lease or outcome keys the general way."""
    key = kv.key.decode(errors="replace")
    try:
        job_id = KEYS.job_id(kv.key, "job")
    except CorruptRecord as exc:
        return corrupt_status(key, key, exc)
    try:
        rec = record(job_id, kv, None, None, NOW)
    except CorruptRecord as exc:
        return corrupt_status(job_id, exc.key, exc)
    return None if rec is None else transitions.status(rec, NOW)


def _variants() -> list[Any]:
    out = []
    for job_id, value in PENDING:
        data = job_value(job_id, value)
        out += [_kv(job_id, data), _kv("other", data), _kv(job_id, data[:-1]), _kv(job_id, b"\xff" + data),
                _kv(job_id, b"[]")]
        fields = json.loads(data)
        for field, changed in itertools.product(fields, VALUES):
            text = json.dumps(dict(fields, **{field: changed})).replace("1e400", "Infinity")
            out.append(_kv(job_id, text.encode()))
    return out


def test_listed_pending_is_the_general_way_or_leaves_it() -> None:
    section = len(KEYS.section("job"))
    variants = _variants()
    wrong = [kv for kv in variants
             if (fast := listed_pending(kv, kv.key[section:], NOW)) is not None and fast != _general(kv)]
    assert not wrong, wrong[:3]
    assert sum(listed_pending(kv, kv.key[section:], NOW) is not None for kv in variants) > len(PENDING)


def test_listed_pending_takes_what_tenure_writes() -> None:
    for job_id, value in PENDING:
        kv = _kv(job_id, job_value(job_id, value))
        fast = listed_pending(kv, kv.key[len(KEYS.section("job")):], NOW)
        assert fast is not None and fast == _general(kv), job_id
