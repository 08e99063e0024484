"""Fencing over HTTP: request headers, a helper for senders, an ASGI middleware for receivers.

A sender adds ``fencing_headers(held, secret=..., method=..., path=...)`` to each request that
produces an effect: the signature is bound to that method and path (and body, with ``body=``).
A receiver wraps its ASGI app in ``FencingMiddleware``, which proves the token (a signature
and/or the store's word, see ``proof``), then admits it against a fence before the app runs: ``403`` to
an unproven token, ``409 Conflict`` to stale work (a token below one the fence admitted, or,
with ``store=``, one whose lease the store says was completed, released, expired or
superseded). Header values are percent-encoded UTF-8, because job ids and owners may be any
Unicode text and headers carry only ASCII.

The fence key is the request's path in one normal form (``normal_path``), so that a stale
writer cannot reach a fresh key by spelling the same resource another way.

The middleware's check commits before the app runs, so a newer holder may be admitted
while the app is still writing; an app whose writes go to SQL closes that gap by writing
inside ``SQLFence.fenced()`` with the claim the middleware leaves in ``scope["tenure.fence"]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, MutableMapping
from typing import Any
from urllib.parse import quote, unquote

from tenure.core import validation
from tenure.core.clock import SYSTEM_CLOCK, Clock
from tenure.core.errors import BackendUnavailable, ForgedToken, InvalidArgument, LeaseError, StaleToken
from tenure.core.records import Lease
from tenure.core.renewal import HeldLease
from tenure.core.store import Store
from tenure.fencing import claims, proof
from tenure.fencing.binding import (
    BODY_DIGEST_HEADER,
    DIGEST_PREFIX,
    Receive,
    Scope,
    Unread,
    Unsigned,
    bound_request,
    matching_body,
    signed_request,
)
from tenure.fencing.budget import UNPROVEN_PER_MINUTE, RefusalBudget
from tenure.fencing.claims import FenceClaim, FenceRejection, RejectHook
from tenure.fencing.dbapi import Connection
from tenure.fencing.paths import normal_path
from tenure.fencing.proof import Request
from tenure.fencing.sql import DEFAULT_PREFIX, SQLFence

JOB_HEADER = "Tenure-Job-Id"
TOKEN_HEADER = "Tenure-Fencing-Token"
OWNER_HEADER = "Tenure-Owner"
SIGNATURE_HEADER = "Tenure-Fencing-Signature"
SCOPE_KEY = "tenure.fence"  # where the middleware leaves the admitted FenceClaim for the app
UNNORMAL_RESOURCE = "(unnormalised path)"  # the audited resource of a request whose path has no normal form

Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Admit = Callable[[FenceClaim], object]  # raises StaleToken; may be a coroutine function

log = logging.getLogger("tenure.fencing")
_DIGITS = re.compile(r"[0-9]{1,19}")
Headers = Mapping[str, str] | Iterable[tuple[bytes, bytes]]


def fencing_headers(lease: Lease | HeldLease, *, secret: bytes | str | None = None, method: str | None = None,
                    path: str | None = None, body: bytes | None = None, unbound: bool = False) -> dict[str, str]:
    """Headers carrying the lease's job id, token and owner; a held lease is checked first.

    With ``secret`` (the destination's ``FencingMiddleware(secret=...)``) they are signed for
    one request: ``method`` and ``path`` (a path or a whole URL, as sent; its query is not
    signed), and the exact bytes sent as the body when ``body`` is given. ``unbound=True``
    instead makes the old signature, valid on every resource, for fences that ask for it.
    """
    if not isinstance(lease, (Lease, HeldLease)):
        raise InvalidArgument(f"expected a tenure.Lease or HeldLease, not {type(lease).__name__}")
    job_id, token, owner = claims.holder(lease)
    assert owner is not None  # a lease always names its owner
    headers = {JOB_HEADER: quote(job_id, safe=""), TOKEN_HEADER: str(token), OWNER_HEADER: quote(owner, safe="")}
    bound = (method, path, body) != (None, None, None)
    if not isinstance(unbound, bool):
        raise InvalidArgument(f"unbound must be a bool, not {type(unbound).__name__}")
    if secret is None:
        if bound or unbound:
            raise InvalidArgument("method, path, body and unbound say what is signed: they need secret=")
        return headers
    if unbound and bound:
        raise InvalidArgument("an unbound signature is for no request: pass method, path and body, or unbound=True")
    request = None
    if not unbound:
        if method is None or path is None:
            raise InvalidArgument("a signature is bound to the request it is for: pass method= and path= "
                                  "(or unbound=True for the old form, valid on every resource)")
        request = signed_request(method, path, body)  # checked, never str()-ed: b"POST" is no method
    headers[SIGNATURE_HEADER] = proof.sign(secret, job_id, owner, token, request=request, unbound=request is None)
    if request is not None and request.body_digest:
        headers[BODY_DIGEST_HEADER] = DIGEST_PREFIX + request.body_digest
    return headers


def _pairs(headers: Headers) -> list[tuple[str, str]]:
    """(lower-case name, value) pairs from a mapping or ASGI's list of byte pairs."""
    if isinstance(headers, Mapping):
        return [(str(k).lower(), str(v)) for k, v in headers.items()]
    return [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in headers]


def read_signature(headers: Headers) -> str | None:
    """The ``Tenure-Fencing-Signature`` header's value, or None."""
    found = [v.strip() for k, v in _pairs(headers) if k == SIGNATURE_HEADER.lower()]
    return found[0] if len(found) == 1 else None  # two signatures prove nothing


def read_headers(headers: Headers) -> tuple[str, int, str] | None:
    """(job id, token, owner) from request headers; None if none of the three is present.

    Takes a mapping of names to values or ASGI's list of (name, value) byte pairs. Some but
    not all of the headers, or a malformed one, raise ``InvalidArgument``.
    """
    wanted = {JOB_HEADER.lower(): "", TOKEN_HEADER.lower(): "", OWNER_HEADER.lower(): ""}
    given = [(k, v.strip()) for k, v in _pairs(headers) if k in wanted]
    found = dict(given)
    if len(found) < len(given):  # which one would a proxy or the app believe? neither
        raise InvalidArgument("fencing headers given more than once")
    if not found:
        return None
    missing = [name for name in (JOB_HEADER, TOKEN_HEADER, OWNER_HEADER) if name.lower() not in found]
    if missing:
        raise InvalidArgument(f"fencing headers incomplete: missing {', '.join(missing)}")
    token = found[TOKEN_HEADER.lower()]
    if not _DIGITS.fullmatch(token):
        raise InvalidArgument(f"{TOKEN_HEADER} must be a decimal integer, got {token[:40]!r}")
    try:
        job_id = unquote(found[JOB_HEADER.lower()], errors="strict")
        owner = unquote(found[OWNER_HEADER.lower()], errors="strict")
    except UnicodeDecodeError as exc:
        raise InvalidArgument(f"fencing headers must be percent-encoded UTF-8: {exc}") from exc
    job, checked, who = claims.holder(int(token), job_id=job_id, owner=owner)
    assert who is not None
    return job, checked, who


def path_resource(scope: Scope) -> str | None:
    """The default resource of a request: its normal path (``normal_path``), one fence per URL."""
    return normal_path(str(scope.get("path") or "/"), str(scope.get("root_path") or ""))


class FencingMiddleware:
    """Pure ASGI 3 middleware: prove and admit each request's token, or answer 4xx/5xx without the app.

    A token is proven first (``secret=``: its signature, bound to the request's method and path,
    and to its body when the sender signed one; ``unbound=True`` also takes the old signature
    valid on every resource; ``signed_body=True`` refuses a request whose body is not signed (so no ``unbound``);
    ``store=``: the store issued it; at least one is required, see ``proof.Proof``), then
    ``admit(claim)`` raises ``StaleToken`` for
    stale work (``sql_admitter`` builds one from a connection factory); a plain function runs in
    a worker thread. ``resource(scope)`` names the fenced resource, or None to let a request
    through unfenced; it raises ``InvalidArgument`` for a path with no normal form. Without
    fencing headers a request gets 428 when ``required``, else passes through unfenced.
    ``on_reject`` hears of every unproven token and unnormalised path (by default, given
    ``store``, the store's audit: ``forward_to(store)``); stale tokens are the fence's to report
    (``sql_admitter``'s own). Refusals of requests nothing proved (no valid signature; with
    ``store=`` alone, any the store refuses as forged) reach it at most ``unproven_per_minute``
    a minute (``budget``), on ``clock``; a refusal of a request with a valid signature, and an
    ended lease's, always does.
    """

    def __init__(self, app: ASGIApp, admit: Admit, *, secret: bytes | str | None = None,
                 store: Store | None = None, on_reject: RejectHook | None = None,
                 resource: Callable[[Scope], str | None] = path_resource,
                 shared: bool = False, required: bool = True, unbound: bool = False,
                 signed_body: bool = False, unproven_per_minute: int = UNPROVEN_PER_MINUTE,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        if not callable(app) or not callable(admit) or not callable(resource):
            raise InvalidArgument("app, admit and resource must be callables")
        if not isinstance(signed_body, bool) or (signed_body and secret is None):
            raise InvalidArgument("signed_body=True needs secret=: a body is proven by its signature")
        if signed_body and unbound:  # else a v1 signature and a digest of the sender's own body would pass
            raise InvalidArgument("signed_body=True takes no unbound=True: an unbound signature signs no body")
        self.app = app
        self.admit = admit
        self.proof = proof.Proof(secret=secret, store=store, unbound=unbound)
        self.signed_body = signed_body
        self.on_reject = claims.reporting(on_reject, store)
        self.unproven = RefusalBudget(unproven_per_minute, clock)
        self.resource = resource
        self.shared = shared
        self.required = required

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            name, unnormal = self.resource(scope), None
        except InvalidArgument as exc:
            name, unnormal = None, exc
        if name is None and unnormal is None:
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers") or []
        try:
            found = read_headers(headers)
        except InvalidArgument as exc:
            await _answer(send, 400, {"error": str(exc)})
            return
        if found is None:
            if self.required:
                await _answer(send, 428, {"error": "fencing headers required",
                                          "headers": [JOB_HEADER, TOKEN_HEADER, OWNER_HEADER, SIGNATURE_HEADER]})
                return
            await self.app(scope, receive, send)
            return
        if unnormal is not None:
            await self._refuse(send, 400, FenceClaim(UNNORMAL_RESOURCE, *found, shared=self.shared), str(unnormal))
            return
        assert name is not None
        try:
            claim = FenceClaim(validation.resource(name), *found, shared=self.shared)
        except InvalidArgument as exc:
            await _answer(send, 400, {"error": str(exc)})
            return
        request: Request | None = None
        if self.proof.signed:
            digests = [v.strip() for k, v in _pairs(headers) if k == BODY_DIGEST_HEADER.lower()]
            try:
                request = bound_request(scope, digests, self.signed_body)
            except Unread as exc:
                await _answer(send, exc.status, {"error": exc.why})
                return
            except Unsigned as exc:
                await self._refuse(send, exc.status, claim, exc.why)
                return
        try:
            self.proof.check_signature(claim, read_signature(headers), request)  # microseconds: in the loop
        except ForgedToken as exc:
            await self._refuse(send, 403, claim, exc.why)
            return
        if request is not None:  # signed: only now is the body worth reading (up to 16 MiB) and hashing
            try:
                receive = await matching_body(request, receive)
            except Unread as exc:
                await _answer(send, exc.status, {"error": exc.why})
                return
            except Unsigned as exc:
                await self._refuse(send, exc.status, claim, exc.why)  # a header copied onto another body
                return
        try:
            await asyncio.to_thread(self.proof.check_issued, claim)
        except ForgedToken as exc:  # from a sender who knows the secret, if one is asked for
            await self._refuse(send, 403, claim, exc.why, proven=self.proof.signed)
            return
        except StaleToken as exc:  # the store says its lease ended; the fence never saw it: audit here
            await self._refuse(send, 409, claim, str(exc), highest=exc.highest, proven=True)
            return
        except LeaseError as exc:  # the store cannot be asked: refuse rather than risk it
            await _unavailable(send, claim, exc)
            return
        try:
            await self._admit(claim)
        except StaleToken as exc:  # the fence refused it and reported it itself
            await _answer(send, 409, _stale(exc.resource, exc.token, exc.highest))
            return
        except LeaseError as exc:
            await _unavailable(send, claim, exc)
            return
        await self.app({**scope, SCOPE_KEY: claim}, receive, send)

    async def _refuse(self, send: Send, status: int, claim: FenceClaim, why: str, highest: int = 0, *,
                      proven: bool = False) -> None:
        """Answer an unproven token (403), one whose lease the store says ended (409) or an
        unnormalised path (400); log it and report it to ``on_reject`` (unless ``proven``,
        within the fence's budget for unproven refusals)."""
        kind = _REFUSALS[status]
        reason = f"{kind}: {why}"[:validation.MAX_REASON]
        skipped = 0 if proven or self.on_reject is None else self.unproven.take()
        unrecorded = "" if skipped is not None else (
            f" (not recorded in the audit: over {self.unproven.per_minute} unproven refusals a minute, "
            f"{self.unproven.unrecorded} not recorded so far)")
        log.warning("refused %s token %d of job %r by %r on %r: %s%s", kind, claim.token, claim.job_id, claim.owner,
                    claim.resource, why, unrecorded)
        if skipped is not None:
            rejection = FenceRejection(claim.resource, claim.job_id, claim.owner, claim.token, highest, time.time(),
                                       claim.shared, _noting(reason, skipped))
            await asyncio.to_thread(claims.report, self.on_reject, rejection)
        body = {**_stale(claim.resource, claim.token, highest), "reason": reason} if status == 409 else {
            "error": reason}
        await _answer(send, status, body)

    async def _admit(self, claim: FenceClaim) -> None:
        result = await asyncio.to_thread(self.admit, claim)  # a blocking fence stays off the loop
        if inspect.isawaitable(result):  # an async admit (or callable object) gave a coroutine
            await result


_REFUSALS = {403: "unproven token", 409: "ended lease", 400: "unnormalised path"}


def _noting(reason: str, skipped: int) -> str:
    """The audited reason, saying how many unproven refusals before it were not recorded."""
    if not skipped:
        return reason
    note = f" ({skipped} more unproven refusals not recorded)"
    return reason[:validation.MAX_REASON - len(note)] + note


def _stale(resource: str, token: int, highest: int) -> dict[str, Any]:
    return {"error": "stale fencing token", "resource": resource, "token": token, "highest": highest}


async def _unavailable(send: Send, claim: FenceClaim, exc: LeaseError) -> None:
    log.warning("fence unavailable for %r: %s", claim.resource, exc)
    await _answer(send, 503, {"error": "fence unavailable"})


async def _answer(send: Send, status: int, body: dict[str, Any]) -> None:
    payload = json.dumps(body).encode("utf-8")
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(payload)).encode("ascii"))]})
    await send({"type": "http.response.body", "body": payload})


