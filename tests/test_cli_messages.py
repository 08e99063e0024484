"""What ``tenure``'s messages say (issue 26): refusals, store times, waits, Python-free wording."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tenure.cli import main


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'cli.db'}"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


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
