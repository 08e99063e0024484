"""``tenure`` run in-process, for the CLI's tests."""

from __future__ import annotations

import pytest

from tenure.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """The exit status, stdout and stderr of ``tenure ARGV``."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err
