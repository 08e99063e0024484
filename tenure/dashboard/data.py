"""Records to tables: the dashboard's data shaping, free of Streamlit so tests can call it.

Every time here is the store's clock; "now" is the store's now as read for this render.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterable, Sequence

import pandas as pd

from tenure.core.queries import fold
from tenure.core.records import HistoryEvent, JobPage, JobState, JobStatus, Op, Rejection
from tenure.core.shown import DAY, attempts, duration, first_line
from tenure.views.export import to_json

LEASE_COLUMNS = ["job", "owner", "token", "state", "attempts", "expires in (s)", "lease left",
                 "last renewal", "claimed at", "claimable at", "last error", "problem"]
PARKED_COLUMNS = ["job", "attempts", "last error", "parked at", "token", "runs"]
SCHEDULED_COLUMNS = ["job", "claimable at", "claimable in (s)", "attempts", "last error", "token"]
REJECTION_COLUMNS = ["at", "job", "op", "kind", "owner", "token", "current owner",
                     "current token", "reason", "resource"]
TERMINAL = {Op.COMPLETE: "completed", Op.RELEASE: "released", Op.EXPIRE: "force-expired", Op.FAIL: "failed"}


def when(seconds: float | None) -> pd.Timestamp | None:
    """A store time as a UTC timestamp (None stays None)."""
    return None if seconds is None else pd.Timestamp(seconds, unit="s", tz="UTC")


def ago(delta: float) -> str:
    """``delta`` seconds from now in words: "12 s ago", "in 4 min", "now"."""
    if abs(delta) < 0.5:
        return "now"
    return f"in {duration(delta)}" if delta > 0 else f"{duration(delta)} ago"


def clock_offset(skew: float) -> str:
    """Where this machine's clock stands against the store's (``skew``: this machine's minus the
    store's) in words, not a sign to decode, and never "-0.000 s"."""
    if abs(skew) < 0.0005:
        return "This machine's clock agrees with the store's to the millisecond."
    return f"This machine's clock is {abs(skew):.3f} s {'ahead of' if skew > 0 else 'behind'} the store's."


def stamp(seconds: float | None, now: float, zone: str | None = None, *, dated: bool = True) -> str:
    """A store time as people read it: "2026-12-03 04:35:13 UTC (12 s ago)", in ``zone`` (an
    IANA name such as the browser's) when given and known, else UTC; "" for None. Not
    ``dated``: the date only for times a day or more from now ("04:35:13 UTC (12 s ago)"),
    whose day the age tells, for tables too narrow to repeat it."""
    if seconds is None:
        return ""
    t = pd.Timestamp(seconds, unit="s", tz="UTC")
    if zone:
        with contextlib.suppress(KeyError, ValueError):  # a zone unknown here: stay in UTC
            t = t.tz_convert(zone)
    day = f"{t:%Y-%m-%d} " if dated or abs(seconds - now) >= DAY else ""
    return f"{day}{t:%H:%M:%S} {t.tzname()} ({ago(seconds - now)})"


_MARKDOWN_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")


def literal(text: object) -> str:
    """``text`` for Streamlit's Markdown, shown as written: every ASCII punctuation mark
    backslash-escaped, line breaks as spaces. Besides keeping a ``*`` or ``|`` of a value
    from being read as Markdown, this keeps the ``:58:`` of a time from being taken for an
    emoji shortcode (which makes the browser fetch and parse a 265 kB emoji plugin before it
    draws the text) and a ``$`` from starting a formula."""
    return _MARKDOWN_PUNCTUATION.sub(r"\\\1", " ".join(str(text).splitlines()))


def facts_table(facts: dict[str, str]) -> str:
    """A two-column Markdown table of ``facts`` (a Markdown table needs none of the front-end
    code that ``st.table`` loads: about 1 MB of Arrow and table code before the first paint)."""
    rows = "".join(f"| {literal(k)} | {literal(v)} |\n" for k, v in facts.items())
    return f"| fact | value |\n|---|---|\n{rows}"


def ttl_of(job: JobStatus) -> float | None:
    """The TTL of a job's lease: from its last claim or renewal to its expiry (None: no lease)."""
    began = job.renewed_at or job.claimed_at
    if job.expires_at is None or began is None:
        return None
    return job.expires_at - began


def leases_frame(jobs: Sequence[JobStatus], now: float, zone: str | None = None) -> pd.DataFrame:
    """One row per job; ``lease left`` is the fraction of the lease's TTL still to run."""
    rows = []
    for j in jobs:
        left = fraction = None
        if j.expires_at is not None and j.state in (JobState.LEASED, JobState.EXPIRED):
            left = j.expires_at - now
            ttl = ttl_of(j)
            fraction = min(1.0, max(0.0, left / ttl)) if ttl else 0.0
        problem = f"{j.key}: {j.problem}" if j.state is JobState.CORRUPT else ""
        rows.append({"job": j.job_id, "owner": j.owner or "", "token": j.token,
                     "state": j.state.value, "attempts": attempts(j.attempts, j.max_attempts),
                     "expires in (s)": left, "lease left": fraction,
                     "last renewal": stamp(j.renewed_at, now, zone), "claimed at": stamp(j.claimed_at, now, zone),
                     "claimable at": stamp(j.claimable_at, now, zone), "last error": first_line(j.last_error),
                     "problem": problem})
    return pd.DataFrame(rows, columns=LEASE_COLUMNS)


def parked_frame(jobs: Sequence[JobStatus], now: float, zone: str | None = None) -> pd.DataFrame:
    """Parked jobs: what they used, what went wrong last, and since when they wait for an operator."""
    rows = [{"job": j.job_id, "attempts": attempts(j.attempts, j.max_attempts), "last error": first_line(j.last_error),
             "parked at": stamp(j.parked_at, now, zone), "token": j.token, "runs": j.runs} for j in jobs]
    return pd.DataFrame(rows, columns=PARKED_COLUMNS)


def scheduled_frame(jobs: Sequence[JobStatus], now: float, zone: str | None = None) -> pd.DataFrame:
    """Scheduled jobs, soonest claimable first: a delayed submit or requeue, or a retry's backoff."""
    shown = sorted(jobs, key=lambda j: (j.claimable_at or 0.0, j.job_id))
    rows = [{"job": j.job_id, "claimable at": stamp(j.claimable_at, now, zone),
             "claimable in (s)": None if j.claimable_at is None else max(0.0, j.claimable_at - now),
             "attempts": attempts(j.attempts, j.max_attempts), "last error": first_line(j.last_error),
             "token": j.token} for j in shown]
    return pd.DataFrame(rows, columns=SCHEDULED_COLUMNS)


PageFetch = Callable[[list[str], int, int], JobPage]  # (states, offset, limit) -> one page


def stacked_page(fetch: PageFetch, groups: Sequence[list[str]], offset: int,
                 limit: int) -> tuple[list[JobStatus], list[int]]:
    """One page of the jobs in ``groups`` of states, all of the first group's before the
    second's (each in ``fetch``'s order), and how many jobs each group holds."""
    jobs: list[JobStatus] = []
    counts: list[int] = []
    for states in groups:
        wanted = limit - len(jobs)
        # A page past its group's end, or of one job when the page is full, still counts the group.
        page = fetch(states, max(0, offset - sum(counts)), max(1, wanted))
        jobs += page.jobs[:max(0, wanted)]
        counts.append(page.total)
    return jobs, counts


def rejections_frame(rejections: Iterable[Rejection]) -> pd.DataFrame:
    """Newest first."""
    rows = [{"at": when(r.at), "job": r.job_id, "op": r.op.value, "kind": r.kind.value,
             "owner": r.owner, "token": r.token, "current owner": r.current_owner or "",
             "current token": r.current_token, "reason": r.reason, "resource": r.resource or ""}
            for r in rejections]
    frame = pd.DataFrame(rows, columns=REJECTION_COLUMNS)
    return frame.iloc[::-1].reset_index(drop=True)


# Who was refused with which token, and who holds which, before the reason (the CLI's order but for
# its kind column, which the dashboard puts after the reason: the reason matters more at 1400 px).
AUDIT_COLUMNS = ["at", "job", "op", "owner", "token", "current owner", "current token", "reason",
                 "kind", "resource"]


def audit_table(rejections: Iterable[Rejection], now: float, zone: str | None = None) -> pd.DataFrame:
    """Rejections for people, newest first, with readable times (dated when a day old or more)."""
    rows = [{"at": stamp(r.at, now, zone, dated=False), "job": r.job_id, "op": r.op.value, "owner": r.owner,
             "token": r.token, "current owner": r.current_owner or "", "current token": r.current_token,
             "reason": r.reason, "kind": r.kind.value, "resource": r.resource or ""}
            for r in rejections]
    return pd.DataFrame(rows[::-1], columns=AUDIT_COLUMNS)


def filter_rejections(rejections: Iterable[Rejection], *, job: str = "", owner: str = "",
                      ops: Iterable[str] = (), kinds: Iterable[str] = (),
                      since: float | None = None) -> list[Rejection]:
    """Rejections whose job and owner contain the texts (ASCII case ignored), of those ops
    and kinds (all when empty), at or after ``since``."""
    op_set, kind_set = set(ops), set(kinds)
    return [r for r in rejections
            if fold(job) in fold(r.job_id) and fold(owner) in fold(r.owner)
            and (not op_set or r.op.value in op_set) and (not kind_set or r.kind.value in kind_set)
            and (since is None or r.at >= since)]


# A spreadsheet runs a cell that starts with one of these as a formula (CSV injection): job ids,
# owners and resources are anyone's text, so such cells get a leading quote, as OWASP advises.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(cell: object) -> object:
    """A text cell that a spreadsheet would run as a formula, quoted; anything else as it is."""
    if isinstance(cell, str) and cell.startswith(FORMULA_STARTS):
        return "'" + cell
    return cell


def rejections_csv(rejections: Iterable[Rejection]) -> bytes:
    frame = rejections_frame(rejections)
    for column in ("job", "owner", "current owner", "reason", "resource"):
        frame[column] = frame[column].map(spreadsheet_safe)
    text: str = frame.to_csv(index=False, date_format="%Y-%m-%dT%H:%M:%S.%fZ")
    return text.encode()


def rejections_json(rejections: Iterable[Rejection]) -> bytes:
    """Every field, store times as epoch seconds: the shape ``tenure rejections -o json`` prints."""
    return to_json(list(rejections), indent=1).encode()


def history_frame(events: Iterable[HistoryEvent], now: float, zone: str | None = None) -> pd.DataFrame:
    rows = [{"at": stamp(e.at, now, zone), "op": e.op.value, "owner": e.owner or "", "token": e.token,
             "expires at": stamp(e.expires_at, now, zone)} for e in events]
    return pd.DataFrame(rows, columns=["at", "op", "owner", "token", "expires at"])


def intervals(events: Iterable[HistoryEvent], now: float, start: float) -> pd.DataFrame:
    """One row per (job, generation): when the lease began and ended (or will end).

    A generation claimed before ``start``, or whose claim is not among ``events``, begins at
    ``start``: any other event of a token follows its claim, and a claim keeps only its latest
    renewal event (``transitions.replaced``), so the first event seen may be far from the
    claim. One whose last event is a claim or renewal ends at its expiry, which may be in the
    future (a renewal event carries the end the renewal gave the lease).
    """
    spans: dict[tuple[str, int], dict[str, object]] = {}
    for e in events:
        if e.token == 0 or e.op is Op.SUBMIT:
            continue
        span = spans.setdefault((e.job_id, e.token), {"job": e.job_id, "token": e.token,
                                                      "owner": e.owner or "", "begin": start})
        if e.op is Op.CLAIM:
            span["owner"] = e.owner or ""
            span["begin"] = max(e.at, start)
        if e.op in TERMINAL:
            span["end"], span["outcome"] = (e.expires_at if e.op is Op.EXPIRE and e.expires_at
                                            else e.at), TERMINAL[e.op]
        elif e.expires_at is not None:
            span["end"] = e.expires_at
            span["outcome"] = "live" if e.expires_at > now else "expired"
    rows = [s for s in spans.values() if "end" in s]
    frame = pd.DataFrame(rows, columns=["job", "token", "owner", "begin", "end", "outcome"])
    frame["label"] = [f"token {t} {o}" for t, o in zip(frame["token"], frame["owner"], strict=True)]
    for column in ("begin", "end"):
        frame[column] = pd.to_datetime(frame[column], unit="s", utc=True)
    return frame


def busiest_jobs(events: Sequence[HistoryEvent], rejections: Sequence[Rejection], limit: int) -> list[str]:
    """The jobs to chart: those with rejections first, then the most recently active."""
    order: dict[str, None] = {}
    for r in reversed(rejections):
        order.setdefault(r.job_id, None)
    for e in reversed(events):
        order.setdefault(e.job_id, None)
    return list(order)[:limit]
