"""How pytest-xdist hands out the suite: the fault cases of one backend as one unit of work.

``--dist loadgroup`` is meant to keep tests marked ``xdist_group`` on one worker, but
pytest-xdist 3.8 does it by appending ``@group`` to each test's node id on the worker, and
pytest 9.2 builds node ids from structured ids and ignores that (pytest-dev/pytest-xdist#1386):
every fault case became a unit of its own, both workers ran them and each started every
backend's fault servers. This scheduler reads the group from the case's own id instead
(``test_no_violation_under_fault[etcd3-mixed]`` is in ``faults-etcd3``): one worker runs a
backend's cases one after another on servers started once. The groups are the largest units,
so xdist hands them out first, to both workers; everything else is loadgroup's as before.
"""

from __future__ import annotations

from xdist.scheduler import LoadGroupScheduling

FAULT_CASES = "tests/faults/test_faults.py::test_no_violation_under_fault["


def fault_group(nodeid: str) -> str | None:
    """``faults-<backend>`` for a fault case's node id, None for any other test."""
    if not nodeid.startswith(FAULT_CASES):
        return None
    return "faults-" + nodeid[len(FAULT_CASES):].split("-", 1)[0]


class FaultGroups(LoadGroupScheduling):
    def _split_scope(self, nodeid: str) -> str:
        return fault_group(nodeid) or super()._split_scope(nodeid)
