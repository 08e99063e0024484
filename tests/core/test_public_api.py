"""The public surface: what ``tenure`` exports and the shape of its one exception tree."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import tenure
import tenure.backend

ROOT = Path(__file__).resolve().parents[2]


def test_all_names_exist_and_every_public_class_is_exported() -> None:
    assert sorted(tenure.__all__) == sorted(set(tenure.__all__))
    for name in tenure.__all__:
        assert hasattr(tenure, name), name
    public = {n for n, v in vars(tenure).items() if not n.startswith("_") and inspect.isclass(v)}
    assert public <= set(tenure.__all__)


# tenure.backend: everything a backend needs, and nothing else. A name added or dropped here is a
# change of the contract third-party backends build on: docs/backends/writing-a-backend.md too.
BACKEND_CONTRACT = {
    # the interface and what a backend declares
    "Backend", "RecordBackend", "Transaction", "Characteristics", "Durability", "Link",
    # what from_url receives
    "StoreURL", "Options", "Clock",
    # records and the codec that writes and checks them
    "JobRecord", "job_record", "LIFE_FIELDS", "life", "life_fields", "result_text", "result_bytes",
    "rejection", "rejection_fields", "event", "event_fields", "corrupt_status", "key_of",
    "encode_job_id", "decode_job_id", "json_object",
    # judging a record, the audit
    "status", "is_next", "candidate_at", "select", "readable", "of_job", "replaced",
    # claim_next's order: an index's keys, their merge, what a store declares it cannot keep
    "Expired", "Queued", "ordered", "Tolerance", "EXACT", "OPTIMISTIC",
    # the types of the interface's signatures
    "Lease", "JobStatus", "JobState", "Rejection", "HistoryEvent", "Change", "Summary", "JobPage", "Op", "Retry",
    # the errors a backend raises or maps its client library's errors to
    "CorruptRecord", "BackendUnavailable", "OutcomeUnknown", "AuthenticationFailed", "StoreNotFound",
    "InvalidArgument",
}


def test_the_backend_namespace_exports_the_contract_and_nothing_else() -> None:
    names = tenure.backend.__all__
    assert sorted(names) == sorted(set(names)) and set(names) == BACKEND_CONTRACT
    public = {n for n, v in vars(tenure.backend).items() if not n.startswith("_") and not inspect.ismodule(v)}
    assert public == BACKEND_CONTRACT  # no name leaks in beside __all__
    for name in names:
        value = getattr(tenure.backend, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__module__.startswith("tenure.core."), name  # re-exported, not a copy


def test_the_backend_namespace_shares_tenures_classes() -> None:
    # A backend raising tenure.backend.CorruptRecord raises what callers catch as tenure.CorruptRecord.
    shared = set(tenure.backend.__all__) & set(tenure.__all__)
    assert {"Backend", "RecordBackend", "Characteristics", "CorruptRecord", "Lease"} <= shared
    assert all(getattr(tenure.backend, n) is getattr(tenure, n) for n in shared)


def test_every_error_derives_from_lease_error() -> None:
    errors = [v for v in vars(tenure).values()
              if inspect.isclass(v) and issubclass(v, Exception) and not issubclass(v, Warning)]
    assert len(errors) >= 10
    assert all(issubclass(e, tenure.LeaseError) for e in errors)
    assert issubclass(tenure.AuthenticationFailed, tenure.BackendUnavailable)
    assert issubclass(tenure.JobNotFound, KeyError)
    assert issubclass(tenure.InsecureTransportWarning, UserWarning)  # a warning, not an error


def test_invalid_argument_is_a_value_error_and_a_lease_error() -> None:
    assert issubclass(tenure.InvalidArgument, ValueError)
    assert issubclass(tenure.InvalidArgument, tenure.LeaseError)


def test_importing_tenure_never_imports_pytest() -> None:
    # pytest is a dependency of tenure.testing's users, not of tenure: a fresh interpreter shows it.
    code = "import sys, tenure; tenure.connect('memory://'); print('pytest' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.stdout.strip() == "False", done.stdout + done.stderr


def test_stale_lease_carries_its_rejection() -> None:
    rejection = tenure.Rejection("j", tenure.Op.RENEW, "a", 3, "b", 4, 1.0, "token superseded by a newer claim")
    err = tenure.StaleLease(rejection)
    assert err.rejection is rejection and "renew of job 'j' by 'a' with token 3" in str(err)
