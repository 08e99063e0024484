"""The stores under test, each with its floor and its peers, started for one benchmark run."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from benchmarks import floors


@dataclass
class Subject:
    name: str
    url: str
    options: dict[str, Any] = field(default_factory=dict)
    processes: bool = True  # can several processes share it?
    floor: Callable[[int], float] | None = None  # seconds for n claim+complete pairs of bare round trips
    peers: list[tuple[str, Callable[[int], float]]] = field(default_factory=list)  # seconds for n cycles


@contextlib.contextmanager
def memory() -> Iterator[Subject]:
    yield Subject("memory", "memory://bench", processes=False)


@contextlib.contextmanager
def sqlite() -> Iterator[Subject]:
    with tempfile.TemporaryDirectory(prefix="tenure-bench-") as tmp:
        yield Subject("sqlite", f"sqlite:///{tmp}/bench.db",
                      floor=lambda n: floors.sqlite_floor(f"{tmp}/floor.db", n))


SUBJECTS: dict[str, Callable[[], contextlib.AbstractContextManager[Subject]]] = {
    "memory": memory,
    "sqlite": sqlite,
}
