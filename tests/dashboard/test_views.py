"""Every view, through Streamlit's AppTest, on seeded memory and SQLite stores."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable

import pandas as pd
import pytest
from streamlit.dataframe_util import convert_arrow_bytes_to_pandas_df
from streamlit.testing.v1 import AppTest

import tenure
from tenure.dashboard import config, data
from tests.dashboard.conftest import APP, goto, plain
from tests.dashboard.seeding import JOB, Seeded

OpenApp = Callable[..., AppTest]


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def chart_data(at: AppTest) -> list[pd.DataFrame]:
    (chart,) = at.get("vega_lite_chart")
    return [convert_arrow_bytes_to_pandas_df(d.data.data) for d in chart.proto.datasets]


def unescape(cells: list[str]) -> tuple[str, str]:
    """A row of the health facts' Markdown table as the browser shows it."""
    fact, value = (plain(cell) for cell in cells)
    return fact, value


def test_overview_counts_health_and_clock(seed: Seeded, open_app: OpenApp) -> None:
    at = open_app(seed.url)
    assert metrics(at) == {"Pending": "1", "Scheduled": "0", "Leased": "2", "Expiring < 30s": "1",
                           "Expired, unclaimed": "1", "Completed": "1", "Parked": "0", "Rejections (1h)": "2"}
    (health,) = [m.value for m in at.markdown if m.value.startswith("| fact | value |")]
    facts = dict(unescape(line.strip("| ").split(" | ")) for line in health.splitlines()[2:])
    assert facts["backend"] == seed.backend
    if seed.backend == "sqlite":
        assert facts["file"].endswith("dash.db") and int(facts["bytes"]) > 0
    assert "Store clock" in [s.value for s in at.subheader]
    assert any(c.value.startswith("This machine's clock ") and c.value.endswith(" store's clock alone.")
               for c in at.caption)


@pytest.mark.parametrize("skew, words", [
    (-0.0001, "This machine's clock agrees with the store's to the millisecond."),
    (0.5341, "This machine's clock is 0.534 s ahead of the store's."),
    (-2.0, "This machine's clock is 2.000 s behind the store's."),
])
def test_the_overview_says_which_way_this_machines_clock_is_off(skew: float, words: str) -> None:
    assert data.clock_offset(skew) == words


def test_live_leases_lists_live_ones_first_and_expired_behind_the_filter(seed: Seeded, open_app: OpenApp) -> None:
    at = open_app(seed.url, "Live leases")
    table = at.dataframe[0].value
    assert list(table["job"]) == ["soon-5", JOB]  # live only, soonest expiry first
    row = table.set_index("job").loc[JOB]
    assert (row["owner"], row["token"], row["state"]) == ("worker-b", 2, "leased")
    assert 0.8 < row["lease left"] < 0.9 and row["expires in (s)"] > 500  # 64 s of 600 gone
    assert at.caption[0].value.startswith("2 live lease(s), soonest expiry first; page 1 of 1.")
    assert "Expired leases: add 'expired' under State." in at.caption[0].value

    at.multiselect(key="lease_states").set_value(["expired", "leased"]).run()
    table = at.dataframe[0].value
    assert list(table["job"]) == ["soon-5", JOB, "report-9"]  # the live ones still first
    assert table.set_index("job").loc["report-9", "state"] == "expired"
    assert at.caption[0].value.startswith("2 live lease(s), then 1 expired job(s), each soonest expiry first")

    at.text_input(key="lease_owner").set_value("WORKER-B").run()
    assert list(at.dataframe[0].value["job"]) == [JOB]
    at.text_input(key="lease_owner").set_value("").run()
    at.multiselect(key="lease_states").set_value(["completed", "pending"]).run()
    assert list(at.dataframe[0].value["job"]) == ["email-3", "pending-1"]
    at.text_input(key="lease_job").set_value("mail").run()
    assert list(at.dataframe[0].value["job"]) == ["email-3"]


def test_timeline_shows_both_generations_and_the_rejection(seed: Seeded, open_app: OpenApp) -> None:
    at = open_app(seed.url, "Expiry timeline")
    spans, marks, _now = chart_data(at)
    gens = spans[spans["job"] == JOB].sort_values("token")
    assert list(zip(gens["token"], gens["owner"], gens["outcome"], strict=True)) == [
        (1, "worker-a", "expired"), (2, "worker-b", "live")]
    # A's generation ends (expires) before B's begins: the seed's example at a glance.
    assert gens["end"].iloc[0] < gens["begin"].iloc[1]
    assert set(zip(marks["job"], marks["op"], marks["owner"], strict=True)) == {
        (JOB, "complete", "worker-a"), (JOB, "effect", "worker-a")}
    at.text_input(key="tl_job").set_value("email").run()
    spans, marks, _now = chart_data(at)
    assert set(spans["job"]) == {"email-3"} and marks.empty
    # email-3 completed at once: a bar narrower than a pixel, so each lease's start is a tick too.
    (chart,) = at.get("vega_lite_chart")
    layers = json.loads(chart.proto.spec)["layer"]
    assert any(layer["mark"]["type"] == "tick" and layer["encoding"]["x"]["field"] == "begin" for layer in layers)


