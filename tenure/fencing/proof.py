"""Proof that a fencing token came from the store, for fences that take tokens from the network.

A fence admits the highest token it has seen, so a token it believes on a client's word is a
weapon: one request with token 2**63-1 would lock every real holder out for good. Two proofs,
either or both:

- a **signature**: HMAC-SHA256 over (job id, owner, token) with a secret the workers and the
  destination share. Workers sign with ``signature(held, secret)`` (``fencing_headers(held,
  secret=...)`` adds it as a header). It proves the sender knows the secret, not that the store
  issued the token: a worker holding the secret could still sign a token it made up.
- the **store's word**: the store issued this token for this job to this owner (its current
  lease, or a claim in its history), and the lease under it still runs. A token above the
  store's current one, or one the store gave another owner, is forged (``ForgedToken``); a
  genuine token whose lease was completed, released, expired or superseded is stale
  (``StaleToken``): its effects must not land. It costs one store read per check (two for an
  old token: its history, which etcd and ZooKeeper read whole; who a token was issued to never
  changes, so each answer is kept and a stale holder's repeated writes cost one read each) and
  needs the destination to reach the store. A token older than the store's retained history
  cannot be proven and is refused as forged.
"""

from __future__ import annotations

import hashlib
import hmac

from tenure.core.bounded import Bounded
from tenure.core.errors import ForgedToken, InvalidArgument, StaleToken
from tenure.core.records import JobState, Op
from tenure.core.store import Store
from tenure.fencing import claims
from tenure.fencing.claims import FenceClaim

VERSION = "v1"  # names the message layout, so a later layout can be told apart
MIN_SECRET_BYTES = 16
_CONTEXT = b"tenure-fencing-token\x00"  # a signature made for something else never matches
ISSUED_KEPT = 10_000  # (job, token) -> owner answers a Proof keeps


def _key(secret: object) -> bytes:
    if isinstance(secret, str):
        secret = secret.encode("utf-8")
    if not isinstance(secret, bytes):
        raise InvalidArgument(f"a fencing secret must be str or bytes, not {type(secret).__name__}")
    if len(secret) < MIN_SECRET_BYTES:
        raise InvalidArgument(f"a fencing secret must be at least {MIN_SECRET_BYTES} bytes")
    return secret


def _message(job_id: str, owner: str, token: int) -> bytes:
    # Each field is length-prefixed: no job id and owner pair can be spelled as another.
    parts = [job_id.encode("utf-8"), owner.encode("utf-8"), str(token).encode("ascii")]
    return _CONTEXT + b"".join(len(p).to_bytes(4, "big") + p for p in parts)


def sign(secret: bytes | str, job_id: str, owner: str, token: int) -> str:
    """The signature of (job id, owner, token): ``v1=`` and 64 hex digits."""
    job, checked, who = claims.holder(token, job_id=job_id, owner=owner)
    assert who is not None
    return f"{VERSION}=" + hmac.new(_key(secret), _message(job, who, checked), hashlib.sha256).hexdigest()


def signature(lease: claims.LeaseLike, secret: bytes | str) -> str:
    """The worker's side: sign a lease (a held lease is checked first: LeaseLost once lost)."""
    job, token, owner = claims.holder(lease)
    assert owner is not None  # a lease always names its owner
    return sign(secret, job, owner, token)


class Proof:
    """What a fence requires before it admits a token from the network.

    ``secret``: the token must carry a valid signature. ``store``: the store must have issued
    the token for the job to its presenter, and its lease must still run (``StaleToken``
    otherwise). At least one is required: a fence that believes any token is not a fence.
    """

    def __init__(self, *, secret: bytes | str | None = None, store: Store | None = None) -> None:
        if secret is None and store is None:
            raise InvalidArgument("a fence that takes tokens from the network needs a proof: pass secret= "
                                  "(signed tokens) and/or store= (tokens the store issued)")
        if store is not None and not isinstance(store, Store):
            raise InvalidArgument(f"store must be a tenure.Store, not {type(store).__name__}")
        self._key = None if secret is None else _key(secret)
        self.store = store
        # Tokens are never issued twice, so who the store issued one to is a fact for good.
        self._issued: Bounded[tuple[str, int], str] = Bounded(ISSUED_KEPT)

    def check(self, claim: FenceClaim, given: str | None) -> None:
        """Raise ``ForgedToken`` unless ``claim`` is proven, ``StaleToken`` if the store says its
        lease has ended; ``given`` is the signature it came with."""
        if self._key is not None:
            self._check_signature(claim, given)
        if self.store is not None:
            self._check_issued(claim, self.store)

    def _check_signature(self, claim: FenceClaim, given: str | None) -> None:
        if not given:
            raise ForgedToken(claim.job_id, claim.token, "no signature")
        if claim.owner is None:
            raise ForgedToken(claim.job_id, claim.token, "a signed token needs its owner")
        expected = f"{VERSION}=" + hmac.new(self._key or b"", _message(claim.job_id, claim.owner, claim.token),
                                            hashlib.sha256).hexdigest()
        if not hmac.compare_digest(given.encode("ascii", "replace"), expected.encode("ascii")):
            raise ForgedToken(claim.job_id, claim.token, "bad signature")

    def _check_issued(self, claim: FenceClaim, store: Store) -> None:
        if claim.owner is None:
            raise ForgedToken(claim.job_id, claim.token, "the store's word needs the owner the token was issued to")
        status = store.get(claim.job_id)  # BackendUnavailable propagates: unproven is not admitted
        if status is None or status.token == 0:
            raise ForgedToken(claim.job_id, claim.token, "the store has never issued a token for this job")
        if claim.token > status.token:
            raise ForgedToken(claim.job_id, claim.token, "above the store's current token for this job")
        if claim.token == status.token and status.state is JobState.LEASED:
            if claim.owner != status.owner:
                raise ForgedToken(claim.job_id, claim.token, "the store issued this token to another owner")
            return  # the running lease: the common case, one read
        issued_to = self._issued_to(store, claim.job_id, claim.token)
        if issued_to is None:
            raise ForgedToken(claim.job_id, claim.token, "the store's history does not show this token issued")
        if issued_to != claim.owner:
            raise ForgedToken(claim.job_id, claim.token, "the store issued this token to another owner")
        ended = (f"superseded by token {status.token}" if claim.token < status.token
                 else f"its lease has ended (the job is {status.state.value})")
        raise StaleToken(claim.resource, claim.token, status.token, ended)


    def _issued_to(self, store: Store, job_id: str, token: int) -> str | None:
        key = (job_id, token)
        owner = self._issued.get(key, refresh=True)
        if owner is not None:
            return owner
        owner = _claimed_by(store, job_id, token)
        if owner is not None:  # not found is not kept: made-up tokens would push real answers out
            self._issued.put(key, owner)
        return owner


def _claimed_by(store: Store, job_id: str, token: int) -> str | None:
    """The owner the store's history shows claiming ``token`` of the job, or None."""
    for event in reversed(store.history(job_id)):
        if event.op is Op.CLAIM and event.token == token:
            return event.owner
    return None
