"""Issue 28 in the dashboard (AppTest, a memory store on the test's clock): the Parked jobs
page with its scheduled jobs, attempts and last errors in the lists and on a job's page, and
the Requeue admin action under the force-expire's confirmed-token rule."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
from streamlit.testing.v1 import AppTest

import tenure
from tenure import JobState, Op
from tests.dashboard.conftest import goto, plain

OpenApp = Callable[..., AppTest]
SECRET = "correct horse battery"


@pytest.fixture
def story() -> Iterator[tuple[str, tenure.Store, tenure.ManualClock]]:
    """poison: parked after its one attempt failed; flaky: failed once, retried in 120 s;
    later: submitted with a 300 s delay; busy: leased, its second attempt of 3."""
    clock = tenure.ManualClock()
    url = f"memory://dash-lifecycle-{uuid.uuid4().hex}"
    with tenure.connect(url, clock=clock) as store:
        store.submit("poison", max_attempts=1)
        store.fail(store.claim("poison", "worker-a", 30), "OOM: killed\nTraceback (most recent call last): ...")
        clock.advance(10)
        store.fail(store.claim("flaky", "worker-b", 30), "timeout talking to the ledger", retry_in=120)
        store.submit("later", delay=300)
        store.submit("busy", max_attempts=3)
        store.fail(store.claim("busy", "worker-c", 30), "exit status 3", retry_in=0)
        store.claim("busy", "worker-c", 600)
        yield url, store, clock


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_the_overview_counts_parked_and_scheduled_jobs(story: tuple[str, tenure.Store, tenure.ManualClock],
                                                       open_app: OpenApp) -> None:
    url, _, _ = story
    at = open_app(url)
    m = metrics(at)
    assert (m["Parked"], m["Scheduled"], m["Leased"]) == ("1", "2", "1")
    assert "Parked jobs (1) and scheduled (2)" in [link.proto.label for link in at.get("page_link")]


def test_the_parked_page_lists_parked_then_scheduled_jobs(story: tuple[str, tenure.Store, tenure.ManualClock],
                                                          open_app: OpenApp) -> None:
    url, _, clock = story
    at = open_app(url, "Parked jobs")
    parked, scheduled = (d.value for d in at.dataframe)
    assert list(parked.columns) == ["job", "attempts", "last error", "parked at", "token", "runs"]
    row = parked.set_index("job").loc["poison"]
    assert (row["attempts"], row["last error"]) == ("1/1", "OOM: killed ...")
    assert row["parked at"].endswith("(10 s ago)")
    assert list(scheduled["job"]) == ["flaky", "later"]  # soonest claimable first
    assert [round(s) for s in scheduled["claimable in (s)"]] == [120, 300]  # float32 in Arrow
    assert scheduled.set_index("job").loc["flaky", "last error"] == "timeout talking to the ledger"
    assert at.caption[0].value.startswith("1 parked job(s)")
    clock.advance(121)  # flaky's backoff is over: no longer scheduled
    at.run()
    assert list(at.dataframe[1].value["job"]) == ["later"]


def test_attempts_and_last_error_in_the_lists_and_on_the_jobs_page(
        story: tuple[str, tenure.Store, tenure.ManualClock], open_app: OpenApp) -> None:
    url, _, _ = story
    at = open_app(url, "Live leases")
    row = at.dataframe[0].value.set_index("job").loc["busy"]
    assert (row["attempts"], row["last error"]) == ("2/3", "exit status 3")
    at = goto(at, "Job detail", job="poison")
    m = metrics(at)
    assert (m["State"], m["Attempts"]) == ("parked", "1/1")
    assert any(" parked " in c.value for c in at.caption)
    assert [c.value for c in at.code] == ["OOM: killed\nTraceback (most recent call last): ..."]
    history = at.dataframe[0].value
    assert list(history["op"]) == ["submit", "claim", "fail"]


def test_requeue_needs_the_secret_and_a_confirmation_and_sends_the_confirmed_token(
        story: tuple[str, tenure.Store, tenure.ManualClock], open_app: OpenApp) -> None:
    url, store, _ = story
    at = open_app(url, "Job detail", admin_secret=SECRET)
    at.text_input(key="detail_job").set_value("poison").run()
    assert not at.button  # locked
    at.text_input(key="admin_secret_input").set_value(SECRET).run()
    labels = {b.label: b for b in at.button}
    assert not labels["Requeue job"].disabled and labels["Force-expire lease"].disabled
    at.button[[b.label for b in at.button].index("Requeue job")].click().run()
    assert store.get("poison").state is JobState.PARKED  # nothing before the confirmation
    assert any("requeue job 'poison' (token 1)" in plain(w.value) for w in at.warning)
    at.button[[b.label for b in at.button].index("Confirm requeue")].click().run()
    assert not at.exception
    assert any("recorded in its history" in plain(s.value) for s in at.success)
    job = store.get("poison")
    assert job is not None and (job.state, job.attempts) == (JobState.PENDING, 0)
    last = store.history("poison")[-1]
    assert (last.op, last.owner, last.token) == (Op.REQUEUE, "dashboard-admin", 1)

    # A job that moved on after the operator looked is left as it is now.
    at.text_input(key="detail_job").set_value("flaky").run()
    at.button[[b.label for b in at.button].index("Requeue job")].click().run()
    store.requeue("flaky", actor="someone-else")
    store.fail(store.claim("flaky", "worker-b", 30), "again", retry_in=60)  # token 2 now
    at.button[[b.label for b in at.button].index("Confirm requeue")].click().run()
    assert any("not the token 1 you confirmed" in plain(e.value) for e in at.error)
    job = store.get("flaky")
    assert job is not None and (job.state, job.token, job.attempts) == (JobState.SCHEDULED, 2, 1)


def test_a_live_lease_cannot_be_requeued(story: tuple[str, tenure.Store, tenure.ManualClock],
                                         open_app: OpenApp) -> None:
    url, _, _ = story
    at = open_app(url, "Job detail", admin_secret=SECRET)
    at.text_input(key="detail_job").set_value("busy").run()
    at.text_input(key="admin_secret_input").set_value(SECRET).run()
    assert {b.label: b.disabled for b in at.button}["Requeue job"]
