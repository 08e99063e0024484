"""The Streamlit app: ``streamlit run tenure/dashboard/app.py`` or ``tenure dashboard``.

Settings come from the environment (see ``config``). ``st.navigation`` lists the pages
(``links.ROUTES``), each with its own URL; the sidebar holds the store, the refresh
interval, and the time zone; admin actions are unlocked on a job's page.
"""

from __future__ import annotations

import streamlit as st

from tenure.core.errors import LeaseError
from tenure.dashboard import data, links, shared


def main() -> None:
    # An emoji favicon is drawn in the page (an inline SVG); without one Streamlit shows each
    # page's :material/ icon, fetched from fonts.gstatic.com: no dashboard page leaves its host.
    st.set_page_config(page_title="tenure dashboard", page_icon="🔒", layout="wide")
    cfg = shared.settings()
    if cfg is None:
        return
    try:
        snap = shared.snapshot(cfg)
    except LeaseError as exc:
        st.error(f"Cannot open the store: {type(exc).__name__}: {data.literal(cfg.scrub(str(exc)))}")
        return
    current = st.navigation([links.page(route.name) for route in links.ROUTES])
    with st.sidebar:
        st.caption(f"Store: `{snap.store.url}` ({snap.store.characteristics.name})")
        # In a popover: the browser draws its widgets (and fetches their code) only when it
        # is opened, not before the first page's counts.
        with st.popover("Settings", icon=":material/settings:"):
            st.number_input("Refresh every (s, 0 = paused)", 0.0, 3600.0, cfg.refresh, step=0.5, key="refresh")
            st.radio("Times", [shared.UTC, shared.LOCAL], key=shared.TIMES_KEY, horizontal=True,
                     help="Local is this browser's time zone. Ownership is judged by the store's clock.")
        st.caption("Read-only." if not cfg.admin else "Admin mode enabled by the operator: "
                   "unlock the actions on a job's page.")
    current.run()


main()
