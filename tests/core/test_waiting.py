"""Which changes wake a blocking claim (the store-independent part of ``tenure.core.waiting``)."""

from __future__ import annotations

import tenure
from tenure.core import waiting


def test_only_changes_that_can_free_a_job_wake_waiters() -> None:
    def job(state: tenure.JobState) -> tenure.Change:
        return tenure.Change(job=tenure.JobStatus("j", state))

    frees = {s for s in tenure.JobState if waiting.may_free_a_job(job(s))}
    assert frees == {tenure.JobState.PENDING, tenure.JobState.EXPIRED}
    assert waiting.may_free_a_job(tenure.Change(removed="j"))
    rejection = tenure.Rejection("j", tenure.Op.RENEW, "a", 1, "b", 2, 0.0, "stale")
    assert not waiting.may_free_a_job(tenure.Change(rejection=rejection))