def test_rejections_audit_filters(seed: Seeded, open_app: OpenApp) -> None:
    at = open_app(seed.url, "Rejections")
    table = at.dataframe[0].value
    assert list(table["op"]) == ["effect", "complete"]  # newest first
    assert set(table["token"]) == {1} and set(table["current token"]) == {2}
    at.multiselect(key="rj_kinds").set_value(["destination"]).run()
    assert list(at.dataframe[0].value["resource"]) == ["ledger/42"]
    at.multiselect(key="rj_kinds").set_value([]).run()
    at.multiselect(key="rj_ops").set_value(["complete"]).run()
    (reason,) = at.dataframe[0].value["reason"]
    assert reason == "lease expired by store time" or "superseded" in reason
    at.text_input(key="rj_owner").set_value("worker-b").run()
    assert at.dataframe[0].value.empty and "0 rejection(s)" in at.caption[0].value
    labels = [e.proto.label for e in at.get("download_button")]
    assert labels == ["Export CSV", "Export JSON"]


def test_job_detail_history_and_rejections(seed: Seeded, open_app: OpenApp) -> None:
    at = open_app(seed.url, "Job detail")
    assert "Enter a job id" in at.info[0].value
    at.text_input(key="detail_job").set_value(JOB).run()
    m = metrics(at)
    assert (m["State"], m["Owner"], m["Token"], m["Runs"]) == ("leased", "worker-b", "2", "1")
    assert any(c.value.startswith("submitted ") and " claimed " in c.value for c in at.caption)
    history, rejections = (d.value for d in at.dataframe)
    assert list(zip(history["op"], history["owner"], history["token"], strict=True)) == [
        ("claim", "worker-a", 1), ("renew", "worker-a", 1), ("claim", "worker-b", 2)]
    assert list(rejections["op"]) == ["effect", "complete"]
    assert not at.get("button")  # read-only: no admin actions
    at.text_input(key="detail_job").set_value("no-such-job").run()
    assert "No job 'no-such-job'" in plain(at.warning[0].value)


def test_a_hostile_job_link_shows_its_id_as_text(seed: Seeded, open_app: OpenApp) -> None:
    # A deep link is anyone's input: its job id must not turn into a link, an image or an
    # emoji in the page an operator reads.
    hostile = "[sign in again](https://evil.example/login) ![x](https://evil.example/p.png) :58:"
    at = goto(open_app(seed.url), "Job detail", job=hostile)
    (warning,) = [w.value for w in at.warning]
    assert re.search(r"(?<!\\)[\[\]()!:]", warning.removeprefix("No job ").removesuffix(" in the store.")) is None
    assert plain(warning) == f"No job {hostile!r} in the store."


def test_live_leases_pages_through_many_jobs(open_app: OpenApp) -> None:
    with tenure.connect(f"memory://pages-{uuid.uuid4().hex}", clock=tenure.ManualClock()) as store:
        for i in range(120):
            store.submit(f"bulk-{i:03d}")
        at = open_app(store.url, "Live leases")
        at.multiselect(key="lease_states").set_value(["pending"]).run()
        assert len(at.dataframe[0].value) == 50 and "page 1 of 3" in at.caption[0].value
        at.number_input(key="lease_page").set_value(3).run()
        table = at.dataframe[0].value
        assert len(table) == 20 and table["job"].iloc[-1] == "bulk-119"
        at.text_input(key="lease_job").set_value("bulk-11").run()  # 10 matches: back to page 1
        assert len(at.dataframe[0].value) == 10 and "page 1 of 1" in at.caption[0].value
        assert not at.exception


