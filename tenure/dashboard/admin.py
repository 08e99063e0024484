"""Admin actions: only with ``--admin`` and the operator's secret, confirmed, and audited.

Audited means recorded in the store, where operators look: the action's history event names
``dashboard-admin`` as its owner. A log line is written as well, for the process's own log.
The unlock is rate-limited per client address, under a server-wide ceiling (``unlock``). A
force-expire sends the token the operator confirmed, so a job claimed again meanwhile is
left to its new holder; a requeue sends it too, so a job claimed (or failed, or requeued)
again meanwhile is left as it is now.
"""

from __future__ import annotations

import logging

import streamlit as st

from tenure.core.errors import LeaseError, TokenChanged
from tenure.core.records import JobState, JobStatus
from tenure.core.store import Store
from tenure.dashboard.config import ADMIN_ACTOR, Config
from tenure.dashboard.data import literal
from tenure.dashboard.unlock import LIMITER

log = logging.getLogger("tenure.dashboard.admin")
_UNLOCKED = "admin_unlocked"
_PENDING = "admin_pending"
_DONE = "admin_done"  # (job, what was done, why nothing was): shown on that job's page until the next action
_SECRET_INPUT = "admin_secret_input"
_REFUSAL = "admin_unlock_refusal"


def _try_unlock(cfg: Config) -> None:
    """Runs once per secret typed (a widget callback), not on every rerun, so reruns are not tries."""
    given = st.session_state.get(_SECRET_INPUT) or ""
    st.session_state[_SECRET_INPUT] = ""  # the secret does not stay in the session
    if not given:
        return
    assert cfg.admin_secret is not None
    attempt = LIMITER.attempt(given, cfg.admin_secret, client_address())
    if attempt.unlocked:
        st.session_state[_UNLOCKED] = True
        st.session_state.pop(_REFUSAL, None)
        log.warning("admin actions unlocked")
        return
    log.warning("admin unlock refused: %s", "wrong secret" if attempt.heard else "tried during the backoff")
    message = "Wrong admin secret" if attempt.heard else "Not checked"
    if attempt.retry_after > 0:
        whose = "on this server, from many addresses" if attempt.ceiling else "from your address"
        message += f". Too many wrong tries {whose}: the next is heard in {max(1, round(attempt.retry_after))} s"
    st.session_state[_REFUSAL] = message


def client_address() -> str | None:
    """The browser's address as the server saw it (behind a proxy on the same machine, the one
    it forwards); None for the same machine. Whose wrong tries a try counts with."""
    address = st.context.ip_address
    return address if isinstance(address, str) else None  # no client behind the session (a test run)


def unlock_form(cfg: Config) -> None:
    """The secret the operator supplies; compared in constant time, rate-limited."""
    if st.session_state.get(_UNLOCKED):
        st.success("Admin actions unlocked")
        if st.button("Lock admin actions"):
            st.session_state[_UNLOCKED] = False
            st.rerun()
        return
    st.text_input("Admin secret", type="password", key=_SECRET_INPUT, on_change=_try_unlock, args=(cfg,))
    refusal = st.session_state.get(_REFUSAL)
    if refusal:
        st.error(refusal)


# States a requeue takes: a live lease is ended first (force-expire), a completed job resubmitted.
REQUEUABLE = (JobState.PARKED, JobState.SCHEDULED, JobState.PENDING, JobState.EXPIRED)


def actions(store: Store, cfg: Config, status: JobStatus) -> None:
    """Force-expire a live lease, resubmit a completed job, or requeue a parked (or scheduled,
    pending, expired) one, each after a confirmation, with the token confirmed."""
    st.subheader("Admin actions")
    unlock_form(cfg)  # beside the actions it unlocks; the unlock lasts for the browser session
    if not st.session_state.get(_UNLOCKED):
        st.caption("Unlock admin actions with the admin secret.")
        return
    job = status.job_id
    done = st.session_state.get(_DONE)
    if done and done[0] == job:  # kept across reruns: an auto-refresh must not hide the outcome
        _, success, refusal = done
        if success:
            st.success(success)
        else:
            st.error(refusal)
    # Each click is handled in a callback: callbacks run before the page's body, so a click
    # that lands while the page refreshes itself (a run the click's rerun interrupts before
    # reaching its button) is not lost.
    c1, c2, c3 = st.columns(3)
    c1.button("Force-expire lease", disabled=status.state is not JobState.LEASED,
              on_click=_ask, args=("force-expire", job, status.token))
    c2.button("Resubmit job", disabled=status.state is not JobState.COMPLETED,
              on_click=_ask, args=("resubmit", job, status.token))
    c3.button("Requeue job", disabled=status.state not in REQUEUABLE,
              on_click=_ask, args=("requeue", job, status.token),
              help="Attempts reset to 0, claimable now (a parked, scheduled, pending or expired job)")
    pending = st.session_state.get(_PENDING)
    if not pending or pending[1] != job:
        return
    action, _, token = pending
    st.warning(f"{action} job {literal(repr(job))} (token {token})? This is recorded in the store's "
               f"history as done by {literal(repr(ADMIN_ACTOR))}.")
    y, n = st.columns(2)
    n.button("Cancel", on_click=_cancel)
    y.button(f"Confirm {action}", type="primary", on_click=_confirm, args=(store, cfg))


def _ask(action: str, job: str, token: int) -> None:
    st.session_state[_PENDING] = (action, job, token)


def _cancel() -> None:
    st.session_state.pop(_PENDING, None)


def _confirm(store: Store, cfg: Config) -> None:
    """Does the confirmed action once (a callback runs once per click, whatever reruns follow);
    its outcome, or why nothing was changed, stays on that job's page until the next action."""
    pending = st.session_state.pop(_PENDING, None)
    if pending is None:  # confirmed twice before the page caught up: done once
        return
    action, job, token = pending
    try:
        if action == "force-expire":
            store.force_expire(job, token=token, actor=ADMIN_ACTOR)
        elif action == "requeue":
            store.requeue(job, token=token, actor=ADMIN_ACTOR)
        else:
            store.submit(job, actor=ADMIN_ACTOR)
    except TokenChanged as exc:
        st.session_state[_DONE] = (job, None, (
            f"Nothing was changed: job {literal(repr(job))} is at token {exc.current} now, not the "
            f"token {token} you confirmed (claimed again or ended since you looked). Review it and try again."))
        return
    except LeaseError as exc:
        st.session_state[_DONE] = (job, None, literal(cfg.scrub(str(exc))))
        return
    log.warning("admin %s of job %r (token %d) by %s", action, job, token, ADMIN_ACTOR)
    st.session_state[_DONE] = (job, f"{action} of {literal(repr(job))} done and recorded in its history.", None)
