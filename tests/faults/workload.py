"""The worker process: claim a job, write fenced effects while renewing, then complete it,
or fail it, or release it.

Run as ``python -m tests.faults.workload CONFIG_JSON``, possibly under ``faketime``. Every
store and destination operation goes to the history as invoke, then ok, fail or info. Each
claim uses a fresh owner name (``process#op``), so a claim whose answer was lost is found
again in the store's own history. ``burst`` processes claim chosen jobs all at once when
the run's burst file changes, to compete with the holders.

Some leases end in ``fail`` (with a short ``retry_in``, or with the store's backoff, short
by the fault store's options), a few in ``release``; after half of its fails a worker
claims the job again by name at once, which the store must refuse as scheduled (or parked)
unless the wait was none.
"""

from __future__ import annotations

import functools
import json
import logging
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

import tenure
from tests.faults import suspend
from tests.faults.clock import true_now
from tests.faults.destination import Destination
from tests.faults.history import Recorder, file_for

IDLE = 0.05  # seconds between looks for work when there is none
# How a lease ends, by share: fail with retry_in, fail with the store's backoff, release; else complete.
FAIL_RETRY_IN, FAIL_BACKOFF, RELEASE = 0.15, 0.10, 0.05
RETRY_IN = (0.0, 0.3)  # seconds of the store's clock a fail with retry_in asks for
EARLY_END_LOGGER = "tenure.early_end"  # a line per lease a store (etcd) ended early that its holder restored


