"""ZooKeeper specifics: URL options, the znode layout, foreign data, ACLs, audit retention."""

from __future__ import annotations

import concurrent.futures
import json
import threading
import time
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

import tenure
from devservers.zookeeper import ZooKeeperServer
from tenure.backends.zookeeper import layout as zl
from tests.servers.zookeeper import ZooKeeperHarness


def _kazoo(server: ZooKeeperServer, auth: str | None = None) -> KazooClient:
    client = KazooClient(hosts=server.hosts, auth_data=[("digest", auth)] if auth else None)
    client.start(timeout=10)
    return client


# -- URLs and options ---------------------------------------------------------------------------
@pytest.mark.parametrize(("suffix", "problem"), [
    ("", "at least one host"),
    ("h:99999/x", "port"),
    ("h/a//b", "root path"),
    ("h/a/../b", "root path"),
    ("h/x?session_timeout=0.01", "session_timeout"),
    ("h/x?session_timeout=abc", "session_timeout"),
    ("h/x?timeout=0", "timeout"),
    ("h/x?retention=0", "retention"),
    ("h/x?retention=1.5", "retention"),
    ("h/x?bogus=1", "bogus"),
    ("h/x?tls=maybe", "tls"),
    ("h/x?ca=/etc/ca.pem", "tls=true"),
    ("h/x?reader=nocolon", "reader"),
    ("u:p@h/x?reader=nocolon", "reader"),
    ("h/x?reader=dash:pw", "reader"),
    ("u@h/x", "username and a password"),
    ("h/x?repair_acl=true", "repair_acl needs credentials"),
    ("u:p@h/x?repair_acl=maybe", "repair_acl"),
])
def test_bad_urls_and_options_name_the_problem(suffix: str, problem: str) -> None:
    # Parsing happens before any connection: none of these hosts is ever contacted.
    with pytest.raises(tenure.InvalidArgument, match=problem):
        tenure.connect(f"zk://{suffix}")


def test_keyword_arguments_override_the_url(zk_server: ZooKeeperServer) -> None:
    with tenure.connect(f"zk://{zk_server.hosts}/kw?retention=5", retention=7, timeout=3) as store:
        assert store.backend.config.retention == 7  # type: ignore[attr-defined]
        assert store.backend.config.timeout == 3.0  # type: ignore[attr-defined]
    with pytest.raises(tenure.InvalidArgument, match="retention"):
        tenure.connect(f"zk://{zk_server.hosts}/kw", retention=-1)


def test_unreachable_server_is_backend_unavailable() -> None:
    from devservers.ports import free_port

    with pytest.raises(tenure.BackendUnavailable, match="cannot connect"):
        tenure.connect(f"zk://127.0.0.1:{free_port()}/x", timeout=0.5)


# -- layout: tokens are znode versions ------------------------------------------------------------
def test_token_is_the_generation_znode_version_and_renewals_keep_it(zk_harness: ZooKeeperHarness) -> None:
    with zk_harness.connect() as store:
        backend = store.backend
        client, layout = backend.client, backend.layout  # type: ignore[attr-defined]
        store.submit("j/1")
        job_ctime = client.exists(layout.job("j/1")).czxid
        tokens = []
        for _ in range(3):
            lease = store.claim("j/1", owner="a", ttl=zk_harness.ttl)
            assert client.exists(layout.gen("j/1")).version == lease.token
            store.renew(lease)
            store.renew(lease)  # renewals write the job znode, never the generation znode
            assert client.exists(layout.gen("j/1")).version == lease.token
            store.complete(lease)
            store.submit("j/1")  # a new run rewrites the job znode; it is never recreated
            tokens.append(lease.token)
        assert tokens == [1, 2, 3]
        assert client.exists(layout.job("j/1")).czxid == job_ctime


def test_lease_times_are_the_servers_clock_not_the_workers(tmp_path: object) -> None:
    # The server runs an hour ahead of this process: leases are stamped with its clock.
    from pathlib import Path

    server = ZooKeeperServer(Path(str(tmp_path)) / "ahead", wrapper=("faketime", "-f", "+3600s"))
    try:
        server.start()
        with tenure.connect(f"zk://{server.hosts}/clock") as store:
            lease = store.claim("j", owner="a", ttl=10.0)
            assert lease.expires_at - time.time() == pytest.approx(3610, abs=30)
            assert store.now() - time.time() == pytest.approx(3600, abs=30)
            status = store.get("j")
            assert status is not None and status.state is tenure.JobState.LEASED
    finally:
        server.kill()


