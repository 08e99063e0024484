"""A 3-node ensemble losing its leader while leases are held, and a new leader whose clock
runs ahead. Reclaim times are printed (run with ``-s``); docs/backends/zookeeper.md has them."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

import tenure
from devservers.zookeeper import Ensemble
from tenure import Op

pytestmark = pytest.mark.cluster
TTL = 3.0


def _retry(call: Callable[[], tenure.Lease | None]) -> tenure.Lease | None:
    """The lease, or None if the job is held; retries while the ensemble elects a leader."""
    while True:
        try:
            return call()
        except tenure.AlreadyClaimed:
            return None
        except tenure.BackendUnavailable:
            time.sleep(0.05)  # no quorum yet: the election is under way


def _assert_one_holder_at_a_time(store: tenure.Store, job_id: str) -> None:
    """By the store's history: each claim comes after the previous lease ended."""
    holder_until: float | None = None
    token = 0
    for e in store.history(job_id):
        if e.op is Op.CLAIM:
            assert e.token > token, f"{job_id}: token {e.token} after {token}"
            assert holder_until is None or e.at >= holder_until, f"{job_id}: claimed while held"
            token, holder_until = e.token, e.expires_at
        elif e.op in (Op.RENEW, Op.EXPIRE) and e.token == token:
            holder_until = e.expires_at
        elif e.op in (Op.COMPLETE, Op.RELEASE) and e.token == token:
            holder_until = None


def test_leader_killed_while_leases_are_held(zk_ensemble: Ensemble) -> None:
    url = f"zk://{zk_ensemble.hosts}/failover"
    with tenure.connect(url, session_timeout=4) as alive, tenure.connect(url, session_timeout=4) as other:
        held = [alive.hold(f"alive-{i}", owner="alive", ttl=TTL) for i in range(3)]
        with tenure.connect(url) as dying:
            dead = [dying.claim(f"dead-{i}", owner="dying", ttl=TTL) for i in range(3)]
        # ``dying`` closed without releasing: its leases end only by the store's clock.
        leader = zk_ensemble.leader()
        started = time.monotonic()
        leader.kill()
        first_write = reclaimed = None
        taken: dict[str, tenure.Lease] = {}
        while len(taken) < len(dead):
            assert time.monotonic() - started < 60, "dead leases never reclaimed"
            for lease in dead:
                if lease.job_id not in taken:
                    won = _retry(lambda lease=lease: other.claim(lease.job_id, owner="other", ttl=TTL))
                    first_write = first_write or time.monotonic()
                    if won is not None:
                        assert won.token == lease.token + 1
                        taken[lease.job_id] = won
            for h in held:  # never while its holder keeps renewing through the new leader
                assert _retry(lambda h=h: other.claim(h.job_id, owner="other", ttl=TTL)) is None
            time.sleep(0.05)  # pacing the claim attempts
        reclaimed = time.monotonic()
        assert first_write is not None
        print(f"\nleader sid {leader.sid} killed: writes again after {first_write - started:.2f}s,"
              f" dead holder's leases (ttl {TTL:g}s) reclaimed after {reclaimed - started:.2f}s")
        for h in held:
            assert not h.lost.is_set(), h.lost_reason
            h.complete()
        for job_id in [h.job_id for h in held] + [lease.job_id for lease in dead]:
            _assert_one_holder_at_a_time(other, job_id)


def _serving(store: tenure.Store) -> float:
    """The store's time once the ensemble has a leader again."""
    while True:
        try:
            return store.now()
        except tenure.BackendUnavailable:
            time.sleep(0.05)  # no quorum yet: the election is under way


def test_a_new_leader_with_a_clock_ahead_judges_no_lease_an_earlier_leader_stamped(tmp_path: Path) -> None:
    # Member 3 runs 30 s ahead. 1 and 2 start first and elect 2; 3 joins as a follower.
    # Killing 2 leaves 1 and 3, and 3 wins the election (same zxid, higher id).
    ensemble = Ensemble(tmp_path, wrappers={3: ("faketime", "-f", "+30s")})
    try:
        ensemble.start((1, 2))
        ensemble.start((3,))
        assert ensemble.leader().sid == 2
        url = f"zk://{ensemble.hosts}/skew"
        with tenure.connect(url, session_timeout=4) as a, tenure.connect(url, session_timeout=4) as b:
            claimed, renewed, completed, expired = (a.claim(j, owner="a", ttl=10.0) for j in "jrcf")
            ensemble.in_step()  # else a member that applied more wins whatever its id
            ensemble.server(2).kill()
            if ensemble.leader().sid != 3:
                pytest.fail("the skewed member did not become leader; the test set-up is wrong")
            # By the new leader's clock every lease ran out 20 s ago; nothing may believe it.
            assert _serving(b) > claimed.expires_at + 15
            assert _retry(lambda: b.claim("j", owner="b", ttl=10.0)) is None
            status = b.get("j")
            assert status is not None and status.expires_at is not None
            assert status.expires_at > b.now() + 5  # re-stamped: a full TTL on the new clock
            a.renew(claimed)  # the holder carries on through the new leader
            with pytest.raises(tenure.AlreadyClaimed):
                b.claim("j", owner="b", ttl=10.0)
            # The holder's renew and complete before any claim re-stamped those leases: ``b``
            # has no record of them, so they take the path that judges expiry on the leader's
            # clock (as the holder's own would after a restart or a pause of a second).
            b.renew(renewed)
            with pytest.raises(tenure.AlreadyClaimed):
                b.claim("r", owner="b", ttl=10.0)
            b.complete(completed)
            assert b.get("c").state is tenure.JobState.COMPLETED  # type: ignore[union-attr]
            # An operator's force_expire ends a lease the new clock would call over already.
            b.force_expire("f", token=expired.token, actor="operator")
            assert b.claim("f", owner="b", ttl=10.0).token == expired.token + 1
            assert b.rejections() == []
    finally:
        ensemble.close()


def test_claim_next_under_a_new_leader_with_a_clock_ahead_re_stamps_the_leases_it_passes_over(
        tmp_path: Path) -> None:
    # As above: member 3, 30 s ahead, becomes leader. claim_next meets the earlier leader's
    # leases (expired by the new clock) in its index, passes over them, takes the pending job
    # and re-stamps them in the same commit (``read_facts``).
    ensemble = Ensemble(tmp_path, wrappers={3: ("faketime", "-f", "+30s")})
    try:
        ensemble.start((1, 2))
        ensemble.start((3,))
        url = f"zk://{ensemble.hosts}/skew-next"
        with tenure.connect(url, session_timeout=4) as a, tenure.connect(url, session_timeout=4) as b:
            held = [a.claim(j, owner="a", ttl=10.0) for j in "xy"]
            a.submit("z")
            ensemble.in_step()  # else a member that applied more wins whatever its id
            ensemble.server(2).kill()
            if ensemble.leader().sid != 3:
                pytest.fail("the skewed member did not become leader; the test set-up is wrong")
            assert _serving(b) > held[0].expires_at + 15
            taken = _retry(lambda: b.claim_next(owner="b", ttl=10.0))
            assert taken is not None and taken.job_id == "z"
            for lease in held:
                status = b.get(lease.job_id)
                assert status is not None and status.owner == "a" and status.expires_at is not None
                assert status.expires_at > b.now() + 5  # re-stamped: a full TTL on the new clock
            assert b.claim_next(owner="b", ttl=10.0) is None
            for lease in held:
                a.renew(lease)
            assert b.rejections() == []
    finally:
        ensemble.close()
