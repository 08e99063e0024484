"""The suite's pytest-xdist units (tests/scheduling.py): fault cases by backend, the browser tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from tests.scheduling import fault_group, unit

ROOT = Path(__file__).resolve().parents[2]


def test_fault_cases_by_backend_and_the_browser_tests_are_units_nothing_else_is() -> None:
    case = "tests/faults/test_faults.py::test_no_violation_under_fault[{}]"
    assert fault_group(case.format("etcd3-leader-kill")) == "faults-etcd3"
    assert fault_group(case.format("postgres-server-kill") + "@faults") == "faults-postgres"  # pytest < 9.2's ids
    assert fault_group("tests/faults/test_checker.py::test_a_sound_history_passes") is None
    assert unit(case.format("etcd3-leader-kill")) == "faults-etcd3"
    assert unit("tests/dashboard/test_browser.py::test_dashboard_in_a_real_browser[zk]") == "browser"
    assert unit("tests/dashboard/test_views.py::test_overview") is None


def test_each_backends_fault_cases_run_on_one_worker() -> None:
    # The cases skip at once (no backend chosen): what is checked is where xdist sent each one.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT"))}
    env.update(TENURE_TEST_BACKENDS="", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "-n", "2",
                           "--dist", "loadgroup", "tests/faults/test_faults.py"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    ran = re.findall(r"^\[(gw\d)\] .*test_no_violation_under_fault\[(\w+)-", done.stdout, re.M)
    assert len(ran) >= 40, done.stdout[-3000:] + done.stderr[-3000:]
    workers: dict[str, set[str]] = defaultdict(set)
    for worker, backend in ran:
        workers[backend].add(worker)
    assert all(len(w) == 1 for w in workers.values()), f"a backend's cases ran on two workers: {dict(workers)}"
