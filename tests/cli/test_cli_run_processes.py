"""``tenure run`` stops every process its command started, not only the command itself.

The commands are shell scripts whose children ignore SIGTERM (and SIGINT, SIGHUP), beside a
leader that dies of it: the situation of ``sh -c 'worker & worker; wait'``, a pipeline or a
daemon that called ``setsid``. Each test waits for the children to write their pids, then
acts (a signal, force_expire); nothing waits on a timer to decide an outcome. ``--grace`` is
short, so the SIGKILL that ends the children comes within a second.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import tenure
from tenure.cli import processes
from tenure.cli.processes import running
from tenure.cli.stopping import KILL_WAIT, Stop

ROOT = Path(__file__).resolve().parents[2]
GRACE = "0.3"

# A child that outlives SIGTERM: only SIGKILL ends it. It writes its pid where it is told.
CHILD = """trap '' TERM INT HUP
echo $$ >> "$1"
while :; do sleep 0.05; done
"""
LEADERS = {
    # The leader dies of SIGTERM; its child, in the same process group, ignores it.
    "beside": 'sh "$CHILD" "$PIDS" & while :; do sleep 0.05; done',
    # A double fork into a session of its own: the grandchild is orphaned, out of the group.
    "setsid": '(setsid sh "$CHILD" "$PIDS" &); while :; do sleep 0.05; done',
    "pipeline": 'sh "$CHILD" "$PIDS" | sh "$CHILD" "$PIDS"',
    "exit0": 'sh "$CHILD" "$PIDS" & sleep 0.2; exit 0',  # leaves its child running
    "exit3": 'sh "$CHILD" "$PIDS" & sleep 0.2; exit 3',
}
CHILDREN = {"beside": 1, "setsid": 1, "pipeline": 2, "exit0": 1, "exit3": 1}


@pytest.fixture
def job_store(tmp_path: Path) -> Iterator[tuple[str, tenure.Store]]:
    """The store ``tenure run`` uses, by its URL, and a connection to watch the job in it."""
    url = f"sqlite:///{tmp_path / 'run.db'}"
    with tenure.connect(url) as store:
        yield url, store


@pytest.fixture(autouse=True)
def no_child_left(tmp_path: Path) -> Iterator[None]:
    """Whatever a failing test leaves running is killed (the pids the children wrote)."""
    yield
    pids = tmp_path / "pids"
    for pid in (int(p) for p in pids.read_text().split()) if pids.exists() else ():
        if running(pid):
            os.kill(pid, signal.SIGKILL)


def start(url: str, tmp_path: Path, leader: str, ttl: str = "30") -> tuple[subprocess.Popen[bytes], Path]:
    child = tmp_path / "child.sh"
    child.write_text(CHILD)
    pids = tmp_path / "pids"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CHILD": str(child), "PIDS": str(pids)}
    # stderr to a file: a pipe would stay open as long as any child holds it.
    with open(tmp_path / "stderr", "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tenure", "--url", url, "run", "nightly", "--owner", "cron-1", "--ttl", ttl,
             "--grace", GRACE, "--", "sh", "-c", LEADERS[leader]], env=env, stderr=err)
    return proc, pids


def finish(proc: subprocess.Popen[bytes], tmp_path: Path) -> tuple[int, str]:
    code = proc.wait(timeout=60)
    return code, (tmp_path / "stderr").read_text()


def children(pids: Path, count: int, timeout: float = 30.0) -> list[int]:
    """The children's pids, once ``count`` of them have written theirs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [int(line) for line in pids.read_text().split()] if pids.exists() else []
        if len(found) >= count:
            return found
        time.sleep(0.02)
    raise AssertionError(f"{count} children never started")


def watch(proc: subprocess.Popen[bytes], store: tenure.Store, pids: list[int], tmp_path: Path) -> tuple[int, str]:
    """Until ``tenure run`` exits: the job is never claimable while a child still runs."""
    while proc.poll() is None:
        job = store.get("nightly")
        if job is None or job.state is not tenure.JobState.LEASED:
            # Alive after the read, so alive during it: a second worker could have claimed.
            assert not [p for p in pids if running(p)], f"{job} claimable while children run"
        time.sleep(0.01)
    code, err = finish(proc, tmp_path)
    assert not [p for p in pids if running(p)], f"tenure run exited before its children: {err}"
    return code, err


def test_a_lost_lease_kills_a_child_that_ignores_sigterm_after_the_leader_died(
        job_store: tuple[str, tenure.Store], tmp_path: Path) -> None:
    url, store = job_store
    proc, pids_file = start(url, tmp_path, "beside", ttl="3")
    pids = children(pids_file, 1)
    store.force_expire("nightly", token=1, actor="ops")  # the next renewal is refused
    code, err = finish(proc, tmp_path)
    assert code == 75, err
    assert not [p for p in pids if running(p)], "tenure run exited while the child still ran"
    job = store.get("nightly")
    assert job is not None and job.state is tenure.JobState.EXPIRED  # lost, so not released by run


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT],
                         ids=["TERM", "INT", "HUP", "QUIT"])
