"""``tenure run JOB -- CMD``: every outcome, with real processes and a shared SQLite store.

Nothing here waits on a timer to decide an outcome: a test waits for a file or a line the
command or ``tenure run`` writes, then acts (force_expire, release, a signal), and the
renewal that follows is refused by the store whatever the timing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import tenure

ROOT = Path(__file__).resolve().parent.parent

# The command under test: records its environment, says it started, then does what it is told.
COMMAND = r"""
import json, os, signal, sys, time
out = sys.argv[1]
mode = sys.argv[2]
def note(text):
    with open(out, "a") as f:
        f.write(text + "\n")
if mode == "stubborn":  # ignores SIGTERM, and has a child of its own
    import subprocess
    signal.signal(signal.SIGTERM, lambda *_: note("term"))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
if mode == "graceful":
    signal.signal(signal.SIGTERM, lambda *_: (note("term"), sys.exit(3)))
    signal.signal(signal.SIGINT, lambda *_: (note("int"), sys.exit(4)))
note(json.dumps({k: os.environ.get(k) for k in ("TENURE_JOB", "TENURE_TOKEN", "TENURE_OWNER")}))
if mode == "stubborn":
    note(f"pids {os.getpid()} {child.pid}")
note("started")
if mode.startswith("exit"):
    sys.exit(int(mode[4:]))
while True:
    time.sleep(0.05)
"""


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'run.db'}"


@pytest.fixture
def store(url: str) -> Iterator[tenure.Store]:
    with tenure.connect(url) as s:
        yield s


def start(url: str, tmp_path: Path, mode: str, *options: str, ttl: str = "30",
          job: str = "nightly") -> tuple[subprocess.Popen[str], Path]:
    script = tmp_path / "cmd.py"
    script.write_text(COMMAND)
    out = tmp_path / f"out-{mode}.txt"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tenure", "--url", url, "run", job, "--owner", "cron-1", "--ttl", ttl, *options,
         "--", sys.executable, str(script), str(out), mode],
        env=env, stderr=subprocess.PIPE, text=True)
    return proc, out


def lines_of(out: Path, wanted: str, timeout: float = 30.0) -> list[str]:
    """The command's notes, once ``wanted`` is among them."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = out.read_text().splitlines() if out.exists() else []
        if wanted in lines:
            return lines
        time.sleep(0.02)
    raise AssertionError(f"{wanted!r} never appeared in {out}")


def finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


def test_success_completes_the_job_with_the_exit_status(url: str, tmp_path: Path, store: tenure.Store) -> None:
    proc, out = start(url, tmp_path, "exit0")
    code, err = finish(proc)
    assert code == 0, err
    seen = json.loads(lines_of(out, "started")[0])
    assert seen == {"TENURE_JOB": "nightly", "TENURE_TOKEN": "1", "TENURE_OWNER": "cron-1"}
    job = store.get("nightly")
    assert job is not None and job.state is tenure.JobState.COMPLETED
    assert json.loads(job.result or b"") == {"exit_status": 0}


def test_failure_releases_the_job_and_returns_the_status(url: str, tmp_path: Path, store: tenure.Store) -> None:
    proc, _ = start(url, tmp_path, "exit7")
    assert finish(proc)[0] == 7
    job = store.get("nightly")
    assert job is not None and job.state is tenure.JobState.PENDING and job.token == 1
    assert [e.op for e in store.history("nightly")][-1] is tenure.Op.RELEASE


def test_a_completed_job_does_not_run_again(url: str, tmp_path: Path, store: tenure.Store) -> None:
    store.complete(store.claim("nightly", "earlier", 30))
    proc, out = start(url, tmp_path, "exit0")
    code, err = finish(proc)
    assert (code, out.exists(), "already completed" in err) == (0, False, True)


def test_a_held_job_exits_75_without_running(url: str, tmp_path: Path, store: tenure.Store) -> None:
    store.claim("nightly", "someone-else", 300)
    proc, out = start(url, tmp_path, "exit0")
    code, err = finish(proc)
    assert (code, out.exists()) == (75, False), err


def test_with_wait_it_runs_once_the_holder_releases(url: str, tmp_path: Path, store: tenure.Store) -> None:
    lease = store.claim("nightly", "someone-else", 300)
    proc, out = start(url, tmp_path, "exit0", "--wait", "60")
    assert proc.stderr is not None
    assert "waiting up to 60 s" in proc.stderr.readline()
    assert not out.exists()
    store.release(lease)
    code, err = finish(proc)
    assert code == 0, err
    assert json.loads(lines_of(out, "started")[0])["TENURE_TOKEN"] == "2"


def test_a_lost_lease_stops_the_command_sigterm_then_sigkill(url: str, tmp_path: Path,
                                                             store: tenure.Store) -> None:
    # TTL 3: a renewal every second. The operator's force_expire makes the next one refused.
    proc, out = start(url, tmp_path, "stubborn", "--grace", "0.5", ttl="3")
    token = int(json.loads(lines_of(out, "started")[0])["TENURE_TOKEN"])
    store.force_expire("nightly", token=token, actor="ops")
    code, err = finish(proc)
    assert code == 75, err
    assert "lost" in err
    lines = lines_of(out, "term")
    assert lines[-1] == "term"  # SIGTERM came first; the command ignored it and was killed
    pids = [int(p) for p in next(line for line in lines if line.startswith("pids")).split()[1:]]
    assert not any(alive(pid) for pid in pids)  # the command's own child too: the whole group
    rejected = store.rejections()
    assert [(r.op, r.token) for r in rejected] == [(tenure.Op.RENEW, token)]
    job = store.get("nightly")
    assert job is not None and job.state is tenure.JobState.EXPIRED  # lost, so not released by run


def alive(pid: int, timeout: float = 10.0) -> bool:
    """Whether the process still runs after ``timeout`` (a zombie waiting for its reaper is dead)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return False
        if state in ("Z", "X"):
            return False
        time.sleep(0.02)
    return True


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signals_are_passed_on_and_the_job_released(url: str, tmp_path: Path, store: tenure.Store,
                                                    signum: int) -> None:
    proc, out = start(url, tmp_path, "graceful")
    lines_of(out, "started")
    proc.send_signal(signum)
    code, err = finish(proc)
    assert code == 128 + signum, err
    assert lines_of(out, "int" if signum == signal.SIGINT else "term")
    job = store.get("nightly")
    assert job is not None and job.state is tenure.JobState.PENDING


def test_a_missing_command_releases_and_exits_127(url: str, tmp_path: Path, store: tenure.Store) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "tenure", "--url", url, "run", "j", "--owner", "o", "--ttl", "30",
                           "--", str(tmp_path / "no-such-program")], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 127, done.stderr
    job = store.get("j")
    assert job is not None and job.state is tenure.JobState.PENDING


def test_run_without_a_command_is_a_usage_error(url: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "tenure", "--url", url, "run", "j", "--owner", "o", "--ttl", "30"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 64 and "needs a command" in done.stderr
