"""Timing helpers: medians of several runs, percentiles, and met/not-met lines."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Latencies:
    samples: dict[str, list[float]] = field(default_factory=dict)

    def timed(self, op: str, call: Callable[[], object]) -> object:
        start = time.perf_counter()
        result = call()
        self.samples.setdefault(op, []).append(time.perf_counter() - start)
        return result

    def merge(self, other: Latencies) -> None:
        for op, values in other.samples.items():
            self.samples.setdefault(op, []).extend(values)

    def pct(self, op: str, q: float) -> float:
        values = sorted(self.samples[op])
        return values[min(len(values) - 1, int(q * len(values)))]


def median_of(runs: int, measure: Callable[[], float]) -> float:
    return statistics.median(measure() for _ in range(runs))


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


class Targets:
    """Collects each target as met or not, printed as it is checked and summed up at the end."""

    def __init__(self) -> None:
        self.lines: list[tuple[bool, str]] = []

    def check(self, ok: bool, text: str) -> None:
        self.lines.append((ok, text))
        print(f"  target {'MET    ' if ok else 'NOT MET'}  {text}", flush=True)

    def summary(self) -> str:
        met = sum(ok for ok, _ in self.lines)
        return f"{met} of {len(self.lines)} targets met"
