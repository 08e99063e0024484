"""Bad input: a clear InvalidArgument, and nothing written."""

from __future__ import annotations

import dataclasses
import math

import pytest

import tenure
from tests.harness import Harness

# Format characters (zero-width space and joiner, bidi override, BOM) and line/paragraph separators
# make two ids look alike or reorder and break what an operator reads.
INVISIBLE = ["zero\u200bwidth", "join\u200d", "evil\u202egnp.exe", "\ufeffbom", "line\u2028sep", "para\u2029sep"]
BAD_JOB_IDS = ["", "x" * 257, "tab\there", "nul\x00", "line\nbreak", "\x7f", "\ud800", None, 42, b"bytes",
               *INVISIBLE]
BAD_OWNERS = ["", "o" * 129, "bell\x07", None, 3.5, *INVISIBLE]
BAD_TTLS = [0, -1, math.nan, math.inf, "10", None, True, 10 ** 9, 10 ** 5000, -(10 ** 5000)]


@pytest.mark.parametrize("job_id", BAD_JOB_IDS)
def test_bad_job_ids(store: tenure.Store, harness: Harness, job_id: object) -> None:
    for call in (lambda: store.submit(job_id),  # type: ignore[arg-type]
                 lambda: store.claim(job_id, owner="a", ttl=harness.ttl),  # type: ignore[arg-type]
                 lambda: store.get(job_id)):  # type: ignore[arg-type]
        with pytest.raises(tenure.InvalidArgument, match="job id"):
            call()
    assert list(store.jobs()) == []


@pytest.mark.parametrize("owner", BAD_OWNERS)
def test_bad_owners(store: tenure.Store, harness: Harness, owner: object) -> None:
    with pytest.raises(tenure.InvalidArgument, match="owner"):
        store.claim("j", owner=owner, ttl=harness.ttl)  # type: ignore[arg-type]
    with pytest.raises(tenure.InvalidArgument, match="owner"):
        store.claim_next(owner=owner, ttl=harness.ttl)  # type: ignore[arg-type]
    assert list(store.jobs()) == []


@pytest.mark.parametrize("ttl", BAD_TTLS, ids=lambda v: f"int-of-{v.bit_length()}-bits" if isinstance(v, int)
                         and v.bit_length() > 64 else None)
def test_bad_ttls(store: tenure.Store, ttl: object) -> None:
    with pytest.raises(tenure.InvalidArgument, match="ttl"):
        store.claim("j", owner="a", ttl=ttl)  # type: ignore[arg-type]
    assert list(store.jobs()) == []


def test_ttl_below_the_backend_minimum_names_it(store: tenure.Store) -> None:
    minimum = store.characteristics.min_ttl
    if minimum <= 0:
        pytest.skip(f"{store.characteristics.name} has no minimum TTL")
    with pytest.raises(tenure.InvalidArgument, match="minimum"):
        store.claim("j", owner="a", ttl=minimum / 2)
    assert list(store.jobs()) == []


def test_an_error_quotes_at_most_a_short_prefix_of_the_input(store: tenure.Store, harness: Harness) -> None:
    long_id = "a" * 200 + "\u202e" + "b" * 50
    with pytest.raises(tenure.InvalidArgument) as info:
        store.claim(long_id, owner="w", ttl=harness.ttl)
    message = str(info.value)
    assert "format character U+202E" in message and "(251 characters)" in message
    assert "a" * 41 not in message and len(message) < 160


def test_errors_about_long_ids_quote_only_their_start(store: tenure.Store, harness: Harness) -> None:
    job, owner = "j" * 256, "o" * 128
    lease = store.claim(job, owner=owner, ttl=harness.short_ttl)
    with pytest.raises(tenure.AlreadyClaimed) as claimed:
        store.claim(job, owner="other", ttl=harness.ttl)
    harness.expire(store, lease)
    store.claim(job, owner="p" * 128, ttl=harness.ttl)
    with pytest.raises(tenure.StaleLease) as stale:
        store.complete(lease)
    for error in (claimed.value, stale.value):
        message = str(error)
        assert "(256 characters)" in message and "j" * 41 not in message and "o" * 41 not in message
        assert len(message) < 300
    assert stale.value.rejection.job_id == job  # the record keeps the whole id


def test_huge_ints_are_refused_with_a_short_message(store: tenure.Store, harness: Harness) -> None:
    lease = store.claim("j", owner="w", ttl=harness.ttl)
    for call in (lambda: store.force_expire("j", token=10 ** 5000), lambda: store.rejections(limit=-(10 ** 5000)),
                 lambda: store.renew(dataclasses.replace(lease, token=10 ** 5000))):
        with pytest.raises(tenure.InvalidArgument) as info:
            call()
        assert len(str(info.value)) < 200
    assert store.get("j").token == lease.token  # type: ignore[union-attr]


def test_invalid_argument_is_a_value_error_and_a_lease_error() -> None:
    assert issubclass(tenure.InvalidArgument, ValueError)
    assert issubclass(tenure.InvalidArgument, tenure.LeaseError)


def test_bad_lease_and_result_arguments(store: tenure.Store, harness: Harness) -> None:
    lease = store.claim("j", owner="a", ttl=harness.ttl)
    with pytest.raises(tenure.InvalidArgument):
        store.renew("not a lease")  # type: ignore[arg-type]
    with pytest.raises(tenure.InvalidArgument):
        store.complete(lease, result=12)  # type: ignore[arg-type]
    assert store.get("j").state is tenure.JobState.LEASED  # type: ignore[union-attr]
    assert store.rejections() == []


def test_corrupt_record_is_listed_and_never_overwritten(harness: Harness, store: tenure.Store) -> None:
    store.submit("good")
    lease = store.claim("bad", owner="a", ttl=harness.ttl)
    harness.corrupt(store, "bad")
    listing = {j.job_id: j for j in store.jobs()}
    assert listing["good"].state is tenure.JobState.PENDING
    assert listing["bad"].state is tenure.JobState.CORRUPT and listing["bad"].problem
    for call in (lambda: store.claim("bad", owner="b", ttl=harness.ttl), lambda: store.submit("bad"),
                 lambda: store.complete(lease)):
        with pytest.raises(tenure.CorruptRecord):
            call()
    assert store.get("bad").state is tenure.JobState.CORRUPT  # type: ignore[union-attr]


@pytest.mark.parametrize("job_ids", ["abc", b"abc", bytearray(b"ab"), 42, None])
def test_submit_many_refuses_a_str_or_bytes_and_writes_nothing(store: tenure.Store, job_ids: object) -> None:
    # A str is an iterable of one-character job ids: "abc" would submit "a", "b" and "c".
    with pytest.raises(tenure.InvalidArgument, match="submit_many takes an iterable of job ids"):
        store.submit_many(job_ids)  # type: ignore[arg-type]
    assert list(store.jobs()) == [] and store.history() == []
