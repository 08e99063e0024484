"""JobRecord's written-out ``__init__`` (core/records.py) against its dataclass fields."""

from __future__ import annotations

import dataclasses
import inspect

from tenure.core.records import JobRecord


def test_init_takes_the_fields_in_order_with_their_defaults() -> None:
    params = list(inspect.signature(JobRecord.__init__).parameters.values())[1:]
    fields = dataclasses.fields(JobRecord)
    assert [(p.name, p.default) for p in params] == [
        (f.name, inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default) for f in fields]


def test_init_sets_every_field_and_the_record_stays_frozen() -> None:
    values = {f.name: f"v-{f.name}" for f in dataclasses.fields(JobRecord)}
    rec = JobRecord(**values)  # type: ignore[arg-type]  # distinct values show a field set under another's name
    assert {f.name: getattr(rec, f.name) for f in dataclasses.fields(JobRecord)} == values
    assert dataclasses.replace(rec, token=7) == JobRecord(**{**values, "token": 7})  # type: ignore[arg-type]
    try:
        rec.__setattr__("token", 1)
    except dataclasses.FrozenInstanceError:
        pass
    else:
        raise AssertionError("a JobRecord took a new value")

