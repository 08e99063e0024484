"""A Jepsen-style operation history, one JSON line per event, one file per process.

Each operation is written when it is invoked and again when it ends: ``ok``, ``fail``
(it certainly did not happen) or ``info`` (unknown: a timeout or a lost connection, so it
may have happened at any time after its invocation). Lines are flushed one by one, so a
process killed with SIGKILL leaves every event it saw finish, and its open operations
read as unknown.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from tests.faults.clock import true_now

INF = float("inf")


class Recorder:
    """Writes one process's history; ``invoke`` returns the id its outcome refers to."""

    def __init__(self, path: Path, process: str) -> None:
        self.process = process
        self._file: TextIO = open(path, "a", buffering=1)  # noqa: SIM115 - lives as long as the process
        self._next = 0

    def _write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")

    @property
    def next_id(self) -> int:
        """The id the next ``invoke`` will return (claims name their owner after it)."""
        return self._next + 1

    def invoke(self, op: str, job: str | None = None, token: int | None = None, **extra: Any) -> int:
        self._next += 1
        self._write({"type": "invoke", "p": self.process, "id": self._next, "op": op, "job": job,
                     "token": token, "t": true_now(), **extra})
        return self._next

    def end(self, kind: str, op_id: int, **fields: Any) -> None:
        assert kind in ("ok", "fail", "info")
        self._write({"type": kind, "p": self.process, "id": op_id, "t": true_now(), **fields})

    def note(self, what: str, **fields: Any) -> None:
        """Something that is not an operation (a worker giving up a lease, say)."""
        self._write({"type": "note", "p": self.process, "what": what, "t": true_now(), **fields})

    def close(self) -> None:
        self._file.close()


@dataclass
class Operation:
    """One operation with its outcome; ``end`` is INF for unknown outcomes."""

    process: str
    id: int
    op: str  # claim, renew, complete, effect
    job: str | None
    token: int | None
    start: float
    end: float = INF
    outcome: str = "info"  # ok, fail, info
    error: str | None = None  # the exception type name, for fail and info
    reason: str | None = None  # a store rejection's reason
    owner: str | None = None
    ttl: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, int]:
        return self.process, self.id


def read_lines(paths: Iterable[Path]) -> Iterator[dict[str, Any]]:
    for path in paths:
        with open(path) as f:
            for line in f:
                if line.endswith("\n"):  # a line cut short by SIGKILL is not an event
                    yield json.loads(line)


def load(directory: Path) -> list[Operation]:
    """Every operation of every process in ``directory``, in order of invocation."""
    ops: dict[tuple[str, int], Operation] = {}
    for rec in read_lines(sorted(directory.glob("*.jsonl"))):
        kind = rec["type"]
        if kind == "invoke":
            extra = {k: v for k, v in rec.items()
                     if k not in ("type", "p", "id", "op", "job", "token", "t", "owner", "ttl")}
            ops[rec["p"], rec["id"]] = Operation(rec["p"], rec["id"], rec["op"], rec["job"], rec["token"],
                                                 rec["t"], owner=rec.get("owner"), ttl=rec.get("ttl"),
                                                 extra=extra)
        elif kind in ("ok", "fail", "info"):
            o = ops[rec["p"], rec["id"]]
            o.outcome = kind
            o.end = rec["t"] if kind != "info" else INF
            o.error = rec.get("error")
            o.reason = rec.get("reason")
            for name in ("job", "token", "owner"):
                if rec.get(name) is not None:
                    setattr(o, name, rec[name])
            o.extra.update({k: v for k, v in rec.items() if k not in ("type", "p", "id", "t", "error",
                                                                       "reason", "job", "token", "owner")})
    return sorted(ops.values(), key=lambda o: o.start)


def file_for(directory: Path, process: str) -> Path:
    os.makedirs(directory, exist_ok=True)
    return directory / f"{process}.jsonl"
