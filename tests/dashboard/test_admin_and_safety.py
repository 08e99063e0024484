"""Admin actions (off by default, secret, confirmation, audit), corrupt rows, secrets never shown."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import tenure
from tenure import JobState, Op
from tenure.dashboard import links, unlock
from tenure.dashboard.unlock import UnlockLimiter
from tests.dashboard.conftest import goto, plain, texts
from tests.dashboard.seeding import JOB, Seeded, seeded

OpenApp = Callable[..., AppTest]
SECRET = "correct horse battery"


def buttons(at: AppTest) -> dict[str, object]:
    return {b.label: b for b in at.button}


def test_read_only_without_admin(seed: Seeded, open_app: OpenApp) -> None:
    at = open_app(seed.url)
    assert "Read-only." in [c.value for c in at.sidebar.caption]
    goto(at, "Job detail", job=JOB)
    assert "Admin actions" not in [s.value for s in at.subheader]
    assert not at.button and not [t for t in at.text_input if t.label == "Admin secret"]


def test_force_expire_needs_secret_and_confirmation_and_is_audited(
        seed: Seeded, open_app: OpenApp) -> None:
    at = open_app(seed.url, "Job detail", admin_secret=SECRET)
    at.text_input(key="detail_job").set_value(JOB).run()
    assert "Admin actions" in [s.value for s in at.subheader] and not at.button  # still locked
    at.text_input(key="admin_secret_input").set_value("wrong guess").run()
    assert "Wrong admin secret" in [e.value for e in at.error] and not buttons(at)
    at.text_input(key="admin_secret_input").set_value(SECRET).run()
    assert buttons(at)["Resubmit job"].disabled  # only a completed job can be resubmitted
    at.button[[b.label for b in at.button].index("Force-expire lease")].click().run()
    assert seed.store.get(JOB).state is JobState.LEASED  # nothing happens before confirmation
    assert any("force-expire job 'invoice-42' (token 2)" in plain(w.value) for w in at.warning)
    at.button[[b.label for b in at.button].index("Confirm force-expire")].click().run()
    assert not at.exception
    assert any("recorded in its history" in plain(s.value) for s in at.success)
    after = seed.writer()
    assert after.get(JOB).state is JobState.EXPIRED
    last = after.history(JOB)[-1]
    assert (last.op, last.owner, last.token) == (Op.EXPIRE, "dashboard-admin", 2)


def test_resubmit_can_be_cancelled_then_done(seed: Seeded, open_app: OpenApp) -> None:
    at = open_app(seed.url, "Job detail", admin_secret=SECRET)
    at.text_input(key="detail_job").set_value("email-3").run()
    at.text_input(key="admin_secret_input").set_value(SECRET).run()
    assert buttons(at)["Force-expire lease"].disabled
    at.button[[b.label for b in at.button].index("Resubmit job")].click().run()
    at.button[[b.label for b in at.button].index("Cancel")].click().run()
    assert seed.store.get("email-3").state is JobState.COMPLETED and "Confirm resubmit" not in buttons(at)
    at.button[[b.label for b in at.button].index("Resubmit job")].click().run()
    at.button[[b.label for b in at.button].index("Confirm resubmit")].click().run()
    job = seed.writer().get("email-3")
    assert job is not None and (job.state, job.runs) == (JobState.PENDING, 2)
    assert seed.writer().history("email-3")[-1].owner == "dashboard-admin"


def test_corrupt_record_shows_as_a_row_with_its_key(tmp_path: Path, open_app: OpenApp) -> None:
    seed = seeded("sqlite", tmp_path)
    with sqlite3.connect(seed.store.backend.path) as db:  # type: ignore[attr-defined]
        db.execute("UPDATE tenure_jobs SET state = 'bogus' WHERE job_id = 'email-3'")
    at = open_app(seed.url)
    assert any("1 corrupt record" in plain(e.value) for e in at.error) and not at.exception
    goto(at, "Live leases")
    at.multiselect(key="lease_states").set_value(["corrupt"]).run()
    (row,) = at.dataframe[0].value.to_dict("records")
    assert row["job"] == "email-3" and row["state"] == "corrupt"
    assert "tenure_jobs/email-3" in row["problem"] and "bogus" in row["problem"]
    goto(at, "Job detail")
    at.text_input(key="detail_job").set_value("email-3").run()
    assert not at.exception and any("tenure_jobs/email-3" in plain(e.value) for e in at.error)


def test_password_in_url_is_never_shown(open_app: OpenApp) -> None:
    url = "memory://operator:hunter2-secret@pw-test"
    with tenure.connect(url) as store:
        store.claim("j", owner="w", ttl=60)
        at = open_app(url)
        assert "memory://operator:***@pw-test" in texts(at)  # the sidebar's store
        for view in links.BY_TITLE:
            goto(at, view, job="j")
            assert not at.exception
            assert "hunter2" not in texts(at)


@pytest.mark.parametrize("url", ["sqlite:///no/such/dir/x.db", "sqlite://user:hunter2@bad host/x"])
def test_unusable_store_is_an_error_message_not_an_exception(url: str, open_app: OpenApp) -> None:
    at = open_app(url)
    assert not at.exception and at.error and "hunter2" not in texts(at)


def test_unreadable_audit_row_is_an_error_box_not_a_traceback(tmp_path: Path, open_app: OpenApp) -> None:
    seed = seeded("sqlite", tmp_path)
    with sqlite3.connect(seed.store.backend.path) as db:  # type: ignore[attr-defined]
        db.execute("UPDATE tenure_rejections SET op = 'bogus'")
    at = open_app(seed.url, "Rejections")
    assert not at.exception
    assert any("Rejections view could not be shown" in plain(e.value) and "bogus" in plain(e.value) for e in at.error)
    goto(at, "Live leases")  # the other views still work
    assert not at.error and JOB in list(at.dataframe[0].value["job"])


@pytest.fixture
def limiter() -> Iterator[UnlockLimiter]:
    """The server's one unlock limiter, on a clock the test moves, reset afterwards."""
    clock = tenure.ManualClock()
    saved = unlock.LIMITER.clock
    unlock.LIMITER.clock = clock
    unlock.LIMITER.reset()
    yield unlock.LIMITER
    unlock.LIMITER.clock = saved
    unlock.LIMITER.reset()


