"""The faults: worker pauses, suspends and kills, claim bursts, skewed worker clocks, forged fencing
tokens, server and network faults.

Worker processes are started here (under ``faketime`` when their clock is to be skewed), so
the nemesis can pause, kill and replace them. Server and network faults go through the
environment. Every fault is logged to the run's history directory as ``nemesis`` notes.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import tenure
from tests.faults import suspend
from tests.faults.clock import true_now
from tests.faults.forger import Forger
from tests.faults.history import Recorder, file_for
from tests.faults.run_term import RunTerm
from tests.harness import Harness

ROOT = Path(__file__).resolve().parents[2]
# Clock faults: an hour either way, and rates inside the default 5 % drift margin.
SKEWS = ("+1h", "-1h", "+0 x1.03", "+0 x0.97")
BURST_WORKERS = 3


FAKETIME_LIBS = ("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
                 "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
                 "/usr/lib/faketime/libfaketimeMT.so.1", "/usr/local/lib/faketime/libfaketimeMT.so.1")


def faketime_library() -> str:
    """Debian's multi-threaded libfaketime (workers run threads: gRPC, kazoo)."""
    for path in FAKETIME_LIBS:
        if os.path.exists(path):
            return path
    raise RuntimeError("libfaketime is not installed (Debian package faketime)")


