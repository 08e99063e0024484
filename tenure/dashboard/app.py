"""The Streamlit app: ``streamlit run tenure/dashboard/app.py`` or ``tenure dashboard``.

Settings come from the environment (see ``config``). The sidebar chooses a view; the view
lives in a fragment that reruns on its own every refresh interval, not the whole page.
"""

from __future__ import annotations

import logging

import streamlit as st

import tenure
from tenure.dashboard import admin, config, views

log = logging.getLogger("tenure.dashboard")


@st.cache_resource(show_spinner=False)
def _store(url: str) -> tenure.Store:
    # One store per URL per server process, shared by every browser session.
    return tenure.connect(url)


def _show(cfg: config.Config, view: str) -> None:
    try:
        views.VIEWS[view](_store(cfg.url), cfg)
    except tenure.LeaseError as exc:
        st.error(f"{type(exc).__name__}: {cfg.scrub(str(exc))}")
    except Exception as exc:
        # A record the backend could not turn into values: an operator needs to see which
        # view failed and why, not a traceback page (which could quote the URL); the log
        # keeps the traceback.
        log.exception("the %s view failed", view)
        st.error(f"The {view} view could not be shown: {type(exc).__name__}: {cfg.scrub(str(exc))}")


def main() -> None:
    st.set_page_config(page_title="tenure dashboard", layout="wide")
    try:
        cfg = config.from_env()
        store = _store(cfg.url)
    except tenure.LeaseError as exc:
        st.error(f"Cannot open the store: {type(exc).__name__}: {exc}")
        return
    with st.sidebar:
        st.title("tenure")
        st.caption(f"Store: `{store.url}` ({store.characteristics.name})")
        view = st.radio("View", list(views.VIEWS), key="view")
        refresh = st.number_input("Refresh every (s, 0 = paused)", 0.0, 3600.0, cfg.refresh,
                                  step=0.5, key="refresh")
        st.caption("Read-only." if not cfg.admin else "Admin mode enabled by the operator.")
        if cfg.admin:
            admin.unlock_form(cfg)
    st.header(view)
    st.fragment(run_every=refresh or None)(_show)(cfg, view)


main()
