"""What a fence's ``Proof(store=...)`` relies on, on every backend: a job's status names the
token and owner of its running lease, and its history names who claimed each earlier token,
so a token above the current one, or one claimed by someone else, was never issued to its
presenter, and one whose lease ended is stale."""

from __future__ import annotations

import pytest

import tenure
from tenure.fencing import Proof
from tenure.fencing.claims import FenceClaim
from tests.harness import Harness


def test_the_store_proves_the_tokens_it_issued_and_no_other(harness: Harness, store: tenure.Store) -> None:
    proof = Proof(store=store)
    a = store.claim("j", owner="a", ttl=harness.short_ttl)
    harness.expire(store, a)
    b = store.claim("j", owner="b", ttl=harness.ttl)
    proof.check(FenceClaim("r", "j", b.token, "b"), None)
    with pytest.raises(tenure.StaleToken, match=f"superseded by token {b.token}"):
        proof.check(FenceClaim("r", "j", a.token, "a"), None)  # issued to a, but its lease is over
    for claim, why in ((FenceClaim("r", "j", b.token + 1, "b"), "above the store's current token"),
                       (FenceClaim("r", "j", b.token, "a"), "issued this token to another owner"),
                       (FenceClaim("r", "j", a.token, "b"), "issued this token to another owner"),
                       (FenceClaim("r", "never", 1, "a"), "never issued")):
        with pytest.raises(tenure.ForgedToken, match=why):
            proof.check(claim, None)
    store.complete(b)
    with pytest.raises(tenure.StaleToken, match="its lease has ended"):
        proof.check(FenceClaim("r", "j", b.token, "b"), None)  # completed: no effect may land under it
