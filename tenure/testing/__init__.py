"""The conformance suite, shipped for third-party backends: ``tenure.testing.ConformanceSuite``.

    import pytest, tenure, tenure.testing

    tenure.register_backend("mystore", MyBackend)

    class TestMyStore(tenure.testing.ConformanceSuite):
        @pytest.fixture
        def store_url(self, tmp_path):
            return f"mystore://{tmp_path}/db"

Importing this package needs pytest (``pip install pytest``); ``import tenure`` never imports
it, so pytest stays a dependency of your tests, not of tenure. The optional hooks are listed in
``tenure.testing.suite``; docs/backends/writing-a-backend.md walks through a backend from scratch.
"""

import pkgutil

import pytest

# The suite's asserts say what they compared (pytest rewrites only test modules by itself): its
# modules are registered before they are imported.
pytest.register_assert_rewrite(*(f"{__name__}.{m.name}" for m in pkgutil.iter_modules(__path__)))

from tenure.testing.kit import Kit, Pauser, Restartable, Tampering, wait_out  # noqa: E402
from tenure.testing.processes import adopt_registrations, child_environment  # noqa: E402
from tenure.testing.suite import ConformanceSuite, Hooks  # noqa: E402

__all__ = ["ConformanceSuite", "Hooks", "Kit", "Pauser", "Restartable", "Tampering", "adopt_registrations",
           "child_environment", "wait_out"]