def test_refresh_interval_comes_from_the_launcher(seed: Seeded, open_app: OpenApp,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    at = open_app(seed.url)
    assert at.number_input(key="refresh").value == 0.0  # open_app pauses it
    monkeypatch.setenv(config.REFRESH_ENV, "2.5")
    at = AppTest.from_file(APP, default_timeout=30).run()
    assert at.number_input(key="refresh").value == 2.5


def test_a_job_link_opens_its_detail_and_typing_updates_the_link(seed: Seeded, open_app: OpenApp) -> None:
    at = goto(open_app(seed.url), "Job detail", job=JOB)
    assert at.text_input(key="detail_job").value == JOB
    m = metrics(at)
    assert (m["State"], m["Owner"], m["Token"]) == ("leased", "worker-b", "2")
    assert m["Expires"].startswith("in ")
    _history, rejections = (d.value for d in at.dataframe)
    assert list(rejections["op"]) == ["effect", "complete"]  # this job's, newest first
    # The CLI's order: who was refused with which token and who holds which come before the reason.
    assert list(rejections.columns[:8]) == ["at", "job", "op", "owner", "token", "current owner",
                                            "current token", "reason"]
    at.text_input(key="detail_job").set_value("email-3").run()
    assert at.query_params["job"] == "email-3" and metrics(at)["State"] == "completed"


def test_times_are_readable_with_ages(seed: Seeded, open_app: OpenApp) -> None:
    at = open_app(seed.url, "Live leases")
    row = at.dataframe[0].value.set_index("job").loc[JOB]
    # 64 s on the seed's clock, and as many more as seeding and the first render took on a busy machine
    assert re.search(r" UTC \((6[4-9] s|1 min) ago\)$", row["claimed at"]), row["claimed at"]
    assert data.stamp(0.0, 60.0) == "1970-01-01 00:00:00 UTC (60 s ago)"
    assert data.stamp(1_750_000_000.0, 1_750_000_000.0, "Europe/Berlin") == "2025-06-15 17:06:40 CEST (now)"
    assert data.stamp(0.0, 0.0, "No/Such_Zone").endswith(" UTC (now)")  # an unknown zone: UTC
    # Undated where the age tells the day (narrow tables), dated a day or more from now.
    assert data.stamp(0.0, 60.0, dated=False) == "00:00:00 UTC (60 s ago)"
    assert data.stamp(0.0, 86400.0, dated=False) == "1970-01-01 00:00:00 UTC (24.0 h ago)"
    assert [data.ago(d) for d in (0.2, 30, -300, -7200, 3 * 86400)] == [
        "now", "in 30 s", "5 min ago", "2.0 h ago", "in 3 d"]


def test_markdown_shows_times_and_values_as_written() -> None:
    # A time's ":58:" must not look like an emoji shortcode to Streamlit's front end (it would
    # fetch its emoji plugin before drawing the page), nor a "|" end a table cell.
    text = "2026-12-03 04:58:54 UTC | *a_b* $5 [x](y)\nnext"
    shown = data.literal(text)
    assert re.search(r":(?!material/|streamlit:)[\w+-][\w_+-]*:", shown) is None  # its pattern
    assert re.search(r"(?<!\\)[|*_$\[]", shown) is None and "\n" not in shown
    assert unescape([shown, "x"])[0] == text.replace("\n", " ")
    table = data.facts_table({"file": "/tmp/a|b.db"})
    assert table.splitlines() == ["| fact | value |", "|---|---|", r"| file | \/tmp\/a\|b\.db |"]


def test_overview_links_to_each_ops_view(seed: Seeded, open_app: OpenApp) -> None:
    at = open_app(seed.url)
    labels = [p.proto.label for p in at.get("page_link")]
    assert labels == ["Live leases (2)", "Workers: who holds what", "Stuck leases",
                      "Rejections and expiries per minute", "Rejections (2 in 1 h)",
                      "Parked jobs (0) and scheduled (0)"]


def test_workers_shows_who_holds_what(seed: Seeded, open_app: OpenApp) -> None:
    at = open_app(seed.url, "Workers")
    table = at.dataframe[0].value.set_index("owner")
    assert set(table.index) == {"worker-b", "worker-c", "worker-e"}
    assert list(table.loc["worker-c", ["leases", "expired, unclaimed"]]) == [0, 1]
    assert list(table.loc["worker-e", ["leases", "expiring soon"]]) == [1, 1]  # ends in 15 s
    assert 63.9 <= table.loc["worker-b", "since last renewal (s)"] < 75  # claimed at t0+26, now t0+90
    # Owners holding live leases first, the longest silent first; worker-c holds nothing now.
    assert list(table.index) == ["worker-b", "worker-e", "worker-c"]
    assert at.caption[0].value.startswith("2 owner(s) holding live leases, the longest without a renewal "
                                          "first, then 1 whose leases all expired unclaimed;")


def test_stuck_leases_by_the_jobs_own_runs_and_by_an_owner_that_completes_nothing(open_app: OpenApp) -> None:
    clock = tenure.ManualClock()
    with tenure.connect(f"memory://stuck-{uuid.uuid4().hex}", clock=clock) as store:
        for i in range(5):  # unrelated jobs completed in 0.3 s (say, from the CLI)
            lease = store.claim(f"cli-{i}", owner="cli", ttl=30)
            clock.advance(0.3)
            store.complete(lease)
        for job, times in (("batch-slow", 3), ("batch-twice", 2)):
            for _ in range(times):  # these jobs themselves usually run 10 s
                store.submit(job)
                lease = store.claim(job, owner="busy", ttl=60)
                clock.advance(10)
                store.complete(lease)
            store.submit(job)
        slow, twice = store.claim("batch-slow", owner="busy", ttl=60), store.claim("batch-twice", owner="busy", ttl=60)
        zombie = store.claim("batch-zombie", owner="zombie", ttl=120)
        for _ in range(25):  # 20+ minutes of renewals: held far beyond 10 s
            clock.advance(50)
            slow, twice, zombie = store.renew(slow), store.renew(twice), store.renew(zombie)
        store.complete(store.claim("batch-3", owner="busy", ttl=60))  # busy still completes jobs
        store.claim("report", owner="busy", ttl=600)
        for _ in range(3):  # report held 2 min of its 600 s TTL: 400x the CLI's runs, but not stuck
            clock.advance(40)
            slow, twice, zombie = store.renew(slow), store.renew(twice), store.renew(zombie)
        at = open_app(store.url, "Stuck leases")
        at.selectbox(key="stuck_window").set_value("15 minutes").run()
        table = at.dataframe[0].value.set_index("job")
        # batch-twice has 2 runs of its own, too few to judge it by; report is within its TTL.
        assert list(table.index) == ["batch-slow", "batch-zombie"]  # the longest held first
        assert table.loc["batch-slow", "usual run"] == "10.0 s (median of its 3 runs)"
        assert "held 137x its usual run" in table.loc["batch-slow", "why"]
        assert "busy" not in table.loc["batch-slow", "why"]  # busy completed jobs in the window
        assert "zombie renews but completed nothing in 15 min" in table.loc["batch-zombie", "why"]
        assert table.loc["batch-zombie", "usual run"] == "unknown: 0 completed run(s), 3 needed"
        assert "of that job's own runs" in at.caption[0].value


def test_activity_counts_rejections_and_expiries_per_minute(seed: Seeded, open_app: OpenApp) -> None:
    at = open_app(seed.url, "Activity")
    (chart,) = at.get("vega_lite_chart")
    (frame,) = [convert_arrow_bytes_to_pandas_df(d.data.data) for d in chart.proto.datasets]
    totals = frame.groupby("what")["count"].sum().to_dict()
    # A's completion and the ledger's refusal; A's generation 1 and report-9 ran out.
    assert totals == {"rejections": 2, "expiries": 2}
    assert len(frame) == 2 * frame["minute"].nunique() and frame["minute"].nunique() >= 180
    assert "2 rejection(s) and 2 expiries" in at.caption[0].value


def test_a_page_of_live_leases_then_the_other_states_runs_across_the_groups() -> None:
    groups = {"leased": ["live-0", "live-1", "live-2"], "expired": ["old-0", "old-1"]}

    def fetch(states: list[str], offset: int, limit: int) -> tenure.JobPage:
        ids = [i for s in states for i in groups[s]]
        jobs = [tenure.JobStatus(i, tenure.JobState(states[0])) for i in ids[offset:offset + limit]]
        return tenure.JobPage(jobs, len(ids), offset, limit)

    pages = [data.stacked_page(fetch, [["leased"], ["expired"]], offset, 2) for offset in (0, 2, 4)]
    assert [[j.job_id for j in jobs] for jobs, _ in pages] == [
        ["live-0", "live-1"], ["live-2", "old-0"], ["old-1"]]
    assert all(counts == [3, 2] for _, counts in pages)  # each group counted on every page


def test_a_lease_bar_runs_from_its_claim_to_the_end_its_latest_renewal_gave() -> None:
    # A claim keeps only its latest renewal event: the bar must not start there.
    renew, claim, done = tenure.Op.RENEW, tenure.Op.CLAIM, tenure.Op.COMPLETE
    events = [tenure.HistoryEvent("old", claim, "a", 1, 100.0, 110.0),  # claimed before the window
              tenure.HistoryEvent("new", claim, "b", 1, 160.0, 170.0),
              tenure.HistoryEvent("gone", renew, "c", 4, 180.0, 210.0),  # its claim trimmed
              tenure.HistoryEvent("old", renew, "a", 1, 190.0, 200.0),
              tenure.HistoryEvent("new", renew, "b", 1, 191.0, 201.0),
              tenure.HistoryEvent("new", done, "b", 1, 193.0, None)]
    spans = data.intervals([e for e in events if e.at >= 150.0], now=195.0, start=150.0).set_index("job")
    seconds = {job: (row["begin"].timestamp(), row["end"].timestamp(), row["outcome"]) for job, row in spans.iterrows()}
    assert seconds == {"gone": (150.0, 210.0, "live"), "old": (150.0, 200.0, "live"),
                       "new": (160.0, 193.0, "completed")}
