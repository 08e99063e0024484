"""The forged-fence fault: a process without the fencing secret writes under tokens it made up.

It picks a job that is leased right now and tries the destination three ways: the largest
token there is (2**63-1) unsigned, the next token the store has not issued yet signed with
a wrong secret, and the current holder's own token and owner name with a made-up signature.
Each try is an operation ``forge`` in the history; the fence must refuse every one
(``ForgedToken``), report it to the store's audit, and keep admitting the real holders.
"""

from __future__ import annotations

import random
from pathlib import Path

import tenure
from tenure.fencing import FenceRejection, sign
from tests.faults.clock import true_now
from tests.faults.destination import Destination
from tests.faults.history import Recorder, file_for

PROCESS = "forger"
WRONG_SECRET = "not the destination's fencing secret"


class Forger:
    def __init__(self, history: Path, destination: Path, admin_url: str) -> None:
        self.rec = Recorder(file_for(history, PROCESS), PROCESS)
        self.destination = destination
        self.admin_url = admin_url

    def forge(self, rng: random.Random) -> bool:
        """One round of forged writes on a leased job; False when no job is leased or the store is down."""
        try:
            with tenure.connect(self.admin_url) as store:
                held = [j for j in store.jobs() if j.state is tenure.JobState.LEASED and j.owner]
                if not held:
                    return False
                job = rng.choice(held)
                assert job.owner is not None
                tries = [(2**63 - 1, f"{PROCESS}#{self.rec.next_id}", None),
                         (job.token + 1, f"{PROCESS}#{self.rec.next_id + 1}", WRONG_SECRET),
                         (job.token, job.owner, "made-up")]
                for token, owner, secret in tries:
                    self._try(store, job.job_id, token, owner, secret)
        except tenure.BackendUnavailable:
            return False
        return True

    def _try(self, store: tenure.Store, job: str, token: int, owner: str, secret: str | None) -> None:
        op = self.rec.invoke("forge", job, token, owner=owner)
        audited: list[bool] = []

        def audit(rejection: FenceRejection) -> None:
            try:
                store.report_rejection(rejection.job_id, rejection.owner or "(unknown)", rejection.token,
                                       resource=rejection.resource, highest=0, reason=rejection.reason)
                audited.append(True)
            except tenure.BackendUnavailable:
                audited.append(False)  # the store is down: the checker does not expect this one audited

        dest = Destination(self.destination, audit=audit)
        signature = None if secret is None else ("v1=" + "0" * 64 if secret == "made-up"
                                                 else sign(secret, job, owner, token, unbound=True))
        try:
            dest.write(job, token, owner, PROCESS, op, true_now, lambda: None, signature)
        except tenure.ForgedToken as exc:
            self.rec.end("fail", op, error="ForgedToken", reason=exc.why, audited=all(audited) and bool(audited))
            return
        except tenure.LeaseError as exc:  # StaleToken: also refused, but the proof should have said so first
            self.rec.end("fail", op, error=type(exc).__name__)
            return
        finally:
            dest.close()
        self.rec.end("ok", op)

    def close(self) -> None:
        self.rec.close()
