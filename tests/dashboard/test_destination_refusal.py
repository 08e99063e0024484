"""A write the destination refused, through a fence given the store, is on the dashboard's
Rejections page beside the store's own refusals (issue 26 item 15)."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import tenure
from tenure.fencing import SQLFence, StaleToken


def test_the_dashboard_shows_a_refusal_at_the_destination(tmp_path: Path, open_app: Callable[..., AppTest]) -> None:
    url = f"memory://refused-{uuid.uuid4().hex}"
    with tenure.connect(url) as store:
        a = store.claim("invoice-7", owner="worker-a", ttl=600.0)
        store.force_expire("invoice-7", token=a.token)
        b = store.claim("invoice-7", owner="worker-b", ttl=600.0)
        conn = sqlite3.connect(tmp_path / "ledger.db")
        ledger = SQLFence(conn, store=store)  # as the README's worker wires it
        with ledger.fenced("ledger/invoice-7", b):
            pass
        with pytest.raises(StaleToken), ledger.fenced("ledger/invoice-7", a):  # A's late write
            pass
        conn.close()
        at = open_app(url, "Rejections")
        at.multiselect(key="rj_kinds").set_value(["destination"]).run()
        [row] = at.dataframe[0].value.to_dict("records")
        assert (row["job"], row["op"], row["owner"], row["token"], row["current token"], row["resource"]) == (
            "invoice-7", "effect", "worker-a", a.token, b.token, "ledger/invoice-7")
