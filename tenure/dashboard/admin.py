"""Admin actions: only with ``--admin`` and the operator's secret, confirmed, and audited.

Audited means recorded in the store, where operators look: the action's history event names
``dashboard-admin`` as its owner. A log line is written as well, for the process's own log.
"""

from __future__ import annotations

import hmac
import logging

import streamlit as st

from tenure.core.errors import LeaseError
from tenure.core.records import JobState, JobStatus
from tenure.core.store import Store
from tenure.dashboard.config import ADMIN_ACTOR, Config

log = logging.getLogger("tenure.dashboard.admin")
_UNLOCKED = "admin_unlocked"
_PENDING = "admin_pending"


def unlock_form(cfg: Config) -> None:
    """Sidebar: the secret the operator supplies; compared in constant time."""
    if st.session_state.get(_UNLOCKED):
        st.success("Admin actions unlocked")
        if st.button("Lock admin actions"):
            st.session_state[_UNLOCKED] = False
            st.rerun()
        return
    secret = st.text_input("Admin secret", type="password", key="admin_secret_input")
    if secret:
        assert cfg.admin_secret is not None
        if hmac.compare_digest(secret.encode(), cfg.admin_secret.encode()):
            st.session_state[_UNLOCKED] = True
            st.rerun()
        st.error("Wrong admin secret")


def actions(store: Store, cfg: Config, status: JobStatus) -> None:
    """Force-expire a live lease or resubmit a completed job, each after a confirmation."""
    st.subheader("Admin actions")
    if not st.session_state.get(_UNLOCKED):
        st.caption("Unlock admin actions with the admin secret in the sidebar.")
        return
    job = status.job_id
    c1, c2 = st.columns(2)
    if c1.button("Force-expire lease", disabled=status.state is not JobState.LEASED):
        st.session_state[_PENDING] = ("force-expire", job, status.token)
    if c2.button("Resubmit job", disabled=status.state is not JobState.COMPLETED):
        st.session_state[_PENDING] = ("resubmit", job, status.token)
    pending = st.session_state.get(_PENDING)
    if not pending or pending[1] != job:
        return
    action, _, token = pending
    st.warning(f"{action} job {job!r} (generation {token})? This is recorded in the store's history "
               f"as done by {ADMIN_ACTOR!r}.")
    y, n = st.columns(2)
    if n.button("Cancel"):
        del st.session_state[_PENDING]
        st.rerun()
    if y.button(f"Confirm {action}", type="primary"):
        del st.session_state[_PENDING]
        try:
            if action == "force-expire":
                store.force_expire(job, actor=ADMIN_ACTOR)
            else:
                store.submit(job, actor=ADMIN_ACTOR)
        except LeaseError as exc:
            st.error(cfg.scrub(str(exc)))
            return
        log.warning("admin %s of job %r (generation %d) by %s", action, job, token, ADMIN_ACTOR)
        st.success(f"{action} of {job!r} done and recorded in its history.")