def test_force_expire_sends_the_confirmed_generation_and_spares_a_newer_holder(
        seed: Seeded, open_app: OpenApp, limiter: UnlockLimiter) -> None:
    at = open_app(seed.url, "Job detail", admin_secret=SECRET)
    at.text_input(key="detail_job").set_value(JOB).run()
    at.text_input(key="admin_secret_input").set_value(SECRET).run()
    at.button[[b.label for b in at.button].index("Force-expire lease")].click().run()
    assert any("(token 2)" in plain(w.value) for w in at.warning)
    # Between the click and the confirmation the lease ends and worker C claims the job.
    other = seed.writer()
    other.force_expire(JOB, actor="someone-else")
    newer = other.claim(JOB, owner="worker-c", ttl=600)
    at.button[[b.label for b in at.button].index("Confirm force-expire")].click().run()
    assert not at.exception
    assert any("Nothing was changed" in plain(e.value) and f"token {newer.token} now" in plain(e.value)
               and "token 2 you confirmed" in plain(e.value) for e in at.error)
    assert not any("recorded in its history" in plain(s.value) for s in at.success)
    status = other.get(JOB)
    assert status is not None and (status.state, status.owner, status.token) == (
        JobState.LEASED, "worker-c", newer.token)
    assert other.history(JOB)[-1].op is Op.CLAIM  # no EXPIRE by dashboard-admin


def test_admin_unlock_backs_off_per_server_after_wrong_secrets(
        seed: Seeded, open_app: OpenApp, limiter: UnlockLimiter) -> None:
    first = goto(open_app(seed.url, admin_secret=SECRET), "Job detail", job=JOB)
    for _ in range(unlock.FREE_TRIES):
        first.text_input(key="admin_secret_input").set_value("wrong guess").run()
        assert [e.value for e in first.error] == ["Wrong admin secret"]
    first.text_input(key="admin_secret_input").set_value("another guess").run()
    assert any("next is heard in 1 s" in plain(e.value) for e in first.error)
    # A new session (a new browser tab) gets no new tries: the right secret is not even compared.
    second = goto(open_app(seed.url, admin_secret=SECRET), "Job detail", job=JOB)
    second.text_input(key="admin_secret_input").set_value(SECRET).run()
    assert any(e.value.startswith("Not checked") for e in second.error)
    assert "Admin actions unlocked" not in [s.value for s in second.success]
    limiter.clock.advance(1.0)  # type: ignore[attr-defined]
    second.text_input(key="admin_secret_input").set_value("third guess").run()  # heard: the wait doubles
    assert any("next is heard in 2 s" in plain(e.value) for e in second.error)
    limiter.clock.advance(2.0)  # type: ignore[attr-defined]
    second.text_input(key="admin_secret_input").set_value(SECRET).run()
    assert "Admin actions unlocked" in [s.value for s in second.success]
    assert limiter.attempt("wrong", SECRET) == unlock.Attempt(False, True, 0.0)  # success reset the count


def test_unlock_backoff_doubles_up_to_its_cap() -> None:
    clock = tenure.ManualClock()
    limiter = UnlockLimiter(clock)
    waits = []
    for _ in range(unlock.FREE_TRIES + 12):
        attempt = limiter.attempt("wrong", SECRET)
        assert attempt.heard
        waits.append(attempt.retry_after)
        if attempt.retry_after:  # even the right secret is refused unheard during the wait
            assert limiter.attempt(SECRET, SECRET) == unlock.Attempt(False, False, attempt.retry_after)
        clock.advance(attempt.retry_after)
    assert waits[:unlock.FREE_TRIES] == [0.0] * unlock.FREE_TRIES
    assert waits[unlock.FREE_TRIES:unlock.FREE_TRIES + 4] == [1.0, 2.0, 4.0, 8.0]
    assert max(waits) == unlock.MAX_WAIT
