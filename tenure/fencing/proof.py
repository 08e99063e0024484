"""Proof that a fencing token came from the store, for fences that take tokens from the network.

A fence admits the highest token it has seen, so a token it believes on a client's word is a
weapon: one request with token 2**63-1 would lock every real holder out for good. Two proofs,
either or both:

- a **signature**: HMAC-SHA256 with a secret the workers and the destination share, over
  (job id, owner, token) and the request it is for: its method, its normal path, and the
  SHA-256 of its body when the sender binds that too (``v2=``). A signature is a bearer
  credential: whoever captures it can send it again, but only as the same request (method,
  path and, if bound, body) while the fence still admits the token. The old form over (job id,
  owner, token) alone (``v1=``) is valid on every resource; it is made with ``unbound=True``
  and accepted only by a ``Proof(unbound=True)``. A signature proves the sender knows the
  secret, not that the store issued the token: a worker holding the secret could still sign a
  token it made up.
- the **store's word**: the store issued this token for this job to this owner (its current
  lease, or a claim in its history), and the lease under it still runs. A token above the
  store's current one, or one the store gave another owner, is forged (``ForgedToken``); a
  genuine token whose lease was completed, released, expired or superseded is stale
  (``StaleToken``): its effects must not land. It costs one store read per check (two for an
  old token: its history, which etcd and ZooKeeper read whole; who a token was issued to never
  changes, so each answer is kept and a stale holder's repeated writes cost one read each) and
  needs the destination to reach the store. A token older than the store's retained history
  cannot be proven and is refused as forged. Job id, owner and token are not secret, so the
  store's word alone says the lease runs, not who sent the request.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass

from tenure.core.bounded import Bounded
from tenure.core.errors import ForgedToken, InvalidArgument, StaleToken, quoted
from tenure.core.records import JobState, Op
from tenure.core.store import Store
from tenure.fencing import claims
from tenure.fencing.claims import FenceClaim

UNBOUND = "v1"  # names the message layout: (job, owner, token), valid on every resource
BOUND = "v2"  # (job, owner, token) and the request: method, normal path, body digest
MIN_SECRET_BYTES = 16
_CONTEXT = b"tenure-fencing-token\x00"  # a signature made for something else never matches
_BOUND_CONTEXT = b"tenure-fencing-request\x00"  # nor is one layout's message ever another's
METHOD = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,32}")  # an HTTP method is a token (RFC 9110)
_DIGEST = re.compile(r"[0-9a-f]{64}")
ISSUED_KEPT = 10_000  # (job, token) -> owner answers a Proof keeps


def _key(secret: object) -> bytes:
    if isinstance(secret, str):
        secret = secret.encode("utf-8")
    if not isinstance(secret, bytes):
        raise InvalidArgument(f"a fencing secret must be str or bytes, not {type(secret).__name__}")
    if len(secret) < MIN_SECRET_BYTES:
        raise InvalidArgument(f"a fencing secret must be at least {MIN_SECRET_BYTES} bytes")
    return secret


@dataclass(frozen=True)
class Request:
    """What a bound signature is for: a method, a path in its normal form (``http.normal_path``
    makes it), and the SHA-256 (hex) of the body, or "" when the body is not bound."""

    method: str
    path: str
    body_digest: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.method, str) or not METHOD.fullmatch(self.method):
            raise InvalidArgument(f"a request method is an HTTP token of 1 to 32 characters, got {quoted(self.method)}")
        object.__setattr__(self, "method", self.method.upper())  # "post" is sent as POST by every client
        if not isinstance(self.path, str) or not self.path.startswith("/"):
            raise InvalidArgument(f"a signed request path starts with '/', got {quoted(self.path)}")
        if self.body_digest and not _DIGEST.fullmatch(self.body_digest):
            raise InvalidArgument("a body digest is 64 lower-case hex digits (SHA-256)")


def body_digest(body: bytes) -> str:
    """The SHA-256 of a request body, as a bound signature covers it."""
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise InvalidArgument(f"a request body is bytes, not {type(body).__name__}")
    return hashlib.sha256(body).hexdigest()


def _framed(context: bytes, parts: list[bytes]) -> bytes:
    # Each field is length-prefixed: no job id and owner pair can be spelled as another.
    return context + b"".join(len(p).to_bytes(4, "big") + p for p in parts)


def _message(job_id: str, owner: str, token: int, request: Request | None) -> bytes:
    parts = [job_id.encode("utf-8"), owner.encode("utf-8"), str(token).encode("ascii")]
    if request is None:
        return _framed(_CONTEXT, parts)
    return _framed(_BOUND_CONTEXT, [*parts, request.method.encode("ascii"), request.path.encode("utf-8"),
                                    request.body_digest.encode("ascii")])


def _mac(key: bytes, job_id: str, owner: str, token: int, request: Request | None) -> str:
    layout = UNBOUND if request is None else BOUND
    return f"{layout}=" + hmac.new(key, _message(job_id, owner, token, request), hashlib.sha256).hexdigest()


def sign(secret: bytes | str, job_id: str, owner: str, token: int, *, request: Request | None = None,
         unbound: bool = False) -> str:
    """The signature of (job id, owner, token) for ``request``: ``v2=`` and 64 hex digits.

    ``unbound=True`` instead of a request makes the old ``v1=`` form, valid on every resource.
    """
    job, checked, who = claims.holder(token, job_id=job_id, owner=owner)
    assert who is not None
    if (request is None) != (unbound is True):
        raise InvalidArgument("a signature is bound to the request it is for: pass request= "
                              "(or unbound=True for the old form, valid on every resource)")
    if request is not None and not isinstance(request, Request):
        raise InvalidArgument(f"request must be a tenure.fencing.Request, not {type(request).__name__}")
    return _mac(_key(secret), job, who, checked, request)


def signature(lease: claims.LeaseLike, secret: bytes | str, *, request: Request | None = None,
              unbound: bool = False) -> str:
    """The worker's side: sign a lease (a held lease is checked first: LeaseLost once lost)."""
    job, token, owner = claims.holder(lease)
    assert owner is not None  # a lease always names its owner
    return sign(secret, job, owner, token, request=request, unbound=unbound)


