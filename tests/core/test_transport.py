"""Passwords and ZooKeeper digests sent without TLS: a warning at connect (never the secret), in
the store's health and on the dashboard's overview."""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable

import pytest
from streamlit.testing.v1 import AppTest

import tenure
from devservers.zookeeper import ZooKeeperServer
from tenure.backends.etcd import EtcdBackend
from tenure.backends.postgres import PostgresBackend
from tenure.backends.zookeeper import ZooKeeperBackend
from tenure.core.options import parse_url
from tenure.core.transport import cleartext_credentials
from tests.dashboard.conftest import open_app, texts  # noqa: F401 - the fixture, shared

SECRET = "s3cret-pw"
PG = PostgresBackend.characteristics
DIGEST = "dash-v13w"


def test_a_zookeeper_digest_without_tls_is_warned_about_without_the_secret(
        zk_server: ZooKeeperServer, caplog: pytest.LogCaptureFixture) -> None:
    url = f"zk://{zk_server.hosts}/cleartext-{time.time_ns()}"
    caplog.set_level(logging.WARNING)
    with pytest.warns(tenure.InsecureTransportWarning) as caught, \
            tenure.connect(url, username="alice", password=SECRET, reader=f"dash:{DIGEST}") as store:
        health = store.health()
    [warning] = [w for w in caught if w.category is tenure.InsecureTransportWarning]
    message = str(warning.message)
    assert "option password and option reader sent to zookeeper without TLS (TLS needs tls)" in message
    assert health["warnings"] == store.warnings[0] and "without TLS" in health["warnings"]
    assert "without TLS" in caplog.text
    for text in (message, caplog.text, str(health)):
        assert SECRET not in text and DIGEST not in text


def test_no_warning_without_credentials_or_for_local_stores(zk_server: ZooKeeperServer) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", tenure.InsecureTransportWarning)
        with tenure.connect(f"zk://{zk_server.hosts}/plain-{time.time_ns()}") as store:
            assert "warnings" not in store.health() and store.warnings == ()
        with tenure.connect(f"memory://operator:{SECRET}@local") as store:  # nothing crosses a network
            assert store.warnings == ()


@pytest.mark.parametrize(("traits", "url", "options", "expected"), [
    (EtcdBackend.characteristics, f"etcd://root:{SECRET}@h:2379/p", {},
     "the URL's password sent to etcd without TLS (TLS needs ca_cert)"),
    (EtcdBackend.characteristics, f"etcd://root:{SECRET}@h:2379/p", {"ca_cert": "/ca.pem"}, None),
    (EtcdBackend.characteristics, "etcd://h:2379/p", {"user": "root", "password": SECRET},
     "option password sent to etcd without TLS (TLS needs ca_cert)"),
    (ZooKeeperBackend.characteristics, f"zk://u:{SECRET}@h/r", {"tls": "false"},
     "the URL's password sent to zookeeper without TLS (TLS needs tls)"),
    (ZooKeeperBackend.characteristics, f"zk://u:{SECRET}@h/r?tls=true", {"tls": "true"}, None),
    (PG, f"postgresql://u:{SECRET}@h/db", {},
     "the URL's password sent to postgres without TLS (TLS needs sslmode=require or sslmode=verify-ca or "
     "sslmode=verify-full)"),
    *[(PG, f"postgresql://u:{SECRET}@h/db?sslmode={mode}", {"sslmode": mode},
       "the URL's password sent to postgres without TLS (TLS needs sslmode=require or sslmode=verify-ca or "
       "sslmode=verify-full)") for mode in ("disable", "allow", "prefer")],  # prefer/allow fall back to clear text
    *[(PG, f"postgresql://u:{SECRET}@h/db?sslmode={mode}", {"sslmode": mode}, None)
      for mode in ("require", "verify-ca", "verify-full")],
    (PG, "postgresql://u@h/db", {"password": SECRET, "sslmode": "prefer"},
     "option password sent to postgres without TLS (TLS needs sslmode=require or sslmode=verify-ca or "
     "sslmode=verify-full)"),
    (ZooKeeperBackend.characteristics, f"zk://u:{SECRET}@h/r", {"tls": "off"},
     "the URL's password sent to zookeeper without TLS (TLS needs tls)"),
    (EtcdBackend.characteristics, f"etcd://root:{SECRET}@h:2379/p", {"ca_cert": ""},
     "the URL's password sent to etcd without TLS (TLS needs ca_cert)"),
    (tenure.Characteristics("third-party", "?"), f"x://u:{SECRET}@h", {},
     "the URL's password sent to third-party without TLS (it has no TLS)"),
])
def test_which_connections_send_credentials_in_clear_text(traits: tenure.Characteristics, url: str,
                                                          options: dict[str, str], expected: str | None) -> None:
    assert cleartext_credentials(traits, parse_url(url), options, environ={}) == expected


NEEDS = "(TLS needs sslmode=require or sslmode=verify-ca or sslmode=verify-full)"


@pytest.mark.parametrize("url, options, environ, expected", [
    # libpq reads PGSSLMODE and PGPASSWORD when the URL does not give them.
    (f"postgresql://u:{SECRET}@h/db", {}, {"PGSSLMODE": "require"}, None),
    (f"postgresql://u:{SECRET}@h/db", {}, {"PGSSLMODE": "prefer"},
     f"the URL's password sent to postgres without TLS {NEEDS}"),
    (f"postgresql://u:{SECRET}@h/db?sslmode=disable", {"sslmode": "disable"}, {"PGSSLMODE": "verify-full"},
     f"the URL's password sent to postgres without TLS {NEEDS}"),  # the URL's sslmode wins
    ("postgresql://u@h/db", {}, {"PGPASSWORD": SECRET},
     f"PGPASSWORD from the environment sent to postgres without TLS {NEEDS}"),
    ("postgresql://u@h/db", {}, {"PGPASSWORD": SECRET, "PGSSLMODE": "verify-ca"}, None),
    ("postgresql://u@h/db", {"sslmode": "require"}, {"PGPASSWORD": SECRET}, None),
    ("postgresql://u@h/db", {}, {"PGPASSWORD": ""}, None),
])
def test_libpq_settings_from_the_environment_count(url: str, options: dict[str, str], environ: dict[str, str],
                                                   expected: str | None) -> None:
    assert cleartext_credentials(PG, parse_url(url), options, environ=environ) == expected
    if expected is not None:
        assert SECRET not in expected


def test_the_dashboard_overview_says_credentials_go_without_tls(
        zk_server: ZooKeeperServer, open_app: Callable[..., AppTest]) -> None:  # noqa: F811
    url = f"zk://alice:{SECRET}@{zk_server.hosts}/dash-{time.time_ns()}"
    with pytest.warns(tenure.InsecureTransportWarning):
        at = open_app(url)
    assert any("Insecure connection" in w.value and "without TLS" in w.value for w in at.warning)
    assert "without TLS" in texts(at) and SECRET not in texts(at)
