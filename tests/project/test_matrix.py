"""The version matrix (``python -m tests.matrix``): which cells it runs, how it judges one, and
that docs/tested-with.md and the README say what it does. The matrix itself is not run here."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests import matrix

ROOT = Path(__file__).resolve().parents[2]


def test_every_server_runs_at_two_versions_single_and_clustered() -> None:
    cells = {(c.server.kind, c.version): c for c in matrix.CELLS}
    assert set(cells) == {("etcd", "3.4"), ("etcd", "3.5"), ("zookeeper", "3.8"), ("zookeeper", "3.9"),
                          ("postgres", "15"), ("postgres", "18")}
    for (kind, _), cell in cells.items():
        assert cell.faults == {"etcd": "etcd,etcd3", "zookeeper": "zk,zk3", "postgres": "postgres"}[kind]


def test_a_cells_runs_select_its_version_alone(monkeypatch: Any) -> None:
    monkeypatch.setenv("TENURE_ETCD", "3.5")  # set outside: not carried into a ZooKeeper cell
    env = matrix.cell_env(next(c for c in matrix.CELLS if c.name == "zookeeper-3.9"))
    assert (env["TENURE_ZOOKEEPER"], env["TENURE_TEST_BACKENDS"], env["CI"]) == ("3.9", "zk", "true")
    assert env["TMPDIR"] == str(matrix.RUNS)  # not /tmp, where other runs' leftovers are tidied
    assert "TENURE_ETCD" not in env


def entry(**changes: Any) -> dict[str, Any]:
    faults = {"commands": ["TENURE_ETCD=3.5 python -m tests.faults.run ..."], "cases": 16, "expected": 16,
              "ops": 1000, "violations": 0, "early_ends": 0, "stopped": ""}
    found = {"cell": "etcd-3.5", "server": "etcd", "version": "3.5.16", "nodes": "1 and 3",
             "tests": {"passed": 300, "failed": 0, "skipped": 10}, "faults": faults,
             "finished": "2026-12-03 19:00 UTC", "minutes": 12.0}
    for key, value in changes.items():
        (faults if key in faults else found)[key] = value
    return found


def test_a_cell_passes_only_with_every_test_passed_and_every_case_run_without_violation() -> None:
    assert matrix.passed(entry())
    assert not matrix.passed(entry(violations=1))
    assert not matrix.passed(entry(cases=15))  # a run that stopped early
    assert not matrix.passed(entry(tests={"passed": 300, "failed": 1, "skipped": 0}))
    assert not matrix.passed(entry(tests={"passed": 0, "failed": 0, "skipped": 10}))  # nothing ran
    row = next(line for line in matrix.render([entry(stopped="etcd3 net (seed 7000): boom", cases=12)]).splitlines()
               if line.startswith("| etcd | 3.5.16"))
    assert "| 300 / 0 / 10 | 12 of 16 | 1000 | 0 | 0 | FAILED: stopped at etcd3 net (seed 7000): boom |" in row


def test_the_committed_page_is_what_the_matrix_renders() -> None:
    docs = ROOT / "docs"
    entries = json.loads((docs / "tested-with.json").read_text())
    assert (docs / "tested-with.md").read_text() == matrix.render(entries)
    assert {e["cell"] for e in entries} == {c.name for c in matrix.CELLS}  # every cell has run


def test_the_readme_documents_the_matrix_after_its_first_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Development"):]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    assert blocks[0].strip() == "./scripts/servers.sh && .venv/bin/python -m tests.matrix"
    assert readme.index("```sh") < readme.index("## Development")  # the opening two come first


def test_the_harness_looks_for_newer_servers_where_the_servers_script_unpacks_them() -> None:
    # scripts/servers.sh unpacks into the checkout's .servers/ (its CACHE, relative to the root);
    # the harness moved from tests/ to devservers/ once and kept looking one directory higher.
    from devservers import versions

    script = (versions.ROOT / "scripts" / "servers.sh").read_text()
    assert 'CACHE=$(realpath -m "${TENURE_SERVERS_DIR:-.servers}")' in script
    assert 'cd "$(dirname "$0")/.."' in script
    assert Path(__file__).resolve().parents[2] == versions.ROOT
    assert (versions.ROOT / "pyproject.toml").is_file()
    assert versions.cache_dir({}) == versions.ROOT / ".servers"
    assert versions.cache_dir({"TENURE_SERVERS_DIR": "elsewhere"}) == versions.ROOT / "elsewhere"  # as the script
    assert versions.cache_dir({"TENURE_SERVERS_DIR": "/abs"}) == Path("/abs")
