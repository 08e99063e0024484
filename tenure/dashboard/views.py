"""The dashboard's views; each reads only what it shows, through aggregated, paged queries."""

from __future__ import annotations

import time

import pandas as pd
import streamlit as st

from tenure.core.queries import fold
from tenure.core.records import JobPage, JobState, Op, RejectionKind
from tenure.core.store import Store
from tenure.dashboard import admin, charts, data
from tenure.dashboard.config import Config

PAGE_SIZE = 50
SOON = 30.0  # seconds: a live lease ending within this is "expiring soon"
AUDIT_LIMIT = 10_000  # the audit reads at most this many of the newest rejections ...
AUDIT_ROWS = 1_000  # ... and shows this many of those that match the filters
TIMELINE_JOBS = 30
WINDOWS = {"last 15 minutes": 900.0, "last hour": 3600.0, "last 24 hours": 86400.0, "all kept": None}


def overview(store: Store, cfg: Config) -> None:
    s = store.summary(soon=SOON)
    cols = st.columns(6)
    cols[0].metric("Pending", s.pending)
    cols[1].metric("Leased", s.leased)
    cols[2].metric(f"Expiring < {SOON:g}s", s.expiring_soon)
    cols[3].metric("Expired, unclaimed", s.expired)
    cols[4].metric("Completed", s.completed)
    cols[5].metric("Rejections (1h)", s.rejections_last_hour)
    if s.corrupt:
        st.error(f"{s.corrupt} corrupt record(s) in the store: filter Live leases by state 'corrupt'.")
    left, right = st.columns(2)
    with left:
        st.subheader("Store clock")
        skew = time.time() - s.now
        st.markdown(f"**{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(s.now))} UTC**")
        st.caption(f"This machine's clock is {skew:+.3f} s from the store's. "
                   "Ownership is judged by the store's clock alone.")
    with right:
        st.subheader("Backend health")
        for warning in store.warnings:  # e.g. a password sent without TLS; never the secret itself
            st.warning(f"Insecure connection: {cfg.scrub(warning)}")
        facts = {k: cfg.scrub(str(v)) for k, v in store.health().items()}
        st.table(pd.DataFrame({"fact": list(facts), "value": list(facts.values())}))