# -- data tenure did not write ------------------------------------------------------------------
def test_foreign_znodes_are_corrupt_never_a_crash_never_overwritten(zk_harness: ZooKeeperHarness) -> None:
    with zk_harness.connect() as store:
        backend = store.backend
        client, layout = backend.client, backend.layout  # type: ignore[attr-defined]
        store.submit("good")
        foreign = {
            "not base64!": b"{}",
            zl.encode("json"): b"[1, 2]",
            zl.encode("alien"): json.dumps({"tenure": 1, "job_id": "someone else", "state": "pending",
                                             "token": 0, "runs": 1}).encode(),
            zl.encode("state"): json.dumps({"tenure": 1, "job_id": "state", "state": "corrupt",
                                             "token": 0, "runs": 1}).encode(),
            zl.encode("bytes"): b"\xff\xfe",
            zl.encode("deep"): b"[" * 100_000,  # deeper than Python recurses
            zl.encode("null"): None,  # no data at all (ZooKeeper's null), not even empty
        }
        for name, data in foreign.items():
            client.create(f"{layout.jobs}/{name}", data)
        client.create(f"{layout.rejections}/r-", b"garbage", sequence=True)
        client.create(f"{layout.events}/e-", b"garbage", sequence=True)

        listing = {j.job_id: j for j in store.jobs()}
        assert listing.pop("good").state is tenure.JobState.PENDING
        assert len(listing) == len(foreign)
        assert all(j.state is tenure.JobState.CORRUPT and j.problem and j.key for j in listing.values())
        assert (listing["bytes"].problem, listing["json"].problem) == ("the value is not JSON",
                                                                       "the value is not a JSON object")
        assert store.rejections() == [] and [e.job_id for e in store.history()] == ["good"]

        for job_id in ("json", "alien", "state", "bytes", "null"):
            with pytest.raises(tenure.CorruptRecord):
                store.claim(job_id, owner="b", ttl=zk_harness.ttl)
            with pytest.raises(tenure.CorruptRecord):
                store.submit(job_id)
            assert store.get(job_id).state is tenure.JobState.CORRUPT  # type: ignore[union-attr]
        for name, data in foreign.items():
            assert client.get(f"{layout.jobs}/{name}")[0] == data
        assert store.claim_next(owner="w", ttl=zk_harness.ttl).job_id == "good"  # type: ignore[union-attr]


def test_a_generation_znode_out_of_step_is_corrupt(zk_harness: ZooKeeperHarness) -> None:
    with zk_harness.connect() as store:
        client, layout = store.backend.client, store.backend.layout  # type: ignore[attr-defined]
        store.submit("j")
        client.set(layout.gen("j"), b"")  # someone else bumped the token counter
        with pytest.raises(tenure.CorruptRecord, match="generation"):
            store.claim("j", owner="a", ttl=zk_harness.ttl)
        assert store.get("j").token == 0  # type: ignore[union-attr]


def test_a_deleted_job_znode_does_not_reset_tokens(zk_harness: ZooKeeperHarness) -> None:
    with zk_harness.connect() as store:
        client, layout = store.backend.client, store.backend.layout  # type: ignore[attr-defined]
        first = store.claim("j", owner="a", ttl=zk_harness.ttl)
        client.delete(layout.job("j"))  # an operator cleaning up by hand
        assert store.claim("j", owner="b", ttl=zk_harness.ttl).token == first.token + 1


# -- audit -----------------------------------------------------------------------------------------
def test_audit_retention_is_bounded(zk_harness: ZooKeeperHarness) -> None:
    with zk_harness.connect(retention=5) as store:
        lease = store.claim("j", owner="a", ttl=zk_harness.ttl)
        for i in range(40):
            store.report_rejection("j", "a", lease.token, resource=f"r{i}", highest=lease.token + 1)
        assert store.backend.session.settled(30)  # type: ignore[attr-defined]  # trims run in the background
        kept = store.rejections()
        assert 5 <= len(kept) <= 10  # trimmed every few records, never below retention
        assert kept[-1].resource == "r39"