def sql_admitter(connect: Callable[[], Connection], *, table_prefix: str = DEFAULT_PREFIX,
                 on_reject: RejectHook | None = None, store: Store | None = None) -> Callable[[FenceClaim], int]:
    """An ``admit`` for ``FencingMiddleware`` over an SQL fence, one connection per request.

    ``connect`` opens a new DB-API connection (``lambda: sqlite3.connect(path)``); the
    tables are created once, here. Stale tokens are reported as ``SQLFence`` reports them.
    """
    if not callable(connect):
        raise InvalidArgument(f"connect must be callable, not {type(connect).__name__}")
    on_reject = claims.reporting(on_reject, store)
    with _connected(connect) as conn:
        SQLFence(conn, table_prefix=table_prefix)

    def admit(claim: FenceClaim) -> int:
        with _connected(connect) as conn:
            fence = SQLFence(conn, table_prefix=table_prefix, on_reject=on_reject, create=False)
            with fence.fenced(claim.resource, claim.token, job_id=claim.job_id, owner=claim.owner,
                              shared=claim.shared):
                pass
        return claim.token

    return admit


@contextlib.contextmanager
def _connected(connect: Callable[[], Connection]) -> Iterator[Connection]:
    """A connection from the caller's factory, closed afterwards; failing to connect is ours."""
    try:
        conn = connect()
    except Exception as exc:  # whatever the driver raises: the fence's database is unreachable
        raise BackendUnavailable(f"could not connect to the fence database: {exc}") from exc
    try:
        yield conn
    finally:
        close = getattr(conn, "close", None)
        if callable(close):
            close()
