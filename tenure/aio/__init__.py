"""tenure for asyncio: the same contract as ``tenure.Store``, awaited.

    import tenure.aio
    async with tenure.aio.connect("postgresql://app@db/jobs") as store:
        await store.submit("job-42")
        async with store.hold("job-42", owner="worker-a", ttl=10.0) as held:  # renewed by a task
            held.check()                    # raises LeaseLost once the lease cannot be trusted
            await write_somewhere(token=held.token)
            await held.complete(b"done")    # leaving without complete() releases the job

Values (``Lease``, ``JobStatus`` ...) and errors are ``tenure``'s own.
"""

from tenure.aio.backend import AsyncBackend, ThreadedBackend
from tenure.aio.holding import AsyncHeldLease
from tenure.aio.record_backend import AsyncRecordBackend, InlineRecordBackend
from tenure.aio.registry import Connecting, connect
from tenure.aio.store import AsyncStore, Holding

__all__ = ["AsyncBackend", "AsyncHeldLease", "AsyncRecordBackend", "AsyncStore", "Connecting", "Holding",
           "InlineRecordBackend", "ThreadedBackend", "connect"]
