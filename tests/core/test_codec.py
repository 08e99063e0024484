"""The one record codec (tenure.core.codec): the checks every store's records pass, and the
audit records' JSON, read in today's shape and in the shape etcd wrote before."""

from __future__ import annotations

import dataclasses
import inspect
import math
import sys
import unicodedata

import pytest

from tenure.core import codec, transitions, validation
from tenure.core.errors import CorruptRecord, InvalidArgument, TokensExhausted
from tenure.core.records import HistoryEvent, JobRecord, JobState, JobStatus, Op, Rejection, RejectionKind


@pytest.mark.parametrize("job_id", ["a", "ünï/cödé", "../..", " ", "x" * 300])
def test_job_ids_round_trip(job_id: str) -> None:
    encoded = codec.encode_job_id(job_id)
    assert "/" not in encoded and "=" not in encoded
    assert codec.decode_job_id(encoded) == job_id


@pytest.mark.parametrize("text", ["", "YQ=", "a+b", "YR", "_w"])  # padded, other alphabet, not canonical
def test_other_names_are_no_job_ids(text: str) -> None:
    with pytest.raises(ValueError):
        codec.decode_job_id(text)


GOOD = ("k", "j", "leased", "w", 3, 10.0, 5.0, 1.0, 2.0, None, None, 1, None)


def test_a_good_record_reads() -> None:
    rec = codec.job_record(*GOOD)
    assert rec.state is JobState.LEASED and rec.token == 3 and rec.lease_until == 10.0


@pytest.mark.parametrize(("index", "value", "problem"), [
    (2, "expired", "state 'expired' is never stored"),
    (2, "gone", "unknown state 'gone'"),
    (4, -1, "field 'token' is -1"),
    (4, True, "field 'token' is True"),
    (4, 2**63 - 1, "token 9223372036854775807 is above the highest a claim issues (9223372036854775806)"),
    (4, 10**400, "token an int of 1329 bits is above the highest a claim issues (9223372036854775806)"),
    (11, -1, "field 'runs' is -1"),
    (1, b"job-x", "the job id is 5 bytes of binary, not text"),
    (1, "job\nx", "the job id contains the control character U+000A ('\\n')"),
    (1, "job\u202ex", "the job id contains the format character U+202E ('\\u202e')"),
    (1, "", "the job id has 0 characters, not 1 to 256"),
    (1, "x" * 100_000, "the job id has 100000 characters, not 1 to 256"),
    (3, None, "leased without owner or expiry"),
    (5, float("nan"), "field 'lease_until' is nan"),
    (7, "soon", "field 'submitted_at' is 'soon'"),
    (12, "text", "result is not bytes"),
])
def test_broken_records_are_corrupt_with_one_message(index: int, value: object, problem: str) -> None:
    fields = list(GOOD)
    fields[index] = value
    with pytest.raises(CorruptRecord) as caught:
        codec.job_record(*fields)  # type: ignore[arg-type]
    assert caught.value.key == "k" and caught.value.problem == problem


def test_a_stored_value_reads_as_a_json_object() -> None:
    assert codec.json_object("k", '{"a": [1, "ü"]}'.encode()) == {"a": [1, "ü"]}


def test_stored_numbers_are_read_as_stored_and_a_bad_one_is_corrupt() -> None:
    stored = {"a": 1, "b": 2.5, "c": None}
    assert codec.stored_numbers("k", stored, ("a", "b", "c", "absent")) == [1, 2.5, None, None]
    assert type(codec.stored_numbers("k", stored, ("a",))[0]) is int  # as stored, not made a float
    for bad in (True, "1", math.nan, math.inf, -math.inf, [1], 10**400):
        with pytest.raises(CorruptRecord) as caught:
            codec.stored_numbers("k", {"a": 1, "b": bad}, ("a", "b"))
        assert caught.value.problem == f"field 'b' is {bad!r}"  # as ``number`` says it
        with pytest.raises(CorruptRecord):
            codec.number("k", "b", bad)


def test_a_whole_number_too_large_for_a_float_is_corrupt_not_an_overflow() -> None:
    # JSON reads 1e400 as inf but 10**400 written out as an int: float() of it overflows.
    value = codec.json_object("k", b'{"ttl": 1' + b"0" * 400 + b"}")
    with pytest.raises(CorruptRecord):
        codec.stored_numbers("k", value, ("ttl",))
    with pytest.raises(CorruptRecord):
        codec.number("k", "ttl", value["ttl"])
    assert codec.number("k", "ttl", 2**60) == float(2**60)  # large but a float: as before


