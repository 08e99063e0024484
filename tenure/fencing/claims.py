"""What a fenced destination is shown (a claim) and what it keeps when it says no (a rejection).

A claim is checked once, here, for every helper: SQL fences, idempotency keys and the HTTP
middleware all take their job id, owner and token through ``claim()``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tenure.core import validation
from tenure.core.errors import InvalidArgument, LeaseError
from tenure.core.records import Lease
from tenure.core.renewal import HeldLease
from tenure.core.store import Store

if TYPE_CHECKING:
    from tenure.core.records import Rejection

log = logging.getLogger("tenure.fencing")

MAX_TOKEN = validation.MAX_TOKEN  # fence tables keep tokens in signed 64-bit columns
UNKNOWN_OWNER = "(unknown)"  # reported to the store when the destination was not told the owner
SHARED_SCOPE = ""  # the fence key of a resource shared across jobs; no job id is empty

LeaseLike = Lease | HeldLease


@dataclass(frozen=True)
class FenceClaim:
    """A request to produce an effect on ``resource`` under ``token`` of ``job_id``.

    ``shared`` fences the resource across jobs with one token; that is only sound where the
    store's tokens are globally ordered (``store.characteristics.tokens_ordered_across_jobs``,
    as etcd revisions are; the leases of one etcd ``claim_next_many`` request share one, and
    the fence admits each). Otherwise each job has its own fence on the resource.
    """

    resource: str
    job_id: str
    token: int
    owner: str | None = None
    shared: bool = False

    @property
    def scope(self) -> str:
        """The second half of the fence key: the job, or one shared key."""
        return SHARED_SCOPE if self.shared else self.job_id


@dataclass(frozen=True)
class FenceRejection:
    """A token refused at a destination; ``at`` is the destination's own clock.

    ``reason`` is empty for a stale token (lower than ``highest``); otherwise it says why an
    unproven token or an unnormalised request was refused (``highest`` is then 0: not asked).
    """

    resource: str
    job_id: str
    owner: str | None
    token: int
    highest: int
    at: float
    shared: bool = False
    reason: str = ""


RejectHook = Callable[[FenceRejection], object]


def token(value: object) -> int:
    """A fencing token: a positive int that fits a signed 64-bit column."""
    return validation.token(value)


def holder(token_or_lease: object, *, job_id: object = None,
           owner: object = None) -> tuple[str, int, str | None]:
    """Job id, token and owner from a ``Lease``/``HeldLease``, or from an int and ``job_id=``.

    A held lease is checked first: once it is lost no effect may be produced under it.
    """
    if isinstance(token_or_lease, (Lease, HeldLease)):
        if job_id is not None or owner is not None:
            raise InvalidArgument("pass job_id and owner only with an int token; a lease carries its own")
        if isinstance(token_or_lease, HeldLease):
            token_or_lease.check()  # LeaseLost
        lease = token_or_lease.lease if isinstance(token_or_lease, HeldLease) else token_or_lease
        return lease.job_id, token(lease.token), lease.owner
    if job_id is None:
        raise InvalidArgument("an int token needs job_id=: fences and their audit are per job")
    return (validation.job_id(job_id), token(token_or_lease),
            None if owner is None else validation.owner(owner))


def claim(resource: object, token_or_lease: object, *, job_id: object = None, owner: object = None,
          shared: object = False) -> FenceClaim:
    """Validate what a caller handed a fence (see ``holder`` for the token or lease)."""
    if not isinstance(shared, bool):
        raise InvalidArgument(f"shared must be a bool, not {type(shared).__name__}")
    name = validation.resource(resource)
    job, checked, who = holder(token_or_lease, job_id=job_id, owner=owner)
    return FenceClaim(name, job, checked, who, shared)


def forward_to(store: Store) -> Callable[[FenceRejection], Rejection]:
    """An ``on_reject`` hook that adds each destination rejection to ``store``'s audit.

    The store shows them in ``store.rejections()`` (kind ``destination``) and so on the
    dashboard, next to the stale operations the store refused itself.
    """

    def forward(rejection: FenceRejection) -> Rejection:
        return store.report_rejection(
            rejection.job_id, rejection.owner or UNKNOWN_OWNER, rejection.token,
            resource=rejection.resource, highest=rejection.highest, reason=rejection.reason)

    return forward


def reporting(on_reject: RejectHook | None, store: Store | None) -> RejectHook | None:
    """Where a fence reports its rejections: ``on_reject`` when given, else the audit of
    ``store`` when given (``forward_to``), else nowhere but the destination itself."""
    if on_reject is not None and not callable(on_reject):
        raise InvalidArgument(f"on_reject must be callable, not {type(on_reject).__name__}")
    if store is not None and not isinstance(store, Store):
        raise InvalidArgument(f"store must be a tenure.Store, not {type(store).__name__}")
    if on_reject is not None:
        return on_reject
    return None if store is None else forward_to(store)


def report(hook: RejectHook | None, rejection: FenceRejection) -> None:
    """Call the hook after the rejection is durable at the destination.

    A hook that fails (the store is down) must not change the destination's answer, which is
    StaleToken either way, and the destination's own record is already committed: log it.
    """
    if hook is None:
        return
    try:
        hook(rejection)
    except LeaseError as exc:
        log.warning("could not forward the rejection of %r token %d: %s",
                    rejection.resource, rejection.token, exc)
    except Exception:
        log.exception("on_reject hook failed for %r token %d", rejection.resource, rejection.token)
