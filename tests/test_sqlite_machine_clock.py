"""SQLite's store clock is the machine's boot clock: a worker with a skewed wall clock
(Debian's faketime, one hour either way) can neither steal a live lease nor keep a dead one."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tenure
from tests.harness import in_ci

ROOT = Path(__file__).resolve().parent.parent


def _faketime(offset: str, code: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("faketime") is None:
        if in_ci():
            pytest.fail("faketime is not installed; scripts/setup.sh installs it")
        pytest.skip("faketime is not installed")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(["faketime", "-f", offset, sys.executable, "-c", code], env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("offset", ["+1h", "-1h"])
def test_a_skewed_worker_cannot_claim_a_live_lease(tmp_path: Path, offset: str) -> None:
    url = f"sqlite:///{tmp_path / 'skew.db'}"
    with tenure.connect(url) as store:
        held = store.claim("j", owner="honest", ttl=60.0)
        code = ("import tenure, time\n"
                f"s = tenure.connect({url!r})\n"
                "assert abs(time.time() - s.now()) > 3000, 'faketime did not skew this process'\n"
                "try:\n"
                "    s.claim('j', owner='skewed', ttl=60.0)\n"
                "    print('CLAIMED')\n"
                "except tenure.AlreadyClaimed:\n"
                "    print('REFUSED')\n")
        done = _faketime(offset, code)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "REFUSED"
        status = store.get("j")
        assert status is not None and (status.owner, status.token) == ("honest", held.token)


def test_a_skewed_worker_sees_the_same_store_time(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'skew.db'}"
    with tenure.connect(url) as store:
        code = f"import tenure; print(tenure.connect({url!r}).now())"
        done = _faketime("+1h", code)
        assert done.returncode == 0, done.stderr
        assert abs(float(done.stdout) - store.now()) < 5.0  # same clock, read a process start apart
