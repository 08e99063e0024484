"""The expiry timeline: lease intervals per job and token (generation), rejections marked on them."""

from __future__ import annotations

from typing import Any, Literal

import pandas as pd

from tenure.dashboard.data import when

OUTCOME_COLOURS = {"live": "#2e7d32", "expired": "#f9a825", "completed": "#1565c0",
                   "released": "#78909c", "force-expired": "#6a1b9a",
                   "failed": "#d84315"}
ROW = 40  # pixels per job: a bar with generation labels above (odd) and below (even) it


def job_order(spans: pd.DataFrame, rejections: pd.DataFrame) -> list[str]:
    return sorted(set(spans["job"]) | set(rejections["job"]))


def height(spans: pd.DataFrame, rejections: pd.DataFrame) -> int:
    """The chart's height in pixels: a fixed row per job, so bars never squash together."""
    return 60 + ROW * max(len(job_order(spans, rejections)), 2)


def timeline(spans: pd.DataFrame, rejections: pd.DataFrame, now: float, start: float,
             ahead: float, local: bool = False) -> Any:
    """Bars from lease start to expiry (or completion) per job, labelled with token and
    owner, with a tick at each start; a red cross where a stale operation was rejected; a
    dashed rule at the store's now. The time axis runs from ``start`` to ``ahead`` seconds
    after now, in UTC (``local``: the browser's zone); bars are clipped. Labels of odd
    generations sit above the bar, even ones below, so the labels of a short generation and
    the next one never overlap."""
    import altair as alt  # here, not at the top: 0.3-0.7 s the server's first page need not wait for

    jobs = job_order(spans, rejections)
    kind: Literal["time", "utc"] = "time" if local else "utc"
    x_scale = alt.Scale(type=kind, domain=[_iso(start), _iso(now + ahead)])
    x_axis = alt.Axis(format="%H:%M:%S", labelFlush=False,  # in the scale's zone
                      title="store time (local)" if local else "store time (UTC)")
    y = alt.Y("job:N", sort=jobs, title=None, scale=alt.Scale(domain=jobs),
              axis=alt.Axis(labelLimit=240))
    outcomes = alt.Scale(domain=list(OUTCOME_COLOURS), range=list(OUTCOME_COLOURS.values()))
    bars = alt.Chart(spans).mark_bar(height=12, clip=True, cornerRadius=2).encode(
        x=alt.X("begin:T", scale=x_scale, axis=x_axis), x2="end:T", y=y,
        color=alt.Color("outcome:N", title="lease", scale=outcomes, legend=alt.Legend(symbolType="square")),
        tooltip=["job:N", "token:Q", "owner:N", "outcome:N",
                 alt.Tooltip("begin:T", format="%H:%M:%S.%L", formatType=kind),
                 alt.Tooltip("end:T", format="%H:%M:%S.%L", formatType=kind)])
    labels = [alt.Chart(spans).transform_filter(f"datum.token % 2 == {odd}").mark_text(
        align="left", baseline="bottom" if odd else "top", dy=-7 if odd else 7, fontSize=10,
        color="#333", clip=True).encode(x=alt.X("begin:T", scale=x_scale), y=y, text="label:N")
        for odd in (1, 0)]
    # A lease shorter than a pixel (a job completed at once) would leave its label over no bar.
    starts = alt.Chart(spans).mark_tick(thickness=2, size=12, clip=True).encode(
        x=alt.X("begin:T", scale=x_scale), y=y, color=alt.Color("outcome:N", title="lease", scale=outcomes))
    marks = alt.Chart(rejections).mark_point(shape="cross", size=140, color="#c62828", filled=True,
                                             clip=True).encode(
        x=alt.X("at:T", scale=x_scale), y=y,
        tooltip=[alt.Tooltip("at:T", format="%H:%M:%S.%L", formatType=kind), "job:N", "op:N",
                 "owner:N", "token:Q", "current token:Q", "reason:N"])
    rule = alt.Chart(pd.DataFrame({"now": [when(now)]})).mark_rule(
        strokeDash=[4, 4], color="#555").encode(x=alt.X("now:T", scale=x_scale))
    return alt.layer(bars, starts, *labels, marks, rule).properties(height=height(spans, rejections))


def _iso(seconds: float) -> str:
    return str(pd.Timestamp(seconds, unit="s", tz="UTC").isoformat())