def test_stale_complete_is_audited_in_the_same_multi_as_the_check(zk_harness: ZooKeeperHarness) -> None:
    with zk_harness.connect() as store:
        client, layout = store.backend.client, store.backend.layout  # type: ignore[attr-defined]
        a = store.claim("j", owner="a", ttl=zk_harness.ttl)
        store.force_expire("j")
        store.claim("j", owner="b", ttl=zk_harness.ttl)
        with pytest.raises(tenure.StaleLease):
            store.complete(a)
        (segment,) = client.get_children(layout.rejections)
        (name,) = client.get_children(f"{layout.rejections}/{segment}")
        assert json.loads(client.get(f"{layout.rejections}/{segment}/{name}")[0])["token"] == a.token


# -- watch --------------------------------------------------------------------------------------
def test_watch_is_driven_by_zookeeper_watches_not_polling(zk_harness: ZooKeeperHarness) -> None:
    with zk_harness.connect() as store:
        client, layout = store.backend.client, store.backend.layout  # type: ignore[attr-defined]
        store.submit("doomed")
        stop = threading.Event()
        # 30 s between polls: only a ZooKeeper watch can deliver each change within 10 s.
        changes = store.watch(stop, interval=30)
        pool = concurrent.futures.ThreadPoolExecutor(1)
        try:
            assert pool.submit(next, changes).result(timeout=10).job.job_id == "doomed"
            store.claim("doomed", owner="a", ttl=zk_harness.ttl)
            assert pool.submit(next, changes).result(timeout=10).job.owner == "a"
            client.delete(layout.job("doomed"))
            assert pool.submit(next, changes).result(timeout=10).removed == "doomed"
        finally:
            stop.set()
            pool.shutdown(wait=False)


def test_watch_shows_a_job_znode_without_data_as_corrupt(zk_harness: ZooKeeperHarness) -> None:
    with zk_harness.connect() as store:
        client, layout = store.backend.client, store.backend.layout  # type: ignore[attr-defined]
        client.create(layout.job("null"), None)  # by hand: ZooKeeper's null data
        stop = threading.Event()
        changes = store.watch(stop, interval=30)
        pool = concurrent.futures.ThreadPoolExecutor(1)
        try:
            job = pool.submit(next, changes).result(timeout=10).job
            assert job is not None and (job.job_id, job.state) == ("null", tenure.JobState.CORRUPT)
        finally:
            stop.set()
            pool.shutdown(wait=False)


def test_watch_reports_what_the_stores_clock_changes_with_no_write(zk_harness: ZooKeeperHarness) -> None:
    """A scheduled job's time coming and a last lease running out change no znode: the idle
    watcher re-rates them (PENDING, PARKED) as it does leases that turn EXPIRED."""
    with zk_harness.connect() as store:
        store.submit("soon", delay=0.5)
        store.submit("last", max_attempts=1)
        store.claim("last", owner="a", ttl=0.5)
        stop = threading.Event()
        changes = store.watch(stop, interval=0.1)  # the idle re-rating runs every 0.1 s
        pool = concurrent.futures.ThreadPoolExecutor(1)
        try:
            seen = {c.job.job_id: c.job.state for c in (pool.submit(next, changes).result(timeout=10)
                                                        for _ in range(2)) if c.job}
            assert seen == {"soon": tenure.JobState.SCHEDULED, "last": tenure.JobState.LEASED}
            later = {c.job.job_id: c.job.state for c in (pool.submit(next, changes).result(timeout=10)
                                                         for _ in range(2)) if c.job}
            assert later == {"soon": tenure.JobState.PENDING, "last": tenure.JobState.PARKED}
        finally:
            stop.set()
            pool.shutdown(wait=False)


# -- security --------------------------------------------------------------------------------------
def test_other_identities_cannot_claim_renew_complete_or_delete(zk_server: ZooKeeperServer) -> None:
    url = f"zk://{zk_server.hosts}/secured-{time.time_ns()}"
    with tenure.connect(url, username="alice", password="s3cret", reader="dash:view") as alice:
        lease = alice.claim("j", owner="alice", ttl=10.0)
        for creds in ({"username": "mallory", "password": "guess"}, {}):
            with tenure.connect(url, **creds) as other:
                for call in (lambda: other.claim("j", owner="m", ttl=10.0),
                             lambda: other.renew(lease),
                             lambda: other.complete(lease),
                             lambda: other.submit("new")):
                    with pytest.raises(tenure.AuthenticationFailed):
                        call()
        raw = _kazoo(zk_server, "mallory:guess")
        try:
            layout = alice.backend.layout  # type: ignore[attr-defined]
            for path in (layout.job("j"), layout.gen("j")):
                with pytest.raises(NoAuthError):
                    raw.delete(path)
                with pytest.raises(NoAuthError):
                    raw.set(path, b"overwritten")
        finally:
            raw.stop()
            raw.close()
        with tenure.connect(url, username="dash", password="view") as dashboard:
            assert [(j.job_id, j.owner) for j in dashboard.jobs()] == [("j", "alice")]
            with pytest.raises(tenure.AuthenticationFailed):
                dashboard.claim("other", owner="dash", ttl=10.0)
        alice.complete(lease)
        assert alice.get("j").state is tenure.JobState.COMPLETED  # type: ignore[union-attr]