def test_each_signal_to_run_stops_every_child_before_the_job_is_released(
        job_store: tuple[str, tenure.Store], tmp_path: Path, signum: int) -> None:
    url, store = job_store
    proc, pids_file = start(url, tmp_path, "beside")
    pids = children(pids_file, 1)
    proc.send_signal(signum)
    code, err = watch(proc, store, pids, tmp_path)
    assert code == 128 + signum, err
    job = store.get("nightly")
    assert job is not None and job.state is tenure.JobState.PENDING and job.token == 1


@pytest.mark.parametrize("leader", ["setsid", "pipeline"])
def test_a_setsid_grandchild_and_a_pipeline_are_stopped_too(job_store: tuple[str, tenure.Store], tmp_path: Path,
                                                            leader: str) -> None:
    url, store = job_store
    proc, pids_file = start(url, tmp_path, leader)
    pids = children(pids_file, CHILDREN[leader])
    proc.send_signal(signal.SIGTERM)
    code, err = watch(proc, store, pids, tmp_path)
    assert code == 128 + signal.SIGTERM, err
    job = store.get("nightly")
    assert job is not None and job.state is tenure.JobState.PENDING


@pytest.mark.parametrize(("leader", "op"), [("exit0", tenure.Op.COMPLETE), ("exit3", tenure.Op.FAIL)])
def test_what_the_command_leaves_running_is_stopped_before_the_job_is_completed_or_failed(
        job_store: tuple[str, tenure.Store], tmp_path: Path, leader: str, op: tenure.Op) -> None:
    url, store = job_store
    proc, pids_file = start(url, tmp_path, leader)
    pids = children(pids_file, 1)
    code, err = watch(proc, store, pids, tmp_path)
    assert code == int(leader[-1]), err
    assert f"the command exited with status {leader[-1]} and left" in err
    assert f"{pids[0]} (sh)" in err  # with its sleep, if one was under way
    assert [e.op for e in store.history("nightly")][-1] is op


def test_a_process_that_outlives_sigkill_is_given_up_on_after_kill_wait() -> None:
    # A process in uninterruptible sleep (D) outlives SIGKILL until it leaves the system call;
    # here one that does not exist stands for it (signalling it does nothing), on a clock of our own.
    now = [100.0]
    stuck = [processes.Process(2**30, 1, "stuck", "D")]
    stop = Stop(signal.SIGTERM, 2.0, None, clock=lambda: now[0])
    assert stop.step(stuck) == []  # SIGTERM
    now[0] += 2.0
    assert stop.step(stuck) == []  # SIGKILL
    now[0] += KILL_WAIT - 0.01
    assert stop.step(stuck) == []
    now[0] += 0.01
    assert stop.step(stuck) == stuck


