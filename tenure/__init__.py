"""tenure: expiring job leases with fencing tokens, on etcd, ZooKeeper, SQLite or memory.

    import tenure
    with tenure.connect("sqlite:///jobs.db") as store:
        store.submit("job-42")
        with store.hold("job-42", owner="worker-a", ttl=10.0) as held:
            held.check()              # raises LeaseLost once the lease cannot be trusted
            write_somewhere(token=held.token)
            held.complete(b"done")
"""

from importlib import metadata as _metadata

from tenure.core.backend import Backend, Characteristics, Durability, RecordBackend
from tenure.core.clock import Clock, ManualClock, SystemClock
from tenure.core.errors import (
    AlreadyClaimed,
    AuthenticationFailed,
    BackendUnavailable,
    CorruptRecord,
    ForgedToken,
    InvalidArgument,
    JobCompleted,
    JobNotFound,
    JobParked,
    JobScheduled,
    LeaseError,
    LeaseLost,
    NotYetClaimable,
    OutcomeUnknown,
    Outraced,
    StaleLease,
    StaleToken,
    StoreNotFound,
    TokenChanged,
    TokensExhausted,
)
from tenure.core.record_transaction import Transaction
from tenure.core.records import (
    Change,
    HistoryEvent,
    JobPage,
    JobState,
    JobStatus,
    Lease,
    Op,
    Reason,
    Rejection,
    RejectionKind,
    Summary,
)
from tenure.core.registry import connect, register_backend
from tenure.core.renewal import HeldLease
from tenure.core.store import Store
from tenure.core.transport import InsecureTransportWarning


def _installed_version() -> str:
    """The version pyproject.toml declares, as installed; it is written nowhere else."""
    try:
        return _metadata.version("tenure")
    except _metadata.PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


__version__ = _installed_version()

__all__ = [
    "AlreadyClaimed",
    "AuthenticationFailed",
    "Backend",
    "BackendUnavailable",
    "Change",
    "Characteristics",
    "Clock",
    "CorruptRecord",
    "Durability",
    "ForgedToken",
    "HeldLease",
    "HistoryEvent",
    "InsecureTransportWarning",
    "InvalidArgument",
    "JobCompleted",
    "JobNotFound",
    "JobPage",
    "JobParked",
    "JobScheduled",
    "JobState",
    "JobStatus",
    "Lease",
    "LeaseError",
    "LeaseLost",
    "ManualClock",
    "NotYetClaimable",
    "Op",
    "OutcomeUnknown",
    "Outraced",
    "Reason",
    "RecordBackend",
    "Rejection",
    "RejectionKind",
    "StaleLease",
    "StaleToken",
    "Store",
    "StoreNotFound",
    "Summary",
    "SystemClock",
    "TokenChanged",
    "TokensExhausted",
    "Transaction",
    "__version__",
    "connect",
    "register_backend",
]
