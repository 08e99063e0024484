"""The record copy the transitions make (``transitions._replaced``) against the dataclass."""

from __future__ import annotations

import dataclasses

from tenure.core import transitions
from tenure.core.records import JobRecord, JobState


def test_the_changes_a_transition_may_make_are_the_records_fields_with_their_types() -> None:
    fields = {f.name: str(f.type) for f in dataclasses.fields(JobRecord)}
    keywords = {name: getattr(hint, "__forward_arg__", str(hint))  # TypedDict keeps them as ForwardRefs
                for name, hint in transitions.RecordChanges.__annotations__.items()}
    assert keywords == fields  # both as written: a field added to one only fails


def test_a_replaced_record_equals_dataclasses_replace_and_leaves_the_original_alone() -> None:
    rec = JobRecord(job_id="j", state=JobState.LEASED, owner="a", token=3, lease_until=10.0, ttl=5.0,
                    attempts=2, max_attempts=4)
    changed = transitions.renew(rec, 7.0, 8.0)
    assert changed == dataclasses.replace(rec, lease_until=15.0, ttl=7.0, renewed_at=8.0)
    assert rec.lease_until == 10.0 and rec.renewed_at is None
    assert hash(changed) == hash(dataclasses.replace(rec, lease_until=15.0, ttl=7.0, renewed_at=8.0))
    claimed = transitions.claim(None, "n", "b", 5.0, 100.0, max_attempts=3)
    assert claimed == dataclasses.replace(JobRecord(job_id="n", state=JobState.PENDING, submitted_at=100.0,
                                                    max_attempts=3),
                                          state=JobState.LEASED, owner="b", token=1, lease_until=105.0, ttl=5.0,
                                          claimed_at=100.0, attempts=1)
