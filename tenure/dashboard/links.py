"""The dashboard's pages and links between them: each page has a URL (``/leases``,
``/job?job=ID`` ...) and a script in ``screens/`` that calls ``nav.render`` with its name."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import streamlit as st

# Not "pages": Streamlit would take a "pages" folder beside the app for its older file-based
# navigation and open /leases there without running the app.
SCREENS = Path(__file__).with_name("screens")


@dataclass(frozen=True)
class Route:
    name: str  # the URL path and the script's name
    title: str
    icon: str


ROUTES = [Route("overview", "Overview", ":material/dashboard:"),
          Route("leases", "Live leases", ":material/lock_clock:"),
          Route("workers", "Workers", ":material/engineering:"),
          Route("stuck", "Stuck leases", ":material/hourglass_disabled:"),
          Route("activity", "Activity", ":material/monitoring:"),
          Route("timeline", "Expiry timeline", ":material/timeline:"),
          Route("rejections", "Rejections", ":material/block:"),
          Route("parked", "Parked jobs", ":material/local_parking:"),
          Route("job", "Job detail", ":material/search:")]
BY_NAME = {r.name: r for r in ROUTES}
BY_TITLE = {r.title: r for r in ROUTES}


def script(name: str) -> str:
    """The page's script, relative to the app's (what ``AppTest.switch_page`` takes)."""
    return f"screens/{BY_NAME[name].name}.py"


def page(name: str) -> st.Page:
    """The page as ``st.navigation`` and ``st.switch_page`` take it (the same each time)."""
    route = BY_NAME[name]
    return st.Page(str(SCREENS / f"{route.name}.py"), title=route.title, icon=route.icon,
                   url_path=route.name, default=route.name == "overview")


_OPEN_JOB = "open_job"


def open_job(job_id: str) -> None:
    """Go to a job's detail page, ``/job?job=ID`` (a link anyone can share). Asked from a view,
    which runs in a fragment: the switch is made by the whole app's next run (``follow``), not
    from the fragment, whose timer may rerun it on the old page meanwhile."""
    st.session_state[_OPEN_JOB] = job_id
    st.rerun(scope="app")


def follow() -> None:
    """Make the switch ``open_job`` asked for, if any (called at the start of every page)."""
    job_id = st.session_state.pop(_OPEN_JOB, None)
    if job_id:
        st.switch_page(page("job"), query_params={"job": job_id})
