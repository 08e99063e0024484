"""Fencing at the destination: refuse stale or duplicate work where the effect lands.

The lease store's own check cannot stop a request that was sent before a lease expired and
arrives after: only the destination can. See ``docs/fencing.md``.

    from tenure.fencing import SQLFence
    fence = SQLFence(conn, store=store)              # refusals go to the store's audit too
    with fence.fenced("accounts/42", held) as cur:   # StaleToken if a newer holder wrote
        cur.execute("UPDATE accounts SET balance = ? WHERE id = 42", (balance,))
"""

from tenure.core.errors import ForgedToken, StaleToken
from tenure.fencing.binding import BODY_DIGEST_HEADER, request_path, signed_request
from tenure.fencing.claims import FenceClaim, FenceRejection, RejectHook, forward_to
from tenure.fencing.http import (
    JOB_HEADER,
    OWNER_HEADER,
    SCOPE_KEY,
    SIGNATURE_HEADER,
    TOKEN_HEADER,
    FencingMiddleware,
    fencing_headers,
    path_resource,
    read_headers,
    read_signature,
    sql_admitter,
)
from tenure.fencing.idempotency import IdempotencyKeys
from tenure.fencing.paths import normal_path
from tenure.fencing.proof import Proof, Request, body_digest, sign, signature
from tenure.fencing.sql import SQLFence, fenced

__all__ = [
    "BODY_DIGEST_HEADER",
    "JOB_HEADER",
    "OWNER_HEADER",
    "SCOPE_KEY",
    "SIGNATURE_HEADER",
    "TOKEN_HEADER",
    "FenceClaim",
    "FenceRejection",
    "FencingMiddleware",
    "ForgedToken",
    "IdempotencyKeys",
    "Proof",
    "RejectHook",
    "Request",
    "SQLFence",
    "StaleToken",
    "body_digest",
    "fenced",
    "fencing_headers",
    "forward_to",
    "normal_path",
    "path_resource",
    "read_headers",
    "read_signature",
    "request_path",
    "sign",
    "signature",
    "signed_request",
    "sql_admitter",
]
