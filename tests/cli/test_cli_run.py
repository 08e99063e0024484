"""``tenure run JOB -- CMD``: every outcome, with real processes and a shared SQLite store.

Nothing here waits on a timer to decide an outcome: a test waits for a file or a line the
command or ``tenure run`` writes, then acts (force_expire, release, a signal), and the
renewal that follows is refused by the store whatever the timing.
"""

from __future__ import annotations

import dataclasses
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
from tenure.backends.memory import MemoryBackend

ROOT = Path(__file__).resolve().parents[2]

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


def test_failure_fails_the_job_and_returns_the_status(url: str, tmp_path: Path, store: tenure.Store) -> None:
    # What the failure records (attempts, last error, the backoff) is in test_cli_lifecycle.py.
    proc, _ = start(url, tmp_path, "exit7")
    assert finish(proc)[0] == 7
    job = store.get("nightly")
    assert job is not None and job.state in (tenure.JobState.PENDING, tenure.JobState.SCHEDULED) and job.token == 1
    assert [e.op for e in store.history("nightly")][-1] is tenure.Op.FAIL


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


def test_a_signal_to_run_reaches_the_commands_whole_group(url: str, tmp_path: Path, store: tenure.Store) -> None:
    # The command ignores SIGTERM but its child does not: the signal goes to the group, and
    # the command itself is killed after --grace.
    proc, out = start(url, tmp_path, "stubborn", "--grace", "0.5")
    lines = lines_of(out, "started")
    pids = [int(p) for p in next(line for line in lines if line.startswith("pids")).split()[1:]]
    proc.send_signal(signal.SIGTERM)
    code, err = finish(proc)
    assert code == 128 + signal.SIGTERM, err
    assert not any(alive(pid) for pid in pids)
    job = store.get("nightly")
    assert job is not None and job.state is tenure.JobState.PENDING


def test_a_signal_while_waiting_to_claim_is_not_lost(url: str, tmp_path: Path, store: tenure.Store) -> None:
    lease = store.claim("nightly", "someone-else", 300)
    proc, out = start(url, tmp_path, "exit0", "--wait", "600")
    assert proc.stderr is not None
    assert "waiting up to 600 s" in proc.stderr.readline()
    proc.send_signal(signal.SIGTERM)
    code, err = finish(proc)  # promptly: not after the 600 s wait
    assert code == 128 + signal.SIGTERM, err
    assert not out.exists()  # the command never ran
    store.release(lease)  # the job is still the other holder's: run claimed nothing
    assert [e.owner for e in store.history("nightly") if e.op is tenure.Op.CLAIM] == ["someone-else"]


def test_a_signal_that_lands_during_the_claim_releases_the_lease(store: tenure.Store) -> None:
    from tenure.cli.run import Supervisor

    supervisor = Supervisor(["true"], 1.0, {})

    def hold(wait: float | None) -> tenure.HeldLease:
        held = store.hold("nightly", "cron-1", 30, wait=wait)
        os.kill(os.getpid(), signal.SIGINT)  # as if it arrived while the answer was on its way
        return held

    with supervisor.interrupts.catching():
        assert supervisor.claim(hold, 0.0) is None
    job = store.get("nightly")
    assert job is not None and job.state is tenure.JobState.PENDING and job.token == 1
    assert supervisor.interrupted() == 128 + signal.SIGINT


BAD_NUMBERS = [("--ttl", "nan"), ("--ttl", "inf"), ("--ttl", "-1"), ("--ttl", "1e400"), ("--ttl", "0"),
               ("--wait", "nan"), ("--wait", "inf"), ("--wait", "-5"), ("--wait", "1e300"),
               ("--grace", "nan"), ("--grace", "inf"), ("--grace", "-1"), ("--grace", "1e300")]


@pytest.mark.parametrize(("option", "value"), BAD_NUMBERS)
def test_bad_numbers_are_usage_errors_and_write_nothing(tmp_path: Path, option: str, value: str) -> None:
    from tenure.cli import main

    db = tmp_path / "untouched.db"
    options = {"--ttl": "30", option: value}
    words = [w for pair in options.items() for w in pair]
    assert main(["--url", f"sqlite:///{db}", "run", "j", "--owner", "o", *words, "--", "true"]) == 64
    assert not db.exists()  # the store was not even opened


