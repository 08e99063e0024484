"""The public contract for backend authors: everything a backend needs, and nothing else.

    from tenure.backend import Characteristics, Durability, RecordBackend, Transaction, job_record

A backend imports from here, from ``tenure`` (the values a store hands out, its errors) and,
in its tests, from ``tenure.testing`` (the conformance suite). These names are the stable
contract (tests/core/test_public_api.py holds ``__all__`` to it): changing one is a change of the
contract, made on purpose. Everything under ``tenure.core`` is tenure's own and may move; the
names below are re-exported from there, so a backend written against this module does not
notice. docs/backends/writing-a-backend.md builds a backend on it.

What is here, by use:

- the interface: ``RecordBackend`` (stores with one record per job and transactions; the core
  runs the protocol) and its ``Transaction``; ``Backend`` for a store that runs the protocol
  itself (as PostgreSQL does in SQL); ``Characteristics``, ``Durability``, ``Link``;
- construction: ``StoreURL`` and ``Options`` (what ``from_url`` receives), ``Clock``;
- records: ``JobRecord`` and the codec that writes and checks them (``job_record``, the life
  cycle's ``LIFE_FIELDS``/``life``/``life_fields``, ``result_text``/``result_bytes``,
  ``rejection_fields``/``rejection``, ``event_fields``/``event``, ``corrupt_status``, ``key_of``,
  ``encode_job_id``/``decode_job_id``, ``json_object``);
- judging: ``status`` (a record as callers see it at the store's ``now``), ``is_next`` (whether
  ``claim_next`` may take it), ``candidate_at`` (when it can next become claimable by time);
- claim_next's order (``tenure.core.order``): the keys an index of candidates keeps
  (``Expired``, ``Queued``), ``ordered`` (their merge, spread for an optimistic store), and
  what a store declares it cannot keep (``Tolerance``, ``EXACT``, ``OPTIMISTIC``);
- the audit: ``select``, ``readable``, ``of_job``;
- the types in the interface's signatures (``Lease``, ``JobStatus``, ``Rejection``, ...) and the
  errors a backend raises or maps its client library's errors to.
"""

from tenure.core.audit import of_job, readable, select
from tenure.core.backend import Backend, Characteristics, Durability, Link, RecordBackend
from tenure.core.clock import Clock
from tenure.core.codec import (
    LIFE_FIELDS,
    corrupt_status,
    decode_job_id,
    encode_job_id,
    event,
    event_fields,
    job_record,
    json_object,
    key_of,
    life,
    life_fields,
    rejection,
    rejection_fields,
    result_bytes,
    result_text,
)
from tenure.core.errors import (
    AuthenticationFailed,
    BackendUnavailable,
    CorruptRecord,
    InvalidArgument,
    OutcomeUnknown,
    StoreNotFound,
)
from tenure.core.lifecycle import Retry
from tenure.core.options import Options, StoreURL
from tenure.core.order import EXACT, OPTIMISTIC, Expired, Queued, Tolerance, ordered
from tenure.core.record_transaction import Transaction
from tenure.core.records import (
    Change,
    HistoryEvent,
    JobPage,
    JobRecord,
    JobState,
    JobStatus,
    Lease,
    Op,
    Rejection,
    Summary,
)
from tenure.core.transitions import candidate_at, is_next, replaced, status

__all__ = [
    "EXACT",
    "LIFE_FIELDS",
    "OPTIMISTIC",
    "AuthenticationFailed",
    "Backend",
    "BackendUnavailable",
    "Change",
    "Characteristics",
    "Clock",
    "CorruptRecord",
    "Durability",
    "Expired",
    "HistoryEvent",
    "InvalidArgument",
    "JobPage",
    "JobRecord",
    "JobState",
    "JobStatus",
    "Lease",
    "Link",
    "Op",
    "Options",
    "OutcomeUnknown",
    "Queued",
    "RecordBackend",
    "Rejection",
    "Retry",
    "StoreNotFound",
    "StoreURL",
    "Summary",
    "Tolerance",
    "Transaction",
    "candidate_at",
    "corrupt_status",
    "decode_job_id",
    "encode_job_id",
    "event",
    "event_fields",
    "is_next",
    "job_record",
    "json_object",
    "key_of",
    "life",
    "life_fields",
    "of_job",
    "ordered",
    "readable",
    "rejection",
    "rejection_fields",
    "replaced",
    "result_bytes",
    "result_text",
    "select",
    "status",
]
