"""The expiry timeline: lease intervals per job and generation, rejections marked on them."""

from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd

from tenure.dashboard.data import when

OUTCOME_COLOURS = {"live": "#2e7d32", "expired": "#f9a825", "completed": "#1565c0",
                   "released": "#78909c", "force-expired": "#6a1b9a"}
ROW = 34  # pixels per job: a bar with its generation label above it


def job_order(spans: pd.DataFrame, rejections: pd.DataFrame) -> list[str]:
    return sorted(set(spans["job"]) | set(rejections["job"]))


def height(spans: pd.DataFrame, rejections: pd.DataFrame) -> int:
    """The chart's height in pixels: a fixed row per job, so bars never squash together."""
    return 60 + ROW * max(len(job_order(spans, rejections)), 2)


def timeline(spans: pd.DataFrame, rejections: pd.DataFrame, now: float, start: float,
             ahead: float) -> Any:
    """Bars from lease start to expiry (or completion) per job, labelled with generation and
    owner; a red cross where a stale operation was rejected; a dashed rule at the store's now.
    The time axis runs from ``start`` to ``ahead`` seconds after now, in UTC; bars are clipped."""
    jobs = job_order(spans, rejections)
    x_scale = alt.Scale(type="utc", domain=[_iso(start), _iso(now + ahead)])
    x_axis = alt.Axis(format="%H:%M:%S", title="store time (UTC)", labelFlush=False)
    y = alt.Y("job:N", sort=jobs, title=None, scale=alt.Scale(domain=jobs),
              axis=alt.Axis(labelLimit=240))
    bars = alt.Chart(spans).mark_bar(height=12, clip=True, cornerRadius=2).encode(
        x=alt.X("begin:T", scale=x_scale, axis=x_axis), x2="end:T", y=y,
        color=alt.Color("outcome:N", title="lease", scale=alt.Scale(
            domain=list(OUTCOME_COLOURS), range=list(OUTCOME_COLOURS.values()))),
        tooltip=["job:N", "token:Q", "owner:N", "outcome:N",
                 alt.Tooltip("begin:T", format="%H:%M:%S.%L", formatType="utc"),
                 alt.Tooltip("end:T", format="%H:%M:%S.%L", formatType="utc")])
    labels = alt.Chart(spans).mark_text(align="left", baseline="bottom", dy=-7, fontSize=10,
                                        color="#333", clip=True).encode(
        x=alt.X("begin:T", scale=x_scale), y=y, text="label:N")
    marks = alt.Chart(rejections).mark_point(shape="cross", size=140, color="#c62828", filled=True,
                                             clip=True).encode(
        x=alt.X("at:T", scale=x_scale), y=y,
        tooltip=[alt.Tooltip("at:T", format="%H:%M:%S.%L", formatType="utc"), "job:N", "op:N",
                 "owner:N", "token:Q", "current token:Q", "reason:N"])
    rule = alt.Chart(pd.DataFrame({"now": [when(now)]})).mark_rule(
        strokeDash=[4, 4], color="#555").encode(x=alt.X("now:T", scale=x_scale))
    return (bars + labels + marks + rule).properties(height=height(spans, rejections))


def _iso(seconds: float) -> str:
    return str(pd.Timestamp(seconds, unit="s", tz="UTC").isoformat())
