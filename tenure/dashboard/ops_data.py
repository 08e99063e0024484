"""What an operator looks for first, as tables: who holds what, which leases look stuck, and
rejections and expiries per minute. Free of Streamlit, so tests call it directly.

Every time is the store's clock; ``now`` is the store's now for this render.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pandas as pd

from tenure.core.records import HistoryEvent, JobState, JobStatus, Op, Rejection
from tenure.core.shown import duration
from tenure.core.transitions import state_at
from tenure.dashboard.data import ago, intervals, stamp, ttl_of

WORKER_COLUMNS = ["owner", "leases", "expiring soon", "expired, unclaimed", "since last renewal (s)",
                  "last renewal", "soonest expiry"]
STUCK_COLUMNS = ["job", "owner", "token", "held for", "usual run", "why", "last renewal"]
STUCK_FACTOR = 3.0  # held this many times the job's usual run is stuck ...
STUCK_FLOOR = 60.0  # ... and for at least this many seconds (short jobs vary a lot) ...
MIN_RUNS = 3  # ... judged once the job itself has completed this many runs: others' runs say nothing


def _renewed(job: JobStatus) -> float | None:
    return job.renewed_at if job.renewed_at is not None else job.claimed_at


def workers_frame(held: Iterable[JobStatus], now: float, soon: float, zone: str | None = None) -> pd.DataFrame:
    """One row per owner of a lease (live or expired and unclaimed): owners holding a live lease
    first, the longest silent first among them, then owners whose leases all expired."""
    owners: dict[str, list[JobStatus]] = {}
    for job in held:
        owners.setdefault(job.owner or "", []).append(job)
    rows = []
    for owner, jobs in owners.items():
        live = [j for j in jobs if state_at(j, now) is JobState.LEASED]
        last = max((t for j in jobs if (t := _renewed(j)) is not None), default=None)  # expired ones too
        soonest = min((j.expires_at for j in live if j.expires_at is not None), default=None)
        rows.append({"owner": owner, "leases": len(live),
                     "expiring soon": sum(1 for j in live if j.expires_at is not None and j.expires_at <= now + soon),
                     "expired, unclaimed": len(jobs) - len(live),
                     "since last renewal (s)": None if last is None else round(now - last, 1),
                     "last renewal": stamp(last, now, zone),
                     "soonest expiry": "" if soonest is None else ago(soonest - now)})
    frame = pd.DataFrame(rows, columns=WORKER_COLUMNS)
    # Owners holding live leases first: one whose leases all ran out holds nothing now.
    frame["_idle"] = frame["leases"] == 0
    frame = frame.sort_values(["_idle", "since last renewal (s)", "owner"], ascending=[True, False, True],
                              na_position="first")
    return frame.drop(columns="_idle").reset_index(drop=True)


@dataclass(frozen=True)
class Runs:
    """How long each job ran, from the claims and completions in the history read."""

    per_job: dict[str, list[float]]  # job -> claim-to-completion of each of its completed runs
    last_completion: dict[str, float]  # owner -> store time of its latest completion

    def usual(self, job_id: str) -> float | None:
        """The job's own median run, once it has ``MIN_RUNS`` completed runs (None before)."""
        own = self.per_job.get(job_id, [])
        return statistics.median(own) if len(own) >= MIN_RUNS else None

    def count(self, job_id: str) -> int:
        return len(self.per_job.get(job_id, []))


def runs(events: Sequence[HistoryEvent]) -> Runs:
    claimed: dict[tuple[str, int], float] = {}
    durations: dict[str, list[float]] = {}
    last: dict[str, float] = {}
    for e in events:
        if e.op is Op.CLAIM:
            claimed[(e.job_id, e.token)] = e.at
        elif e.op is Op.COMPLETE:
            if e.owner:
                last[e.owner] = e.at
            began = claimed.get((e.job_id, e.token))
            if began is not None:
                durations.setdefault(e.job_id, []).append(e.at - began)
    return Runs(durations, last)


def _usual_text(usual: float | None, n: int) -> str:
    if usual is None:
        return f"unknown: {n} completed run(s), {MIN_RUNS} needed"
    return f"{usual:.1f} s (median of its {n} runs)"


def stuck_frame(held: Iterable[JobStatus], events: Sequence[HistoryEvent], now: float, window: float,
                zone: str | None = None) -> pd.DataFrame:
    """Live leases held past their TTL and either far longer than their job's own usual run
    (``STUCK_FACTOR`` times its median in ``events``, once it has ``MIN_RUNS`` runs there) or
    longer than ``window`` seconds by an owner that completed nothing in that time: the longest
    held first. A lease within its TTL is not judged: its worker asked for that long."""
    known = runs(events)
    rows = []
    for job in held:
        if state_at(job, now) is not JobState.LEASED or job.claimed_at is None:
            continue
        held_for = now - job.claimed_at
        if held_for <= (ttl_of(job) or 0.0):
            continue
        usual = known.usual(job.job_id)
        why = []
        if usual is not None and held_for > max(STUCK_FACTOR * usual, STUCK_FLOOR):
            why.append(f"held {held_for / max(usual, 1e-3):.0f}x its usual run")
        owner = job.owner or ""
        last_done = known.last_completion.get(owner)
        if held_for > window and (last_done is None or last_done < now - window):
            why.append(f"{owner} renews but completed nothing in {duration(window)}")
        if why:
            rows.append({"job": job.job_id, "owner": owner, "token": job.token, "held for": duration(held_for),
                         "usual run": _usual_text(usual, known.count(job.job_id)), "why": "; ".join(why),
                         "last renewal": stamp(_renewed(job), now, zone), "_held": held_for})
    frame = pd.DataFrame(rows, columns=[*STUCK_COLUMNS, "_held"])
    return frame.sort_values("_held", ascending=False).drop(columns="_held").reset_index(drop=True)


def activity_frame(rejections: Iterable[Rejection], events: Sequence[HistoryEvent], now: float,
                   window: float) -> pd.DataFrame:
    """Rejections and lease expiries (run out or forced) per minute over the last ``window``
    seconds, every minute present (0 where none): columns minute, what, count."""
    start = now - window
    minutes = pd.date_range(pd.Timestamp(start, unit="s", tz="UTC").floor("min"),
                            pd.Timestamp(now, unit="s", tz="UTC").floor("min"), freq="min")
    spans = intervals(events, now, start)
    ended = spans[spans["outcome"].isin(["expired", "force-expired"])]["end"]
    series = {
        "rejections": pd.Series([pd.Timestamp(r.at, unit="s", tz="UTC") for r in rejections if r.at >= start],
                                dtype="datetime64[ns, UTC]"),
        "expiries": ended[(ended >= minutes[0]) & (ended <= pd.Timestamp(now, unit="s", tz="UTC"))],
    }
    parts = []
    for what, times in series.items():
        counts = times.dt.floor("min").value_counts().reindex(minutes, fill_value=0)
        parts.append(pd.DataFrame({"minute": minutes, "what": what, "count": counts.to_numpy()}))
    return pd.concat(parts, ignore_index=True)
