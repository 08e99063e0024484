"""Views for what an operator looks for first: who holds what, stuck leases, and rejections
and expiries per minute. The tables come from ``ops_data``; rows open the job's detail."""

from __future__ import annotations

import streamlit as st

from tenure.core.shown import duration
from tenure.dashboard import data, ops_data
from tenure.dashboard.config import Config
from tenure.dashboard.shared import zone
from tenure.dashboard.views import LEASE_COLUMNS, SOON, jobs_table
from tenure.views.snapshot import HELD_CAP, Snapshot

ACTIVITY_HOURS = [1, 3, 6, 12, 24]
STUCK_WINDOWS = {"15 minutes": 900.0, "1 hour": 3600.0, "6 hours": 21600.0}
RUNS_WINDOW = 3600.0  # at least this much history tells a job's usual run


def _capped(count: int) -> str:
    return f" (the {HELD_CAP} soonest to expire read)" if count >= HELD_CAP else ""


def workers(snap: Snapshot, cfg: Config) -> None:
    held = snap.held()
    now = snap.now()
    frame = ops_data.workers_frame(held, now, SOON, zone())
    if frame.empty:
        st.info("No worker holds a lease.")
        return
    event = st.dataframe(frame, hide_index=True, width="stretch", key="workers_table", on_select="rerun",
                         selection_mode="single-row", column_config={
                             "since last renewal (s)": st.column_config.NumberColumn(format="%.1f")})
    holding = int((frame["leases"] > 0).sum())
    idle = len(frame) - holding
    gone = f", then {idle} whose leases all expired unclaimed" if idle else ""
    st.caption(f"{holding} owner(s) holding live leases{_capped(len(held))}, the longest without a renewal "
               f"first{gone}; 'expiring soon' ends within {SOON:g} s. Click an owner for its leases.")
    rows = event.selection.rows if event is not None else []
    if rows and rows[0] < len(frame):
        owner = str(frame["owner"].iloc[rows[0]])
        st.subheader(f"Leases of {data.literal(owner)}")
        mine = [j for j in held if (j.owner or "") == owner]
        jobs_table(data.leases_frame(mine, now, zone()), "worker_leases", LEASE_COLUMNS)


def stuck(snap: Snapshot, cfg: Config) -> None:
    label = st.selectbox("History to judge by", list(STUCK_WINDOWS), index=1, key="stuck_window")
    window = STUCK_WINDOWS[label]
    held = snap.held()
    runs_window = max(window, RUNS_WINDOW)
    frame = ops_data.stuck_frame(held, snap.history(runs_window), snap.now(), window, zone())
    st.caption(f"Live leases held past their TTL and either more than {ops_data.STUCK_FACTOR:g} times "
               f"their job's usual run (the median claim-to-completion of that job's own runs in the last "
               f"{duration(runs_window)} of history, once it has {ops_data.MIN_RUNS}; at least "
               f"{ops_data.STUCK_FLOOR:g} s), or longer than {label} by an owner that completed nothing in "
               f"that time{_capped(len(held))}.")
    if frame.empty:
        st.success("No stuck leases.")
        return
    jobs_table(frame, "stuck_table", {"why": st.column_config.TextColumn("why", width="large")})


def activity(snap: Snapshot, cfg: Config) -> None:
    import altair as alt  # here, not at the top: 0.3-0.7 s the server's first page need not wait for

    hours = st.select_slider("Last hours", ACTIVITY_HOURS, value=3, key="activity_hours")
    window = 3600.0 * hours
    frame = ops_data.activity_frame(snap.rejections(window), snap.history(window), snap.now(), window)
    local = zone() is not None
    x = alt.X("minute:T", title="store time (local)" if local else "store time (UTC)",
              scale=alt.Scale(type="time" if local else "utc"),
              axis=alt.Axis(format="%H:%M"))  # in the scale's zone
    chart = alt.Chart(frame).mark_line(interpolate="step-after").encode(
        x=x, y=alt.Y("count:Q", title="per minute"),
        color=alt.Color("what:N", title=None, scale=alt.Scale(domain=["rejections", "expiries"],
                                                              range=["#c62828", "#f9a825"])),
        tooltip=[alt.Tooltip("minute:T", format="%H:%M", formatType="time" if local else "utc"),
                 "what:N", "count:Q"])
    st.altair_chart(chart, width="stretch")
    totals = frame.groupby("what")["count"].sum()
    st.caption(f"{totals.get('rejections', 0)} rejection(s) and {totals.get('expiries', 0)} expiries "
               f"(leases that ran out unrenewed or were force-expired) in the last {hours} h, from the "
               "store's audit and history (as far back as their retention keeps).")
