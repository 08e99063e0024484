"""``tenure demo --once``: the seed's example with real processes and a real SIGSTOP."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import tenure
from devservers.ports import free_port

ROOT = Path(__file__).resolve().parents[2]


EARLIER_ROUND = ["report-1.0", "report-1.1", "report-1.2", "report-1.3", "invoice-1"]


def test_demo_once_shows_the_stale_completion_rejected_and_audited_on_fresh_jobs(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    with tenure.connect(url) as store:  # an earlier run's round, completed
        for job_id in EARLIER_ROUND:
            store.complete(store.claim(job_id, owner="worker-1", ttl=10))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "tenure", "demo", "--once", "--url", url],
                          env=env, capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SIGSTOP worker-A" in done.stdout
    assert "REJECTED" in done.stdout and "Timeline of invoice-2" in done.stdout
    with tenure.connect(url) as store:
        (rejection,) = store.rejections()
        assert (rejection.job_id, rejection.op, rejection.owner) == ("invoice-2", tenure.Op.COMPLETE, "worker-A")
        status = store.get("invoice-2")
        assert status is not None and status.state is tenure.JobState.COMPLETED
        assert status.owner != "worker-A" and status.token > rejection.token == 1
        assert all(j.state is tenure.JobState.COMPLETED for j in store.jobs())
        # This round's jobs are new ones; the earlier round's were not run again.
        tokens = {j.job_id: j.token for j in store.jobs()}
        assert {job_id: tokens[job_id] for job_id in EARLIER_ROUND} == dict.fromkeys(EARLIER_ROUND, 1)
        assert {f"report-2.{i}" for i in range(4)} <= set(tokens)


def test_demo_serves_the_dashboard_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    import signal
    import urllib.request

    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "tenure", "demo", "--url", f"sqlite:///{tmp_path / 'd.db'}",
                             "--port", str(port), "--every", "1"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=_default_sigint)
    try:
        assert proc.stdout is not None
        seen: list[str] = []
        for line in proc.stdout:
            seen.append(line)
            if "REJECTED" in line:
                break
        text = "".join(seen)
        assert f"dashboard: http://127.0.0.1:{port}" in text, text
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=10) as response:
            assert response.status == 200
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _default_sigint() -> None:
    # A shell starts background jobs with SIGINT ignored and children inherit that; the test
    # sends the Ctrl-C a person would, so the child gets Python's usual handler back.
    import signal

    signal.signal(signal.SIGINT, signal.default_int_handler)
