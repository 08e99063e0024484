"""Whether a server that cannot start skips the test or fails it: in CI (``CI=true``) a
server that cannot start is a failure, never a silent skip."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable(message: str) -> NoReturn:
    """Fail in CI, skip elsewhere."""
    if in_ci():
        pytest.fail(f"{message} (CI=true makes this a failure)")
    pytest.skip(message)