def leases(store: Store, cfg: Config) -> None:
    c1, c2, c3 = st.columns([2, 2, 3])
    job = c1.text_input("Job contains", key="lease_job").strip()
    owner = c2.text_input("Owner contains", key="lease_owner").strip()
    states = c3.multiselect("State", [s.value for s in JobState], key="lease_states",
                            default=[JobState.LEASED.value, JobState.EXPIRED.value])

    def fetch(page_no: int) -> JobPage:
        return store.page(states=states or None, job=job or None, owner=owner or None,
                          order="expiry", offset=(page_no - 1) * PAGE_SIZE, limit=PAGE_SIZE)

    page_no = int(st.session_state.get("lease_page", 1))
    result = fetch(page_no)
    pages = max(1, -(-result.total // PAGE_SIZE))
    if page_no > pages:  # the filters changed under a later page: show the last one
        page_no = st.session_state["lease_page"] = pages
        result = fetch(page_no)
    now = store.now()
    frame = data.leases_frame(result.jobs, now)
    st.dataframe(frame, hide_index=True, width="stretch", column_config={
        "lease left": st.column_config.ProgressColumn("lease left", min_value=0.0, max_value=1.0,
                                                      format="percent"),
        "expires in (s)": st.column_config.NumberColumn(format="%.1f"),
    })
    st.caption(f"{result.total} matching job(s), soonest expiry first; page {page_no} of {pages}.")
    if pages > 1:
        st.number_input("Page", 1, pages, key="lease_page")


def timeline(store: Store, cfg: Config) -> None:
    c1, c2 = st.columns([1, 3])
    minutes = c1.select_slider("Window (minutes)", [1, 2, 5, 10, 30, 60], value=5, key="tl_minutes")
    job = c2.text_input("Job contains", key="tl_job").strip()
    now = store.now()
    start = now - 60.0 * minutes
    events = store.history(since=start)
    rejected = data.filter_rejections(store.rejections(since=start, limit=AUDIT_LIMIT), job=job)
    if job:
        events = [e for e in events if fold(job) in fold(e.job_id)]
    shown = set(data.busiest_jobs(events, rejected, TIMELINE_JOBS))
    spans = data.intervals([e for e in events if e.job_id in shown], now, start)
    marks = data.rejections_frame([r for r in rejected if r.job_id in shown])
    if spans.empty and marks.empty:
        st.info("No leases or rejections in this window.")
        return
    chart = charts.timeline(spans, marks, now, start, ahead=max(30.0, 6.0 * minutes))
    st.altair_chart(chart, width="stretch", height=charts.height(spans, marks))
    st.caption(f"{len(charts.job_order(spans, marks))} most recently active job(s) with leases or "
               "rejections in the window, those with rejections first. "
               "Bars: one lease generation each, from claim to expiry or completion. "
               "Red crosses: rejected stale operations (hover for details).")


def rejections(store: Store, cfg: Config) -> None:
    c1, c2, c3, c4, c5 = st.columns(5)
    job = c1.text_input("Job contains", key="rj_job").strip()
    owner = c2.text_input("Owner contains", key="rj_owner").strip()
    ops = c3.multiselect("Operation", [o.value for o in Op], key="rj_ops")
    kinds = c4.multiselect("Kind", [k.value for k in RejectionKind], key="rj_kinds")
    window = c5.selectbox("Time", list(WINDOWS), index=1, key="rj_window")
    seconds = WINDOWS[window]
    since = None if seconds is None else store.now() - seconds
    found = data.filter_rejections(store.rejections(since=since, limit=AUDIT_LIMIT),
                                   job=job, owner=owner, ops=ops, kinds=kinds)
    st.dataframe(data.rejections_frame(found[-AUDIT_ROWS:]), hide_index=True, width="stretch")
    shown = "" if len(found) <= AUDIT_ROWS else f"; the newest {AUDIT_ROWS} shown, exports hold all"
    st.caption(f"{len(found)} rejection(s), newest first{shown}.")
    d1, d2, _ = st.columns([1, 1, 4])
    # Exports are built only when clicked, not on every live refresh.
    d1.download_button("Export CSV", lambda: data.rejections_csv(found), "rejections.csv",
                       "text/csv", on_click="ignore")
    d2.download_button("Export JSON", lambda: data.rejections_json(found), "rejections.json",
                       "application/json", on_click="ignore")


def job_detail(store: Store, cfg: Config) -> None:
    job = st.text_input("Job id", key="detail_job").strip()
    if not job:
        st.info("Enter a job id to see its generations, owners, renewals and rejections.")
        return
    status = store.get(job)
    if status is None:
        st.warning(f"No job {job!r} in the store.")
        return
    if status.state is JobState.CORRUPT:
        st.error(f"Corrupt record {status.key!r}: {status.problem}")
    cols = st.columns(5)
    cols[0].metric("State", status.state.value)
    cols[1].metric("Owner", status.owner or "-")
    cols[2].metric("Generation", status.token)
    cols[3].metric("Runs", status.runs)
    left = "-" if status.expires_at is None else f"{status.expires_at - store.now():.1f} s"
    cols[4].metric("Expires in", left)
    times = [(name, data.when(t)) for name, t in [
        ("submitted", status.submitted_at), ("claimed", status.claimed_at),
        ("renewed", status.renewed_at), ("completed", status.completed_at)] if t is not None]
    st.caption(" · ".join(f"{name} {t:%Y-%m-%d %H:%M:%S} UTC" for name, t in times))
    events = store.history(job)
    rejected = [r for r in store.rejections(limit=AUDIT_LIMIT) if r.job_id == job]
    if events:
        now = store.now()
        start = min([events[0].at] + [r.at for r in rejected])
        ahead = max(30.0, 0.1 * (now - start))
        spans = data.intervals(events, now, start)
        marks = data.rejections_frame(rejected)
        chart = charts.timeline(spans, marks, now, start - ahead, ahead)
        st.altair_chart(chart, width="stretch", height=charts.height(spans, marks))
    st.subheader("History")
    st.dataframe(data.history_frame(events), hide_index=True, width="stretch")
    st.subheader("Rejections")
    st.dataframe(data.rejections_frame(rejected), hide_index=True, width="stretch")
    if cfg.admin:
        admin.actions(store, cfg, status)


VIEWS = {"Overview": overview, "Live leases": leases, "Expiry timeline": timeline,
         "Rejections": rejections, "Job detail": job_detail}
