"""A third-party backend, written here on tenure's public RecordBackend API, passes the shipped suite.

``jsonfile:///path/to/store.json`` keeps every record in one JSON file, locked with ``flock`` for
each transaction, so processes on one machine share it. It is the backend that
docs/backends/writing-a-backend.md builds step by step; keep the two in step.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tenure
import tenure.testing
from tenure.core import audit, codec
from tenure.core.options import Options, StoreURL
from tenure.core.records import JobRecord
from tenure.core.transitions import is_next, status
from tenure.testing.kit import Tampering

RETENTION = 10_000  # rejections and history events kept


class JsonFileBackend(tenure.RecordBackend):
    characteristics = tenure.Characteristics(
        name="jsonfile",
        store_clock="the machine's wall clock (time.time), or the clock passed to connect()",
        shared_between_processes=True,  # every process locks the same file
        tls_options=None,  # sends nothing over a network
    )

    def __init__(self, path: Path, clock: tenure.Clock | None) -> None:
        self.path = path
        self.clock = clock
        self._threads = threading.Lock()  # flock() orders processes; this orders our own threads

    @classmethod
    def from_url(cls, url: StoreURL, options: Options, clock: tenure.Clock | None) -> JsonFileBackend:
        options.finish()  # no options: anything in the query string is refused by name
        if not url.path or url.path.endswith("/"):
            raise tenure.InvalidArgument("a jsonfile:// URL names a file: jsonfile:///path/to/store.json")
        return cls(Path(url.path), clock)

    def now(self) -> float:
        return self.clock.time() if self.clock is not None else time.time()

    # -- the one atomic step ------------------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        with self._threads, open(f"{self.path}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield json.loads(self.path.read_text()) if self.path.exists() else {
                    "jobs": {}, "rejections": [], "events": []}
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _write(self, data: dict[str, Any]) -> None:
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            f.write(json.dumps(data))  # dumps runs in C; dump() to a file streams in Python
            f.flush()
            os.fsync(f.fileno())  # a claim is acknowledged only once it would survive a crash
        os.replace(tmp, self.path)  # readers see the old file or the new one, never half of one

    @contextlib.contextmanager
    def transaction(self, fresh: bool = False) -> Iterator[tenure.Transaction]:
        # A locking store: every load reads the file, so ``fresh`` (a retry's) changes nothing.
        with self._locked() as data:
            tx = JsonTransaction(data, self.now())
            yield tx  # an exception here leaves the file as it was: nothing is written
            data["rejections"] = (data["rejections"] + tx.rejections)[-RETENTION:]
            data["events"] = (data["events"] + tx.events)[-RETENTION:]
            self._write(data)

    # -- reads --------------------------------------------------------------------------------
    def _snapshot(self) -> dict[str, Any]:
        with self._locked() as data:
            return data

    def get(self, job_id: str) -> tenure.JobStatus | None:
        stored = self._snapshot()["jobs"].get(job_id)
        return None if stored is None else _status(job_id, stored, self.now())

    def jobs(self) -> Iterator[tenure.JobStatus]:
        now = self.now()
        return iter([_status(job_id, stored, now) for job_id, stored in self._snapshot()["jobs"].items()])

    def rejections(self, since: float | None, limit: int | None) -> list[tenure.Rejection]:
        newest_first = audit.readable(reversed(self._snapshot()["rejections"]), _rejection)
        return audit.select(newest_first, since, limit)  # oldest first, the last ``limit`` of them

    def history(self, job_id: str | None, since: float | None, limit: int | None) -> list[tenure.HistoryEvent]:
        newest_first = audit.readable(reversed(self._snapshot()["events"]), _event)
        return audit.select(newest_first, since, limit, None if job_id is None else lambda e: e.job_id == job_id)


class JsonTransaction(tenure.Transaction):
    def __init__(self, data: dict[str, Any], now: float) -> None:
        self.data = data
        self.now = now
        self.rejections: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []

    def load(self, job_id: str) -> JobRecord | None:
        stored = self.data["jobs"].get(job_id)
        return None if stored is None else _decode(job_id, stored)

    def save(self, record: JobRecord) -> None:
        self.data["jobs"][record.job_id] = _encode(record)

    def next_claimable(self) -> str | None:
        # An expired lease first (its work is overdue), soonest expiry first; then the oldest pending job.
        # Never a corrupt record, nor one whose token no claim can follow (transitions.is_next).
        expired, pending = [], []
        for job_id, stored in self.data["jobs"].items():
            with contextlib.suppress(tenure.CorruptRecord):
                rec = _decode(job_id, stored)
                if not is_next(rec, self.now):
                    continue
                if rec.state is tenure.JobState.LEASED and rec.lease_until is not None:
                    expired.append((rec.lease_until, job_id))
                else:
                    pending.append((rec.claimable_at or rec.submitted_at or 0.0, job_id))  # a delay queues it later
        return min(expired or pending, default=(0.0, None))[1]

    def add_rejection(self, rejection: tenure.Rejection) -> None:
        self.rejections.append(codec.rejection_fields(rejection))

    def add_event(self, event: tenure.HistoryEvent) -> None:
        self.events.append(codec.event_fields(event))


# -- records as JSON: tenure's own codec checks what is read -----------------------------------
def _encode(rec: JobRecord) -> dict[str, Any]:
    return {**dataclasses.asdict(rec), "state": rec.state.value, "result": codec.result_text(rec.result)}


def _decode(job_id: str, stored: Any) -> JobRecord:
    """The record, or CorruptRecord for anything this backend did not write: never guessed at."""
    if not isinstance(stored, dict):
        raise tenure.CorruptRecord(job_id, "not a JSON object")
    fields = ("state", "owner", "token", "lease_until", "ttl", "submitted_at", "claimed_at", "renewed_at",
              "completed_at", "runs")
    return codec.job_record(job_id, job_id, *(stored.get(f) for f in fields),
                            codec.result_bytes(job_id, stored.get("result")),
                            **{f: stored.get(f) for f in codec.LIFE_FIELDS})  # attempts, delays ...


def _status(job_id: str, stored: Any, now: float) -> tenure.JobStatus:
    try:
        return status(_decode(job_id, stored), now)  # judges "expired" by the store's clock
    except tenure.CorruptRecord as exc:
        return codec.corrupt_status(job_id, job_id, exc)


def _rejection(stored: dict[str, Any]) -> tenure.Rejection:
    return codec.rejection("rejections", stored)


def _event(stored: dict[str, Any]) -> tenure.HistoryEvent:
    return codec.event("events", stored)


# -- the test: the whole suite, through the public registration ---------------------------------
tenure.register_backend("jsonfile", JsonFileBackend)


class TestJsonFileStore(tenure.testing.ConformanceSuite):
    @pytest.fixture
    def store_url(self, tmp_path: Path) -> str:
        return f"jsonfile://{tmp_path}/store.json"

    @pytest.fixture
    def connect_options(self) -> dict[str, Any]:
        return {"clock": tenure.ManualClock()}  # expiry without sleeping, where a test allows it

    @pytest.fixture
    def corrupt_record(self) -> Any:
        def corrupt(store: tenure.Store, job_id: str) -> None:
            path = store.backend.path  # type: ignore[attr-defined]
            data = json.loads(path.read_text())
            data["jobs"][job_id] = {"state": "bogus", "token": "x"}
            path.write_text(json.dumps(data))

        return corrupt

    @pytest.fixture
    def plant_raw_record(self) -> Any:
        def plant(store: tenure.Store, job_id: str, tampering: Tampering) -> bool:
            if tampering in (Tampering.BINARY_ID, Tampering.UNDECODABLE_ID):
                return False  # JSON keys are text
            store.submit(job_id)
            path = store.backend.path  # type: ignore[attr-defined]
            data = json.loads(path.read_text())
            record = data["jobs"].pop(job_id)
            if tampering is Tampering.UNREADABLE:
                record = ["not", "a", "record"]
            elif tampering is Tampering.NEWLINE_ID:
                job_id = job_id + "\nx"
            else:
                record["token"] = 2**63 - 1 if tampering is Tampering.TOP_TOKEN else 2**63 - 2
            data["jobs"][job_id] = record
            path.write_text(json.dumps(data))
            return True

        return plant