class Proof:
    """What a fence requires before it admits a token from the network.

    ``secret``: the token must carry a valid signature, bound to the request it came with
    (``v2=``); the old unbound form (``v1=``) only with ``unbound=True``. ``store``: the store
    must have issued the token for the job to its presenter, and its lease must still run
    (``StaleToken`` otherwise). At least one is required: a fence that believes any token is not
    a fence.
    """

    def __init__(self, *, secret: bytes | str | None = None, store: Store | None = None,
                 unbound: bool = False) -> None:
        if secret is None and store is None:
            raise InvalidArgument("a fence that takes tokens from the network needs a proof: pass secret= "
                                  "(signed tokens) and/or store= (tokens the store issued)")
        if store is not None and not isinstance(store, Store):
            raise InvalidArgument(f"store must be a tenure.Store, not {type(store).__name__}")
        if not isinstance(unbound, bool):
            raise InvalidArgument(f"unbound must be a bool, not {type(unbound).__name__}")
        self._key = None if secret is None else _key(secret)
        self.store = store
        self.unbound = unbound
        # Tokens are never issued twice, so who the store issued one to is a fact for good.
        self._issued: Bounded[tuple[str, int], str] = Bounded(ISSUED_KEPT)

    @property
    def signed(self) -> bool:
        """Whether a signature is required (``secret=`` was given)."""
        return self._key is not None

    def check(self, claim: FenceClaim, given: str | None, request: Request | None = None) -> None:
        """Raise ``ForgedToken`` unless ``claim`` is proven, ``StaleToken`` if the store says its
        lease has ended; ``given`` is the signature it came with, ``request`` what it came on."""
        self.check_signature(claim, given, request)
        self.check_issued(claim)

    def check_signature(self, claim: FenceClaim, given: str | None, request: Request | None = None) -> None:
        """The first half of ``check``: the signature (nothing to check without ``secret=``)."""
        if self._key is not None:
            self._check_signature(self._key, claim, given, request)

    def check_issued(self, claim: FenceClaim) -> None:
        """The second half of ``check``: the store's word (nothing to ask without ``store=``)."""
        if self.store is not None:
            self._check_issued(claim, self.store)

    def _check_signature(self, key: bytes, claim: FenceClaim, given: str | None, request: Request | None) -> None:
        if not given:
            raise ForgedToken(claim.job_id, claim.token, "no signature")
        if claim.owner is None:
            raise ForgedToken(claim.job_id, claim.token, "a signed token needs its owner")
        layout = given.partition("=")[0]
        if layout == UNBOUND and not self.unbound:
            raise ForgedToken(claim.job_id, claim.token, "an unbound signature (v1): this fence takes only "
                                                          "signatures bound to the request (v2)")
        if layout == BOUND and request is None:
            raise ForgedToken(claim.job_id, claim.token, "a bound signature (v2) with no request to check it against")
        expected = _mac(key, claim.job_id, claim.owner, claim.token, request if layout == BOUND else None)
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
