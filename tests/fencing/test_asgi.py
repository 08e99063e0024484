"""The middleware's choices that need no server: pass-through, async fences, other scopes."""

from __future__ import annotations

import asyncio
from typing import Any

import tenure
from tenure.fencing import FenceClaim, FencingMiddleware, fencing_headers

LEASE = tenure.Lease(job_id="job", owner="w", token=5, expires_at=0.0, ttl=1.0)


async def app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": repr(scope.get("tenure.fence")).encode()})


def call(middleware: FencingMiddleware, headers: dict[str, str], kind: str = "http") -> list[Any]:
    sent: list[Any] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": kind, "path": "/doc", "headers": [(k.lower().encode(), v.encode())
                                                       for k, v in headers.items()]}
    asyncio.run(middleware(scope, receive, send))
    return sent


def test_an_async_fence_is_awaited_and_its_claim_reaches_the_app() -> None:
    seen: list[FenceClaim] = []

    async def admit(claim: FenceClaim) -> None:
        seen.append(claim)
        if claim.token < 6:
            raise tenure.StaleToken(claim.resource, claim.token, 6)

    stale = call(FencingMiddleware(app, admit), fencing_headers(LEASE))
    assert stale[0]["status"] == 409
    current = call(FencingMiddleware(app, admit), fencing_headers(
        tenure.Lease(job_id="job", owner="w", token=6, expires_at=0.0, ttl=1.0)))
    assert current[0]["status"] == 200
    assert current[1]["body"].decode() == repr(seen[-1])
    assert [(c.resource, c.job_id, c.owner, c.token) for c in seen] == [("/doc", "job", "w", 5),
                                                                          ("/doc", "job", "w", 6)]


def test_without_headers_a_request_is_refused_or_passed_through_unfenced() -> None:
    calls: list[FenceClaim] = []
    assert call(FencingMiddleware(app, calls.append), {})[0]["status"] == 428
    relaxed = call(FencingMiddleware(app, calls.append, required=False), {})
    assert (relaxed[0]["status"], relaxed[1]["body"]) == (200, b"None")
    assert calls == []


def test_other_scopes_are_not_fenced() -> None:
    calls: list[FenceClaim] = []
    assert call(FencingMiddleware(app, calls.append), {}, kind="lifespan") == []
    assert calls == []
