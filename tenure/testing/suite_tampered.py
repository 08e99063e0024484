"""Records tenure did not write (a migration, a bad restore, a person), planted through the
``plant_raw_record`` hook, one case per kind of tampering the backend can hold: never a phantom
job, a raw exception or a blocked queue."""

from __future__ import annotations

import pytest

import tenure
from tenure.core.validation import LAST_TOKEN
from tenure.testing.kit import Kit, Tampering

CORRUPTING = [t for t in Tampering if t is not Tampering.LAST_TOKEN]
NAMEABLE = {Tampering.UNREADABLE, Tampering.TOP_TOKEN}  # the id is still one a caller can give


class TamperedRecordTests:
    @pytest.mark.parametrize("tampering", CORRUPTING, ids=str)
    def test_a_tampered_record_is_corrupt_passed_over_and_never_touched(
            self, kit: Kit, store: tenure.Store, tampering: Tampering) -> None:
        kit.plant(store, "tampered", tampering)  # ahead of "good" in the queue
        store.submit("good")
        (bad,) = [j for j in store.jobs() if j.job_id != "good"]
        assert bad.state is tenure.JobState.CORRUPT and bad.problem and bad.key
        assert bad.job_id.isprintable() and len(bad.job_id) < 100  # shown escaped: never binary or a line break
        assert [j.job_id for j in store.page(states=["corrupt"]).jobs] == [bad.job_id]
        lease = store.claim_next(owner="w", ttl=kit.ttl)  # passed over: no phantom job, no error
        assert lease is not None and lease.job_id == "good"
        assert store.claim_next(owner="w", ttl=kit.ttl) is None
        store.complete(lease)
        if tampering in NAMEABLE:
            for call in (lambda: store.claim("tampered", owner="w", ttl=kit.ttl), lambda: store.submit("tampered"),
                         lambda: store.force_expire("tampered")):
                with pytest.raises(tenure.CorruptRecord) as caught:
                    call()
                message = str(caught.value)  # which job and what is wrong, never a raw value
                assert "tampered" in message and caught.value.problem in message
                assert message.isprintable() and len(message) < 300
            assert store.get("tampered").state is tenure.JobState.CORRUPT  # type: ignore[union-attr]
        assert [j for j in store.jobs() if j.job_id != "good"] == [bad]  # never overwritten

    def test_a_token_at_the_top_of_its_range_refuses_a_claim_and_writes_nothing(
            self, kit: Kit, store: tenure.Store) -> None:
        kit.plant(store, "last", Tampering.LAST_TOKEN)
        store.submit("good")
        before, history = store.get("last"), store.history("last")
        assert before is not None and before.state is tenure.JobState.PENDING and before.token == LAST_TOKEN
        lease = store.claim_next(owner="w", ttl=kit.ttl)  # passed over, the queue behind it served
        assert lease is not None and lease.job_id == "good"
        assert store.claim_next(owner="w", ttl=kit.ttl) is None
        with pytest.raises(tenure.TokensExhausted, match=f"job 'last' cannot be claimed again: its token {LAST_TOKEN}"):
            store.claim("last", owner="w", ttl=kit.ttl)
        assert store.get("last") == before and store.history("last") == history
