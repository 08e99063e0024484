"""Counting a real backend's reads: its read methods wrapped on the instance, nothing faked.

Used by the snapshot tests and by benchmarks/dashboard_counted_app.py.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

import tenure

READS = ("now", "get", "jobs", "rejections", "job_rejections", "history", "summary", "page", "health")


class Reads(Counter[str]):
    """Calls of each read method since counting began; ``snapshot()`` copies them safely."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()

    def snapshot(self) -> dict[str, int]:
        with self.lock:
            return dict(self)


def count_reads(store: tenure.Store) -> Reads:
    """Count every call of the store's backend's read methods from now on."""
    reads = Reads()
    backend = store.backend
    for name in READS:
        method = getattr(backend, name)

        def counted(*args: object, _name: str = name, _method: Callable[..., object] = method) -> object:
            with reads.lock:
                reads[_name] += 1
            return _method(*args)

        setattr(backend, name, counted)
    return reads