SECRET = "hunter2-hunter2-hunter2"


@pytest.mark.parametrize(("data", "problem"), [
    (b"\xff\xfe" + SECRET.encode(), "the value is not JSON"),  # not UTF-8
    (f'{{"password": "{SECRET}"'.encode(), "the value is not JSON"),  # cut short
    (b"", "the value is not JSON"),
    (f'["{SECRET}"]'.encode(), "the value is not a JSON object"),
    (b"null", "the value is not a JSON object"),
    (b"[" * 100_000, "the value is not JSON"),  # deeper than Python recurses: not a crash
])
def test_a_value_not_a_json_object_is_corrupt_and_named_by_its_key_alone(data: bytes, problem: str) -> None:
    with pytest.raises(CorruptRecord) as caught:
        codec.json_object("jobs/k\x00", data)
    assert caught.value.problem == problem
    assert str(caught.value) == f"corrupt record 'jobs/k\\x00': {problem}"  # the key escaped, no value


REJECTION = Rejection("j", Op.RENEW, "w", 2, "v", 3, 12.5, "token superseded by a newer claim",
                      RejectionKind.STORE, None)


def test_rejections_round_trip_with_one_set_of_field_names() -> None:
    fields = codec.rejection_fields(REJECTION)
    assert set(fields) == {"job_id", "op", "owner", "token", "current_owner", "current_token", "at",
                           "reason", "kind", "resource"}
    assert codec.rejection("k", fields) == REJECTION


def test_etcds_earlier_rejection_shape_still_reads() -> None:
    old = {"job": "j", "op": "renew", "owner": "w", "token": 2, "current_owner": "v", "current_token": 3,
           "at": 12.5, "reason": None, "kind": "store", "resource": None}  # a stub, as etcd wrote it
    rejection = codec.rejection("k", old)
    assert rejection.job_id == "j" and rejection.reason == codec.UNKNOWN_REASON


EVENT = HistoryEvent("j", Op.CLAIM, "w", 7, 1.0, 31.0)


def test_events_round_trip_with_one_set_of_field_names() -> None:
    fields = codec.event_fields(EVENT)
    assert set(fields) == {"job_id", "op", "owner", "token", "at", "expires_at"}
    assert codec.event("k", fields) == EVENT


@pytest.mark.parametrize(("name", "value"), [("op", "dance"), ("token", None), ("token", "7"), ("job_id", None),
                                             ("at", None)])
def test_an_event_missing_or_with_a_bad_field_is_corrupt(name: str, value: object) -> None:
    with pytest.raises(CorruptRecord) as caught:
        codec.event("k", {**codec.event_fields(EVENT), name: value})
    assert caught.value.key == "k"


def test_the_audit_pairs_have_one_shape() -> None:
    # x_fields(value) -> the JSON object; x(key, fields) -> the value: the same parameters for both pairs.
    for read, write in ((codec.rejection, codec.rejection_fields), (codec.event, codec.event_fields)):
        assert list(inspect.signature(read).parameters) == ["key", "d"]
        assert len(inspect.signature(write).parameters) == 1


def test_a_listed_status_is_the_status_the_general_way_builds() -> None:
    # Listings build JobStatus without its __init__ (records.fast_status): every field, the
    # same equality, hash and immutability.
    now = 1000.0
    live = codec.listed_status("j", "leased", "w", 3, 2, 1010.0, 30.0, 900.0, 980.0, 995.0, None, now)
    over = codec.listed_status("j", "leased", "w", 3, 2, 990.0, 30.0, 900.0, 960.0, None, None, now)
    pending = codec.listed_status("p", "pending", None, 0, 1, None, None, 900.0, None, None, None, now)
    assert live == JobStatus("j", JobState.LEASED, "w", 3, 1010.0, 900.0, 980.0, 995.0, None, 2)
    assert over == JobStatus("j", JobState.EXPIRED, "w", 3, 990.0, 900.0, 960.0, None, None, 2)
    assert pending == JobStatus("p", JobState.PENDING, None, 0, None, 900.0, None, None, None, 1)
    assert pending is not None and vars(pending) == vars(JobStatus("p", JobState.PENDING, submitted_at=900.0, runs=1))
    assert hash(pending) == hash(JobStatus("p", JobState.PENDING, submitted_at=900.0, runs=1))
    with pytest.raises(dataclasses.FrozenInstanceError):
        pending.owner = "x"  # type: ignore[misc]
    for bad in (math.inf, math.nan, 5, "5"):  # a time that is not a finite float: the general way
        assert codec.listed_status("p", "pending", None, 0, 1, None, None, bad, None, None, None, now) is None


