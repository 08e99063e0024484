"""Child processes that open the same stores as the test: the import path and registrations.

The suite's holder and competing processes call ``adopt_registrations`` first, so a backend a
test registered with ``tenure.register_backend`` opens there too.
"""

from __future__ import annotations

import json
import os
import sys

import tenure
from tenure.core.registry import registered_backends

# The variable a child process reads to register the same run-time backends as its parent.
BACKENDS_VARIABLE = "TENURE_TESTING_BACKENDS"


def child_environment() -> dict[str, str]:
    """Environment for a Python child process that must open the same stores as this one.

    It gets this process's import path (a test module's backend class is importable there) and
    the run-time registrations (``tenure.register_backend``), which ``adopt_registrations``
    repeats in the child.
    """
    path = os.pathsep.join(p for p in sys.path if p)
    return {**os.environ, "PYTHONPATH": path, BACKENDS_VARIABLE: json.dumps(registered_backends())}


def adopt_registrations(specs: dict[str, str] | None = None) -> None:
    """Register in this process what the parent had registered (see ``child_environment``)."""
    if specs is None:
        specs = json.loads(os.environ.get(BACKENDS_VARIABLE) or "{}")
    for scheme, spec in specs.items():
        tenure.register_backend(scheme, spec)


def python_child(code: str, *args: str) -> list[str]:
    """The command line of a Python child running ``code`` after adopting the registrations."""
    prelude = "from tenure.testing.processes import adopt_registrations; adopt_registrations()\n"
    return [sys.executable, "-c", prelude + code, *args]
