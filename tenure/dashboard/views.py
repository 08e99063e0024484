"""The dashboard's main views; each reads only what it shows, through the shared snapshot.

A row of a lease or rejection table opens that job's detail page (``/job?job=ID``).
"""

from __future__ import annotations

import time
from typing import Any

import pandas as pd
import streamlit as st

from tenure.core.queries import fold
from tenure.core.records import JobPage, JobState, Op, RejectionKind
from tenure.core.shown import attempts
from tenure.dashboard import admin, charts, data, links
from tenure.dashboard.config import Config
from tenure.dashboard.shared import zone
from tenure.views.snapshot import Snapshot

PAGE_SIZE = 50
SOON = 30.0  # seconds: a live lease ending within this is "expiring soon"
AUDIT_LIMIT = 10_000  # the audit reads at most this many of the newest rejections ...
AUDIT_ROWS = 1_000  # ... and shows this many of those that match the filters
TIMELINE_JOBS = 30
WINDOWS = {"last 15 minutes": 900.0, "last hour": 3600.0, "last 24 hours": 86400.0, "all kept": None}
LEASE_COLUMNS: dict[str, Any] = {
    "lease left": st.column_config.ProgressColumn("lease left", min_value=0.0, max_value=1.0, format="percent"),
    "expires in (s)": st.column_config.NumberColumn(format="%.1f"),
}
# At 1400 px with the sidebar open, every column up to the reason fits without scrolling.
AUDIT_COLUMNS: dict[str, Any] = {"reason": st.column_config.TextColumn("reason", width=280)}


def jobs_table(frame: pd.DataFrame, key: str, columns: dict[str, Any] | None = None) -> None:
    """A table whose rows open their job's detail page when clicked."""
    event = st.dataframe(frame, hide_index=True, width="stretch", column_config=columns, key=key,
                         on_select="rerun", selection_mode="single-row")
    rows = event.selection.rows if event is not None else []
    if rows and rows[0] < len(frame):
        links.open_job(str(frame["job"].iloc[rows[0]]))


def overview(snap: Snapshot, cfg: Config) -> None:
    s = snap.summary(soon=SOON)
    cols = st.columns(8)
    cols[0].metric("Pending", s.pending)
    cols[1].metric("Scheduled", s.scheduled, help="Pending, but claimable only later: a delay, or a retry's backoff")
    cols[2].metric("Leased", s.leased)
    cols[3].metric(f"Expiring < {SOON:g}s", s.expiring_soon)
    cols[4].metric("Expired, unclaimed", s.expired)
    cols[5].metric("Completed", s.completed)
    cols[6].metric("Parked", s.parked, help="Used every attempt allowed: claimed again only once requeued")
    cols[7].metric("Rejections (1h)", s.rejections_last_hour)
    if s.corrupt:
        st.error(f"{s.corrupt} corrupt record(s) in the store: filter Live leases by state 'corrupt'.")
    st.subheader("Look first at")
    # One link a line: side by side, the longer labels were cut off in a 1400 px window.
    st.page_link(links.page("leases"), label=f"Live leases ({s.leased})")
    st.page_link(links.page("workers"), label="Workers: who holds what")
    st.page_link(links.page("stuck"), label="Stuck leases")
    st.page_link(links.page("activity"), label="Rejections and expiries per minute")
    st.page_link(links.page("rejections"), label=f"Rejections ({s.rejections_last_hour} in 1 h)")
    st.page_link(links.page("parked"), label=f"Parked jobs ({s.parked}) and scheduled ({s.scheduled})")
    left, right = st.columns(2)
    with left:
        st.subheader("Store clock")
        skew = time.time() - snap.now()
        st.markdown(f"**{data.literal(data.stamp(s.now, s.now, zone()).removesuffix(' (now)'))}**")
        st.caption(f"{data.clock_offset(skew)} Ownership is judged by the store's clock alone.")
    with right:
        st.subheader("Backend health")
        for warning in snap.store.warnings:  # e.g. a password sent without TLS; never the secret itself
            st.warning(f"Insecure connection: {data.literal(cfg.scrub(warning))}")
        facts = {k: cfg.scrub(str(v)) for k, v in snap.health().items()}
        st.markdown(data.facts_table(facts))


LIVE = JobState.LEASED.value


def state_groups(chosen: list[str]) -> list[list[str]]:
    """The states chosen (none: all) as the groups the Live leases page lists in turn: live
    leases first, then the rest together."""
    chosen = chosen or [s.value for s in JobState]
    rest = [s for s in chosen if s != LIVE]
    return ([[LIVE]] if LIVE in chosen else []) + ([rest] if rest else [])


def _groups_caption(groups: list[list[str]], counts: list[int]) -> str:
    names = [f"{n} live lease(s)" if states == [LIVE] else f"{n} {' or '.join(states)} job(s)"
             for states, n in zip(groups, counts, strict=True)]
    return ", then ".join(names) + (", each" if len(names) > 1 else ",")


