"""The ``tenure`` command line, run in-process and once as ``python -m tenure``."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import tenure
from devservers.zookeeper import ZooKeeperServer
from tenure.cli import main
from tenure.cli.commands import cmd_claim
from tenure.core.validation import LAST_TOKEN

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'cli.db'}"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_claim_complete_and_stale_completion(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "--url", url, "submit", "job-1", "job 2")[0] == 0
    code, out, _ = run(capsys, "--url", url, "--json", "claim", "job-1", "--owner", "a", "--ttl", "30")
    assert code == 0
    first = json.loads(out)
    assert (first["job_id"], first["owner"]) == ("job-1", "a")
    code, out, err = run(capsys, "--url", url, "claim", "--owner", "b", "--ttl", "30")
    assert (code, out, err.startswith("claimed 'job 2': token 1")) == (0, "1\n", True)

    code, out, _ = run(capsys, "--url", url, "complete", "job-1", "--owner", "a", "--token",
                       str(first["token"]), "--result", "ok")
    assert code == 0 and "completed 'job-1'" in out
    code, _, err = run(capsys, "--url", url, "complete", "job-1", "--owner", "a", "--token", str(first["token"]))
    assert code == 65 and "StaleLease" in err

    code, out, _ = run(capsys, "ls", "--url", url, "--json")
    listing = {j["job_id"]: j for j in json.loads(out)}
    assert (listing["job-1"]["state"], listing["job-1"]["result"]) == ("completed", "ok")
    assert listing["job 2"]["state"] == "leased"
    code, out, _ = run(capsys, "--url", url, "rejections")
    assert code == 0 and "job already completed" in out and "job-1" in out
    code, out, _ = run(capsys, "--url", url, "get", "job-1")
    assert code == 0 and "completed" in out
    code, out, _ = run(capsys, "--url", url, "--json", "history", "job-1")
    assert [e["op"] for e in json.loads(out)] == ["submit", "claim", "complete"]


def test_renew_release_and_ls_filter(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--url", url, "--json", "claim", "j", "--owner", "a", "--ttl", "30")
    token = str(json.loads(out)["token"])
    assert run(capsys, "--url", url, "renew", "j", "--owner", "a", "--token", token, "--ttl", "60")[0] == 0
    code, out, _ = run(capsys, "--url", url, "ls", "--state", "leased")
    assert code == 0 and "j " in out.splitlines()[2] + " "
    assert run(capsys, "--url", url, "release", "j", "--owner", "a", "--token", token)[0] == 0
    code, out, _ = run(capsys, "--url", url, "--json", "ls", "--state", "leased")
    assert json.loads(out) == []


@pytest.mark.parametrize("argv, message", [
    (["--url", "nope://x", "ls"], "unknown store scheme"),
    (["--url", "sqlite:///x.db?color=red", "ls"], "unknown option"),
    (["claim", "", "--owner", "a", "--ttl", "5"], "job id"),
    (["claim", "j", "--owner", "a", "--ttl", "-5"], "ttl"),
])
def test_bad_input_exits_64_with_a_message(url: str, capsys: pytest.CaptureFixture[str], argv: list[str],
                                          message: str) -> None:
    if "--url" not in argv:
        argv = ["--url", url, *argv]
    code, _, err = run(capsys, *argv)
    assert code == 64 and message in err


def test_missing_job_exits_66(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    tenure.connect(url).close()  # the store exists: get never creates one
    code, _, err = run(capsys, "--url", url, "get", "ghost")
    assert code == 66 and "ghost" in err


def test_a_job_at_the_last_token_exits_65_and_a_tampered_one_70(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with tenure.connect(url) as store:
        store.submit_many(["last", "top"])
    with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
        db.execute("UPDATE tenure_jobs SET token = ? WHERE job_id = 'last'", (LAST_TOKEN,))
        db.execute("UPDATE tenure_jobs SET token = ? WHERE job_id = 'top'", (LAST_TOKEN + 1,))
    code, _, err = run(capsys, "--url", url, "claim", "last", "--owner", "a", "--ttl", "30")
    assert code == 65 and "TokensExhausted" in err and "nothing was written" in err
    code, _, err = run(capsys, "--url", url, "claim", "top", "--owner", "a", "--ttl", "30")
    assert code == 70 and "CorruptRecord" in err and "of job 'top': token 9223372036854775807 is above" in err
    assert run(capsys, "--url", url, "claim", "--owner", "a", "--ttl", "30")[0] == 66  # claim_next: nothing it may take


def test_python_dash_m_and_tenure_url_env(url: str) -> None:
    env = {**os.environ, "TENURE_URL": url, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "tenure", "submit", "x"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    done = subprocess.run([sys.executable, "-m", "tenure", "--json", "ls"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert [j["job_id"] for j in json.loads(done.stdout)] == ["x"]


@pytest.mark.parametrize("words", [
    ["submit", "ok", "nul\x00id"],
    ["claim", "zero\u200bwidth", "--owner", "o", "--ttl", "5"],
    ["claim", "j", "--owner", "bell\x07", "--ttl", "5"],
    ["claim", "j", "--owner", "o", "--ttl", "nan"],
    ["complete", "j", "--owner", "o", "--token", "0"],
    ["release", "j", "--owner", "o", "--token", str(2**63)],
    ["renew", "j", "--owner", "o", "--token", "1", "--ttl", "1e400"],
    ["expire", "j", "--token", "abc"],
    ["rejections", "--since", "inf"],
    ["watch", "--interval", "0"],
    ["metrics", "--soon", "nan"],
    ["metrics", "--port", "70000"],
])
def test_bad_input_is_a_usage_error_before_the_store_is_opened(tmp_path: Path, words: list[str],
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "untouched.db"
    assert main(["--url", f"sqlite:///{db}", *words]) == 64
    assert not db.exists()
    assert "error: argument" in capsys.readouterr().err


def test_ctrl_c_while_claim_waits_exits_130_and_claims_nothing(url: str) -> None:
    with tenure.connect(url) as store:
        store.claim("busy", owner="someone-else", ttl=300)
        proc = subprocess.Popen(
            [sys.executable, "-m", "tenure", "--url", url, "claim", "busy", "--owner", "me", "--ttl", "30",
             "--wait", "600"], env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=subprocess.PIPE, text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # a background shell ignores SIGINT
        assert proc.stderr is not None
        assert "waiting up to 600 s for 'busy'" in proc.stderr.readline()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)  # promptly: not after the 600 s wait
        assert proc.returncode == 130, err
        assert [e.owner for e in store.history("busy") if e.op is tenure.Op.CLAIM] == ["someone-else"]


class _SignalledDuringClaim:
    """A store whose claim is granted just as Ctrl-C arrives."""

    def __init__(self, store: tenure.Store) -> None:
        self.store = store

    def claim(self, *args: Any, **kwargs: Any) -> tenure.Lease:
        lease = self.store.claim(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)  # the real signal, while the answer is on its way
        return lease

    def claim_next(self, *args: Any, **kwargs: Any) -> tenure.Lease | None:
        lease = self.store.claim_next(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)
        return lease

    def release(self, lease: tenure.Lease) -> None:
        self.store.release(lease)


@pytest.mark.parametrize("job", ["j", None])
def test_a_lease_granted_as_ctrl_c_arrives_is_released(url: str, job: str | None) -> None:
    args = argparse.Namespace(job_id=job, owner="me", ttl=30.0, wait=None, output="table")
    with tenure.connect(url) as store:
        store.submit("j")
        assert cmd_claim(_SignalledDuringClaim(store), args) == 130  # type: ignore[arg-type]
        status = store.get("j")
        assert status is not None and status.state is tenure.JobState.PENDING and status.token == 1


def test_build_indexes_says_when_a_store_keeps_its_own(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    tenure.connect(url).close()
    code, out, _ = run(capsys, "--url", url, "build-indexes")
    assert code == 0 and "sqlite keeps its indexes in its schema" in out


def test_build_indexes_on_a_zookeeper_store(zk_server: ZooKeeperServer, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"zk://{zk_server.hosts}/cli-index-{time.time_ns()}"
    with tenure.connect(url) as store:
        store.submit_many(["a", "b"])
    code, out, err = run(capsys, "--url", url, "build-indexes", "-o", "json")
    assert code == 0, err
    assert json.loads(out) == {"indexed": 0}  # made by this version: already indexed
