"""How pytest-xdist hands out the suite: the fault cases of one backend as one unit of work.

``--dist loadgroup`` is meant to keep tests marked ``xdist_group`` on one worker, but
pytest-xdist 3.8 does it by appending ``@group`` to each test's node id on the worker, and
pytest 9.2 builds node ids from structured ids and ignores that (pytest-dev/pytest-xdist#1386):
every fault case became a unit of its own, both workers ran them and each started every
backend's fault servers. This scheduler reads the group from the case's own id instead
(``test_no_violation_under_fault[etcd3-mixed]`` is in ``faults-etcd3``): one worker runs a
backend's cases one after another on servers started once. The groups are the largest units,
so xdist hands them out first, to both workers; everything else is loadgroup's as before.

The browser tests are one unit too: each starts a Streamlit server and a Chromium, and four of
them side by side on two cores starved one another (a job page drew nothing for 60 s).
"""

from __future__ import annotations

from xdist.scheduler import LoadGroupScheduling

FAULT_CASES = "tests/faults/test_faults.py::test_no_violation_under_fault["
BROWSER_TESTS = "tests/dashboard/test_browser.py::"


def fault_group(nodeid: str) -> str | None:
    """``faults-<backend>`` for a fault case's node id, None for any other test."""
    if not nodeid.startswith(FAULT_CASES):
        return None
    return "faults-" + nodeid[len(FAULT_CASES):].split("-", 1)[0]


def unit(nodeid: str) -> str | None:
    """The unit of work a test goes in with others (a fault group, the browser tests), or None."""
    if nodeid.startswith(BROWSER_TESTS):
        return "browser"
    return fault_group(nodeid)


class SuiteUnits(LoadGroupScheduling):
    def _split_scope(self, nodeid: str) -> str:
        return unit(nodeid) or super()._split_scope(nodeid)
