"""The short fault suite: every fault at least once on every backend, each run checked.

A few seconds of workload per case (``TENURE_FAULT_SECONDS``, 6 by default) against real
servers started once per backend. The long version is ``python -m tests.faults.run`` (see
docs/reliability.md). In CI a server that cannot start fails the case.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devservers.availability import in_ci
from tests.conftest import BACKENDS
from tests.faults import envs
from tests.faults.run import run_case
from tests.harness import Harness

# The cases of one backend run on one pytest-xdist worker, one after another, on servers it
# starts once (tests/scheduling.py hands them out as one unit, first).

SECONDS = float(os.environ.get("TENURE_FAULT_SECONDS", "6"))
ROOT = Path(__file__).resolve().parents[2]
SERVER_MODULES = {"etcd": "devservers/etcd.py", "zk": "devservers/zookeeper.py",
                  "postgres": "devservers/postgres.py"}

SINGLE = ("pause", "suspend", "burst", "skew", "kill-worker", "forge", "net", "server-kill", "mixed")
CASES = [
    *[("sqlite", f) for f in ("pause", "suspend", "burst", "skew", "kill-worker", "forge", "run-term", "mixed")],
    *[("etcd", f) for f in SINGLE],
    *[("etcd3", f) for f in ("leader-kill", "leader-pause", "mixed")],
    *[("zk", f) for f in SINGLE],
    *[("zk3", f) for f in ("leader-kill", "leader-pause", "mixed")],
    *[("postgres", f) for f in (*SINGLE, "leader-pause")],
]


@pytest.fixture(scope="module")
def environment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Harness]]:
    """Servers started on first use and kept for the module; a failed start is remembered."""
    started: dict[str, Harness | BaseException] = {}

    def get(name: str) -> Harness:
        family = name.rstrip("3")
        if family not in BACKENDS:
            pytest.skip(f"{family} not in TENURE_TEST_BACKENDS")
        module = SERVER_MODULES.get(family)
        if module and not (ROOT / module).exists():
            pytest.skip(f"the {family} backend has not landed yet")
        if name not in started:
            env = envs.make(name, tmp_path_factory.mktemp(name))
            try:
                env.start()
                started[name] = env
            except BaseException as exc:
                env.close()
                started[name] = exc
        got = started[name]
        if isinstance(got, BaseException):
            if in_ci():
                pytest.fail(f"{name} could not start: {got!r}")
            pytest.skip(f"{name} could not start: {got!r}")
        return got

    yield get
    for env in started.values():
        if isinstance(env, Harness):
            env.close()


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize(("backend", "fault"), CASES, ids=[f"{b}-{f}" for b, f in CASES])
def test_no_violation_under_fault(environment: Callable[[str], Harness], backend: str, fault: str) -> None:
    env = environment(backend)
    result = run_case(env, fault, SECONDS, seed=sum(map(ord, backend + fault)))
    assert result.violations == [], "\n".join(result.violations[:30]) + f"\nrun kept in {result.directory}"
    # Not vacuous: jobs were claimed and effects landed (a server kill may leave few completions).
    progress = min(result.counts["claim:ok"], result.counts["effect:ok"])
    assert progress >= 3, f"the workload made no progress: {dict(result.counts)}"
    if fault not in ("mixed", "skew"):
        assert result.injected[fault] >= 1, f"{fault} was never injected"
    if fault == "run-term":  # not vacuous: processes of both runs of a job acted
        assert result.counts["process effects"] >= 10
    if fault == "forge":  # not vacuous: forgeries were tried, refused as unproven and audited
        assert result.counts["forgeries refused"] >= 3 and result.counts["forgeries audited"] >= 1
