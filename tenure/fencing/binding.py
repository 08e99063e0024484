"""What a signed HTTP proof is bound to: the request's method, its normal path (mount prefix
included, query string not) and, when the sender signs it, its body's SHA-256.

The sender's side is ``signed_request``; the receiver's is ``bound_request`` (the request as its
headers declare it, checked against the signature first, so an unsigned sender cannot make the
fence read and hash a body) and then ``matching_body``, which reads a signed body whole to check
its digest and hands the app the same bytes afterwards.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import unquote, urlsplit

from tenure.core.errors import InvalidArgument, quoted
from tenure.fencing import proof
from tenure.fencing.paths import normal_path
from tenure.fencing.proof import Request

BODY_DIGEST_HEADER = "Tenure-Body-Digest"  # "sha256=" and the hex digest: the signature covers the body
DIGEST_PREFIX = "sha256="
MAX_SIGNED_BODY = 16 * 1024 * 1024  # a body the middleware reads whole to check its digest; larger: 413

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]


class Unsigned(Exception):
    """A request its signature cannot cover: refused and reported like an unproven token."""

    def __init__(self, status: int, why: str) -> None:
        super().__init__(why)
        self.status, self.why = status, why


class Unread(Unsigned):
    """A request whose method or body could not be read: answered, not reported."""


def signed_request(method: str, path: str, body: bytes | None = None) -> Request:
    """What a sender signs: ``method``, the normal form of ``path`` (a path or a URL, as sent:
    percent-escapes decoded once, as the server does) and the body's digest when given."""
    for name, value in (("method", method), ("path", path)):
        if not isinstance(value, str):
            raise InvalidArgument(f"{name} must be a str, not {type(value).__name__}")
    try:
        sent = unquote(urlsplit(path).path, errors="strict")
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidArgument(f"request path {quoted(path)} is not a URL path of UTF-8 text: {exc}") from exc
    return Request(method, normal_path(sent), "" if body is None else proof.body_digest(body))


def request_path(scope: Scope) -> str:
    """The normal form of the whole path the client asked for, mount prefix included: what a
    bound signature covers (a server may or may not have left ``root_path`` in ``path``)."""
    path, root = str(scope.get("path") or "/"), str(scope.get("root_path") or "").rstrip("/")
    if root and not (path == root or path.startswith(root + "/")):
        path = root + path
    return normal_path(path)


def bound_request(scope: Scope, digests: list[str], signed_body: bool) -> Request:
    """The request a signature must be bound to, as its headers declare it (``digests``: its
    ``Tenure-Body-Digest`` values); the body is read only once the signature is checked
    (``matching_body``). Raises ``Unsigned`` to refuse the request, ``Unread`` for input that
    is not a request."""
    try:
        path = request_path(scope)
    except InvalidArgument as exc:  # a resource= of the app's own named a path with no normal form
        raise Unsigned(400, str(exc)) from exc
    method = str(scope.get("method") or "")
    if not proof.METHOD.fullmatch(method):
        raise Unread(400, f"request method {quoted(method)} is not an HTTP method")
    if not digests:
        if signed_body:
            raise Unsigned(403, "the body is not signed")
        return Request(method, path)
    try:
        if len(digests) > 1 or not digests[0].startswith(DIGEST_PREFIX):
            raise InvalidArgument("not one digest")
        return Request(method, path, digests[0][len(DIGEST_PREFIX):])
    except InvalidArgument:
        raise Unread(400, f"{BODY_DIGEST_HEADER} must be given once, as {DIGEST_PREFIX}<hex SHA-256>") from None


async def matching_body(request: Request, receive: Receive) -> Receive:
    """After the signature over ``request`` was checked: a ``receive`` that gives the app the
    body read here, once it is the one whose digest was signed (else ``Unsigned``)."""
    if not request.body_digest:
        return receive
    body = await _whole_body(receive)
    if proof.body_digest(body) != request.body_digest:
        raise Unsigned(403, "the body is not the one signed")
    return _replay(body, receive)


async def _whole_body(receive: Receive) -> bytes:
    chunks, size, more = [], 0, True
    while more:
        message = await receive()
        if message.get("type") != "http.request":  # the client went away
            raise Unread(400, "the request body ended early")
        chunk = bytes(message.get("body") or b"")
        size += len(chunk)
        if size > MAX_SIGNED_BODY:
            raise Unread(413, f"a signed body is read whole to check its digest: at most {MAX_SIGNED_BODY} bytes")
        chunks.append(chunk)
        more = bool(message.get("more_body"))
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the app the body already read, then the server's own messages."""
    pending: list[MutableMapping[str, Any]] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> MutableMapping[str, Any]:
        return pending.pop() if pending else await receive()

    return replayed
