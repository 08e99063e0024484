"""``tenure demo --once``: the seed's example with real processes and a real SIGSTOP."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import tenure
from tests.servers.ports import free_port

ROOT = Path(__file__).resolve().parent.parent


def test_demo_once_shows_the_stale_completion_rejected_and_audited(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "tenure", "demo", "--once", "--url", url],
                          env=env, capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SIGSTOP worker-A" in done.stdout
    assert "REJECTED" in done.stdout and "Timeline of invoice-1" in done.stdout
    with tenure.connect(url) as store:
        (rejection,) = store.rejections()
        assert (rejection.job_id, rejection.op, rejection.owner) == ("invoice-1", tenure.Op.COMPLETE, "worker-A")
        status = store.get("invoice-1")
        assert status is not None and status.state is tenure.JobState.COMPLETED
        assert status.owner != "worker-A" and status.token > rejection.token == 1
        assert all(j.state is tenure.JobState.COMPLETED for j in store.jobs())


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