@pytest.mark.skipif(unicodedata.unidata_version != "14.0.0", reason="the ranges are Unicode 14.0's (Python 3.11)")
def test_the_refused_ranges_are_unicode_14s_refused_categories() -> None:
    # Job ids are checked by these ranges in Python and in SQL alike.
    words = {"Cc": "control", "Cs": "surrogate", "Cf": "format", "Zl": "line separator", "Zp": "paragraph separator"}
    listed = {code: what for low, high, what in validation.REFUSED_RANGES for code in range(low, high + 1)}
    assert listed == {code: words[kind] for code in range(sys.maxunicode + 1)
                      if (kind := unicodedata.category(chr(code))) in words}


def test_an_ascii_id_is_refused_by_its_quick_check_exactly_as_by_the_ranges() -> None:
    # validation and the codec pass ASCII text that isprintable() without the ranges' scan.
    for code in range(128):
        text = f"a{chr(code)}b"
        refused = any(low <= code <= high for low, high, _ in validation.REFUSED_RANGES)
        assert (text.isascii() and text.isprintable()) is not refused
        assert (codec.job_id_problem(text) is None) is not refused
        if refused:
            with pytest.raises(InvalidArgument):
                validation.job_id(text)
        else:
            assert validation.job_id(text) == text


@pytest.mark.parametrize(("job_id", "token", "runs"), [
    ("a\nb", 1, 1), ("a\u2028b", 1, 1), ("", 1, 1), ("x" * 257, 1, 1), (b"j", 1, 1),
    ("j", validation.LAST_TOKEN + 1, 1), ("j", 1, -1),
])
def test_a_listing_leaves_a_record_the_codec_refuses_to_the_general_way(job_id: object, token: int, runs: int) -> None:
    assert codec.listed_status(job_id, "pending", None, token, runs, None, None, 1.0, None, None, None, 2.0) is None
    with pytest.raises(CorruptRecord):
        codec.job_record("k", job_id, "pending", None, token, None, None, 1.0, None, None, None, runs, None)


@pytest.mark.parametrize(("stored", "shown"), [
    ("ünï/cödé", "ünï/cödé"),
    ("a\nb", "'a\\nb'"),
    (b"job-x", "x'6a6f622d78'"),
    (b"\x00" * 100, "x'" + "00" * 32 + "'... (100 bytes)"),
    ("x" * 1000, "'" + "x" * 40 + "'... (1000 characters)"),
])
def test_a_listing_shows_a_job_id_no_caller_could_give_escaped_and_cut(stored: object, shown: str) -> None:
    status = codec.corrupt_status(stored, "k", CorruptRecord("k", "bad"))
    assert status.job_id == shown and status.state is JobState.CORRUPT


def test_a_claim_of_a_job_at_the_last_token_is_refused_and_claim_next_passes_it_over() -> None:
    last = JobRecord("j", JobState.PENDING, token=validation.LAST_TOKEN)
    with pytest.raises(TokensExhausted, match="its token 9223372036854775806 is the highest a claim issues"):
        transitions.claim(last, "j", "w", 5.0, 1.0)
    assert not transitions.is_next(last, 1.0) and transitions.is_claimable(last, 1.0)
    below = transitions.claim(JobRecord("j", JobState.PENDING, token=validation.LAST_TOKEN - 1), "j", "w", 5.0, 1.0)
    assert below.token == validation.LAST_TOKEN and codec.stored_token("k", below.token) == validation.LAST_TOKEN


def test_a_str_subclass_cannot_talk_the_quick_check_into_passing_a_refused_id() -> None:
    # The ASCII check asks str's own methods: an override saying "printable" changes nothing.
    class Printable(str):
        def isascii(self) -> bool:
            return True

        def isprintable(self) -> bool:
            return True

    for text in ("a\nb", "a\x7fb", "a\u200bb"):
        with pytest.raises(InvalidArgument):
            validation.job_id(Printable(text))
        with pytest.raises(InvalidArgument):
            validation.owner(Printable(text))


def test_job_record_takes_the_life_cycles_fields_last_in_their_order() -> None:
    # SQLite and PostgreSQL hand a row's values to job_record in LIFE_FIELDS' order, by position.
    assert tuple(inspect.signature(codec.job_record).parameters)[-len(codec.LIFE_FIELDS):] == codec.LIFE_FIELDS
