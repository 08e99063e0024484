"""A signed proof is bound to its request (method, normal path and, when signed, body): captured
headers replayed on another resource, method or body are refused; the old unbound form only
where the sender and the fence both ask for it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import tenure
from tenure.fencing import (
    BODY_DIGEST_HEADER,
    SIGNATURE_HEADER,
    FenceClaim,
    FenceRejection,
    FencingMiddleware,
    Proof,
    Request,
    fencing_headers,
    signed_request,
)
from tests.fencing.test_asgi import LEASE, SECRET, call


async def echo(scope: Any, receive: Any, send: Any) -> None:
    """An app that answers with the body it received."""
    body, more = b"", True
    while more:
        message = await receive()
        body, more = body + message.get("body", b""), message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})


def fence(heard: list[FenceRejection], **options: Any) -> FencingMiddleware:
    return FencingMiddleware(echo, lambda claim: None, secret=SECRET, on_reject=heard.append, **options)


def error(sent: list[Any]) -> tuple[int, str]:
    return int(sent[0]["status"]), str(json.loads(sent[1]["body"]).get("error"))


def test_a_proof_replayed_on_another_path_or_method_is_refused() -> None:
    heard: list[FenceRejection] = []
    captured = fencing_headers(LEASE, secret=SECRET, method="POST", path="/accounts/42")
    assert call(fence(heard), captured, path="/accounts/42")[0]["status"] == 200
    assert call(fence(heard), captured, path="//accounts/42/")[0]["status"] == 200  # the same resource
    assert error(call(fence(heard), captured, path="/accounts/43")) == (403, "unproven token: bad signature")
    assert error(call(fence(heard), captured, path="/accounts/42", method="DELETE")) == (
        403, "unproven token: bad signature")
    assert [(r.resource, r.reason) for r in heard] == [("/accounts/43", "unproven token: bad signature"),
                                                       ("/accounts/42", "unproven token: bad signature")]


def test_a_signed_body_is_checked_and_still_reaches_the_app() -> None:
    heard: list[FenceRejection] = []
    captured = fencing_headers(LEASE, secret=SECRET, method="POST", path="/doc", body=b'{"debit": 5}')
    assert captured[BODY_DIGEST_HEADER].startswith("sha256=")
    sent = call(fence(heard), captured, body=b'{"debit": 5}')
    assert (sent[0]["status"], sent[1]["body"]) == (200, b'{"debit": 5}')
    assert error(call(fence(heard), captured, body=b'{"debit": 500}')) == (
        403, "unproven token: the body is not the one signed")
    stripped = {k: v for k, v in captured.items() if k != BODY_DIGEST_HEADER}  # the signature covers the digest
    assert error(call(fence(heard), stripped, body=b'{"debit": 500}')) == (403, "unproven token: bad signature")
    unsigned_body = fencing_headers(LEASE, secret=SECRET, method="POST", path="/doc")
    assert call(fence(heard), unsigned_body, body=b"anything")[0]["status"] == 200
    assert error(call(fence(heard, signed_body=True), unsigned_body, body=b"anything")) == (
        403, "unproven token: the body is not signed")
    assert error(call(fence(heard), {**captured, BODY_DIGEST_HEADER: "md5=00"})) == (
        400, f"{BODY_DIGEST_HEADER} must be given once, as sha256=<hex SHA-256>")


def test_the_old_unbound_form_only_when_both_sides_ask() -> None:
    heard: list[FenceRejection] = []
    with pytest.raises(tenure.InvalidArgument, match="bound to the request it is for"):
        fencing_headers(LEASE, secret=SECRET)
    with pytest.raises(tenure.InvalidArgument, match="bound to the request it is for"):
        tenure.fencing.sign(SECRET, "job", "w", 5)
    old = fencing_headers(LEASE, secret=SECRET, unbound=True)
    assert old[SIGNATURE_HEADER].startswith("v1=")
    assert error(call(fence(heard), old)) == (
        403, "unproven token: an unbound signature (v1): this fence takes only signatures bound to the request (v2)")
    for path in ("/doc", "/elsewhere"):  # valid on every resource: why it is not the default
        assert call(fence(heard, unbound=True), old, path=path)[0]["status"] == 200
    bound = fencing_headers(LEASE, secret=SECRET, method="PUT", path="/doc")
    assert call(fence(heard, unbound=True), bound, method="PUT")[0]["status"] == 200
    assert error(call(fence(heard, unbound=True), bound, path="/elsewhere", method="PUT"))[0] == 403


def test_the_sender_signs_the_path_the_server_sees() -> None:
    heard: list[FenceRejection] = []
    url = fencing_headers(LEASE, secret=SECRET, method="post", path="https://ledger.internal/v1/d%6Fc/?page=2")
    assert call(fence(heard), url, path="/v1/doc", root_path="/v1")[0]["status"] == 200
    assert call(fence(heard), url, path="/doc", root_path="/v1")[0]["status"] == 200  # root_path stripped or not
    assert call(fence(heard), url, path="/doc")[0]["status"] == 403  # not mounted: another path
    assert signed_request("post", "https://h/v1/d%6Fc/?page=2") == Request("POST", "/v1/doc")
    with pytest.raises(tenure.InvalidArgument, match=r"'\.' or '\.\.' segments"):
        signed_request("POST", "/a/../b")


def test_a_bound_signature_needs_its_request() -> None:
    claim = FenceClaim("/doc", "job", 5, owner="w")
    given = tenure.fencing.signature(LEASE, SECRET, request=Request("POST", "/doc"))
    Proof(secret=SECRET).check(claim, given, Request("POST", "/doc"))
    with pytest.raises(tenure.ForgedToken, match="no request to check it against"):
        Proof(secret=SECRET).check(claim, given)
    with pytest.raises(tenure.ForgedToken, match="bad signature"):
        Proof(secret=SECRET).check(claim, given, Request("POST", "/doc", "0" * 64))


@pytest.mark.parametrize(("options", "message"), [
    ({"method": b"POST", "path": "/doc"}, "method must be a str, not bytes"),
    ({"method": "POST", "path": b"/doc"}, "path must be a str, not bytes"),
    ({"method": "POST", "path": 42}, "path must be a str, not int"),
    ({"method": "POST", "path": "/doc", "unbound": "no"}, "unbound must be a bool, not str"),
])
def test_what_is_signed_is_checked_not_converted(options: dict[str, Any], message: str) -> None:
    """str(b"POST") is "b'POST'", a method no server is sent: it is refused, not signed."""
    with pytest.raises(tenure.InvalidArgument, match=message):
        fencing_headers(LEASE, secret=SECRET, **options)


def test_a_signature_is_good_for_every_spelling_of_its_normal_path_as_the_docs_say() -> None:
    heard: list[FenceRejection] = []
    captured = fencing_headers(LEASE, secret=SECRET, method="PUT", path="/files/a/b")
    for spelling in ("/files/a/b", "//files/a/b/", "/files/a\\b"):  # one normal path: one signature
        assert call(fence(heard), captured, path=spelling, method="PUT")[0]["status"] == 200
    text = " ".join((Path(__file__).resolve().parents[2] / "docs" / "fencing.md").read_text().split())
    assert ("one made for `/files/a/b` is good for `//files/a/b/` and for `/files/a\\b` too") in text
    assert "any spelling of the path with the same normal form, below, is the same path to a signature" in text


def test_the_upgrade_the_docs_give_admits_both_forms_midway() -> None:
    heard: list[FenceRejection] = []
    midway = fence(heard, unbound=True)  # step 1: the destination takes both forms
    old, new = fencing_headers(LEASE, secret=SECRET, unbound=True), signed_for("POST", "/doc")
    assert [call(midway, h)[0]["status"] for h in (old, new)] == [200, 200]
    assert error(call(fence(heard), old))[0] == 403  # step 3: v1 refused once unbound=True is dropped
    text = " ".join((Path(__file__).resolve().parents[2] / "docs" / "fencing.md").read_text().split())
    assert ("So move in three steps: the destinations first, with `unbound=True` (they take both forms); "
            "then the senders, passing `method=` and `path=`; then drop `unbound=True`.") in text


def signed_for(method: str, path: str) -> dict[str, str]:
    return fencing_headers(LEASE, secret=SECRET, method=method, path=path)


def test_a_fence_that_requires_signed_bodies_takes_no_unbound_signature() -> None:
    """An unbound signature covers no body: with one, a digest the sender adds of its own body
    would pass for a signed body."""
    with pytest.raises(tenure.InvalidArgument, match="an unbound signature signs no body"):
        fence([], unbound=True, signed_body=True)
    text = " ".join((Path(__file__).resolve().parents[2] / "docs" / "fencing.md").read_text().split())
    assert "it cannot be combined with `unbound=True`: an unbound signature signs no body" in text


def test_a_body_is_read_only_once_its_signature_is_good() -> None:
    # A sender without the secret must not make the fence read (up to 16 MiB) and hash a body.
    heard: list[FenceRejection] = []
    captured = fencing_headers(LEASE, secret=SECRET, method="POST", path="/doc", body=b"signed")
    forged = {**captured, SIGNATURE_HEADER: "0" * 64}
    read: list[int] = []

    async def counting(scope: Any, receive: Any, send: Any) -> None:
        async def counted() -> Any:
            read.append(1)
            return await receive()
        await fence(heard)(scope, counted, send)

    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def never() -> Any:
        raise AssertionError("the body was read before the signature was checked")

    scope = {"type": "http", "method": "POST", "path": "/doc", "root_path": "",
             "headers": [(k.lower().encode(), v.encode()) for k, v in forged.items()]}
    asyncio.run(counting(scope, never, send))
    assert error(sent) == (403, "unproven token: bad signature") and read == []
