"""claim_next's cursor over etcd's ``queue/`` keys: the oldest pending jobs, read in bounded
spans of the key space.
"""

from __future__ import annotations

import threading

from tenure.backends.etcd import client as ec
from tenure.backends.etcd.client import KV
from tenure.backends.etcd.layout import Keys
from tenure.core.clock import boot_clock


class QueueCursor:
    """Reads the oldest ``queue/`` keys without making etcd walk the whole queue.

    etcd 3.4 walks every key of a range to answer it, even with a limit of one (its index has
    no limited walk before 3.5): at 100,000 queued jobs a read of the 32 oldest took 220 ms.
    So reads are bounded in the key space: from the oldest key this process saw (the floor) to
    ``WINDOW_US`` of submission time after it, widening 16-fold while nothing is found, up to
    the whole queue. Keys never sort below the floor unless a submitter's clock is behind
    ours; a read of the whole queue every ``RESYNC`` seconds finds those.
    """

    WINDOW_US = 250_000
    RESYNC = 10.0
    PAGE = 32

    def __init__(self, keys: Keys) -> None:
        self.start, self.end = keys.span("queue")
        self._lock = threading.Lock()
        self._floor: bytes | None = None
        self._resync_at = 0.0

    def window(self, after: bytes | None = None, widen: int = 0) -> tuple[bytes, bytes]:
        """The span to read next: from ``after`` (or the floor), ``16 ** widen`` windows wide."""
        with self._lock:
            floor = None if boot_clock() >= self._resync_at else self._floor
        low = after or floor
        if low is None:
            return self.start, self.end
        try:
            micros = int(low[len(self.start):len(self.start) + 20])
        except ValueError:  # not tenure's key: read on from it to the end
            return low, self.end
        width = self.WINDOW_US * 16 ** widen
        return low, self.end if width > 10 ** 16 else self.start + b"%020d" % (micros + width)

    def read(self, span: tuple[bytes, bytes], kvs: list[KV], after: bytes | None) -> None:
        """Note what a read of ``span`` (from ``window``) found."""
        if after is not None or (not kvs and span[1] != self.end):
            return  # reading on, or a window to widen: the floor stays
        with self._lock:
            self._floor = kvs[0].key if kvs else None
            if span[0] == self.start:
                self._resync_at = boot_clock() + self.RESYNC

    def oldest(self, after: bytes | None = None,
               first: tuple[tuple[bytes, bytes], list[KV]] | None = None) -> ec.EtcdIo[list[KV]]:
        """The oldest keys from the floor (or after ``after``); ``first``: a window already
        read (in claim_next's transaction), to widen from if it was empty. Its reads are
        yielded (``client.EtcdIo``): claim_next runs it in either flavour."""
        widen = 0
        while True:
            if first is not None:
                span, kvs = first
                first = None
            else:
                span = self.window(after, widen)
                kvs, _, _ = yield ec.Range(*span, limit=self.PAGE)
            self.read(span, kvs, after)
            if kvs or span[0] == self.start or (span[1] == self.end and after is not None):
                return kvs
            # Nothing from the floor on: widen, and past the end look below the floor too.
            widen = 0 if span[1] == self.end else widen + 1
