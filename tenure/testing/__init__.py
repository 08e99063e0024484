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

from tenure.testing.kit import Kit, Pauser, Restartable, Tampering, wait_out
from tenure.testing.processes import adopt_registrations, child_environment
from tenure.testing.suite import ConformanceSuite, Hooks

__all__ = ["ConformanceSuite", "Hooks", "Kit", "Pauser", "Restartable", "Tampering", "adopt_registrations",
           "child_environment", "wait_out"]