class Worker:
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.name: str = cfg["name"]
        self.ttl: float = cfg["ttl"]
        self.steps: int = cfg["steps"]
        self.rng = random.Random(cfg["seed"])
        self.rec = Recorder(file_for(Path(cfg["history"]), self.name), self.name)
        self.stopping = False
        # A careless worker never checks its safe local deadline and, once refused, still
        # tries to complete (worker A of the seed): only the store and the fence stop it.
        self.careless: bool = cfg.get("careless", False)
        self.store = self._connect()
        self.dest = Destination(Path(cfg["destination"]), timeout=cfg.get("dest_timeout", 2.0))

    def _connect(self) -> tenure.Store:
        while True:  # the server may be down right now: that is one of the faults
            try:
                return tenure.connect(self.cfg["url"])
            except tenure.BackendUnavailable as exc:
                self.rec.note("connect-failed", error=str(exc)[:200])
                time.sleep(0.5)

    def local_ok(self, lease: tenure.Lease) -> bool:
        return self.store.clock.monotonic() < lease.deadline

    # -- one operation each, recorded ------------------------------------------------------
    def claim_next(self) -> tenure.Lease | None:
        op = self.rec.invoke("claim", owner=f"{self.name}#{self.rec.next_id}", ttl=self.ttl)
        return self._claimed(op, lambda owner: self.store.claim_next(owner, self.ttl))

    def claim(self, job: str) -> tenure.Lease | None:
        op = self.rec.invoke("claim", job, owner=f"{self.name}#{self.rec.next_id}", ttl=self.ttl)
        return self._claimed(op, lambda owner: self.store.claim(job, owner, self.ttl))

    def _claimed(self, op: int, call: Any) -> tenure.Lease | None:
        try:
            lease: tenure.Lease | None = call(f"{self.name}#{op}")
        except tenure.BackendUnavailable as exc:
            self.rec.end("info", op, error=type(exc).__name__)
            return None
        except tenure.LeaseError as exc:  # AlreadyClaimed, JobCompleted, JobParked, JobScheduled
            self.rec.end("fail", op, error=type(exc).__name__)
            return None
        if lease is None:
            self.rec.end("fail", op, error="nothing")
            return None
        self.rec.end("ok", op, job=lease.job_id, token=lease.token, expires_at=lease.expires_at,
                     attempt=lease.attempt)
        return lease

    def effect(self, lease: tenure.Lease) -> bool:
        """One fenced write; False once the lease must not be used any more."""
        op = self.rec.invoke("effect", lease.job_id, lease.token, owner=lease.owner)

        # Even a careless worker checks here, inside the fenced transaction: nothing else can
        # stop a stale write that lands before the new holder's first one (docs/protocol.md).
        def still_held() -> None:
            if not self.local_ok(lease):
                raise tenure.LeaseLost("safe local deadline passed")

        try:
            self.dest.write(lease.job_id, lease.token, lease.owner, self.name, op, true_now, still_held,
                            self.dest.signature(lease.job_id, lease.owner, lease.token))
        except tenure.StaleToken as exc:
            self.rec.end("fail", op, error="StaleToken", highest=exc.highest)
            return False
        except tenure.LeaseLost:
            self.rec.end("fail", op, error="LeaseLost")
            return False
        except tenure.BackendUnavailable as exc:
            self.rec.end("info", op, error=type(exc).__name__)
            return True
        self.rec.end("ok", op)
        return True

    def renewed(self, lease: tenure.Lease) -> tenure.Lease:
        """Half the renewals through ``renew_many``, a batch of one: the path held leases take
        (on etcd, keys moved onto a shared etcd lease), the other half through ``renew``."""
        if self.rng.random() < 0.5:
            return self.store.renew(lease)
        (found,) = self.store.renew_many([lease])
        if isinstance(found, BaseException):
            raise found
        return found

    def holder_op(self, name: str, lease: tenure.Lease, **args: Any) -> tuple[str, tenure.Lease | None]:
        """Renew, complete, fail (``retry_in`` in ``args``) or release, retrying unknown
        outcomes until the safe deadline."""
        attempts = 0
        while True:
            op = self.rec.invoke(name, lease.job_id, lease.token, owner=lease.owner, ttl=self.ttl, **args)
            try:
                if name == "renew":
                    new = self.renewed(lease)
                    self.rec.end("ok", op, expires_at=new.expires_at)
                    return "ok", new
                if name == "complete":
                    self.store.complete(lease, f"{self.name}#{op}")
                elif name == "fail":
                    self.store.fail(lease, f"{self.name}#{op} failed", retry_in=args["retry_in"])
                else:
                    self.store.release(lease)
                self.rec.end("ok", op)
                return "ok", None
            except tenure.StaleLease as exc:
                self.rec.end("fail", op, error="StaleLease", reason=exc.rejection.reason)
                return "stale", None
            except tenure.BackendUnavailable as exc:
                self.rec.end("info", op, error=type(exc).__name__)
            except tenure.LeaseError as exc:
                self.rec.end("fail", op, error=type(exc).__name__)
                return "error", None
            attempts += 1
            if self.stopping or (attempts >= 3 if self.careless else not self.local_ok(lease)):
                return "unknown", None
            time.sleep(self.ttl / 20)

    # -- what a worker does with a lease ---------------------------------------------------
    def ending(self) -> tuple[str, dict[str, Any], int]:
        """How the next lease ends (the op and its arguments) and after how many steps."""
        draw = self.rng.random()
        if draw < FAIL_RETRY_IN:
            return "fail", {"retry_in": round(self.rng.uniform(*RETRY_IN), 3)}, self.rng.randint(1, self.steps)
        if draw < FAIL_RETRY_IN + FAIL_BACKOFF:
            return "fail", {"retry_in": None}, self.rng.randint(1, self.steps)
        if draw < FAIL_RETRY_IN + FAIL_BACKOFF + RELEASE:
            return "release", {}, 1
        return "complete", {}, self.steps

    def work(self, lease: tenure.Lease | None) -> None:
        while lease is not None and not self.stopping:
            lease = self.work_once(lease)

    def work_once(self, lease: tenure.Lease) -> tenure.Lease | None:
        """Work on one lease and end it; a lease on the same job if the worker claims it
        again at once after a fail (half the time)."""
        end, args, steps = self.ending()
        for _ in range(steps):
            if not self.careless and not self.local_ok(lease):
                self.rec.note("deadline", job=lease.job_id, token=lease.token)
                return None
            if not self.effect(lease):
                if self.careless:
                    self.holder_op(end, lease, **args)
                return None
            time.sleep(self.rng.uniform(0.1, 0.3) * self.ttl)
            outcome, renewed = self.holder_op("renew", lease)
            if renewed is None:
                if self.careless and outcome == "stale":
                    self.effect(lease)  # refused by the fence, or by the deadline check in it
                    self.holder_op(end, lease, **args)
                return None
            lease = renewed
        outcome, _ = self.holder_op(end, lease, **args)
        if end == "fail" and outcome == "ok" and self.rng.random() < 0.5:
            return self.claim(lease.job_id)  # scheduled (or parked) unless it waits for nothing
        return None

    def run(self) -> None:
        self.rec.note("started", skew=self.cfg.get("skew"), careless=self.careless)  # for reading it later
        if self.cfg.get("burst_mode"):
            self.run_burst(Path(self.cfg["burst"]))
            return
        batch = self.cfg.get("batch", 1)
        batches = Batches(self)
        while not self.stopping:
            if batch > 1:
                leases = batches.claim(batch)
                if leases:
                    batches.work(leases)
                    continue
            else:
                lease = self.claim_next()
                if lease is not None:
                    self.work(lease)
                    continue
            time.sleep(IDLE)

    def run_burst(self, trigger: Path) -> None:
        """Wait for each burst the coordinator announces, then claim its jobs at its time."""
        seen = 0
        while not self.stopping:
            try:
                burst = json.loads(trigger.read_text())
            except (OSError, ValueError):
                burst = {"n": 0}
            if burst["n"] == seen:
                time.sleep(IDLE)
                continue
            seen = burst["n"]
            while true_now() < burst["at"]:
                time.sleep(0.002)
            for job in burst["jobs"]:
                lease = self.claim(job)
                if lease is not None:
                    self.work(lease)

    def stop(self, *_: Any) -> None:
        self.stopping = True


