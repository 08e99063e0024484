"""The ``run-term`` fault: SIGTERM to ``tenure run`` and its command mid-run, with children
that ignore SIGTERM, while a second ``tenure run`` waits for the same job.

Each injection takes a fresh job of a store of its own (the workload's checker sees only its
workers' claims). ``tenure run`` A runs ``held_command.py`` (a leader and two children that
ignore SIGTERM, one in a session of its own); B waits for the job with ``--wait``. Once A's
three processes write effects, A gets SIGTERM, and half the time its command's process group
too (as systemd sends it to a whole unit). A must stop all three before it releases the job;
B then claims it with the next token and runs a command whose leader exits 0 and leaves its
children running, which B must stop before it completes the job. The processes' effects go
to one file per job (see ``held_command``); ``checker.check_process_effects`` reads them.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from tenure.cli import processes
from tests.faults.checker import ProcessEffect
from tests.faults.history import Recorder

COMMAND = Path(__file__).with_name("held_command.py")
ROOT = Path(__file__).resolve().parents[2]
GRACE = 0.3  # --grace: the children ignore SIGTERM, so SIGKILL comes this long after it
TTL_FACTOR = 5  # the runs' TTL in the suite's TTLs: a lease lost under load is not this fault
STARTED = 3  # processes of a command: the leader and its two children
EXIT_TIMEOUT = 60.0  # a tenure run that has not exited by then is reported and killed


def effects_dir(history: Path) -> Path:
    return history.parent / "held"


def load_effects(directory: Path) -> list[ProcessEffect]:
    """Every job's effects, in the order they were written ("job token pid n" lines)."""
    found = []
    for path in sorted(directory.glob("*.log")) if directory.exists() else []:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            job, token, pid, _ = line.split()
            found.append(ProcessEffect(job, int(token), int(pid), number))
    return found


class RunTerm:
    def __init__(self, url: str, history: Path, ttl: float, rec: Recorder) -> None:
        self.url = url
        self.dir = effects_dir(history)
        self.dir.mkdir(exist_ok=True)
        self.ttl = ttl * TTL_FACTOR
        self.rec = rec
        self.runs: list[subprocess.Popen[bytes]] = []
        self.count = 0
        self.problems: list[str] = []  # violations the checker cannot see in the effects

    def inject(self, rng: random.Random, ttl: float) -> bool:
        """One injection; False if the first run never got going (nothing was injected)."""
        self.count += 1
        job = f"run-{self.count:04d}"
        effects = self.dir / f"{job}.log"
        first = self._start(job, "a", effects, "run")
        if not self._wait_for_effects(effects, first):
            self.rec.note("run-term", job=job, skipped="the first run wrote no effects")
            return False
        second = self._start(job, "b", effects, "exit")
        time.sleep(rng.uniform(0.2, 1.0) * ttl)  # mid-run: the second one waits meanwhile
        group = rng.random() < 0.5
        leaders = [p for p in processes.table().values() if p.ppid == first.pid]
        first.send_signal(signal.SIGTERM)
        if group:
            for leader in leaders:  # the command's own process group, as systemd does
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(leader.pid, signal.SIGTERM)
        codes = [self._exit(first), self._exit(second)]
        self.rec.note("run-term", job=job, group=group, exits=codes)
        if "hung" in codes:
            self.problems.append(f"{job}: tenure run did not exit within {EXIT_TIMEOUT:g} s of the fault "
                                 f"(exit statuses {codes})")
        return True

    def _start(self, job: str, name: str, effects: Path, mode: str) -> subprocess.Popen[bytes]:
        log = open(self.dir / f"{job}-{name}.err", "ab")  # noqa: SIM115 - the child keeps it
        cmd = [sys.executable, "-m", "tenure", "--url", self.url, "run", job, "--owner", f"{job}-{name}",
               "--ttl", f"{self.ttl:g}", "--grace", f"{GRACE:g}", "--wait", f"{EXIT_TIMEOUT:g}", "--",
               sys.executable, str(COMMAND), str(effects), mode]
        proc = subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT,
                                stdout=log, stderr=log)
        log.close()
        self.runs.append(proc)
        return proc

    @staticmethod
    def _wait_for_effects(effects: Path, run: subprocess.Popen[bytes]) -> bool:
        """Until each of the command's processes has written an effect."""
        deadline = time.monotonic() + EXIT_TIMEOUT
        while time.monotonic() < deadline and run.poll() is None:
            lines = effects.read_text().splitlines() if effects.exists() else []
            if len({line.split()[2] for line in lines}) >= STARTED:
                return True
            time.sleep(0.02)  # polling the file the processes write
        return False

    @staticmethod
    def _exit(run: subprocess.Popen[bytes]) -> int | str:
        try:
            return run.wait(EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            return "hung"

    def close(self) -> None:
        """Nothing of this fault outlives the run: runs still there, and any process that wrote
        an effect (only a broken ``tenure run`` leaves one)."""
        for run in self.runs:
            if run.poll() is None:
                run.kill()
                run.wait()
        for effects in self.dir.glob("*.log"):
            for pid in {int(line.split()[2]) for line in effects.read_text().splitlines()}:
                if processes.running(pid) and _runs_command(pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)


def _runs_command(pid: int) -> bool:
    """Whether ``pid`` still is a process of ``held_command`` (not another that got its pid)."""
    try:
        return COMMAND.name.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