def test_the_command_gets_no_store_secret(tmp_path: Path) -> None:
    # TENURE_URL carries the store's password; nothing holding it, and no other TENURE_*
    # variable, may reach the command: only the lease's three.
    secret = "HUNTER2xyz"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TENURE_URL": f"memory://user:{secret}@x",
           "COPY_OF_IT": f"postgresql://user:{secret}@db/x", "PGPASSWORD": secret,
           "TENURE_ADMIN_SECRET": "admin-secret-0123456789", "TENURE_TOKEN": "999", "KEPT": "yes"}
    out = tmp_path / "env.json"
    dump = f"import json, os; open({str(out)!r}, 'w').write(json.dumps(dict(os.environ)))"
    done = subprocess.run([sys.executable, "-m", "tenure", "run", "j", "--owner", "o", "--ttl", "30", "--",
                           sys.executable, "-c", dump], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    seen = json.loads(out.read_text())
    assert not [k for k, v in seen.items() if secret in v or "admin-secret" in v]
    assert {k: v for k, v in seen.items() if k.startswith("TENURE_")} == {
        "TENURE_JOB": "j", "TENURE_TOKEN": "1", "TENURE_OWNER": "o"}
    assert seen["KEPT"] == "yes" and "PGPASSWORD" not in seen


class _FlakyCompletion(MemoryBackend):
    """A store whose first completions fail before they are applied, as while it is unreachable."""

    characteristics = dataclasses.replace(MemoryBackend.characteristics, min_ttl=2.0)  # as etcd's
    failures = 2

    def complete(self, lease: tenure.Lease, result: bytes | None) -> None:
        if self.failures:
            self.failures -= 1
            raise tenure.BackendUnavailable("connection reset")
        super().complete(lease, result)


def test_a_completion_the_store_did_not_take_is_retried_while_the_lease_lives() -> None:
    # The command succeeded: releasing the job on the way out would make it run again.
    from tenure.cli.run import Supervisor

    with tenure.Store(_FlakyCompletion(tenure.SystemClock())) as flaky:
        with flaky.hold("nightly", "cron-1", 30) as held:
            assert Supervisor([sys.executable, "-c", "pass"], 1.0, dict(os.environ)).run(held) == 0
        job = flaky.get("nightly")
        assert job is not None and job.state is tenure.JobState.COMPLETED


def test_complete_and_release_on_the_command_line_respect_the_stores_minimum_ttl() -> None:
    # complete and release take no --ttl; the lease they build must still be one etcd accepts.
    import argparse

    from tenure.cli import commands

    with tenure.Store(_FlakyCompletion(tenure.SystemClock())) as store:
        store.backend.failures = 0  # type: ignore[attr-defined]
        first, second = store.claim("a", "me", 30), store.claim("b", "me", 30)
        for command, lease in ((commands.cmd_complete, first), (commands.cmd_release, second)):
            args = argparse.Namespace(job_id=lease.job_id, owner="me", token=lease.token, result=None, output="json")
            assert command(store, args) == 0
        states = {j.job_id: j.state for j in store.jobs()}
        assert states == {"a": tenure.JobState.COMPLETED, "b": tenure.JobState.PENDING}


def test_a_short_password_is_looked_for_only_where_it_can_be() -> None:
    from tenure.cli.run import command_env

    env = {"PATH": "/usr/bin:/bin", "HOME": "/home/pw", "DATABASE_URL": "postgresql://u:pw@db/x",
           "DB_PASSWORD": "pw", "DSN": "host=db password=pw", "TENURE_URL": "memory://u:pw@x"}
    assert command_env(env, "memory://u:pw@x") == {"PATH": "/usr/bin:/bin", "HOME": "/home/pw"}


def test_a_password_written_percent_encoded_is_found_too() -> None:
    # A password with "@", "/", "+" or a space must be percent-encoded in a URL: a copy of the
    # store's URL in the environment holds it that way, never as the decoded text.
    from tenure.cli.run import command_env

    url = "postgresql://u:p%40ss%2Fw0rd%20long@db/x?auth_token=t%2Bk3n-value-long"
    env = {"DATABASE_URL": url, "LOWER_HEX": "postgresql://u:p%40ss%2fw0rd+long@db/x",
           "TOKEN_COPY": "t%2Bk3n-value-long", "KEPT": "p%40ss"}
    assert command_env(env, url) == {"KEPT": "p%40ss"}
    assert command_env({"SHORT": "postgresql://u:p%40w@db/x", "DSN": "password=p%40w"},
                       "postgresql://u:p%40w@db/x") == {}


def test_the_password_of_a_name_and_password_option_is_a_secret_of_its_own() -> None:
    # ZooKeeper's reader=name:password: a variable holding the password alone is kept out too.
    from tenure.cli.run import command_env

    url = "zk://w:writer-pass-123@h:2181/r?reader=dash:reader-pass-456"
    env = {"READER_PASSWORD": "reader-pass-456", "READER_NAME": "dash", "KEPT": "yes"}
    assert command_env(env, url) == {"READER_NAME": "dash", "KEPT": "yes"}