class Batches:
    """A worker that claims ``--batch`` leases at once (``claim_next_many``), works on them side
    by side (an effect each, then one ``renew_many`` a step) and completes those that end so in
    one ``complete_many``; fails and releases go one by one. Every lease is its own operation in
    the history but the claim: one operation for the batch, which the checker splits."""

    def __init__(self, worker: Worker) -> None:
        self.w = worker
        self.rec = worker.rec

    def claim(self, n: int) -> list[tenure.Lease]:
        op = self.rec.invoke("claim", owner=f"{self.w.name}#{self.rec.next_id}", ttl=self.w.ttl, batch=n)
        try:
            leases = self.w.store.claim_next_many(f"{self.w.name}#{op}", self.w.ttl, n)
        except tenure.BackendUnavailable as exc:
            self.rec.end("info", op, error=type(exc).__name__)
            return []
        except tenure.LeaseError as exc:
            self.rec.end("fail", op, error=type(exc).__name__)
            return []
        if not leases:
            self.rec.end("fail", op, error="nothing")
        else:
            self.rec.end("ok", op, leases=[[lease.job_id, lease.token, lease.expires_at, lease.attempt]
                                           for lease in leases])
        return leases

    def work(self, leases: list[tenure.Lease]) -> None:
        w = self.w
        plans = {lease.job_id: w.ending() for lease in leases}
        held = {lease.job_id: lease for lease in leases}
        step = 0
        while held and not w.stopping:
            step += 1
            for job, lease in list(held.items()):
                end, args, _ = plans[job]
                if not w.careless and not w.local_ok(lease):
                    self.rec.note("deadline", job=job, token=lease.token)
                    del held[job]
                elif not w.effect(lease):
                    if w.careless:
                        w.holder_op(end, lease, **args)
                    del held[job]
            time.sleep(w.rng.uniform(0.1, 0.3) * w.ttl)
            ending = {job: lease for job, lease in held.items() if plans[job][2] <= step}
            for job, lease in ending.items():
                del held[job]
                if plans[job][0] != "complete":
                    w.holder_op(plans[job][0], lease, **plans[job][1])
            self.complete([lease for job, lease in ending.items() if plans[job][0] == "complete"])
            held = self.renew(held)

    def renew(self, held: dict[str, tenure.Lease]) -> dict[str, tenure.Lease]:
        """One renew_many of the leases still worked on: those renewed, and those whose answer
        was lost while their deadline runs (the next step's renewal tells)."""
        if not held:
            return held
        ops = {job: self.rec.invoke("renew", job, lease.token, owner=lease.owner, ttl=self.w.ttl)
               for job, lease in held.items()}
        found = self._many(functools.partial(self.w.store.renew_many, list(held.values())), len(held))
        kept = {}
        for (job, lease), one in zip(held.items(), found, strict=True):
            if isinstance(one, tenure.Lease):
                self.rec.end("ok", ops[job], expires_at=one.expires_at)
                kept[job] = one
            elif self._ended(ops[job], one) and self.w.local_ok(lease):
                kept[job] = lease
        return kept

    def complete(self, leases: list[tenure.Lease]) -> None:
        """One complete_many; those whose answer was lost are sent again (new operations, new
        results) while their deadline runs, as ``holder_op`` does."""
        for _ in range(3):
            if not leases or self.w.stopping:
                return
            ops = [self.rec.invoke("complete", lease.job_id, lease.token, owner=lease.owner, ttl=self.w.ttl)
                   for lease in leases]
            results = [f"{self.w.name}#{op}" for op in ops]
            found = self._many(functools.partial(self.w.store.complete_many, leases, results), len(leases))
            unknown = []
            for lease, op, one in zip(leases, ops, found, strict=True):
                if one is None:
                    self.rec.end("ok", op)
                elif self._ended(op, one):
                    unknown.append(lease)
            leases = [lease for lease in unknown if self.w.careless or self.w.local_ok(lease)]
            time.sleep(self.w.ttl / 20)

    def _many(self, call: Any, n: int) -> list[Any]:
        try:
            found: list[Any] = call()
        except tenure.LeaseError as exc:  # the whole call: the store unreachable
            return [exc] * n
        return found

    def _ended(self, op: int, error: tenure.LeaseError) -> bool:
        """Record one lease's refusal; True when its outcome is unknown."""
        if isinstance(error, tenure.StaleLease):
            self.rec.end("fail", op, error="StaleLease", reason=error.rejection.reason)
            return False
        if isinstance(error, tenure.BackendUnavailable):
            self.rec.end("info", op, error=type(error).__name__)
            return True
        self.rec.end("fail", op, error=type(error).__name__)
        return False


def main() -> None:
    for name in ("tenure", "kazoo"):  # the history is the record; their logs would be noise
        logging.getLogger(name).setLevel(logging.CRITICAL)
    early_end = logging.getLogger(EARLY_END_LOGGER)  # except etcd's early ends: the run counts them
    early_end.setLevel(logging.INFO)
    early_end.addHandler(logging.StreamHandler())  # stderr: the worker's log in the history directory
    cfg = json.loads(sys.argv[1])
    if cfg.get("hidden_clock"):
        suspend.install(Path(cfg["hidden_clock"]))  # before tenure reads any clock
    worker = Worker(cfg)
    signal.signal(signal.SIGTERM, worker.stop)
    try:
        worker.run()
    finally:
        worker.rec.close()


def early_ends(history_dir: Path) -> int:
    """How many times the workers of a run found a lease etcd ended early and restored it."""
    return sum(line.count("early; restoring it") for log in history_dir.glob("*.log")
               for line in log.read_text(errors="replace").splitlines())


if __name__ == "__main__":
    main()
