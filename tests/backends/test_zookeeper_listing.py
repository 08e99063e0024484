"""The ZooKeeper listing's fast way (``query.listed``) gives exactly what the general way gives,
or leaves the record to it: checked over records with every field damaged in turn."""

from __future__ import annotations

import itertools
import json
from typing import Any

from tenure.backends.zookeeper import layout as zl
from tenure.backends.zookeeper.query import listed
from tenure.core import transitions
from tenure.core.records import JobRecord, JobState, JobStatus

NOW = 1_800_000_000.0
RECORDS = [
    JobRecord("p", JobState.PENDING, submitted_at=NOW - 5),
    JobRecord("l", JobState.LEASED, "w", 3, NOW + 9, 10.0, NOW - 5, NOW - 1, NOW - 0.5, runs=2),
    JobRecord("e", JobState.LEASED, "w", 3, NOW - 1, 10.0, NOW - 5, NOW - 11),  # expired
    JobRecord("edge", JobState.LEASED, "w", 1, NOW, 10.0, NOW - 5, NOW - 10),  # ends at now: expired
    JobRecord("c", JobState.COMPLETED, "w", 4, None, None, NOW - 5, NOW - 3, None, NOW - 2),
    JobRecord("r", JobState.COMPLETED, "w", 4, None, None, NOW - 5, NOW - 3, None, NOW - 2, result=b"ok"),
    JobRecord("日本 /x", JobState.PENDING, token=7, submitted_at=NOW - 5, runs=3),
    # The life cycle's (issue 28): scheduled, due, parked by fail, parked by its last lease's end.
    JobRecord("s", JobState.PENDING, token=2, submitted_at=NOW - 5, attempts=2, max_attempts=5,
              last_error="boom", claimable_at=NOW + 3, failed_at=NOW - 1),
    JobRecord("d", JobState.PENDING, token=2, submitted_at=NOW - 5, attempts=1, claimable_at=NOW - 3),
    JobRecord("k", JobState.PARKED, token=3, submitted_at=NOW - 5, attempts=3, max_attempts=3,
              last_error="boom", failed_at=NOW - 1),
    JobRecord("x", JobState.LEASED, "w", 1, NOW - 1, 10.0, NOW - 5, NOW - 11, attempts=1, max_attempts=1),
]
VALUES: list[Any] = [None, 0, 1, -1, 2.5, -0.0, True, "x", "pending", "leased", "completed", "expired", [],
                     {}, 1e400, "NaN", 10**20]


def _general(name: str, data: bytes) -> JobStatus:
    item = zl.decoded("/r/jobs", name, data)
    return transitions.status(item, NOW) if isinstance(item, JobRecord) else item


def _variants() -> list[tuple[str, bytes]]:
    out = []
    for rec in RECORDS:
        name = zl.encode(rec.job_id)
        data = zl.dump_record(rec, 1, "pending/x" if rec.state is JobState.PENDING else None)
        out += [(name, data), (zl.encode("other"), data), (name, data[:-1]), (name, b"\xff" + data), (name, b"[]")]
        fields = json.loads(data)
        for field, value in itertools.product([*fields, "job_id"], VALUES):
            changed = dict(fields, **{field: value})
            out.append((name, json.dumps(changed).replace("1e400", "Infinity").encode()))
        out.append((name, json.dumps({k: v for k, v in fields.items() if k != "owner"}).encode()))
    return out


def test_listed_is_the_general_way_or_leaves_it() -> None:
    variants = _variants()
    wrong = [(name, data) for name, data in variants
             if (fast := listed(name, data, NOW)) is not None and fast != _general(name, data)]
    assert not wrong, wrong[:3]
    assert sum(listed(name, data, NOW) is not None for name, data in variants) > len(RECORDS)


def test_listed_takes_the_common_records() -> None:
    for rec in RECORDS:
        if rec.result is None:
            data = zl.dump_record(rec, 1)
            assert listed(zl.encode(rec.job_id), data, NOW) == transitions.status(rec, NOW)


def test_znode_text_is_jsons_own() -> None:
    """``layout.compact`` writes each record and event as json.dumps with compact separators
    did: the same bytes for every kind of value, also once its floats' texts are kept."""
    reference = json.JSONEncoder(separators=(",", ":"))

    class Text(str):
        pass

    values: list[Any] = [None, True, False, 0, -1, 2**70, 0.0, -0.0, 1.5, -2.5, 1e300, 1e-300, float("nan"),
                         float("inf"), float("-inf"), "a", "é\u2028\"\\\n", "", Text("sub"), [1, "x", None],
                         {"a": {"b": 1.0}}, 1796406159.574766, 3.0000000000000004]
    for n, chosen in enumerate(itertools.combinations(values, 3)):
        d = {f"k{n % 5}é": chosen[0], "tenure": chosen[1], "\"x": chosen[2]}
        for _ in range(2):  # the floats' texts made, then kept
            assert zl.compact(d) == reference.encode(d).encode(), d
