"""The README's commands as written: the two opening ones, and the command-line examples,
run with bash against a fresh store."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import tenure

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def sh_blocks(after: str = "") -> list[str]:
    text = README[README.index(after):] if after else README
    return re.findall(r"```sh\n(.*?)```", text, re.S)


def test_the_readme_opens_with_two_commands_the_first_needing_no_root() -> None:
    first_block = sh_blocks()[0]
    assert README.index("```sh") < README.index("\n## ")
    demo, tests = first_block.strip().splitlines()
    assert not re.search(r"\b(sudo|apt|apt-get|setup\.sh|service)\b", demo)
    assert re.findall(r"pip install[^&]*", demo) == ["pip install -q -e '.[dashboard]' "]
    assert demo.endswith("tenure demo")
    ci = (ROOT / ".ci" / "run").read_text()
    assert tests in ci  # CI runs exactly the README's second command


def test_the_command_line_examples_work_as_written(tmp_path: Path) -> None:
    script = sh_blocks("## Command line")[0]
    shim = tmp_path / "bin" / "tenure"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m tenure "$@"\n')
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{shim.parent}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}
    env.pop("TENURE_URL", None)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "report under token 1" in done.stdout
    assert '"reason"' not in done.stdout  # no rejections yet: the JSON list is empty
    with tenure.connect(f"sqlite:///{tmp_path / 'jobs.db'}") as store:
        states = {j.job_id: j.state.value for j in store.jobs()}
    assert states == {"job-1": "completed", "job-2": "expired", "nightly-report": "completed",
                      "job-3": "scheduled", "flaky": "scheduled"}
    with tenure.connect(f"sqlite:///{tmp_path / 'jobs.db'}") as store:
        flaky = store.get("flaky")
    assert flaky is not None and (flaky.attempts, flaky.max_attempts, flaky.last_error) == (0, 2, "exit status 1")


def test_the_stores_table_has_a_row_for_every_builtin_store_with_its_extra() -> None:
    from tenure.core.registry import BUILTIN

    section = README[README.index("## Stores"):README.index("## Command line")]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    for scheme, (_, cls, extra) in BUILTIN.items():
        names = [s for s, (_, c, _) in BUILTIN.items() if c == cls]  # a store and its aliases
        row = next((r for r in rows if any(r.startswith(f"| `{name}://") for name in names)), None)
        assert row is not None, f"no row for {scheme}://"
        assert extra is None or f"pip install 'tenure[{extra}]'" in row, row
        assert len(row.split(" | ")) == 4, row  # URL, for, store clock, token: none left empty


def test_running_workers_gives_each_stores_minimum_ttl() -> None:
    from tenure.core.registry import BUILTIN, backend_class

    text = (ROOT / "docs" / "running-workers.md").read_text()
    section = text[text.index("## Choosing a TTL"):text.index("## The drift margin")]
    rows = {line.split("`")[1].split("://")[0]: line for line in section.splitlines() if line.startswith("| `")}
    for scheme in ("memory", "sqlite", "postgresql", "zk", "etcd"):
        assert scheme in BUILTIN and scheme in rows, scheme
        minimum = backend_class(scheme).characteristics.min_ttl
        assert rows[scheme].split(" | ")[1] == (f"{minimum:g} s" if minimum else "none"), rows[scheme]
