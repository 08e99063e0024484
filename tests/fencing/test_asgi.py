"""The middleware's choices that need no server: pass-through, async fences, other scopes."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

import tenure
from tenure.fencing import (
    FenceClaim,
    FenceRejection,
    FencingMiddleware,
    Proof,
    fencing_headers,
    forward_to,
    normal_path,
    sign,
    signature,
)

LEASE = tenure.Lease(job_id="job", owner="w", token=5, expires_at=0.0, ttl=1.0)
SECRET = "a shared fencing secret"


def signed(lease: tenure.Lease, path: str = "/doc", method: str = "POST") -> dict[str, str]:
    """The headers of a request to ``path``, signed for it with the fence's secret."""
    return fencing_headers(lease, secret=SECRET, method=method, path=path)


async def app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": repr(scope.get("tenure.fence")).encode()})


def call(middleware: FencingMiddleware, headers: dict[str, str], kind: str = "http", path: str = "/doc",
         root_path: str = "", method: str = "POST", body: bytes = b"") -> list[Any]:
    """The messages ``middleware`` sends for one request; the body arrives in two parts."""
    sent: list[Any] = []
    parts = [body[:len(body) // 2], body[len(body) // 2:]]

    async def receive() -> dict[str, Any]:
        if not parts:
            return {"type": "http.disconnect"}
        return {"type": "http.request", "body": parts.pop(0), "more_body": bool(parts)}

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": kind, "method": method, "path": path, "root_path": root_path,
             "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]}
    asyncio.run(middleware(scope, receive, send))
    return sent


def test_an_async_fence_is_awaited_and_its_claim_reaches_the_app() -> None:
    seen: list[FenceClaim] = []

    async def admit(claim: FenceClaim) -> None:
        seen.append(claim)
        if claim.token < 6:
            raise tenure.StaleToken(claim.resource, claim.token, 6)

    stale = call(FencingMiddleware(app, admit, secret=SECRET), signed(LEASE))
    assert stale[0]["status"] == 409
    current = call(FencingMiddleware(app, admit, secret=SECRET), signed(
        tenure.Lease(job_id="job", owner="w", token=6, expires_at=0.0, ttl=1.0)))
    assert current[0]["status"] == 200
    assert current[1]["body"].decode() == repr(seen[-1])
    assert [(c.resource, c.job_id, c.owner, c.token) for c in seen] == [("/doc", "job", "w", 5),
                                                                          ("/doc", "job", "w", 6)]


def test_without_headers_a_request_is_refused_or_passed_through_unfenced() -> None:
    calls: list[FenceClaim] = []
    assert call(FencingMiddleware(app, calls.append, secret=SECRET), {})[0]["status"] == 428
    relaxed = call(FencingMiddleware(app, calls.append, secret=SECRET, required=False), {})
    assert (relaxed[0]["status"], relaxed[1]["body"]) == (200, b"None")
    assert calls == []


def test_other_scopes_are_not_fenced() -> None:
    calls: list[FenceClaim] = []
    assert call(FencingMiddleware(app, calls.append, secret=SECRET), {}, kind="lifespan") == []
    assert calls == []


@pytest.mark.parametrize(("path", "root_path", "expected"), [
    ("/accounts/42", "", "/accounts/42"),
    ("/accounts/42/", "", "/accounts/42"),
    ("//accounts///42//", "", "/accounts/42"),
    ("/accounts\\42", "", "/accounts/42"),
    ("/v1/accounts/42", "/v1", "/accounts/42"),  # servers that keep the mount prefix in path ...
    ("/accounts/42", "/v1", "/accounts/42"),  # ... and those that strip it
    ("/v1", "/v1/", "/"),
    ("/v10/accounts", "/v1", "/v10/accounts"),  # a prefix only at a segment boundary
    ("/caf\u0065\u0301", "", "/caf\u00e9"),  # composed Unicode
    ("", "", "/"),
])
def test_one_normal_path_per_resource(path: str, root_path: str, expected: str) -> None:
    assert normal_path(path, root_path) == expected


@pytest.mark.parametrize(("path", "message"), [
    ("/accounts/42/../43", "'.' or '..' segments"),
    ("/accounts/./42", "'.' or '..' segments"),
    ("/accounts%2F42", "still percent-encoded"),  # the server decoded %252F once
    ("/a\x00b", "control character"),
    ("/" + "r" * 300, "resource must be 1 to 256"),
])
def test_a_path_without_a_normal_form_is_refused_and_audited(path: str, message: str) -> None:
    heard: list[FenceRejection] = []
    admitted: list[FenceClaim] = []
    sent = call(FencingMiddleware(app, admitted.append, secret=SECRET, on_reject=heard.append),
                signed(LEASE), path=path)
    assert sent[0]["status"] == 400 and message in json.loads(sent[1]["body"])["error"]
    assert admitted == []
    [rejection] = heard
    assert (rejection.resource, rejection.job_id, rejection.owner, rejection.token) == (
        "(unnormalised path)", "job", "w", 5)
    assert rejection.reason.startswith("unnormalised path: ") and message in rejection.reason


def test_a_mounted_app_fences_the_path_below_its_mount() -> None:
    seen: list[FenceClaim] = []
    for path, root, asked in (("/v1/doc/", "/v1", "/v1/doc"), ("/doc", "/v1", "/v1/doc"), ("/doc", "", "/doc")):
        assert call(FencingMiddleware(app, seen.append, secret=SECRET), signed(LEASE, asked),
                    path=path, root_path=root)[0]["status"] == 200
    assert {c.resource for c in seen} == {"/doc"}


def test_the_store_proves_tokens_it_issued() -> None:
    clock = tenure.ManualClock()
    with tenure.connect(f"memory://proof-{uuid.uuid4().hex}", clock=clock) as store:
        old = store.claim("job", owner="w", ttl=5.0)
        clock.advance(6)
        current = store.claim("job", owner="v", ttl=5.0)
        heard: list[FenceRejection] = []
        fence = FencingMiddleware(app, lambda claim: None, store=store, on_reject=heard.append)

        def status(job: str, owner: str, token: int) -> int:
            lease = tenure.Lease(job_id=job, owner=owner, token=token, expires_at=0.0, ttl=1.0)
            return int(call(fence, fencing_headers(lease))[0]["status"])

        assert status("job", "v", current.token) == 200
        assert status("job", "w", old.token) == 409  # issued to w, but superseded: its effects must not land
        assert status("job", "mallory", old.token) == 403  # an old token, claimed by someone else
        assert status("job", "mallory", current.token + 1) == 403
        assert status("job", "mallory", current.token) == 403  # the current token, another owner
        assert status("never-claimed", "mallory", 1) == 403
    assert [r.reason for r in heard] == [
        f"ended lease: token {old.token} for '/doc' is stale: superseded by token {current.token}",
        "unproven token: the store issued this token to another owner",
        "unproven token: above the store's current token for this job",
        "unproven token: the store issued this token to another owner",
        "unproven token: the store has never issued a token for this job"]
    assert [r.highest for r in heard] == [current.token, 0, 0, 0, 0]


@pytest.mark.parametrize("end", ["complete", "release", "expire", "force_expire"])
def test_a_token_whose_lease_ended_gets_409_and_is_audited(end: str) -> None:
    """The token is the job's current one and its owner presents it, but the lease under it was
    completed, released or ran out: the store's word refuses it (409), and the refusal reaches
    the audit, since the fence behind never saw it."""
    clock = tenure.ManualClock()
    with tenure.connect(f"memory://ended-{uuid.uuid4().hex}", clock=clock) as store:
        lease = store.claim("job", owner="w", ttl=5.0)
        admitted: list[FenceClaim] = []
        fence = FencingMiddleware(app, admitted.append, store=store, on_reject=forward_to(store))
        assert call(fence, fencing_headers(lease))[0]["status"] == 200
        if end == "complete":
            store.complete(lease)
        elif end == "release":
            store.release(lease)
        elif end == "expire":
            clock.advance(6)
        else:
            store.force_expire("job", token=lease.token)
        sent = call(fence, fencing_headers(lease))
        body = json.loads(sent[1]["body"])
        assert sent[0]["status"] == 409 and body["error"] == "stale fencing token"
        assert (body["token"], body["highest"]) == (lease.token, lease.token)
        assert len(admitted) == 1  # only the write made while the lease ran
        [audited] = store.rejections()
        assert (audited.kind, audited.owner, audited.token, audited.resource) == (
            tenure.RejectionKind.DESTINATION, "w", lease.token, "/doc")
        assert audited.reason.startswith("ended lease: ")


def test_the_store_proof_needs_the_owner() -> None:
    with tenure.connect(f"memory://owner-{uuid.uuid4().hex}") as store:
        lease = store.claim("job", owner="w", ttl=5.0)
        claim = FenceClaim("/doc", "job", lease.token, owner=None)
        with pytest.raises(tenure.ForgedToken, match="needs the owner"):
            Proof(store=store).check(claim, None)


def test_a_fence_needs_a_proof_and_a_real_secret() -> None:
    with pytest.raises(tenure.InvalidArgument, match="needs a proof"):
        FencingMiddleware(app, lambda claim: None)
    with pytest.raises(tenure.InvalidArgument, match="at least 16 bytes"):
        FencingMiddleware(app, lambda claim: None, secret="short")
    with pytest.raises(tenure.InvalidArgument, match="at least 16 bytes"):
        fencing_headers(LEASE, secret=b"", method="POST", path="/doc")


def test_signatures_bind_job_owner_and_token() -> None:
    base = sign(SECRET, "job", "w", 5, unbound=True)
    assert base.startswith("v1=") and len(base) == 67 and base == signature(LEASE, SECRET, unbound=True)
    others = {sign(SECRET, "job", "w", 6, unbound=True), sign(SECRET, "jo", "bw", 5, unbound=True),
              sign(SECRET, "job", "x", 5, unbound=True), sign(SECRET + "!", "job", "w", 5, unbound=True)}
    assert base not in others and len(others) == 4
    assert SECRET not in base


def test_fencing_headers_given_twice_are_refused() -> None:
    admitted: list[FenceClaim] = []
    scope_headers = [(k.lower().encode(), v.encode()) for k, v in signed(LEASE).items()]
    sent: list[Any] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    twice = [*scope_headers, (b"tenure-fencing-token", b"6")]
    asyncio.run(FencingMiddleware(app, admitted.append, secret=SECRET)(
        {"type": "http", "path": "/doc", "headers": twice}, receive, send))
    assert sent[0]["status"] == 400 and b"more than once" in sent[1]["body"] and admitted == []


def test_the_store_proof_reads_an_old_tokens_history_once() -> None:
    # A stale holder that keeps writing (a worker that does not check its lease) would make
    # every request read the job's history, which etcd and ZooKeeper read whole; who a token
    # was issued to never changes, so the answer is kept. A made-up token is read every time.
    with tenure.connect(f"memory://history-{uuid.uuid4().hex}") as store:
        old = store.claim("job", owner="w", ttl=5.0)
        store.force_expire("job")
        store.claim("job", owner="x", ttl=5.0)
        reads: list[str] = []
        history = store.history
        store.history = lambda job_id=None, **kw: reads.append(job_id) or history(job_id, **kw)  # type: ignore[method-assign]
        proof = Proof(store=store)
        for _ in range(3):
            with pytest.raises(tenure.StaleToken):
                proof.check(FenceClaim("/doc", "job", old.token, owner="w"), None)
            with pytest.raises(tenure.ForgedToken, match="another owner"):
                proof.check(FenceClaim("/doc", "job", old.token, owner="mallory"), None)
        assert reads == ["job"]
        store.force_expire("job")
        store.claim("job", owner="y", ttl=5.0)  # token 3: token 2 is old now, and new to the proof
        with pytest.raises(tenure.StaleToken):
            proof.check(FenceClaim("/doc", "job", old.token + 1, owner="x"), None)
        assert reads == ["job", "job"]


def test_refusals_of_unproven_requests_reach_the_audit_at_a_bounded_rate(caplog: pytest.LogCaptureFixture) -> None:
    """Anonymous requests with a made-up job, owner and signature cost the audit at most
    ``unproven_per_minute`` records a minute; what is left out is counted and said. A sender
    whose signature verified is audited every time."""
    clock = tenure.ManualClock()
    with tenure.connect(f"memory://flood-{uuid.uuid4().hex}") as store:
        lease = store.claim("job", owner="w", ttl=60.0)
        fence = FencingMiddleware(app, lambda claim: None, secret=SECRET, store=store, clock=clock)
        made_up = tenure.Lease("made-up", "nobody", 1, 0.0, 1.0)
        forged = {**signed(made_up), "Tenure-Fencing-Signature": "v2=" + "0" * 64}
        for _ in range(30):
            assert call(fence, forged)[0]["status"] == 403
        assert len(store.rejections()) == 10  # the bucket, full at the start, and no more
        assert "not recorded in the audit: over 10 unproven refusals a minute, 20 not recorded so far" in caplog.text
        above = tenure.Lease("job", "w", lease.token + 1, 0.0, 1.0)  # signed with the secret: an insider's
        assert call(fence, signed(above))[0]["status"] == 403
        store.release(lease)
        assert call(fence, signed(lease))[0]["status"] == 409  # signed, its lease ended
        assert call(fence, forged)[0]["status"] == 403  # the bucket is still empty
        clock.advance(6.0)  # 10 a minute: room for one more
        assert call(fence, forged)[0]["status"] == 403
        reasons = [r.reason for r in store.rejections()]
    assert len(reasons) == 13
    assert reasons[10:] == ["unproven token: above the store's current token for this job",
                            f"ended lease: token {lease.token} for '/doc' is stale: its lease has ended (the job is "
                            "pending)",
                            "unproven token: bad signature (21 more unproven refusals not recorded)"]
    doc = " ".join((Path(__file__).resolve().parents[2] / "docs" / "fencing.md").read_text().split())
    assert "are reported at most 10 a minute per middleware (`unproven_per_minute=10`" in doc
    assert "`not recorded in the audit: over 10 unproven refusals a minute, N not recorded so far`" in doc
    assert "ends its reason with `(N more unproven refusals not recorded)`" in doc


def test_with_the_store_alone_a_made_up_token_is_unproven_and_its_budget_is_the_fences_own() -> None:
    clock = tenure.ManualClock()
    with tenure.connect(f"memory://store-only-{uuid.uuid4().hex}") as store:
        fence = FencingMiddleware(app, lambda claim: None, store=store, unproven_per_minute=2, clock=clock)
        for _ in range(5):
            assert call(fence, fencing_headers(tenure.Lease("made-up", "nobody", 1, 0.0, 1.0)))[0]["status"] == 403
        assert len(store.rejections()) == 2
        with pytest.raises(tenure.InvalidArgument, match="unproven_per_minute must be a positive int"):
            FencingMiddleware(app, lambda claim: None, store=store, unproven_per_minute=0)
