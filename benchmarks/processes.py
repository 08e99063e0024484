"""Benchmark subjects in processes of their own, spoken to one line at a time, and a git
revision's tree to run one from."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class LineProcess:
    """A child process that answers each line written to it with one line."""

    def __init__(self, label: str, argv: list[str], env: dict[str, str], cwd: Path | None = None) -> None:
        self.label = label
        self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                      env=env, cwd=cwd)
        self.first = self.line()  # what it says once it is ready

    def line(self) -> str:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.label} stopped (exit {self._proc.wait()})")
        return line.strip()

    def ask(self, request: str) -> str:
        assert self._proc.stdin is not None
        self._proc.stdin.write(f"{request}\n")
        self._proc.stdin.flush()
        return self.line()

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc.wait(timeout=60)


def archived(revision: str, into: Path) -> Path:
    """The tree of ``revision`` of this repository, extracted into ``into`` (made here)."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into
