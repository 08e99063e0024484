"""AppTest fixtures: the real app file, run in-process against seeded memory and SQLite stores."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from tenure.dashboard import config, links
from tests.dashboard.seeding import Seeded, seeded

APP = str(Path(__file__).parents[2] / "tenure" / "dashboard" / "app.py")


@pytest.fixture(params=["memory", "sqlite"])
def seed(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Seeded]:
    s = seeded(request.param, tmp_path)
    yield s
    s.store.close()


@pytest.fixture
def open_app(monkeypatch: pytest.MonkeyPatch) -> Callable[..., AppTest]:
    """``open_app(url, view=..., admin_secret=...)``: the app after its first run."""

    def run(url: str, view: str = "Overview", admin_secret: str | None = None) -> AppTest:
        monkeypatch.setenv(config.URL_ENV, url)
        monkeypatch.setenv(config.REFRESH_ENV, "0")  # AppTest runs on demand; no timer needed
        if admin_secret is None:
            monkeypatch.delenv(config.ADMIN_SECRET_ENV, raising=False)
        else:
            monkeypatch.setenv(config.ADMIN_SECRET_ENV, admin_secret)
        at = AppTest.from_file(APP, default_timeout=30).run()
        if view != "Overview":
            goto(at, view)
        assert not at.exception, at.exception
        return at

    return run


def goto(at: AppTest, title: str, **query: str) -> AppTest:
    """Open the page titled ``title`` (``links.ROUTES``) with ``query`` as its query string."""
    at.query_params.clear()
    at.query_params.update(query)
    return at.switch_page(links.script(links.BY_TITLE[title].name)).run()


def texts(at: AppTest) -> str:
    """Everything the app sent to the browser, as text (labels, values, captions, tables)."""
    out: list[str] = []

    def walk(node: Any) -> None:
        proto = getattr(node, "proto", None)
        if proto is not None:
            out.append(str(proto))
        children = getattr(node, "children", None)
        if isinstance(children, dict):
            for child in children.values():
                walk(child)

    walk(at._tree)
    return "\n".join(out)


def plain(markdown: str) -> str:
    """Text the dashboard escaped for Markdown (``data.literal``), as the browser shows it."""
    return re.sub(r"\\(.)", r"\1", markdown)
