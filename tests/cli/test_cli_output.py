"""The CLI's exit statuses, output forms, operator commands and version."""

from __future__ import annotations

import importlib.metadata
import json
import threading
from pathlib import Path

import pytest

import tenure
from tenure.cli import main
from tenure.dashboard import data


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'cli.db'}"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_usage_errors_exit_64_not_argparse_2(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "--url", url, "claim", "j")[0] == 64  # --owner and --ttl missing
    assert run(capsys, "--url", url, "no-such-command")[0] == 64
    assert run(capsys, "--url", url, "ls", "--limit", "5000")[0] == 64  # InvalidArgument from page()


def test_exit_statuses_of_refusals_and_nothing_to_claim(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--url", url, "claim", "--owner", "a", "--ttl", "30")
    assert (code, "nothing to claim" in err) == (66, True)
    assert run(capsys, "--url", url, "claim", "j", "--owner", "a", "--ttl", "30")[0] == 0
    code, _, err = run(capsys, "--url", url, "claim", "j", "--owner", "b", "--ttl", "30")
    assert (code, "AlreadyClaimed" in err) == (65, True)
    assert run(capsys, "--url", url, "complete", "j", "--owner", "a", "--token", "1")[0] == 0
    code, _, err = run(capsys, "--url", url, "claim", "j", "--owner", "b", "--ttl", "30")
    assert (code, "JobCompleted" in err) == (65, True)


def test_unreachable_store_exits_69(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("grpc")
    # Port 9 (discard) has no etcd: the connection is refused at once.
    code, _, err = run(capsys, "--url", "etcd://127.0.0.1:9?timeout=0.5", "health")
    assert (code, "BackendUnavailable" in err) == (69, True)


def test_claim_prints_only_the_token_on_stdout(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--url", url, "claim", "j", "--owner", "a", "--ttl", "30")
    assert (code, out) == (0, "1\n")


def test_expire_with_the_confirmed_token(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, "--url", url, "claim", "j", "--owner", "a", "--ttl", "300")
    code, _, err = run(capsys, "--url", url, "expire", "j", "--token", "7", "--actor", "ops-ann")
    assert (code, "TokenChanged" in err) == (65, True)
    assert run(capsys, "--url", url, "--json", "get", "j")[1].count('"leased"') == 1  # nothing changed
    assert run(capsys, "--url", url, "expire", "j", "--token", "1", "--actor", "ops-ann")[0] == 0
    code, out, _ = run(capsys, "--url", url, "-o", "json", "history", "j")
    assert json.loads(out)[-1]["op"] == "expire" and json.loads(out)[-1]["owner"] == "ops-ann"
    assert run(capsys, "--url", url, "claim", "j", "--owner", "b", "--ttl", "30")[1] == "2\n"
    assert run(capsys, "--url", url, "expire", "ghost", "--token", "1")[0] == 66


@pytest.mark.parametrize("output", [[], ["-o", "json"]])
def test_expire_of_a_job_with_no_live_lease_says_there_is_nothing_to_end(
        url: str, capsys: pytest.CaptureFixture[str], output: list[str]) -> None:
    run(capsys, "--url", url, "claim", "j", "--owner", "a", "--ttl", "300")
    assert run(capsys, "--url", url, "release", "j", "--owner", "a", "--token", "1")[0] == 0
    code, out, err = run(capsys, "--url", url, *output, "expire", "j", "--token", "1", "--actor", "ops-ann")
    assert (code, out) == (66, "")  # the README's "nothing to claim, nothing to end": no record on stdout
    assert err == "tenure: 'j' has no live lease (state pending): nothing to end\n"
    code, out, _ = run(capsys, "--url", url, "-o", "json", "history", "j")
    assert json.loads(out)[-1]["op"] == "release"  # no expire was recorded


def test_jsonl_is_one_record_per_line_in_the_dashboard_export_shape(url: str,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, "--url", url, "claim", "j", "--owner", "a", "--ttl", "30")
    run(capsys, "--url", url, "complete", "j", "--owner", "a", "--token", "1")
    run(capsys, "--url", url, "release", "j", "--owner", "a", "--token", "1")
    run(capsys, "--url", url, "renew", "j", "--owner", "b", "--token", "1", "--ttl", "5")
    code, out, _ = run(capsys, "--url", url, "rejections", "-o", "jsonl")
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(lines) == 2
    with tenure.connect(url) as store:
        exported = json.loads(data.rejections_json(store.rejections()))
    assert lines == exported
    assert json.loads(run(capsys, "--url", url, "rejections", "-o", "json")[1]) == exported


def test_a_binary_result_has_one_shape(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with tenure.connect(url) as store:
        store.complete(store.claim("j", "a", 30), b"\xff\x00")
    code, out, _ = run(capsys, "--url", url, "get", "j", "-o", "json")
    assert (code, json.loads(out)["result"]) == (0, {"base64": "/wA="})


def test_ls_pages_with_filters(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with tenure.connect(url) as store:
        store.submit_many([f"job-{i:02}" for i in range(12)])
        for i in range(3):
            store.claim(f"job-{i:02}", "alice" if i < 2 else "bob", 300)
    code, out, err = run(capsys, "--url", url, "ls", "--limit", "5", "--offset", "5")
    assert code == 0 and "jobs 6-10 of 12" in err
    assert [line.split()[0] for line in out.splitlines()[2:]] == [f"job-{i:02}" for i in range(5, 10)]
    code, out, _ = run(capsys, "--url", url, "-o", "json", "ls", "--state", "leased", "--owner", "ALI")
    assert [j["job_id"] for j in json.loads(out)] == ["job-00", "job-01"]
    code, out, _ = run(capsys, "--url", url, "-o", "jsonl", "ls", "--state", "leased", "--state", "pending")
    assert len(out.splitlines()) == 12


def test_rejections_of_one_job(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with tenure.connect(url) as store:
        for job in ("a-1", "a-10"):
            store.report_rejection(job, "w", 1, resource="ledger", highest=2)
    code, out, _ = run(capsys, "--url", url, "-o", "json", "rejections", "--job", "a-1")
    assert code == 0 and [r["job_id"] for r in json.loads(out)] == ["a-1"]
    assert run(capsys, "--url", url, "rejections", "--job", "")[0] == 64  # an empty id: InvalidArgument


def test_health_and_watch(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    tenure.connect(url).close()
    code, out, _ = run(capsys, "--url", url, "-o", "json", "health")
    assert code == 0 and json.loads(out)["backend"] == "sqlite"
    with tenure.connect(url) as store:
        store.submit("a")
        store.claim("b", "w", 30)
    code, out, _ = run(capsys, "--url", url, "-o", "jsonl", "watch", "--count", "2", "--interval", "0.05")
    assert code == 0
    assert sorted(json.loads(line)["job"]["job_id"] for line in out.splitlines()) == ["a", "b"]


def test_watch_reports_a_change_made_while_it_runs(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with tenure.connect(url) as store:
        store.submit("a")
        timer = threading.Timer(0.3, store.submit, ("late",))
        timer.start()
        try:
            code, out, _ = run(capsys, "--url", url, "watch", "--count", "2", "--interval", "0.05")
        finally:
            timer.join()
    assert code == 0 and "late" in out.splitlines()[-1]


def test_version_comes_from_the_package_metadata(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--version")
    assert (code, out.strip()) == (0, f"tenure {importlib.metadata.version('tenure')}")
    assert tenure.__version__ == importlib.metadata.version("tenure")
    source = (Path(tenure.__file__).parent / "__init__.py").read_text()
    assert importlib.metadata.version("tenure") not in source  # written once, in pyproject.toml


def test_help_documents_the_exit_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0
    for status in ("64", "65", "66", "69", "75"):
        assert f"  {status} " in out
