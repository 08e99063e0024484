"""Every command's failure modes end with the status README's table gives (issue 26 item 11),
and only commands that write a job create a SQLite store (item 12). In-process, on SQLite."""

from __future__ import annotations

import socket
import sys
import uuid
from pathlib import Path

import pytest

import tenure
from tenure.cli import main

STORE_WRITES = ["submit", "claim", "run", "demo"]  # the commands README says may create a store


@pytest.fixture
def url(tmp_path: Path) -> str:
    """A store with a held job (owner a, token 1) and a completed one, nothing claimable."""
    url = f"sqlite:///{tmp_path / 'exits.db'}"
    with tenure.connect(url) as store:
        store.claim("held", "a", 300)
        store.complete(store.claim("done", "a", 300))
    return url


CLAIM = ["--owner", "b", "--ttl", "30"]


@pytest.mark.parametrize("words, status", [
    (["submit", ""], 64),
    (["submit", "new"], 0),
    (["claim", "held", *CLAIM], 65),
    (["claim", "done", *CLAIM], 65),
    (["claim", *CLAIM], 66),
    (["claim", "nosuch", "--existing", *CLAIM], 66),
    (["claim", "held", "--owner", "b", "--ttl", "nan"], 64),
    (["renew", "held", "--owner", "a", "--token", "2", "--ttl", "30"], 65),
    (["renew", "held", "--owner", "b", "--token", "1", "--ttl", "30"], 65),
    (["complete", "nosuch", "--owner", "a", "--token", "1"], 66),
    (["release", "done", "--owner", "a", "--token", "1"], 65),
    (["expire", "nosuch", "--token", "1"], 66),
    (["expire", "held", "--token", "2"], 65),
    (["get", "nosuch"], 66),
    (["history", "nosuch"], 66),
    (["history", "held"], 0),
    (["rejections", "--job", "nosuch"], 66),
    (["rejections", "--job", "held"], 0),
    (["ls", "--limit", "0"], 64),
    (["watch", "--count", "0"], 64),
    (["health"], 0),
    (["build-indexes"], 0),
    (["run", "held", *CLAIM, "--", "true"], 75),
    (["run", "done", *CLAIM, "--", "true"], 0),
    (["run", "nosuch", "--existing", *CLAIM, "--", "true"], 66),
    (["run", "fails", *CLAIM, "--", "sh", "-c", "exit 3"], 3),
    (["run", "missing", *CLAIM, "--", "/nonexistent/command"], 127),
    (["run", "nothing", *CLAIM], 64),
    (["demo", "--ttl", "0"], 64),
    (["demo", "--workers", "0"], 64),
    (["demo", "--jobs", "many"], 64),
    (["dashboard", "--port", "x"], 64),
    (["dashboard", "--refresh", "-1"], 64),
    (["metrics", "--port", "70000"], 64),
    (["dashboard", "--port", "0"], 64),
    (["no-such-command"], 64),
])
def test_each_failure_mode_exits_as_the_readme_says(url: str, words: list[str], status: int,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--url", url, *words]) == status
    assert "Traceback" not in capsys.readouterr().err


def test_the_dashboard_without_its_admin_secret_is_a_usage_error(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TENURE_ADMIN_SECRET", raising=False)
    assert main(["--url", url, "dashboard", "--admin"]) == 64


@pytest.mark.parametrize("command, extra", [("metrics", "prometheus_client"), ("dashboard", "streamlit")])
def test_a_missing_extra_exits_69_as_for_a_store(url: str, command: str, extra: str,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, extra, None)  # what an uninstalled package imports as
    assert main(["--url", url, command, *(["--port", "0"] if command == "metrics" else [])]) == 69
    assert "pip install 'tenure[" in capsys.readouterr().err


def test_metrics_on_a_port_in_use_exits_69(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["--url", url, "metrics", "--port", str(port)]) == 69
    assert f"cannot serve on 127.0.0.1:{port}" in capsys.readouterr().err


@pytest.mark.parametrize("words", [
    ["ls"], ["get", "j"], ["history"], ["rejections"], ["watch", "--count", "1"], ["health"], ["build-indexes"],
    ["metrics", "--port", "0"], ["dashboard", "--port", "0"], ["claim", *CLAIM],
    ["renew", "j", "--owner", "a", "--token", "1", "--ttl", "30"], ["complete", "j", "--owner", "a", "--token", "1"],
    ["release", "j", "--owner", "a", "--token", "1"], ["expire", "j", "--token", "1"],
])
def test_a_command_that_writes_no_job_never_creates_a_store(tmp_path: Path, words: list[str],
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "empty.db"
    assert main(["--url", f"sqlite:///{db}", *words]) == 66
    assert f"no store at {db}" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_the_default_store_says_which_file_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TENURE_URL", raising=False)
    assert main(["submit", "a"]) == 0
    err = capsys.readouterr().err
    assert f"tenure: using the default store {tmp_path / 'tenure-demo.db'} (--url or --url-file to choose" in err
    assert main(["--url", f"sqlite:///{tmp_path / 'tenure-demo.db'}", "ls"]) == 0
    assert "default" not in capsys.readouterr().err  # named: nothing to say


@pytest.fixture
def life_url() -> str:
    """A memory store (shared by name in this process) with a parked job and two scheduled ones
    (delayed, failed)."""
    url = f"memory://exits-{uuid.uuid4().hex}"
    with tenure.connect(url) as store:  # a named memory store outlives its connections
        store.submit("parked", max_attempts=1)
        store.fail(store.claim("parked", "a", 300), "boom")
        store.submit("later", delay=3600)
        store.fail(store.claim("retry", "a", 300), "boom", retry_in=3600)
        store.complete(store.claim("done", "a", 300))
    return url


@pytest.mark.parametrize("words, status", [
    (["claim", "parked", *CLAIM], 65),
    (["claim", "later", *CLAIM], 65),
    (["claim", *CLAIM], 66),  # nothing claimable: parked and scheduled jobs are passed over
    (["run", "parked", *CLAIM, "--", "true"], 65),
    (["run", "later", *CLAIM, "--", "true"], 75),
    (["fail", "parked", "--owner", "a", "--token", "1"], 65),
    (["fail", "nosuch", "--owner", "a", "--token", "1"], 66),
    (["requeue", "done"], 65),
    (["requeue", "nosuch"], 66),
    (["requeue", "parked", "--token", "2"], 65),
    (["requeue", "parked", "--delay", "-1"], 64),
    (["expire", "parked", "--token", "1"], 66),  # no live lease: nothing to end
    (["expire", "retry", "--token", "1"], 66),
    (["requeue", "parked", "--token", "1"], 0),
    (["submit", "x", "--max-attempts", "0"], 64),
])
def test_the_life_cycles_failure_modes_exit_as_the_readme_says(life_url: str, words: list[str], status: int,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--url", life_url, *words]) == status
    assert "Traceback" not in capsys.readouterr().err
