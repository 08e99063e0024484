"""Fencing over HTTP: three request headers, a helper for senders, an ASGI middleware for receivers.

A sender adds ``fencing_headers(held)`` to each request that produces an effect. A receiver
wraps its ASGI app in ``FencingMiddleware``, which admits the token against a fence before
the app runs and answers ``409 Conflict`` to stale work. Header values are percent-encoded
UTF-8, because job ids and owners may be any Unicode text and headers carry only ASCII.

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
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, MutableMapping
from typing import Any
from urllib.parse import quote, unquote

from tenure.core import validation
from tenure.core.errors import BackendUnavailable, InvalidArgument, LeaseError, StaleToken
from tenure.core.records import Lease
from tenure.core.renewal import HeldLease
from tenure.fencing import claims
from tenure.fencing.claims import FenceClaim, RejectHook
from tenure.fencing.dbapi import Connection
from tenure.fencing.sql import DEFAULT_PREFIX, SQLFence

JOB_HEADER = "Tenure-Job-Id"
TOKEN_HEADER = "Tenure-Fencing-Token"
OWNER_HEADER = "Tenure-Owner"
SCOPE_KEY = "tenure.fence"  # where the middleware leaves the admitted FenceClaim for the app

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Admit = Callable[[FenceClaim], object]  # raises StaleToken; may be a coroutine function

log = logging.getLogger("tenure.fencing")
_DIGITS = re.compile(r"[0-9]{1,19}")


def fencing_headers(lease: Lease | HeldLease) -> dict[str, str]:
    """Headers carrying the lease's job id, token and owner; a held lease is checked first."""
    if not isinstance(lease, (Lease, HeldLease)):
        raise InvalidArgument(f"expected a tenure.Lease or HeldLease, not {type(lease).__name__}")
    job_id, token, owner = claims.holder(lease)
    assert owner is not None  # a lease always names its owner
    return {JOB_HEADER: quote(job_id, safe=""), TOKEN_HEADER: str(token), OWNER_HEADER: quote(owner, safe="")}


def read_headers(headers: Mapping[str, str] | Iterable[tuple[bytes, bytes]]) -> tuple[str, int, str] | None:
    """(job id, token, owner) from request headers; None if none of the three is present.

    Takes a mapping of names to values or ASGI's list of (name, value) byte pairs. Some but
    not all of the headers, or a malformed one, raise ``InvalidArgument``.
    """
    if isinstance(headers, Mapping):
        pairs = [(str(k).lower(), str(v)) for k, v in headers.items()]
    else:
        pairs = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in headers]
    wanted = {JOB_HEADER.lower(): "", TOKEN_HEADER.lower(): "", OWNER_HEADER.lower(): ""}
    found = {k: v.strip() for k, v in pairs if k in wanted}
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
    """The default resource of a request: its path, so each URL is fenced on its own."""
    return str(scope.get("path") or "/")


class FencingMiddleware:
    """Pure ASGI 3 middleware: admit each request's token, or answer 4xx/5xx without the app.

    ``admit(claim)`` raises ``StaleToken`` for stale work (``sql_admitter`` builds one from
    a connection factory); a plain function runs in a worker thread. ``resource(scope)``
    names the fenced resource, or None to let a request through unfenced. Without fencing
    headers a request gets 428 when ``required``, else passes through unfenced.
    """

    def __init__(self, app: ASGIApp, admit: Admit, *, resource: Callable[[Scope], str | None] = path_resource,
                 shared: bool = False, required: bool = True) -> None:
        if not callable(app) or not callable(admit) or not callable(resource):
            raise InvalidArgument("app, admit and resource must be callables")
        self.app = app
        self.admit = admit
        self.resource = resource
        self.shared = shared
        self.required = required

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        name = self.resource(scope) if scope["type"] == "http" else None
        if name is None:
            await self.app(scope, receive, send)
            return
        try:
            found = read_headers(scope.get("headers") or [])
            if found is None:
                if self.required:
                    await _answer(send, 428, {"error": "fencing headers required",
                                              "headers": [JOB_HEADER, TOKEN_HEADER, OWNER_HEADER]})
                    return
                await self.app(scope, receive, send)
                return
            claim = FenceClaim(validation.resource(name), *found, shared=self.shared)
        except InvalidArgument as exc:
            await _answer(send, 400, {"error": str(exc)})
            return
        try:
            await self._admit(claim)
        except StaleToken as exc:
            await _answer(send, 409, {"error": "stale fencing token", "resource": exc.resource,
                                      "token": exc.token, "highest": exc.highest})
            return
        except LeaseError as exc:  # the fence cannot be checked: refuse rather than risk it
            log.warning("fence unavailable for %r: %s", claim.resource, exc)
            await _answer(send, 503, {"error": "fence unavailable"})
            return
        await self.app({**scope, SCOPE_KEY: claim}, receive, send)

    async def _admit(self, claim: FenceClaim) -> None:
        result = await asyncio.to_thread(self.admit, claim)  # a blocking fence stays off the loop
        if inspect.isawaitable(result):  # an async admit (or callable object) gave a coroutine
            await result


async def _answer(send: Send, status: int, body: dict[str, Any]) -> None:
    payload = json.dumps(body).encode("utf-8")
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(payload)).encode("ascii"))]})
    await send({"type": "http.response.body", "body": payload})


def sql_admitter(connect: Callable[[], Connection], *, table_prefix: str = DEFAULT_PREFIX,
                 on_reject: RejectHook | None = None) -> Callable[[FenceClaim], int]:
    """An ``admit`` for ``FencingMiddleware`` over an SQL fence, one connection per request.

    ``connect`` opens a new DB-API connection (``lambda: sqlite3.connect(path)``); the
    tables are created once, here.
    """
    if not callable(connect):
        raise InvalidArgument(f"connect must be callable, not {type(connect).__name__}")
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
