"""A page's body: its title, then its view in a fragment that reruns on its own every refresh
interval and reads the server's one shared ``Snapshot`` (see ``shared``), so open sessions
do not multiply the store's reads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import streamlit as st

from tenure.core.errors import LeaseError
from tenure.dashboard import config, data, links, ops, shared, views
from tenure.dashboard.links import BY_NAME
from tenure.views.snapshot import Snapshot

log = logging.getLogger("tenure.dashboard")
View = Callable[[Snapshot, config.Config], None]
VIEWS: dict[str, View] = {"overview": views.overview, "leases": views.leases, "workers": ops.workers,
                          "stuck": ops.stuck, "activity": ops.activity, "timeline": views.timeline,
                          "rejections": views.rejections, "parked": views.parked, "job": views.job_detail}


def render(name: str) -> None:
    """A page's body: its title, then its view in a fragment that refreshes itself."""
    links.follow()
    cfg = shared.settings()
    if cfg is None:
        return
    st.header(BY_NAME[name].title)
    refresh = st.session_state.get("refresh", cfg.refresh)
    st.fragment(run_every=refresh or None)(_show)(VIEWS[name], name, cfg)


def _show(view: View, name: str, cfg: config.Config) -> None:
    try:
        view(shared.snapshot(cfg), cfg)
    except LeaseError as exc:
        st.error(f"{type(exc).__name__}: {data.literal(cfg.scrub(str(exc)))}")
    except Exception as exc:
        # A record the backend could not turn into values: an operator needs to see which
        # view failed and why, not a traceback page (which could quote the URL); the log
        # keeps the traceback.
        log.exception("the %s view failed", name)
        st.error(f"The {BY_NAME[name].title} view could not be shown: {type(exc).__name__}: "
                 f"{data.literal(cfg.scrub(str(exc)))}")
