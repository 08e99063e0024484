"""The run's operator: keeps jobs coming and requeues parked ones, each step recorded.

Jobs are submitted as the workers take them, some with ``max_attempts`` (so fails and leases
run out park them) and some with a delay; now and then a parked job is requeued, with a
delay or not. Every submit and requeue goes to the history as the workers' operations do,
so the checker knows each job's rules and when it became claimable again.
"""

from __future__ import annotations

import random

import tenure
from tests.faults.history import Recorder

MAX_ATTEMPTS = (None, None, 1, 2, 3)  # a job's limit, drawn at submit
DELAYED = 0.25  # share of jobs submitted with a delay
DELAY = (0.1, 1.0)  # seconds of the store's clock
REQUEUE = 0.3  # chance per look that a parked job is requeued
REQUEUE_DELAYED = 0.5  # share of requeues with a delay


class Operator:
    """Submits jobs (``job-00000``, ...) to keep ``want`` waiting; requeues parked ones."""

    def __init__(self, store: tenure.Store, rec: Recorder, rng: random.Random, want: int) -> None:
        self.store = store
        self.rec = rec
        self.rng = rng
        self.want = want
        self.submitted = 0

    def look(self) -> None:
        """One round: top the waiting jobs up, maybe requeue a parked one."""
        try:
            jobs = list(self.store.jobs())
        except tenure.BackendUnavailable:
            return  # a server fault: the workers see it too
        waiting = sum(1 for j in jobs if j.state in (tenure.JobState.PENDING, tenure.JobState.SCHEDULED))
        for _ in range(max(0, self.want - waiting)):
            if not self.submit():
                return
        parked = [j.job_id for j in jobs if j.state is tenure.JobState.PARKED]
        if parked and self.rng.random() < REQUEUE:
            self.requeue(self.rng.choice(parked))

    def submit(self) -> bool:
        """Submit the next job; False if the store was unreachable. A job whose submit has an
        unknown outcome is not submitted again (it may have run and completed since)."""
        job = f"job-{self.submitted:05d}"
        self.submitted += 1
        limit = self.rng.choice(MAX_ATTEMPTS)
        delay = round(self.rng.uniform(*DELAY), 3) if self.rng.random() < DELAYED else 0.0
        op = self.rec.invoke("submit", job, max_attempts=limit, delay=delay)
        try:
            self.store.submit(job, max_attempts=limit, delay=delay)
        except tenure.BackendUnavailable as exc:
            self.rec.end("info", op, error=type(exc).__name__)
            return False
        self.rec.end("ok", op)
        return True

    def requeue(self, job: str) -> None:
        delay = round(self.rng.uniform(*DELAY), 3) if self.rng.random() < REQUEUE_DELAYED else 0.0
        op = self.rec.invoke("requeue", job, delay=delay)
        try:
            self.store.requeue(job, actor="operator", delay=delay)
        except tenure.BackendUnavailable as exc:
            self.rec.end("info", op, error=type(exc).__name__)
        except tenure.LeaseError as exc:
            self.rec.end("fail", op, error=type(exc).__name__)
        else:
            self.rec.end("ok", op)
