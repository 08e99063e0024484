"""A thread-safe map of at most ``limit`` entries, for the caches a process keeps of what it
wrote or learnt (a fast path, never needed for safety): past the limit the oldest goes first.

Entries stand in the order they came in; a call with ``refresh=True`` moves its entry to the
newest end, so each user says at the call whether a use keeps an entry (recency) or not
(insertion order).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Bounded(Generic[K, V]):
    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._entries: collections.OrderedDict[K, V] = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K, *, refresh: bool = False) -> V | None:
        with self._lock:
            if key not in self._entries:
                return None
            if refresh:
                self._entries.move_to_end(key)
            return self._entries[key]

    def put(self, key: K, value: V, *, refresh: bool = False) -> None:
        """Set ``key``: a new key is the newest; one already here keeps its place unless ``refresh``."""
        with self._lock:
            self._entries[key] = value
            if refresh:
                self._entries.move_to_end(key)
            if len(self._entries) > self._limit:
                self._evict()

    def setdefault(self, key: K, value: V, *, refresh: bool = False) -> V:
        """The value at ``key``, set to ``value`` first if absent."""
        with self._lock:
            kept = self._entries.setdefault(key, value)
            if refresh:
                self._entries.move_to_end(key)
            if len(self._entries) > self._limit:
                self._evict()
            return kept

    def pop(self, key: K) -> V | None:
        with self._lock:
            return self._entries.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def _evict(self) -> None:  # rarely: the caller checks first (every operation puts)
        while len(self._entries) > self._limit:
            self._entries.popitem(last=False)
