"""Many small Txns in one request (renew_many, complete_many, claim_next_many): etcd's limits
on a request, in one place.

etcd allows 128 operations a Txn (``--max-txn-ops``), nested ones included, where a nested
Txn's budget is what its parents leave (etcd's ``checkTxnRequest``: a Txn counts the longest
of its compares and its two branches, and each Txn in a branch gets the budget less that). A
top level of ``GROUPS`` Txns, each of ``GROUP`` parts of at most ``PART_OPS`` operations a
side, fits (60 + 60 + 8 <= 128): 3,600 parts a request. ``MAX_BYTES`` keeps a request under
etcd's 1.5 MiB (``--max-request-bytes``). A part is one lease's change with its own compares,
so one whose compares fail writes nothing and fails alone, its neighbours apply.
"""

from __future__ import annotations

from typing import Any

from tenure.backends.etcd import client as ec
from tenure.backends.etcd.client import TxnResult

GROUP = 60  # parts per nested Txn
GROUPS = 60  # nested Txns per request
PART_OPS = 128 - GROUP - GROUPS  # operations a side of one part, at most
MAX_BYTES = 1 << 20  # per request, under etcd's default --max-request-bytes of 1.5 MiB


def weight(op: Any) -> int:
    """What a part adds to a request, in bytes, with its nesting."""
    return ec.size(op) + 8


def full(count: int, size: int, adding: int) -> bool:
    """Whether a request of ``count`` parts of ``size`` bytes has no room for one of ``adding``."""
    return count > 0 and (count == GROUP * GROUPS or size + adding > MAX_BYTES)


def grouped(ops: list[Any]) -> list[Any]:
    """Parts (each a Txn) as the success branch of one request."""
    return [ec.txn([], ops[i:i + GROUP], []) for i in range(0, len(ops), GROUP)]


def answers(res: TxnResult) -> list[TxnResult]:
    """Each part's answer to ``grouped``'s request, in order, with the request's revision (etcd
    numbers only the outer answer: every part was applied at that revision)."""
    parts = [part for group in res.nested for part in group.nested]
    for part in parts:
        object.__setattr__(part, "revision", res.revision)  # (a frozen answer, numbered in place)
    return parts
