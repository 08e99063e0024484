"""Outages the protocol must survive: a holder process frozen past its TTL, a server restart,
a server that is not there.

The paused holder is a real process frozen by the ``pause_holder`` hook (SIGSTOP by default), so
only the store's clock can end its lease; it needs a store shared between processes. The restart needs the
``restartable_store`` hook: a server the test may crash and start again on the same data. The
unreachable server needs the ``unreachable_url`` hook: the test's store at an address where
nothing listens.
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
import warnings
from collections.abc import Callable
from typing import TypeVar

import pytest

import tenure
from tenure.core.options import parse_url
from tenure.testing.kit import Kit
from tenure.testing.processes import child_environment, python_child

T = TypeVar("T")

HOLDER = """
import sys, tenure
store = tenure.connect(sys.argv[1])
lease = store.claim("paused", owner="worker-a", ttl=float(sys.argv[2]))
print(lease.token, flush=True)
sys.stdin.readline()  # stopped around here, resumed after another worker claimed the job
for name, op in (("renew", store.renew), ("complete", store.complete)):
    try:
        op(lease)
        print(name, "accepted", flush=True)
    except tenure.StaleLease:
        print(name, "rejected", flush=True)
store.close()
"""


def eventually(call: Callable[[], T], timeout: float = 60.0) -> T:
    """``call()`` once the store answers again: a client reconnects on its own schedule."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except tenure.BackendUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)  # real time: waiting for a reconnection


def _errors(exc: BaseException) -> list[BaseException]:
    """``exc`` and every error it was raised from or during, as a reader of a traceback sees them."""
    found: list[BaseException] = []
    step: BaseException | None = exc
    while step is not None and step not in found:
        found.append(step)
        step = step.__cause__ or step.__context__
    return found


def _first_answer(kit: Kit, url: str) -> tuple[BaseException | None, float]:
    """What opening ``url`` and submitting a job ends in, and how long it took; in a thread, so
    a store that never answers fails the test after ``kit.unreachable_within`` instead of hanging it."""
    outcome: list[BaseException | None] = []

    def attempt() -> None:
        try:
            with kit.connect(url) as store:
                store.submit("unreachable")
            outcome.append(None)
        except BaseException as exc:  # judged by the test
            outcome.append(exc)

    started = time.monotonic()
    worker = threading.Thread(target=attempt, name="tenure-unreachable", daemon=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tenure.InsecureTransportWarning)  # the hook's password, in clear text
        worker.start()
        worker.join(kit.unreachable_within)
    if worker.is_alive():
        pytest.fail(f"{kit.name}: nothing reported an unreachable server within {kit.unreachable_within:g} s")
    return outcome[0], time.monotonic() - started


class OutageTests:
    def test_an_unreachable_server_is_backend_unavailable_promptly_writes_nothing_and_tells_no_secret(
            self, kit: Kit, caplog: pytest.LogCaptureFixture) -> None:
        url = kit.unreachable_url()
        caplog.set_level(logging.DEBUG)
        found, took = _first_answer(kit, url)
        assert found is not None, "a store at an address where nothing listens took a job"
        assert isinstance(found, tenure.BackendUnavailable), f"{type(found).__name__}: {found}"
        # Nothing was sent, so nothing may have been applied: neither an uncertain write nor a
        # refusal of credentials nobody checked.
        assert not isinstance(found, (tenure.OutcomeUnknown, tenure.AuthenticationFailed, tenure.Outraced)), found
        assert took <= kit.unreachable_within
        secrets = parse_url(url).secrets()
        for shown in [*(f"{e} {e!r}" for e in _errors(found)), caplog.text]:
            for secret in secrets:
                assert secret not in shown, "the error or a log line shows the URL's secret"
        with kit.connect() as store:  # the same store, reached
            assert store.get("unreachable") is None
            assert store.history() == []

    def test_a_paused_holder_process_is_fenced_and_audited(self, kit: Kit) -> None:
        kit.require_processes()
        pauser = kit.holder_pauser()
        worker = subprocess.Popen(python_child(HOLDER, kit.url, str(kit.short_ttl)), env=child_environment(),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert worker.stdout is not None and worker.stdin is not None
            line = worker.stdout.readline()
            assert line.strip().isdigit(), f"the holder did not claim: {line!r}, exit {worker.poll()}"
            token_a = int(line)
            pauser.pause(worker.pid)  # frozen, whatever it was doing
            with kit.connect(own_clock=True) as store:
                # A blocking claim: it returns once the store's clock has ended the holder's lease.
                b = store.claim("paused", owner="worker-b", ttl=kit.ttl, wait=kit.short_ttl * 10 + 60)
                assert b.token > token_a
                pauser.resume(worker.pid)
                out, _ = worker.communicate("go\n", timeout=120)
                assert out.split("\n")[:2] == ["renew rejected", "complete rejected"], out
                audit = [(r.op, r.owner, r.token, r.current_owner, r.current_token) for r in store.rejections()]
                assert audit == [(tenure.Op.RENEW, "worker-a", token_a, "worker-b", b.token),
                                 (tenure.Op.COMPLETE, "worker-a", token_a, "worker-b", b.token)]
                status = store.get("paused")
                assert status is not None and (status.owner, status.token) == ("worker-b", b.token)
        finally:
            if worker.poll() is None:
                pauser.resume(worker.pid)
                worker.kill()
                worker.wait()

    def test_a_restart_keeps_acknowledged_writes_and_tokens_grow(self, kit: Kit) -> None:
        target = kit.restart_target()
        with kit.connect(target.url, own_clock=True) as kept:
            done = {}
            for i in range(5):
                lease = kept.claim(f"j{i}", owner="a", ttl=30.0)
                kept.complete(lease, result=f"r{i}")  # acknowledged before the crash
                done[f"j{i}"] = lease.token
            held = kept.claim("held", owner="a", ttl=30.0)
            target.restart()
            with eventually(lambda: kit.connect(target.url, own_clock=True)) as fresh:
                for job_id, token in done.items():
                    status = eventually(lambda job_id=job_id: fresh.get(job_id))  # type: ignore[misc]
                    assert status is not None
                    assert (status.state, status.token, status.result) == (
                        tenure.JobState.COMPLETED, token, f"r{job_id[1:]}".encode())
                fresh.submit("j0")
                again = fresh.claim("j0", owner="b", ttl=30.0)
                assert again.token > max(*done.values(), held.token)
                status = fresh.get("held")
                assert status is not None and (status.owner, status.token) == ("a", held.token)
            # The store that lived through the restart goes on, and a lease survives an outage
            # shorter than its TTL.
            renewed = eventually(lambda: kept.renew(held))
            assert renewed.token == held.token