class Workers:
    """The worker processes of one run."""

    def __init__(self, env: Harness, base: dict[str, Any], rng: random.Random) -> None:
        self.env = env
        self.base = base
        self.rng = rng
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.clocks: dict[str, str] = {}
        self.generation: Counter[str] = Counter()

    def launch(self, name: str, skew: str | None = None, **extra: Any) -> None:
        cfg = {**self.base, **extra, "name": name, "url": self.env.worker_url(name),
               "seed": self.rng.randrange(2**32), "careless": int(name.split("-")[0][1:]) % 2 == 0, "skew": skew}
        # Every worker's monotonic clock can be made to miss a pause (the suspend fault).
        cfg["hidden_clock"] = str(Path(self.base["history"]) / f"{name}.hidden")
        suspend.create(Path(cfg["hidden_clock"]))
        cmd = [sys.executable, "-m", "tests.faults.workload", json.dumps(cfg)]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        if skew:
            # The library itself rather than the ``faketime`` program, which forks: signals
            # must reach the worker, not a wrapper.
            env.update(LD_PRELOAD=faketime_library(), FAKETIME=skew, FAKETIME_NO_CACHE="1")
            self.clocks[name] = skew
        log = open(Path(self.base["history"]) / f"{name}.log", "ab")  # noqa: SIM115 - the child keeps it
        self.procs[name] = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=log)
        log.close()

    def replace(self, name: str) -> str:
        """A new process in place of a killed one, under a new name (histories stay apart)."""
        stem = name.split("-")[0]
        self.generation[stem] += 1
        new = f"{stem}-{self.generation[stem]}"
        self.launch(new, self.clocks.get(name), burst_mode=stem.startswith("b"))
        return new

    def hide(self, name: str, seconds: float) -> None:
        """Make ``name``'s monotonic clock miss ``seconds`` (see tests.faults.suspend)."""
        suspend.hide(Path(self.base["history"]) / f"{name}.hidden", seconds)

    def alive(self) -> list[str]:
        return [n for n, p in self.procs.items() if p.poll() is None]

    def signal(self, name: str, sig: int) -> None:
        p = self.procs[name]
        if p.poll() is None:
            os.kill(p.pid, sig)

    def stop(self, grace: float) -> None:
        for name in self.alive():
            self.signal(name, signal.SIGCONT)
            self.signal(name, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for p in self.procs.values():
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


class Nemesis(threading.Thread):
    """Injects the chosen faults one after another until stopped."""

    def __init__(self, env: Harness, workers: Workers, faults: list[str], admin_url: str,
                 rng: random.Random, history: Path) -> None:
        super().__init__(name="nemesis", daemon=True)
        self.env = env
        self.workers = workers
        self.faults = [f for f in faults if f != "skew"]  # skew is applied at launch
        self.admin_url = admin_url
        self.rng = rng
        self.rec = Recorder(file_for(history, "nemesis").with_suffix(".log"), "nemesis")
        self.forger = Forger(history, Path(workers.base["destination"]), admin_url)
        self.run_term = RunTerm(env.side_url(), history, env.fault_ttl, self.rec) if "run-term" in faults else None
        self.halt = threading.Event()
        self.done: Counter[str] = Counter()
        self.bursts = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        ttl = self.env.fault_ttl
        try:
            while not self.halt.wait(self.rng.uniform(0.3, 1.0) * ttl):
                if self.faults:
                    fault = self.rng.choice(self.faults)
                    self.inject(fault, ttl)
        except BaseException as exc:  # reported by the run: a nemesis that dies hides nothing
            self.error = exc

    def inject(self, fault: str, ttl: float) -> None:
        w = self.workers
        if fault == "pause":
            name = self.rng.choice(w.alive())
            pause = self.rng.uniform(1.2, 3.0) * ttl
            self.rec.note("pause", worker=name, seconds=pause)
            w.signal(name, signal.SIGSTOP)
            self.halt.wait(pause)
            w.signal(name, signal.SIGCONT)
        elif fault == "suspend":
            # A pause its monotonic clock does not see, as after a suspend: only the boot clock
            # tells the worker that its leases ran out meanwhile.
            name = self.rng.choice(w.alive())
            pause = self.rng.uniform(1.2, 3.0) * ttl
            self.rec.note("suspend", worker=name, seconds=pause)
            w.signal(name, signal.SIGSTOP)
            start = true_now()
            self.halt.wait(pause)
            w.hide(name, true_now() - start)  # while it is stopped: it wakes to the jump
            w.signal(name, signal.SIGCONT)
        elif fault == "burst":
            if not self.burst():
                return
        elif fault == "forge":
            if not self.forger.forge(self.rng):
                return
            self.rec.note("forge")
        elif fault == "run-term":
            assert self.run_term is not None
            if not self.run_term.inject(self.rng, ttl):
                return
        elif fault == "kill-worker":
            name = self.rng.choice([n for n in w.alive() if not n.startswith("b")])
            w.signal(name, signal.SIGKILL)
            w.procs[name].wait()
            self.rec.note("kill-worker", worker=name, replacement=w.replace(name))
        elif fault == "net":
            name = self.rng.choice([n for n in w.alive() if not n.startswith("b")])
            mode = self.rng.choice(("blackhole", "delay", "drop"))
            delay = self.rng.uniform(0.05, 0.6)
            seconds = self.rng.uniform(1.2, 3.0) * ttl
            self.rec.note("net", worker=name, mode=mode, delay=delay, seconds=seconds)
            self.env.net_fault(name, mode, delay)
            self.halt.wait(seconds)
            self.env.net_fault(name, "pass")
        else:
            low, high = self.env.leader_fault_ttls if fault.startswith("leader") else (0.5, 1.5)
            seconds = self.rng.uniform(low, high) * ttl
            self.rec.note(fault, seconds=seconds)
            self.env.server_fault(fault, self.rng, seconds)
        self.done[fault] += 1

    def burst(self) -> bool:
        """Announce jobs held right now; every burst process claims them at the same moment."""
        try:
            with tenure.connect(self.admin_url) as admin:
                held = [j.job_id for j in admin.jobs() if j.state is tenure.JobState.LEASED]
        except tenure.BackendUnavailable:
            return False
        if not held:
            return False
        self.bursts += 1
        jobs = self.rng.sample(held, min(3, len(held)))
        path = Path(self.workers.base["burst"])
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"n": self.bursts, "jobs": jobs, "at": true_now() + 0.2}))
        tmp.replace(path)
        self.rec.note("burst", jobs=jobs)
        return True

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=120)
        self.rec.close()
        self.forger.close()
        if self.run_term is not None:
            self.run_term.close()
