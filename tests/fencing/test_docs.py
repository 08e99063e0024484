"""The seed's example in docs/fencing.md runs as printed and prints what the text says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "fencing.md"


def test_the_seed_example_in_the_docs_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    found = re.search(r"<!-- example: seed -->\n```python\n(.*?)```", DOC.read_text(), re.S)
    assert found, "the seed example is missing from docs/fencing.md"
    monkeypatch.chdir(tmp_path)  # it creates documents.db in the working directory
    namespace: dict[str, object] = {}
    exec(compile(found.group(1), str(DOC), "exec"), namespace)
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("destination refused: token 1 for 'documents/report' is stale")
    assert printed[1].startswith("store refused: complete of job 'job-42' by 'worker-a'")
    assert printed[2:] == ["destination effect worker-a 1 < 2 documents/report",
                           "store complete worker-a 1 < 2 "]
    namespace["store"].close()  # type: ignore[attr-defined]
