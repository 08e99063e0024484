"""The verbs every test server answers to, written once: start, stop, kill, pause, resume, restart.

etcd, ZooKeeper and PostgreSQL servers subclass ``ServerProcess`` and supply ``launch()`` (spawn
the process in a session of its own) and ``serving()``; clusters answer ``leader()``. A fault is
always real: a signal to the server's processes, never a mock.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path


class ServerProcess:
    proc: subprocess.Popen[bytes] | None = None
    name = "server"

    def launch(self) -> None:
        """Spawn the process (``start_new_session=True``) and return at once."""
        raise NotImplementedError

    def serving(self) -> bool:
        """Whether the server answers clients now."""
        raise NotImplementedError

    def start(self, timeout: float = 60.0) -> None:
        """Launch, and return once the server answers."""
        self.launch()
        self.wait_serving(timeout)

    def wait_serving(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.serving():
            if not self.alive():
                raise RuntimeError(f"{self.name} exited with {self.proc and self.proc.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} not serving after {timeout}s")
            time.sleep(0.05)  # polling a starting server

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def pids(self) -> list[int]:
        """The processes a signal must reach (the process group's leader by default)."""
        return [self.proc.pid] if self.alive() and self.proc is not None else []

    def signal(self, sig: signal.Signals) -> None:
        if self.alive() and self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM: a clean shutdown; SIGKILL if it takes longer than ``timeout``."""
        self.resume()
        self.signal(signal.SIGTERM)
        if self.proc is not None:
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        """SIGKILL: a crash, no goodbye to clients or peers; the process is reaped."""
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(30)

    def pause(self) -> None:
        """SIGSTOP, returning once the kernel reports every thread stopped."""
        self.signal(signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while not all(_stopped(pid) for pid in self.pids()) and time.monotonic() < deadline:
            time.sleep(0.005)  # the signal lands when the threads are next scheduled

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def restart(self, timeout: float = 60.0) -> None:
        """A crash and a start on the same data and port."""
        self.kill()
        self.start(timeout)


def _stopped(pid: int) -> bool:
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
        states = [(t / "stat").read_text().rsplit(")", 1)[1].split()[0] for t in tasks]
    except OSError:
        return True  # gone or unreadable: nothing left running either way
    return all(state in "tT" for state in states)
