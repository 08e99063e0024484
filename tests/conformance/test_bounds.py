"""Leases handed back, destination reports and results are checked and bounded before any write.

A ``Lease`` is a plain dataclass anyone can build; its fields reach the backend and the audit.
Every audited field is bounded so that every rejection fits every backend's largest write
(etcd's request limit, ZooKeeper's znode limit): a stale operation is never left unaudited
because its record was too large.
"""

from __future__ import annotations

import dataclasses

import pytest

import tenure
from tenure.core import validation
from tests.harness import Harness

WIDE = "\U0001d11e"  # four bytes in UTF-8: the widest text a field can hold

BAD_LEASE_FIELDS = [
    ("job_id", "j" * 100_000, "job id must be 1 to 256"),
    ("job_id", "zero\u200bwidth", "format character"),
    ("owner", "nul\x00bel\x07", "control character"),
    ("owner", "o" * 129, "owner must be 1 to 128"),
    ("token", "abc", "token must be an int"),
    ("token", 1.0, "token must be an int"),
    ("token", True, "token must be an int"),
    ("token", 2**63, "token must be at most"),
    ("ttl", "10", "ttl must be a number"),
    ("ttl", float("nan"), "ttl must be a finite number"),
    ("expires_at", "soon", "expires_at must be a number"),
    ("expires_at", float("inf"), "expires_at must be a finite number"),
    ("deadline", float("nan"), "deadline must be a finite number"),
]


@pytest.mark.parametrize(("field", "value", "message"), BAD_LEASE_FIELDS,
                         ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(BAD_LEASE_FIELDS)])
def test_every_field_of_a_lease_passed_in_is_checked(store: tenure.Store, harness: Harness, field: str,
                                                    value: object, message: str) -> None:
    lease = store.claim("j", owner="a", ttl=harness.ttl)
    bad = dataclasses.replace(lease, **{field: value})
    for call in (store.renew, store.complete, store.release, store.hold_lease):
        with pytest.raises(tenure.InvalidArgument, match=message):
            call(bad)
    status = store.get("j")
    assert status is not None and (status.state, status.owner, status.token) == (
        tenure.JobState.LEASED, "a", lease.token)
    assert store.rejections() == [] and [e.op for e in store.history("j")] == [tenure.Op.CLAIM]


def test_a_result_too_large_for_the_backend_is_refused_before_anything_is_written(
        store: tenure.Store, harness: Harness) -> None:
    limit = store.characteristics.max_result_bytes
    lease = store.claim("big", owner="a", ttl=harness.ttl)
    with pytest.raises(tenure.InvalidArgument, match=f"above the {limit} bytes"):
        store.complete(lease, result=b"x" * (limit + 1))
    assert store.get("big").state is tenure.JobState.LEASED  # type: ignore[union-attr]
    store.complete(lease, result=b"y" * limit)  # the declared limit itself is stored
    status = store.get("big")
    assert status is not None and status.state is tenure.JobState.COMPLETED and status.result == b"y" * limit


BAD_REPORTS = [
    ({"resource": "r" * 257}, "resource must be 1 to 256"),
    ({"resource": 42}, "resource must be a str"),
    ({"resource": "a\u202eb"}, "format character"),
    ({"highest": "9"}, "highest must be an int"),
    ({"highest": True}, "highest must be an int"),
    ({"highest": -1}, "token must be a positive"),
    ({"reason": "x" * 100_000}, "reason must be 1 to 512"),
    ({"reason": b"bytes"}, "reason must be a str"),
    ({"reason": "line\u2028break"}, "line separator"),
]


@pytest.mark.parametrize(("bad", "message"), BAD_REPORTS, ids=[str(i) for i in range(len(BAD_REPORTS))])
def test_report_rejection_checks_resource_highest_and_reason(store: tenure.Store, bad: dict[str, object],
                                                              message: str) -> None:
    args: dict[str, object] = {"resource": "ledger", "highest": 5, "reason": "", **bad}
    with pytest.raises(tenure.InvalidArgument, match=message):
        store.report_rejection("j", "w", 3, **args)  # type: ignore[arg-type]
    assert store.rejections() == []


def test_the_largest_rejections_every_field_allows_are_stored(store: tenure.Store, harness: Harness) -> None:
    job, owner = WIDE * validation.MAX_JOB_ID, WIDE * validation.MAX_OWNER
    reported = store.report_rejection(job, owner, validation.MAX_TOKEN, resource=WIDE * validation.MAX_RESOURCE,
                                      highest=validation.MAX_TOKEN, reason=WIDE * validation.MAX_REASON)
    a = store.claim(job, owner=owner, ttl=harness.short_ttl)
    harness.expire(store, a)
    store.claim(job, owner=WIDE * (validation.MAX_OWNER - 1) + "b", ttl=harness.ttl)
    with pytest.raises(tenure.StaleLease):
        store.complete(a)
    kept = store.rejections()
    assert reported in kept and [r.op for r in kept] == [tenure.Op.EFFECT, tenure.Op.COMPLETE]
    assert kept[1].job_id == job and kept[1].owner == owner
