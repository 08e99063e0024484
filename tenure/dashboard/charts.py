"""The expiry timeline: lease intervals per job and generation, rejections marked on them."""

from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd

from tenure.dashboard.data import when

OUTCOME_COLOURS = {"live": "#2e7d32", "expired": "#f9a825", "completed": "#1565c0",
                   "released": "#78909c", "force-expired": "#6a1b9a"}


def timeline(spans: pd.DataFrame, rejections: pd.DataFrame, now: float) -> Any:
    """Bars from lease start to expiry (or completion) per job, labelled with generation and
    owner; a red cross where a stale operation was rejected; a rule at the store's now."""
    jobs = sorted(set(spans["job"]) | set(rejections["job"]))
    y = alt.Y("job:N", sort=jobs, title=None)
    bars = alt.Chart(spans).mark_bar(height=14, opacity=0.85).encode(
        x=alt.X("begin:T", title="store time (UTC)"), x2="end:T", y=y,
        color=alt.Color("outcome:N", scale=alt.Scale(domain=list(OUTCOME_COLOURS),
                                                     range=list(OUTCOME_COLOURS.values()))),
        tooltip=["job:N", "token:Q", "owner:N", "outcome:N", "begin:T", "end:T"])
    labels = alt.Chart(spans).mark_text(align="left", dx=3, color="white", fontSize=11).encode(
        x="begin:T", y=y, text="label:N")
    marks = alt.Chart(rejections).mark_point(shape="cross", size=160, color="#c62828",
                                             filled=True).encode(
        x="at:T", y=y, tooltip=["at:T", "job:N", "op:N", "owner:N", "token:Q", "current token:Q", "reason:N"])
    rule = alt.Chart(pd.DataFrame({"now": [when(now)]})).mark_rule(
        strokeDash=[4, 4], color="#555").encode(x="now:T")
    return (bars + labels + marks + rule).properties(height=max(120, 28 * len(jobs)))