def test_a_root_anyone_can_change_is_refused_with_credentials_or_repaired(zk_server: ZooKeeperServer) -> None:
    url = f"zk://{zk_server.hosts}/opened-{time.time_ns()}"
    with tenure.connect(url) as anonymous:  # made without credentials: ZooKeeper's open ACL
        anonymous.submit("j")
        layout = anonymous.backend.layout  # type: ignore[attr-defined]
    with pytest.raises(tenure.InvalidArgument, match="open to anyone") as refused:
        tenure.connect(url, username="alice", password="s3cret")
    message = str(refused.value)
    assert f"{layout.gens} grants world:anyone:CDRWA" in message and "s3cret" not in message
    with tenure.connect(url, username="alice", password="s3cret", repair_acl=True) as alice:
        lease = alice.claim("j", owner="alice", ttl=10.0)  # the record from before, still readable
        assert lease.token == 1
        raw = _kazoo(zk_server)  # anonymous again, straight to ZooKeeper
        try:
            with pytest.raises(NoAuthError):
                raw.delete(layout.gen("j"))  # would reset the job's tokens
            with pytest.raises(NoAuthError):
                raw.set(layout.job("j"), b"forged")
            with pytest.raises(NoAuthError):
                raw.create(f"{layout.gens}/{zl.encode('new')}", b"")
            backend: Any = alice.backend
            for path in (layout.job("j"), layout.gen("j"), layout.gens, layout.root):
                assert backend.client.get_acls(path)[0] == backend.config.acl()
        finally:
            raw.stop()
            raw.close()
        alice.complete(lease)
    with tenure.connect(url, username="alice", password="s3cret") as again:  # repaired: accepted
        assert again.get("j").state is tenure.JobState.COMPLETED  # type: ignore[union-attr]


def test_health_reports_the_server(zk_harness: ZooKeeperHarness) -> None:
    with zk_harness.connect() as store:
        store.submit("j")
        health = store.health()
        assert health["mode"] == "standalone" and health["jobs"] == 1
        assert health["zxid"].startswith("0x") and health["store_time"] > 0


def test_tls_with_the_servers_certificate(zk_tls: tuple[ZooKeeperServer, object]) -> None:
    server, cert = zk_tls
    url = f"zk://127.0.0.1:{server.tls_port}/tls"
    with tenure.connect(url, tls=True, ca=str(cert)) as store:
        store.complete(store.claim("j", owner="a", ttl=10.0), result="over tls")
        assert store.get("j").result == b"over tls"  # type: ignore[union-attr]
        assert store.health()["jobs"] == 1
    with pytest.raises(tenure.BackendUnavailable):
        tenure.connect(url, timeout=1.0)  # plain text to the TLS port
    with pytest.raises(tenure.BackendUnavailable):
        tenure.connect(url, tls=True, timeout=1.0)  # a certificate nobody vouches for


def test_create_false_on_a_root_without_a_store_repairs_no_acl(zk_server: ZooKeeperServer) -> None:
    # With repair_acl, an open root holding no store must not be rewritten before the store is
    # found missing: create=false promises that nothing is written.
    root = f"/bare-{time.time_ns()}"
    raw = _kazoo(zk_server)
    try:
        raw.create(root, b"")  # ZooKeeper's open ACL, and no jobs/ under it
        before = raw.get_acls(root)[0]
        with pytest.raises(tenure.StoreNotFound):
            tenure.connect(f"zk://{zk_server.hosts}{root}", username="alice", password="s3cret",
                           repair_acl=True, create=False)
        assert raw.get_acls(root)[0] == before and raw.get_children(root) == []
    finally:
        raw.stop()
        raw.close()
