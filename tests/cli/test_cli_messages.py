"""What ``tenure``'s messages say (issue 26): refusals, store times, waits, Python-free wording."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import tenure
from tests.cli import run


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'cli.db'}"


def test_a_token_the_store_never_issued_is_not_called_superseded(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "--url", url, "claim", "job-3", "--owner", "me", "--ttl", "30")[0] == 0
    for words in (["complete", "job-3"], ["renew", "job-3", "--ttl", "30"], ["release", "job-3"]):
        code, _, err = run(capsys, "--url", url, *words, "--owner", "me", "--token", "7")
        assert code == 65 and "token never issued" in err and "superseded" not in err


def test_a_holder_is_told_which_operator_ended_its_lease(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "--url", url, "claim", "job-3", "--owner", "me", "--ttl", "30")[0] == 0
    assert run(capsys, "--url", url, "expire", "job-3", "--token", "1", "--actor", "alice")[0] == 0
    code, _, err = run(capsys, "--url", url, "renew", "job-3", "--owner", "me", "--token", "1", "--ttl", "30")
    assert code == 65 and "an operator ('alice') ended the lease at " in err
    assert "expired by store time" not in err


def test_store_times_in_errors_read_as_in_tables(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "--url", url, "claim", "job-3", "--owner", "me", "--ttl", "30")[0] == 0
    code, _, err = run(capsys, "--url", url, "claim", "job-3", "--owner", "you", "--ttl", "30")
    assert code == 65
    assert re.search(r"held by 'me' \(token 1\) until \d\d:\d\d:\d\d\.\d \(in (29|30)\.\ds\)$", err.strip()), err


def test_a_claim_says_it_waits_only_when_it_does(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--url", url, "claim", "free", "--owner", "me", "--ttl", "30", "--wait", "10")
    assert (code, out) == (0, "1\n") and "waiting" not in err
    code, _, err = run(capsys, "--url", url, "run", "idle", "--owner", "me", "--ttl", "30", "--wait", "10",
                       "--", "true")
    assert code == 0 and "waiting" not in err
    # Held by another: the wait is real, and said (0.3 s of it, then AlreadyClaimed).
    code, _, err = run(capsys, "--url", url, "claim", "free", "--owner", "you", "--ttl", "30", "--wait", "0.3")
    assert code == 65 and err.startswith("tenure: waiting up to 0.3 s for 'free'\n")


@pytest.mark.parametrize("words, message", [
    (["ls", "--limit", "0"], "limit must be from 1 to 1000, got 0"),
    (["ls", "--limit", "-3"], "limit must be from 1 to 1000, got -3"),
    (["ls", "--limit", "x"], "not a whole number: 'x'"),
    (["ls", "--offset", "-1"], "offset must be 0 or more, got -1"),
    (["rejections", "--limit", "-3"], "limit must be 0 or more, got -3"),
    (["history", "--limit", "2.5"], "not a whole number: '2.5'"),
    (["watch", "--count", "0"], "count must be 1 or more, got 0"),
    (["complete", "j", "--owner", "o", "--token", "x"], "not a whole number: 'x'"),
])
def test_numbers_are_refused_in_words_not_python(url: str, capsys: pytest.CaptureFixture[str], words: list[str],
                                                 message: str) -> None:
    code, _, err = run(capsys, "--url", url, *words)
    assert code == 64 and message in err
    assert not re.search(r"\bNone\b|\bint\b|\bfloat\b|invalid \w+ value", err), err


def test_existing_refuses_a_job_the_store_does_not_have(url: str, capsys: pytest.CaptureFixture[str],
                                                        tmp_path: Path) -> None:
    assert run(capsys, "--url", url, "submit", "nightly")[0] == 0
    code, _, err = run(capsys, "--url", url, "claim", "nightyl", "--owner", "me", "--ttl", "30", "--existing")
    assert code == 66 and "job 'nightyl' does not exist" in err
    ran = tmp_path / "ran"
    code, _, err = run(capsys, "--url", url, "run", "nightyl", "--owner", "me", "--ttl", "30", "--existing",
                       "--", "touch", str(ran))
    assert code == 66 and "job 'nightyl' does not exist" in err and not ran.exists()
    code, out, _ = run(capsys, "--url", url, "--json", "ls")
    assert [j["job_id"] for j in json.loads(out)] == ["nightly"]  # nothing created
    assert run(capsys, "--url", url, "claim", "nightly", "--owner", "me", "--ttl", "30", "--existing")[0] == 0
    # Without --existing a new job is made, as --help says.
    assert run(capsys, "--url", url, "claim", "typo", "--owner", "me", "--ttl", "30")[0] == 0
    code, out, _ = run(capsys, "claim", "--help")
    assert code == 0 and "is created (--existing refuses it)" in " ".join(out.split())


@pytest.mark.parametrize("words", [["claim", "nightly", "--existing"], ["run", "nightly", "--existing", "--", "true"]],
                         ids=["claim", "run"])
def test_existing_on_a_missing_store_creates_no_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     words: list[str]) -> None:
    db = tmp_path / "typo.db"
    code, _, err = run(capsys, "--url", f"sqlite:///{db}", *words[:2], "--owner", "me", "--ttl", "30", *words[2:])
    assert code == 66 and "nothing was created" in err
    assert not db.exists()  # README: with --existing they "exit 66 and create nothing"


def test_a_ttl_below_the_stores_minimum_is_refused_before_anything_is_written(
        url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--url", url, "claim", "j", "--owner", "me", "--ttl", "0.01")
    assert code == 64 and "ttl 0.01s is below the minimum of 0.05s on sqlite" in err
    assert run(capsys, "--url", url, "get", "j")[0] == 66  # no job written


def test_expire_says_nothing_changed_for_a_job_that_holds_no_lease(url: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    for job in ("done", "given-back", "held"):
        assert run(capsys, "--url", url, "claim", job, "--owner", "me", "--ttl", "300")[0] == 0
    assert run(capsys, "--url", url, "complete", "done", "--owner", "me", "--token", "1")[0] == 0
    assert run(capsys, "--url", url, "release", "given-back", "--owner", "me", "--token", "1")[0] == 0
    for job, state in (("done", "completed"), ("given-back", "pending")):
        code, out, err = run(capsys, "--url", url, "expire", job, "--token", "1")
        assert (code, out) == (66, "")
        assert f"'{job}' has no live lease (state {state}): nothing to end" in err
        code, out, _ = run(capsys, "--url", url, "-o", "json", "history", job)
        assert "expire" not in [e["op"] for e in json.loads(out)]
    code, out, _ = run(capsys, "--url", url, "expire", "held", "--token", "1")
    assert (code, out) == (0, "the lease on 'held' (token 1) has ended; the job can be claimed\n")


def test_get_shows_a_result_as_text_not_python_bytes(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "--url", url, "claim", "j", "--owner", "me", "--ttl", "30")[0] == 0
    assert run(capsys, "--url", url, "complete", "j", "--owner", "me", "--token", "1", "--result", "done")[0] == 0
    code, out, _ = run(capsys, "--url", url, "get", "j")
    assert code == 0 and "       result: done\n" in out and "b'" not in out
    with tenure.connect(url) as store:
        store.submit("j")
        store.complete(store.claim("j", "me", 30), b"\xff\x00")
    out = run(capsys, "--url", url, "get", "j")[1]
    assert "       result: base64:/wA= (not UTF-8 text)\n" in out


def test_far_store_times_read_in_minutes_hours_and_days_with_their_date(
        url: str, capsys: pytest.CaptureFixture[str]) -> None:
    for job, ttl in (("minutes", 600), ("hours", 2 * 3600), ("days", 3 * 86400)):
        assert run(capsys, "--url", url, "claim", job, "--owner", "me", "--ttl", str(ttl))[0] == 0
    code, out, _ = run(capsys, "--url", url, "ls", "--order", "expiry")
    assert code == 0
    rows = (re.fullmatch(r"(\S+)\s+leased\s+me\s+1\s+(.+?\))\s+1\s.*", line) for line in out.splitlines()[2:])
    expires = {row[1]: row[2] for row in rows if row}
    assert re.fullmatch(r"\d\d:\d\d:\d\d\.\d \(in 10 min\)", expires["minutes"]), expires
    assert re.fullmatch(r"\d\d:\d\d:\d\d\.\d \(in 2\.0 h\)", expires["hours"]), expires
    assert re.fullmatch(r"20\d\d-\d\d-\d\d \d\d:\d\d:\d\d\.\d \(in 3 d\)", expires["days"]), expires


def test_a_lease_in_json_has_no_deadline_on_the_commands_own_clock(url: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--url", url, "-o", "json", "claim", "j", "--owner", "me", "--ttl", "30")
    assert code == 0 and set(json.loads(out)) == {"job_id", "owner", "token", "expires_at", "ttl", "attempt"}
    code, out, _ = run(capsys, "--url", url, "-o", "jsonl", "renew", "j", "--owner", "me", "--token", "1",
                       "--ttl", "30")
    assert code == 0 and set(json.loads(out)) == {"job_id", "owner", "token", "expires_at", "ttl", "attempt"}
