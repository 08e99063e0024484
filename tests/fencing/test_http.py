"""HTTP fencing over real HTTP on loopback: uvicorn serving the middleware, httpx sending."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn

import tenure
from tenure import Op, RejectionKind
from tenure.fencing import SCOPE_KEY, FenceClaim, FencingMiddleware, SQLFence, fencing_headers, forward_to
from tenure.fencing.http import sql_admitter
from tests.fencing.databases import Database

TABLE = "CREATE TABLE documents (id TEXT PRIMARY KEY, body TEXT, token BIGINT, job_id TEXT, owner TEXT)"
WRITE = ("INSERT INTO documents (id, body, token, job_id, owner) VALUES ('report', ?, ?, ?, ?) "
         "ON CONFLICT (id) DO UPDATE SET body = excluded.body, token = excluded.token, "
         "job_id = excluded.job_id, owner = excluded.owner")


def documents_app(db: Database) -> Any:
    """A receiver that writes the request body under the fence, with the middleware's claim."""

    def write(claim: FenceClaim, body: str) -> None:
        conn = db.connect()
        try:
            with SQLFence(conn, create=False).fenced(claim.resource, claim.token, job_id=claim.job_id,
                                                     owner=claim.owner) as cur:
                cur.execute(db.q(WRITE), (body, claim.token, claim.job_id, claim.owner))
        finally:
            conn.close()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        await asyncio.to_thread(write, scope[SCOPE_KEY], body.decode())
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"written"})

    return app


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[tuple[uvicorn.Server, threading.Thread]] = []

    def start(app: Any) -> str:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        servers.append((server, thread))
        deadline = time.monotonic() + 20
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)  # polling for the server thread to bind; no timing is asserted
        return f"http://127.0.0.1:{sock.getsockname()[1]}"

    yield start
    for server, thread in servers:
        server.should_exit = True
        thread.join(timeout=10)


def test_the_middleware_answers_409_to_stale_work_and_admits_current_work(db: Database, serve: Any) -> None:
    clock = tenure.ManualClock()
    store = tenure.connect(f"memory://http-{uuid.uuid4().hex}", clock=clock)
    db.execute(TABLE)
    admit = sql_admitter(db.connect, on_reject=forward_to(store))
    url = serve(FencingMiddleware(documents_app(db), admit))

    store.submit("jöb/42 ✓")  # any Unicode job id travels in the percent-encoded headers
    a = store.claim("jöb/42 ✓", owner="wörker-a", ttl=10.0)
    clock.advance(10.5)  # A pauses past its TTL
    b = store.claim("jöb/42 ✓", owner="worker-b", ttl=10.0)
    with httpx.Client(base_url=url, timeout=20) as client:
        current = client.post("/documents/report", content=b"B's report", headers=fencing_headers(b))
        stale = client.post("/documents/report", content=b"A's late report", headers=fencing_headers(a))
        bare = client.post("/documents/report", content=b"no lease")
        broken = client.post("/documents/report", content=b"?",
                             headers={**fencing_headers(b), "Tenure-Fencing-Token": "eight"})

    assert (current.status_code, current.text) == (200, "written")
    assert stale.status_code == 409
    assert stale.json() == {"error": "stale fencing token", "resource": "/documents/report",
                            "token": a.token, "highest": b.token}
    assert bare.status_code == 428
    assert broken.status_code == 400 and "decimal integer" in broken.json()["error"]
    assert db.rows("SELECT body, token, job_id, owner FROM documents") == [
        ("B's report", b.token, "jöb/42 ✓", "worker-b")]
    [audited] = store.rejections()
    assert (audited.kind, audited.op, audited.owner, audited.token, audited.resource) == (
        RejectionKind.DESTINATION, Op.EFFECT, "wörker-a", a.token, "/documents/report")
    store.close()


def test_unfenced_paths_pass_through_and_an_unreachable_fence_refuses(serve: Any) -> None:
    def broken_fence(claim: FenceClaim) -> None:
        raise tenure.BackendUnavailable("the fence database is down")

    async def hello(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": str(SCOPE_KEY in scope).encode()})

    def only_documents(scope: Any) -> str | None:
        path = str(scope["path"])
        return path if path.startswith("/documents/") else None

    url = serve(FencingMiddleware(hello, broken_fence, resource=only_documents))
    lease = tenure.Lease(job_id="j", owner="w", token=1, expires_at=0.0, ttl=1.0)
    with httpx.Client(base_url=url, timeout=20) as client:
        health = client.get("/health")
        refused = client.post("/documents/x", headers=fencing_headers(lease))
    assert (health.status_code, health.text) == (200, "False")  # served, and never fenced
    assert refused.status_code == 503
