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
from tenure.fencing import (
    SCOPE_KEY,
    SIGNATURE_HEADER,
    FenceClaim,
    FencingMiddleware,
    SQLFence,
    fencing_headers,
    forward_to,
)
from tenure.fencing.http import sql_admitter
from tests.fencing.databases import Database

SECRET = "the ledger's fencing secret"
REPORT = "/documents/report"


def signed(lease: tenure.Lease, secret: str = SECRET, path: str = REPORT) -> dict[str, str]:
    """The headers of a POST to ``path``, signed for it."""
    return fencing_headers(lease, secret=secret, method="POST", path=path)
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
    url = serve(FencingMiddleware(documents_app(db), admit, secret=SECRET))

    store.submit("jöb/42 ✓")  # any Unicode job id travels in the percent-encoded headers
    a = store.claim("jöb/42 ✓", owner="wörker-a", ttl=10.0)
    clock.advance(10.5)  # A pauses past its TTL
    b = store.claim("jöb/42 ✓", owner="worker-b", ttl=10.0)
    with httpx.Client(base_url=url, timeout=20) as client:
        current = client.post("/documents/report", content=b"B's report", headers=signed(b))
        stale = client.post("/documents/report", content=b"A's late report",
                            headers=signed(a))
        bare = client.post("/documents/report", content=b"no lease")
        broken = client.post("/documents/report", content=b"?",
                             headers={**signed(b), "Tenure-Fencing-Token": "eight"})

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

    url = serve(FencingMiddleware(hello, broken_fence, secret=SECRET, resource=only_documents))
    lease = tenure.Lease(job_id="j", owner="w", token=1, expires_at=0.0, ttl=1.0)
    with httpx.Client(base_url=url, timeout=20) as client:
        health = client.get("/health")
        refused = client.post("/documents/x", headers=signed(lease, path="/documents/x"))
    assert (health.status_code, health.text) == (200, "False")  # served, and never fenced
    assert refused.status_code == 503


def test_forged_tokens_are_refused_and_audited_and_other_spellings_reach_the_same_fence(
        db: Database, serve: Any) -> None:
    """The review's attack: a forged token 2**63-1 must not lock the real holder out, and a stale
    writer must not reach a fresh fence key with a trailing slash or a doubled slash."""
    clock = tenure.ManualClock()
    store = tenure.connect(f"memory://http-{uuid.uuid4().hex}", clock=clock)
    db.execute(TABLE)
    audit = forward_to(store)
    url = serve(FencingMiddleware(documents_app(db), sql_admitter(db.connect, on_reject=audit), secret=SECRET,
                                  on_reject=audit))
    a = store.claim("job-42", owner="worker-a", ttl=10.0)
    clock.advance(10.5)
    b = store.claim("job-42", owner="worker-b", ttl=10.0)
    top = tenure.Lease(job_id="job-42", owner="mallory", token=2**63 - 1, expires_at=0.0, ttl=1.0)
    forged = {
        "unsigned": fencing_headers(top),
        "made-up signature": {**fencing_headers(top), SIGNATURE_HEADER: "v2=" + "0" * 64},
        "signed with another secret": signed(top, secret="not the ledger's secret"),
        "b's signature on a higher token": {**fencing_headers(top), SIGNATURE_HEADER: signed(b)[SIGNATURE_HEADER]},
    }
    with httpx.Client(base_url=url, timeout=20) as client:
        refused = {name: client.post("/documents/report", content=b"forged", headers=headers)
                   for name, headers in forged.items()}
        current = client.post("/documents/report", content=b"B's report", headers=signed(b))
        # raw paths: httpx would read "//documents" as a host name
        respelled = [client.post(httpx.URL(url).copy_with(raw_path=path), content=b"A's late report",
                                 headers=signed(a))
                     for path in (b"/documents/report/", b"//documents//report", b"/documents/r%65port//")]

    assert {name: r.status_code for name, r in refused.items()} == dict.fromkeys(forged, 403)
    assert refused["unsigned"].json() == {"error": "unproven token: no signature"}
    assert refused["made-up signature"].json() == {"error": "unproven token: bad signature"}
    assert current.status_code == 200  # the forged 2**63-1 was never admitted
    assert [r.status_code for r in respelled] == [409, 409, 409]
    assert all(r.json()["resource"] == "/documents/report" for r in respelled)
    assert db.rows("SELECT body, token FROM documents") == [("B's report", b.token)]
    audited = store.rejections()
    unproven = [r for r in audited if r.reason.startswith("unproven token")]
    assert [(r.owner, r.token, r.resource, r.kind) for r in unproven] == [
        ("mallory", 2**63 - 1, "/documents/report", RejectionKind.DESTINATION)] * len(forged)
    stale = [r for r in audited if r not in unproven]
    assert [(r.owner, r.token, r.current_token, r.resource) for r in stale] == [
        ("worker-a", a.token, b.token, "/documents/report")] * 3
    store.close()
