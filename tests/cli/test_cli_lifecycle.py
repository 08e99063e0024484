"""Issue 28 on the command line: ``tenure run`` fails a job whose command fails, parks it after
``--max-attempts``; ``fail``, ``requeue``, ``submit --max-attempts/--delay``, ``ls --state
parked|scheduled`` and the new fields of ``get``/``ls``/``history``. In-process, on a named
memory store whose clock the test moves (the store keeps the clock it was first opened with).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import tenure
from tenure.cli import main
from tenure.core.clock import ManualClock
from tests.cli import run


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def url(clock: ManualClock) -> Iterator[str]:
    """A memory store of this test's own, on ``clock``; kept open so every command sees it."""
    url = f"memory://cli-lifecycle-{uuid.uuid4().hex}"
    with tenure.connect(url, clock=clock):
        yield url


@pytest.fixture
def store(url: str) -> Iterator[tenure.Store]:
    with tenure.connect(url) as s:
        yield s


RUN = ["--owner", "cron-1", "--ttl", "30"]


def test_a_failed_command_fails_the_job_and_it_is_retried_after_the_backoff(
        url: str, store: tenure.Store, clock: ManualClock, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "--url", url, "run", "nightly", *RUN, "--", "sh", "-c", "exit 3")[0] == 3
    job = store.get("nightly")
    assert job is not None and job.state is tenure.JobState.SCHEDULED
    assert (job.attempts, job.last_error) == (1, "exit status 3")
    assert job.claimable_at is not None
    assert clock.time() + 0.5 <= job.claimable_at <= clock.time() + 1.0  # retry_base 1 s, jittered down
    assert [e.op for e in store.history("nightly")][-1] is tenure.Op.FAIL
    code, _, err = run(capsys, "--url", url, "run", "nightly", *RUN, "--", "true")
    assert (code, "is scheduled" in err) == (75, True)  # not before the backoff, by the store's clock
    clock.advance(1.0)
    assert run(capsys, "--url", url, "run", "nightly", *RUN, "--", "true")[0] == 0
    job = store.get("nightly")
    assert job is not None and job.state is tenure.JobState.COMPLETED and job.attempts == 2
    assert json.loads(job.result or b"") == {"exit_status": 0}