def test_descendants_leave_out_what_the_process_had_before_and_see_every_generation() -> None:
    before = subprocess.Popen(["sleep", "30"])
    try:
        tree = processes.Descendants()
        with processes.subreaper() as adopting:
            assert adopting
            # sh starts a grandchild and exits at once: the orphan is re-parented here.
            sh = subprocess.Popen(["sh", "-c", "sleep 30 & echo $!"], stdout=subprocess.PIPE, text=True)
            assert sh.stdout is not None
            grandchild = int(sh.stdout.readline())
            sh.wait()
            living = tree.living(reap_except=None)
            assert [p.pid for p in living] == [grandchild] and living[0].ppid == os.getpid()
            os.kill(grandchild, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while tree.living() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert tree.all() == []  # dead and reaped: not even a zombie left
    finally:
        before.kill()
        before.wait()


def test_the_docs_say_what_is_and_is_not_guaranteed_as_the_code_does(capsys: pytest.CaptureFixture[str]) -> None:
    from tenure.cli.signals import CAUGHT

    def words(path: str) -> str:
        return " ".join((ROOT / path).read_text().split())

    guide, readme = words("docs/running-workers.md"), words("README.md")
    assert {signal.Signals(s).name for s in CAUGHT} == {"SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT"}
    assert "Ctrl-C, SIGTERM, SIGHUP or SIGQUIT to `tenure run`" in guide
    assert "Ctrl-C, SIGTERM, SIGHUP or SIGQUIT to `tenure run`" in readme
    assert f"{KILL_WAIT:g} s after SIGKILL" in guide and f"outlives SIGKILL by {KILL_WAIT:g} s" in readme
    from tenure.cli.exits import HELP

    stuck = f"a process of the command could not be stopped (alive {KILL_WAIT:g} s after SIGKILL)"
    assert stuck in readme and stuck in " ".join(HELP.split())  # the exit status table's 75
    from tenure.cli import main

    assert main(["run", "--help"]) == 0
    run_help = " ".join(capsys.readouterr().out.split())
    assert "gets SIGTERM (on a signal, that signal; QUIT as TERM)" in run_help
    for promise in ("child subreaper (`prctl(PR_SET_CHILD_SUBREAPER)`)",
                    "neither completes, fails nor releases the job, nor exits, while any of them runs",
                    "uninterruptible sleep (state `D`",
                    "Without `/proc` or the prctl (systems other than Linux) only the command's process group"):
        assert promise in guide


def test_a_process_that_outlives_sigkill_is_named_and_the_job_neither_released_nor_completed(
        job_store: tuple[str, tenure.Store], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # Among the command's processes, one that never dies (as in D state); a pid that cannot
    # exist stands for it, so the signals sent to it reach nobody.
    from tenure.cli import run, stopping

    _, store = job_store
    stuck = processes.Process(2**30, os.getpid(), "stuck", "D")

    class WithStuck(processes.Descendants):
        def living(self, reap_except: int | None = None) -> list[processes.Process]:
            return [*super().living(reap_except), stuck]

    monkeypatch.setattr(processes, "Descendants", WithStuck)
    monkeypatch.setattr(stopping, "KILL_WAIT", 0.2)  # not the 5 s a real stop gives SIGKILL
    with store.hold("nightly", "cron-1", 30) as held:
        assert run.Supervisor(["true"], 0.1, dict(os.environ)).run(held) == 75
    err = capsys.readouterr().err
    assert "left 1 process(es) running: 1073741824 (stuck)" in err
    assert "1 process(es) of the command could not be stopped (0.1 s after SIGTERM, 5 s after SIGKILL): " \
           "1073741824 (stuck); the job is neither released nor completed, its lease runs out by its TTL" in err
    job = store.get("nightly")
    assert job is not None and job.state is tenure.JobState.LEASED and job.token == 1


def test_a_command_killed_by_a_signal_is_said_to_be_killed_not_to_exit_negatively(
        job_store: tuple[str, tenure.Store], capsys: pytest.CaptureFixture[str]) -> None:
    from tenure.cli import run

    _, store = job_store
    with store.hold("nightly", "cron-1", 30) as held:  # the leader leaves a child and kills itself
        assert run.Supervisor(["sh", "-c", "sleep 30 & kill -KILL $$"], 0.1, dict(os.environ)).run(held) == 137
    err = capsys.readouterr().err
    assert "the command was killed by SIGKILL and left 1 process(es) running" in err, err
    assert "(-9)" not in err


@pytest.fixture
def blocking_usr1() -> Iterator[subprocess.Popen[str]]:
    """A child that blocks SIGUSR1: a signal sent to it stays pending, where /proc shows it."""
    code = ("import signal, sys; signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1]); "
            "print('ready', flush=True); sys.stdin.read()")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    yield child
    child.kill()
    child.wait()


def _usr1_pending(pid: int) -> bool:
    """Whether SIGUSR1 waits in ``pid``'s pending set: kill() puts it there before it returns."""
    status = (processes.PROC / str(pid) / "status").read_text()
    pending = next(line.split()[1] for line in status.splitlines() if line.startswith("ShdPnd:"))
    return bool(int(pending, 16) & (1 << (signal.SIGUSR1 - 1)))


def test_a_pid_that_now_names_a_process_started_later_is_not_signalled(
        blocking_usr1: subprocess.Popen[str]) -> None:
    walked = processes.table()[blocking_usr1.pid]
    assert walked.start is not None
    earlier = dataclasses.replace(walked, start=walked.start - 1)  # the walk saw a process since reaped
    processes.send([earlier], signal.SIGUSR1)
    assert not _usr1_pending(blocking_usr1.pid)
    processes.send([walked], signal.SIGUSR1)
    assert _usr1_pending(blocking_usr1.pid)


def test_without_pidfds_a_pid_is_signalled_by_kill_as_it_is(blocking_usr1: subprocess.Popen[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "pidfd_open")
    walked = processes.table()[blocking_usr1.pid]
    assert walked.start is not None
    processes.send([dataclasses.replace(walked, start=walked.start - 1)], signal.SIGUSR1)
    assert _usr1_pending(blocking_usr1.pid)  # the limit the docstring states: os.kill cannot tell


def test_none_left_takes_two_walks_that_find_none(monkeypatch: pytest.MonkeyPatch) -> None:
    # The first walk missed the child (its parent was reaped mid-walk); the second finds it.
    root = 2**30
    tree = processes.Descendants(root)
    child = processes.Process(2**30 + 1, root, "child", "S")
    walks = iter([{}, {child.pid: child}])
    monkeypatch.setattr(processes, "table", lambda: next(walks))
    assert tree.living() == [child]
