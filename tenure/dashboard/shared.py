"""What every browser session of one dashboard server shares: its settings and one snapshot.

``st.cache_resource`` keeps one ``Snapshot`` per store URL and refresh interval for the
server process, so N sessions cost the store the reads of one (see ``tenure.views.snapshot``).
"""

from __future__ import annotations

import streamlit as st

import tenure
from tenure.core.errors import LeaseError
from tenure.dashboard import config, data
from tenure.views.snapshot import Snapshot

TIMES_KEY = "times"
LOCAL, UTC = "local", "UTC"


@st.cache_resource(show_spinner=False)
def _snapshot(url: str, max_age: float) -> Snapshot:
    # In the background once a page has shown a result: a refresh never waits for the store.
    return Snapshot(tenure.connect(url), max_age=max_age, background=max_age > 0)


def snapshot(cfg: config.Config) -> Snapshot:
    """The server's snapshot: results kept for the server's refresh interval (0: not kept)."""
    return _snapshot(cfg.url, cfg.refresh)


def settings() -> config.Config | None:
    """The server's settings, or None after showing why there are none."""
    try:
        return config.from_env()
    except LeaseError as exc:
        st.error(f"Cannot open the store: {type(exc).__name__}: {data.literal(exc)}")
        return None


def zone() -> str | None:
    """The zone times are shown in: the browser's when the session chose local time and the
    browser told one (None: UTC)."""
    if st.session_state.get(TIMES_KEY, UTC) != LOCAL:
        return None
    return st.context.timezone or None