def test_retry_in_chooses_the_wait_and_a_signal_death_is_named(
        url: str, store: tenure.Store, clock: ManualClock, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = run(capsys, "--url", url, "run", "j", *RUN, "--retry-in", "30", "--", "sh", "-c", "kill -9 $$")
    assert code == 128 + 9
    job = store.get("j")
    assert job is not None and (job.last_error, job.claimable_at) == ("killed by signal SIGKILL", clock.time() + 30)


def test_max_attempts_parks_the_job_and_run_then_exits_65_without_running(
        url: str, store: tenure.Store, clock: ManualClock, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    for _ in range(2):
        assert run(capsys, "--url", url, "run", "poison", *RUN, "--max-attempts", "2", "--", "false")[0] == 1
        clock.advance(600)  # past any backoff
    job = store.get("poison")
    assert job is not None and job.state is tenure.JobState.PARKED
    parked = (job.attempts, job.max_attempts, job.last_error, job.parked_at)
    assert parked == (2, 2, "exit status 1", clock.time() - 600)
    ran = tmp_path / "ran"
    code, _, err = run(capsys, "--url", url, "run", "poison", *RUN, "--", "touch", str(ran))
    assert (code, ran.exists()) == (65, False)
    assert "is parked after 2 attempts; last error: 'exit status 1'" in err
    assert run(capsys, "--url", url, "claim", "poison", "--owner", "x", "--ttl", "30")[0] == 65
    code, out, _ = run(capsys, "--url", url, "ls", "--state", "parked")
    assert "poison" in out and "2/2" in out and "exit status 1" in out
    # requeued, it runs again with its attempts reset
    code, out, _ = run(capsys, "--url", url, "requeue", "poison", "--actor", "ops")
    assert code == 0 and "attempts reset" in out
    assert run(capsys, "--url", url, "run", "poison", *RUN, "--", "true")[0] == 0
    job = store.get("poison")
    assert job is not None and job.state is tenure.JobState.COMPLETED and job.attempts == 1
    events = [(e.op, e.owner) for e in store.history("poison")]
    assert (tenure.Op.REQUEUE, "ops") in events and events.count((tenure.Op.FAIL, "cron-1")) == 2


def test_max_attempts_is_the_limit_of_a_job_run_creates_only(url: str, store: tenure.Store,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    store.submit("earlier")
    for job in ("earlier", "new"):
        assert run(capsys, "--url", url, "run", job, *RUN, "--max-attempts", "1", "--", "false")[0] == 1
    states = {j.job_id: (j.state, j.max_attempts) for j in store.jobs()}
    assert states == {"earlier": (tenure.JobState.SCHEDULED, None), "new": (tenure.JobState.PARKED, 1)}


def test_a_lease_lost_while_the_command_runs_keeps_its_attempt(url: str, store: tenure.Store,
                                                               tmp_path: Path) -> None:
    from tenure.cli.run import Supervisor

    started = tmp_path / "started"
    script = f"import pathlib, time; pathlib.Path({str(started)!r}).touch(); time.sleep(60)"
    store.submit("job", max_attempts=1)
    with store.hold("job", "cron-1", 3) as held:  # renewed every second: the next renewal is refused
        def expire() -> None:
            while not started.exists():
                threading.Event().wait(0.02)  # until the command runs
            store.force_expire("job", token=held.token, actor="ops")

        ender = threading.Thread(target=expire)
        ender.start()
        assert Supervisor([sys.executable, "-c", script], 0.5, dict(os.environ)).run(held) == 75
        ender.join()
    job = store.get("job")
    assert job is not None and job.attempts == 1
    assert job.state is tenure.JobState.PARKED  # its one attempt spent by the lost lease


def test_fail_and_requeue_on_the_command_line(url: str, store: tenure.Store, clock: ManualClock,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    token = store.claim("j", "w", 30).token
    code, out, _ = run(capsys, "--url", url, "-o", "json", "fail", "j", "--owner", "w", "--token", str(token),
                       "--error", "disk full\nat line 3", "--retry-in", "60")
    assert code == 0
    said = json.loads(out)
    assert (said["failed"], said["state"], said["attempts"], said["claimable_at"]) == (
        "j", "scheduled", 1, clock.time() + 60)
    # the same fail again is stale: refused, audited as op fail, nothing changed
    code, _, err = run(capsys, "--url", url, "fail", "j", "--owner", "w", "--token", str(token))
    assert code == 65 and "StaleLease" in err
    assert [(r.op, r.token) for r in store.rejections()] == [(tenure.Op.FAIL, token)]
    code, out, _ = run(capsys, "--url", url, "get", "j")
    assert "last_error: disk full\nat line 3" in out and "attempts: 1" in out and "claimable_at:" in out
    code, out, _ = run(capsys, "--url", url, "ls", "--state", "scheduled")
    assert "disk full ..." in out  # the first line of the last error, in the table
    # requeue: a token no longer current changes nothing; the right one resets the attempts
    code, _, err = run(capsys, "--url", url, "requeue", "j", "--token", str(token + 1))
    assert code == 65 and "TokenChanged" in err
    job = store.get("j")
    assert job is not None and job.attempts == 1
    code, out, _ = run(capsys, "--url", url, "-o", "json", "requeue", "j", "--token", str(token),
                       "--delay", "5", "--actor", "alice")
    assert code == 0 and json.loads(out) == {"requeued": "j", "claimable_at": clock.time() + 5}
    job = store.get("j")
    assert job is not None and (job.state, job.attempts) == (tenure.JobState.SCHEDULED, 0)
    code, out, _ = run(capsys, "--url", url, "-o", "json", "history", "j")
    assert [(e["op"], e["owner"]) for e in json.loads(out)] == [("claim", "w"), ("fail", "w"), ("requeue", "alice")]
    code, out, _ = run(capsys, "--url", url, "history", "j")
    assert " fail " in out and " requeue  alice " in out


def test_requeue_refuses_a_completed_job_and_a_live_lease(url: str, store: tenure.Store,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    store.complete(store.claim("done", "w", 30))
    store.claim("held", "w", 30)
    for job, error in (("done", "JobCompleted"), ("held", "AlreadyClaimed")):
        code, _, err = run(capsys, "--url", url, "requeue", job)
        assert (code, error in err) == (65, True), err
    assert run(capsys, "--url", url, "requeue", "nosuch")[0] == 66
    assert [e.op for e in store.history() if e.op is tenure.Op.REQUEUE] == []


def test_submit_with_max_attempts_and_delay(url: str, store: tenure.Store, clock: ManualClock,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "--url", url, "submit", "a", "b", "--max-attempts", "3", "--delay", "10")[0] == 0
    code, out, _ = run(capsys, "--url", url, "-o", "json", "ls", "--state", "scheduled")
    listed = {j["job_id"]: j for j in json.loads(out)}
    assert set(listed) == {"a", "b"}
    assert {(j["max_attempts"], j["attempts"], j["claimable_at"], j["last_error"]) for j in listed.values()} == {
        (3, 0, clock.time() + 10, None)}
    code, _, err = run(capsys, "--url", url, "claim", "a", "--owner", "w", "--ttl", "30")
    assert code == 65 and "JobScheduled" in err and "is scheduled: claimable from" in err
    assert run(capsys, "--url", url, "claim", "--owner", "w", "--ttl", "30")[0] == 66  # claim_next passes over
    clock.advance(10)
    assert run(capsys, "--url", url, "claim", "a", "--owner", "w", "--ttl", "30")[0] == 0


def test_run_with_wait_waits_for_a_scheduled_job(capsys: pytest.CaptureFixture[str]) -> None:
    # The store's real clock: the wait is for the delay to pass (half a second) by store time.
    url = f"memory://cli-lifecycle-{uuid.uuid4().hex}"
    with tenure.connect(url) as store:
        store.submit("later", delay=0.5)
        assert run(capsys, "--url", url, "run", "later", *RUN, "--wait", "30", "--", "true")[0] == 0
        job = store.get("later")
        assert job is not None and job.state is tenure.JobState.COMPLETED


@pytest.mark.parametrize("words", [
    ["submit", "a", "--max-attempts", "0"],
    ["submit", "a", "--max-attempts", "1.5"],
    ["submit", "a", "--delay", "nan"],
    ["submit", "a", "--delay", "-1"],
    ["submit", "a", "--delay", "1e30"],
    ["fail", "a", "--owner", "w", "--token", "1", "--error", "bad\x00byte"],
    ["fail", "a", "--owner", "w", "--token", "1", "--error", "x" * 5000],
    ["fail", "a", "--owner", "w", "--token", "1", "--retry-in", "inf"],
    ["requeue", "a", "--delay", "-5"],
    ["run", "a", *RUN, "--max-attempts", "0", "--", "true"],
    ["run", "a", *RUN, "--retry-in", "-1", "--", "true"],
])
def test_bad_input_is_a_usage_error_and_writes_nothing(tmp_path: Path, words: list[str],
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "untouched.db"
    assert main(["--url", f"sqlite:///{db}", *words]) == 64
    assert "Traceback" not in capsys.readouterr().err
    assert not db.exists()  # the store was not even opened
