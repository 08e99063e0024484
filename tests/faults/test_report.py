"""docs/reliability.md describes every fault the runner can inject, from the one table of faults."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults import catalog, envs, report, workload

BACKENDS = ("sqlite", "etcd", "etcd3", "zk", "zk3", "postgres")


def runnable(tmp_path: Path) -> set[str]:
    """Every fault some environment offers, and ``mixed`` (what ``--fault all`` runs)."""
    found = {"mixed"}
    for backend in BACKENDS:
        found |= set(envs.make(backend, tmp_path / backend).faults)  # no server is started
    return found


def test_every_runnable_fault_is_in_the_table(tmp_path: Path) -> None:
    expected = {"pause", "suspend", "burst", "skew", "kill-worker", "forge", "net", "server-kill",
                "leader-kill", "leader-pause", "run-term", "mixed"}
    assert runnable(tmp_path) == expected == set(catalog.BY_NAME)


def test_the_page_has_a_row_for_every_fault(tmp_path: Path) -> None:
    page = report.render([])
    rows = [line for line in page.splitlines() if line.startswith("| ") and " | " in line]
    described = {line.split(" | ")[0].removeprefix("| ") for line in rows}
    assert runnable(tmp_path) <= described
    for fault in catalog.FAULTS:
        assert f"| {fault.name} | {fault.does} |" in page


@pytest.mark.parametrize("backend", ["etcd3", "zk3", "postgres"])
def test_cluster_faults_only_where_there_is_a_leader(tmp_path: Path, backend: str) -> None:
    faults = envs.make(backend, tmp_path).faults
    assert "leader-pause" in faults and ("leader-kill" in faults) == (backend != "postgres")
    assert "leader-kill" not in envs.make("etcd", tmp_path / "one").faults


def test_the_committed_page_is_what_the_code_renders() -> None:
    """The page is generated: prose edited by hand on the page alone is lost at the next run."""
    import json

    docs = Path(report.__file__).resolve().parents[2] / "docs"
    runs = json.loads((docs / "reliability.json").read_text())
    assert (docs / "reliability.md").read_text() == report.render(runs)


ROW = {"seed": 1, "seconds": 1.0, "counts": {}, "violations": [], "violation_count": 0, "unchecked": 0,
       "audit": 0, "injected": {}}


def test_a_run_counts_the_early_ends_its_workers_logged(tmp_path: Path) -> None:
    line = "the store ended the lease of 'job-00001' (token 7) early; restoring it\n"
    (tmp_path / "w1.log").write_text(line + "something else\n" + line)
    (tmp_path / "w2.log").write_text(line)
    (tmp_path / "w1.jsonl").write_text(line)  # the history itself is not a log
    assert workload.early_ends(tmp_path) == 3
    runs = [{"command": "c", "seed": 1, "note": "", "finished": "f", "results": [
        {**ROW, "backend": backend, "fault": "leader-pause", "early_ends": n}
        for backend, n in (("etcd", 0), ("etcd3", 3), ("zk", 0))]}]
    assert "restored (etcd-io/etcd#15247): 3 (etcd3/leader-pause 3)." in report.render(runs)