def leases(snap: Snapshot, cfg: Config) -> None:
    c1, c2, c3 = st.columns([2, 2, 3])
    job = c1.text_input("Job contains", key="lease_job").strip()
    owner = c2.text_input("Owner contains", key="lease_owner").strip()
    # Expired leases (and every other state) are behind this filter: the page is for live ones.
    states = c3.multiselect("State", [s.value for s in JobState], key="lease_states", default=[LIVE])
    groups = state_groups(states)

    def fetch(group: list[str], offset: int, limit: int) -> JobPage:
        return snap.page(states=group, job=job or None, owner=owner or None, order="expiry",
                         offset=offset, limit=limit)

    page_no = int(st.session_state.get("lease_page", 1))
    shown, counts = data.stacked_page(fetch, groups, (page_no - 1) * PAGE_SIZE, PAGE_SIZE)
    pages = max(1, -(-sum(counts) // PAGE_SIZE))
    if page_no > pages:  # the filters changed under a later page: show the last one
        page_no = st.session_state["lease_page"] = pages
        shown, counts = data.stacked_page(fetch, groups, (page_no - 1) * PAGE_SIZE, PAGE_SIZE)
    jobs_table(data.leases_frame(shown, snap.now(), zone()), "lease_table", LEASE_COLUMNS)
    hint = "" if not states or JobState.EXPIRED.value in states else " Expired leases: add 'expired' under State."
    st.caption(f"{_groups_caption(groups, counts)} soonest expiry first; page {page_no} of {pages}. "
               f"Click a row for the job's detail.{hint}")
    if pages > 1:
        st.number_input("Page", 1, pages, key="lease_page")


def timeline(snap: Snapshot, cfg: Config) -> None:
    c1, c2 = st.columns([1, 3])
    minutes = c1.select_slider("Window (minutes)", [1, 2, 5, 10, 30, 60], value=5, key="tl_minutes")
    job = c2.text_input("Job contains", key="tl_job").strip()
    now = snap.now()
    start = now - 60.0 * minutes
    events = [e for e in snap.history(60.0 * minutes) if e.at >= start]
    rejected = data.filter_rejections(snap.rejections(60.0 * minutes, AUDIT_LIMIT), job=job, since=start)
    if job:
        events = [e for e in events if fold(job) in fold(e.job_id)]
    shown = set(data.busiest_jobs(events, rejected, TIMELINE_JOBS))
    spans = data.intervals([e for e in events if e.job_id in shown], now, start)
    marks = data.rejections_frame([r for r in rejected if r.job_id in shown])
    if spans.empty and marks.empty:
        st.info("No leases or rejections in this window.")
        return
    chart = charts.timeline(spans, marks, now, start, ahead=max(30.0, 6.0 * minutes), local=zone() is not None)
    st.altair_chart(chart, width="stretch", height=charts.height(spans, marks))
    st.caption(f"{len(charts.job_order(spans, marks))} most recently active job(s) with leases or "
               "rejections in the window, those with rejections first. "
               "Bars: one lease (one token) each, from claim to expiry or completion. "
               "Red crosses: rejected stale operations (hover for details).")


def rejections(snap: Snapshot, cfg: Config) -> None:
    c1, c2, c3, c4, c5 = st.columns(5)
    job = c1.text_input("Job contains", key="rj_job").strip()
    owner = c2.text_input("Owner contains", key="rj_owner").strip()
    ops = c3.multiselect("Operation", [o.value for o in Op], key="rj_ops")
    kinds = c4.multiselect("Kind", [k.value for k in RejectionKind], key="rj_kinds")
    window = c5.selectbox("Time", list(WINDOWS), index=1, key="rj_window")
    found = data.filter_rejections(snap.rejections(WINDOWS[window], AUDIT_LIMIT),
                                   job=job, owner=owner, ops=ops, kinds=kinds)
    jobs_table(data.audit_table(found[-AUDIT_ROWS:], snap.now(), zone()), "rj_table", AUDIT_COLUMNS)
    shown = "" if len(found) <= AUDIT_ROWS else f"; the newest {AUDIT_ROWS} shown, exports hold all"
    st.caption(f"{len(found)} rejection(s), newest first{shown}. Click a row for the job's detail.")
    d1, d2, _ = st.columns([1, 1, 4])
    # Exports are built only when clicked, not on every live refresh.
    d1.download_button("Export CSV", lambda: data.rejections_csv(found), "rejections.csv",
                       "text/csv", on_click="ignore")
    d2.download_button("Export JSON", lambda: data.rejections_json(found), "rejections.json",
                       "application/json", on_click="ignore")


PARKED_COLUMNS: dict[str, Any] = {"last error": st.column_config.TextColumn("last error", width=360)}
SCHEDULED_COLUMNS: dict[str, Any] = {"claimable in (s)": st.column_config.NumberColumn(format="%.1f"),
                                     "last error": st.column_config.TextColumn("last error", width=280)}


def parked(snap: Snapshot, cfg: Config) -> None:
    """Jobs that used their attempts and wait for an operator, then jobs claimable later."""
    job = st.text_input("Job contains", key="parked_job").strip() or None
    page_no = int(st.session_state.get("parked_page", 1))
    found = snap.page(states=[JobState.PARKED], job=job, order="job", offset=(page_no - 1) * PAGE_SIZE,
                      limit=PAGE_SIZE)
    now, where = snap.now(), zone()
    if found.total:
        jobs_table(data.parked_frame(found.jobs, now, where), "parked_table", PARKED_COLUMNS)
        pages = max(1, -(-found.total // PAGE_SIZE))
        st.caption(f"{found.total} parked job(s): each used every attempt it was allowed (max_attempts) and is "
                   f"not claimed again until an operator requeues it (the job's page, or `tenure requeue`); "
                   f"page {min(page_no, pages)} of {pages}, by job id. Click a row for the job's detail.")
        if pages > 1:
            st.number_input("Page", 1, pages, key="parked_page")
    else:
        st.success("No parked jobs.")
    st.subheader("Scheduled")
    later = snap.page(states=[JobState.SCHEDULED], job=job, order="job", limit=PAGE_SIZE)
    if not later.total:
        st.caption("No scheduled jobs: every pending job can be claimed now.")
        return
    jobs_table(data.scheduled_frame(later.jobs, now, where), "scheduled_table", SCHEDULED_COLUMNS)
    more = "" if later.total <= len(later.jobs) else f"; the first {len(later.jobs)} by job id shown"
    st.caption(f"{later.total} scheduled job(s), pending but claimable only from the time shown (store time): "
               f"submitted or requeued with a delay, or failed and waiting out their retry backoff; soonest "
               f"first{more}.")


_JOB_PARAM_SEEN = "detail_job_param"


def _job_typed() -> None:
    """The id typed becomes the page's ``?job=`` so the address can be shared."""
    typed = str(st.session_state.get("detail_job", "")).strip()
    st.session_state[_JOB_PARAM_SEEN] = typed
    if typed:
        st.query_params["job"] = typed
    else:
        st.query_params.pop("job", None)


def job_detail(snap: Snapshot, cfg: Config) -> None:
    linked = st.query_params.get("job", "")
    if st.session_state.get(_JOB_PARAM_SEEN) != linked:  # arrived by a link: show that job
        st.session_state[_JOB_PARAM_SEEN] = st.session_state["detail_job"] = linked
    job = st.text_input("Job id", key="detail_job", on_change=_job_typed).strip()
    if not job:
        st.info("Enter a job id to see its leases (tokens), owners, renewals and rejections.")
        return
    status = snap.get(job)
    if status is None:
        st.warning(f"No job {data.literal(repr(job))} in the store.")
        return
    if status.state is JobState.CORRUPT:
        st.error(f"Corrupt record {data.literal(repr(status.key))}: {data.literal(status.problem)}")
    now, where = snap.now(), zone()
    cols = st.columns(6)
    cols[0].metric("State", status.state.value)
    cols[1].metric("Owner", status.owner or "-")
    cols[2].metric("Token", status.token)
    cols[3].metric("Runs", status.runs)
    cols[4].metric("Attempts", attempts(status.attempts, status.max_attempts),
                   help="Claims in this run (a release gives its claim back; a lost lease keeps it), of those "
                        "allowed (max_attempts) when there is a limit")
    cols[5].metric("Expires", "-" if status.expires_at is None else data.ago(status.expires_at - now))
    times = [(name, t) for name, t in [("submitted", status.submitted_at), ("claimed", status.claimed_at),
                                       ("renewed", status.renewed_at), ("completed", status.completed_at),
                                       ("claimable", status.claimable_at), ("parked", status.parked_at)]
             if t is not None]
    st.caption(" · ".join(f"{name} {data.literal(data.stamp(t, now, where))}" for name, t in times))
    if status.last_error is not None:
        st.markdown("**Last error**")
        st.code(status.last_error, language=None)  # whole, as the worker wrote it: not Markdown
    events = snap.history(job_id=job)
    rejected = snap.rejections(None, job_id=job)  # this job's, through the store's index
    if events:
        start = min([events[0].at] + [r.at for r in rejected])
        ahead = max(30.0, 0.1 * (now - start))
        spans = data.intervals(events, now, start)
        marks = data.rejections_frame(rejected)
        chart = charts.timeline(spans, marks, now, start - ahead, ahead, local=where is not None)
        st.altair_chart(chart, width="stretch", height=charts.height(spans, marks))
    st.subheader("History")
    st.dataframe(data.history_frame(events, now, where), hide_index=True, width="stretch")
    st.subheader("Rejections")
    st.dataframe(data.audit_table(rejected, now, where), hide_index=True, width="stretch",
                 column_config=AUDIT_COLUMNS)
    if cfg.admin:
        admin.actions(snap.store, cfg, status)
