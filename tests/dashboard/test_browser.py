"""The real thing: ``tenure dashboard``'s launcher serving a seeded store to headless Chromium.

Runs against SQLite and, through their harness fixtures, against etcd and ZooKeeper (they
skip until those backends' fixtures start real servers). Outside CI a missing Chromium or
Playwright skips; in CI (``CI=true``) it fails.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import tenure
from devservers.availability import in_ci
from devservers.ports import free_port
from tenure.dashboard import launcher
from tests.dashboard.seeding import JOB, seed_on_server, seeded
from tests.dashboard.settled import wait_settled
from tests.harness import Harness

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
# HOOK for server backends: each name here is a ``<name>_harness`` fixture (tests/servers/fixtures.py);
# the store is seeded with seed_on_server() because a server's clock cannot be moved.
BROWSER_BACKENDS = ["sqlite", "etcd", "zk", "postgres"]
SCREENSHOT_DIR_ENV = "TENURE_SCREENSHOT_DIR"  # also save the screenshots there (docs/img)
ADMIN_SECRET = "browser admin secret"
PAGE_ERRORS: dict[int, list[str]] = {}  # id(page) -> its scripts' uncaught errors and console errors


def _missing(reason: str) -> None:
    if in_ci():
        pytest.fail(f"{reason} (CI=true: a browser test that cannot run is a failure)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed")
    if not os.path.exists(CHROMIUM) and not shutil.which("chromium"):
        _missing(f"no Chromium at {CHROMIUM}")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM if os.path.exists(CHROMIUM) else
                              shutil.which("chromium"), args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture(params=BROWSER_BACKENDS)
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, tenure.Store]]:
    """The dashboard's address and a store (on the dashboard's clock) to write to."""
    with _serving(request, tmp_path) as found:
        yield found


@pytest.fixture(params=BROWSER_BACKENDS)
def served_admin(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, tenure.Store]]:
    """As ``served``, started with ``--admin`` and ``ADMIN_SECRET``."""
    with _serving(request, tmp_path, ADMIN_SECRET) as found:
        yield found


@contextlib.contextmanager
def _serving(request: pytest.FixtureRequest, tmp_path: Path,
             admin_secret: str | None = None) -> Iterator[tuple[str, tenure.Store]]:
    if request.param == "sqlite":
        seed = seeded("sqlite", tmp_path)
        seed.store.close()
        url, writer = seed.url, seed.writer()
    else:
        harness: Harness = request.getfixturevalue(f"{request.param}_harness")
        url = harness.url()
        writer = harness.connect(url)
        seed_on_server(writer, harness.ttl)
    port = free_port()
    proc = launcher.start(url, port=port, refresh=1.0, admin_secret=admin_secret)
    try:
        yield launcher.wait_ready(proc, "127.0.0.1", port, timeout=90), writer
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        writer.close()


def _html_has(page: object, text: str, timeout: float = 60_000) -> None:
    # st.dataframe draws cells on a canvas; their text is in the page's accessibility table.
    # Poll on a timer: headless Chromium throttles the animation frames Playwright polls by.
    try:
        page.wait_for_function("t => document.body.innerHTML.includes(t)",  # type: ignore[attr-defined]
                               arg=text, polling=250, timeout=timeout)
    except Exception as exc:  # say what the page showed instead (an error box, another page)
        shown = page.inner_text("body")[:2000]  # type: ignore[attr-defined]
        raise AssertionError(f"{text!r} not on {page.url} within {timeout / 1000:g} s; "  # type: ignore[attr-defined]
                             f"errors in the page: {_crashed(page)}; it shows:\n{shown}") from exc


def _save(page: object, tmp_path: Path, name: str) -> Path:
    wait_settled(page)  # so the picture is not dimmed by a rerun in progress
    path = tmp_path / name
    page.screenshot(path=str(path), full_page=True)  # type: ignore[attr-defined]
    target = os.environ.get(SCREENSHOT_DIR_ENV)
    if target:
        shutil.copy(path, Path(target) / name)
    return path


def _link_labels_cut_off(page: object) -> list[str]:
    """The Overview's page links whose text does not fit its box (the browser cuts it off)."""
    return page.eval_on_selector_all(  # type: ignore[attr-defined, no-any-return]
        "[data-testid=stMain] [data-testid=stPageLink] span",
        "spans => spans.filter(s => s.scrollWidth > s.clientWidth).map(s => s.textContent)")


def _new_page(browser: object, **options: object) -> object:
    """A page that keeps its scripts' uncaught errors and console errors (``_crashed``)."""
    page = browser.new_page(**options)  # type: ignore[attr-defined]
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)[:300]))
    page.on("console", lambda message: errors.append(message.text[:300]) if message.type == "error" else None)
    PAGE_ERRORS[id(page)] = errors
    return page


def _crashed(page: object) -> list[str]:
    return PAGE_ERRORS.get(id(page), [])


def _columns_in_view(page: object, grid: int) -> list[str]:
    """The headers of the columns a st.dataframe draws, wholly or in part, without scrolling:
    its accessibility table holds those alone (once the grid is drawn, which a grid below the
    fold may never be: it is scrolled into view first, vertically only). A refresh may replace
    the grid while it is being scrolled or read: then the new one is, until the deadline."""
    from playwright.sync_api import Error

    deadline, reloaded = time.monotonic() + 60, False
    while True:
        located = page.locator("[data-testid='stDataFrame']").nth(grid)  # type: ignore[attr-defined]
        try:
            located.scroll_into_view_if_needed(timeout=10_000)
            page.wait_for_function(  # type: ignore[attr-defined]
                "i => document.querySelectorAll('[data-testid=stDataFrame]')[i]?.querySelector('th')",
                arg=grid, polling=250, timeout=10_000)
            return located.evaluate(  # type: ignore[no-any-return]
                "g => [...g.querySelectorAll('th')].map(th => th.textContent)", timeout=10_000)
        except Error as exc:
            shown = page.inner_text("body").strip()  # type: ignore[attr-defined]
            if not shown and _crashed(page) and not reloaded:
                # The whole app went blank after an uncaught error in the page: the data grid's
                # "Maximum update depth exceeded" (streamlit/streamlit#7949, glide-data-grid#941)
                # unmounts Streamlit's React tree now and then; a reader reloads, so do we, once.
                reloaded = True
                page.reload()  # type: ignore[attr-defined]
                continue
            if time.monotonic() > deadline:
                raise AssertionError(f"grid {grid} not drawn on {page.url}; errors in the page: "  # type: ignore[attr-defined]
                                     f"{_crashed(page)}; it shows:\n{shown[:2000]}") from exc


# Who was refused with which token, and who holds which: in view, and a column beyond them
# drawn, so the last of them is not cut off at the grid's edge.
AUDIT_IN_VIEW = ["at", "job", "op", "owner", "token", "current owner", "current token", "reason"]


def _audit_fits(page: object, grid: int) -> None:
    shown = _columns_in_view(page, grid)
    assert shown[:len(AUDIT_IN_VIEW)] == AUDIT_IN_VIEW and len(shown) > len(AUDIT_IN_VIEW), shown


def _open_first_row(page: object) -> None:
    """Click the first row's selection cell of the page's first st.dataframe (a canvas)."""
    grid = page.locator("[data-testid='stDataFrame']").first  # type: ignore[attr-defined]
    grid.wait_for(timeout=60_000)
    box = grid.bounding_box()
    assert box is not None
    page.mouse.click(box["x"] + 12, box["y"] + 35 + 17)  # type: ignore[attr-defined]  # header, then row 1


def test_dashboard_in_a_real_browser(browser: object, served: tuple[str, tenure.Store],
                                     tmp_path: Path) -> None:
    address, writer = served
    page = _new_page(browser, viewport={"width": 1400, "height": 1000})
    page.goto(address)
    page.get_by_text("Rejections (1h)").wait_for(timeout=60_000)
    page.get_by_text("Workers: who holds what").wait_for(timeout=60_000)
    assert _link_labels_cut_off(page) == []

    sidebar = page.locator("[data-testid='stSidebar']")
    sidebar.get_by_text("Live leases", exact=True).click()
    page.wait_for_url("**/leases", timeout=60_000)
    _html_has(page, JOB)
    _html_has(page, "worker-b")
    sidebar.get_by_text("Store:").wait_for(timeout=60_000)  # the sidebar stays on every page

    sidebar.get_by_text("Expiry timeline", exact=True).click()
    page.locator("[data-testid='stVegaLiteChart']").first.wait_for(timeout=60_000)
    assert _save(page, tmp_path, "dashboard.png").stat().st_size > 10_000

    sidebar.get_by_text("Rejections", exact=True).click()
    page.wait_for_url("**/rejections", timeout=60_000)
    _html_has(page, "worker-a")
    _html_has(page, "complete")
    page.evaluate("window.__not_reloaded = true")
    writer.report_rejection(JOB, "worker-late", 1, resource="ledger/live-check", highest=2)
    # (The grid's accessibility table holds only the columns in view: look for the owner.)
    _html_has(page, "worker-late")  # the fragment refreshed itself ...
    assert page.evaluate("window.__not_reloaded === true")  # ... without reloading the page
    _audit_fits(page, 0)
    _save(page, tmp_path, "dashboard-rejections.png")

    _open_first_row(page)  # the newest rejection: worker-late's, on JOB
    page.wait_for_url(f"**/job?job={JOB}", timeout=60_000)
    page.get_by_text("Token", exact=True).wait_for(timeout=60_000)  # the CLI's word, not "Generation"
    _audit_fits(page, 1)  # under its history (scrolled into view: a grid below the fold draws nothing)
    _html_has(page, "worker-late", 120_000)  # this job's rejections

    page.goto(f"{address}/job?job=pending-1")  # a deep link, opened in a new page load ...
    page.get_by_text("pending", exact=True).wait_for(timeout=60_000)
    sidebar.get_by_text("Stuck leases", exact=True).wait_for(timeout=60_000)  # ... within the app
    page.goto(f"{address}/workers")
    _html_has(page, "worker-b")
    page.close()


# Front-end code the Overview must not need before its counts: Arrow and table code (st.table,
# st.dataframe), the emoji plugin (a time's ":58:" in Markdown) and the settings' widgets.
HEAVY_CHUNKS = ("arrowFormatUtils.", "Table.", "remark-emoji.", "NumberInput.", "Radio.")


@pytest.mark.parametrize("served", ["sqlite"], indirect=True)
def test_overview_loads_light_and_settings_open_on_demand(browser: object,
                                                          served: tuple[str, tenure.Store]) -> None:
    address, _ = served
    context = browser.new_context(timezone_id="Europe/Berlin")  # type: ignore[attr-defined]
    page = context.new_page()
    urls: list[str] = []
    page.on("request", lambda request: urls.append(request.url))
    page.goto(address)
    page.get_by_text("Backend health").wait_for(timeout=60_000)
    page.get_by_text("store_clock").wait_for(timeout=60_000)  # the facts, as a Markdown table
    clock = page.locator("strong").filter(has_text=" UTC")
    clock.wait_for(timeout=60_000)
    page.wait_for_timeout(1500)  # a live refresh or so: whatever the page asks for later is fetched
    assert [url for url in urls if url.rsplit("/", 1)[-1].startswith(HEAVY_CHUNKS)] == []
    # Nothing from elsewhere (the favicon was fonts.gstatic.com's): operators' networks may be closed.
    assert [url for url in urls if not url.startswith((address, "data:"))] == []

    sidebar = page.locator("[data-testid='stSidebar']")
    sidebar.get_by_text("Settings", exact=True).click()
    page.get_by_text("local", exact=True).click()
    page.keyboard.press("Escape")
    berlin = page.locator("strong").filter(has_text=re.compile(r" CES?T$"))
    berlin.wait_for(timeout=60_000)  # the browser's zone
    page.wait_for_timeout(1500)  # a live refresh with the popover closed keeps the choice
    assert berlin.count() == 1
    context.close()


@pytest.mark.parametrize("served_admin", ["sqlite", "zk"], indirect=True)  # a file and a server store
def test_the_parked_view_and_a_requeue_by_an_unlocked_admin(browser: object, served_admin: tuple[str, tenure.Store],
                                                            tmp_path: Path) -> None:
    address, writer = served_admin
    writer.submit("poison-7", max_attempts=1)
    writer.fail(writer.claim("poison-7", "worker-f", 30), "OOM: killed by the kernel")
    page = _new_page(browser, viewport={"width": 1400, "height": 1000})
    page.goto(address)
    page.get_by_text("Parked jobs (1)").wait_for(timeout=60_000)  # the Overview's link, with the count
    sidebar = page.locator("[data-testid='stSidebar']")
    sidebar.get_by_text("Parked jobs", exact=True).click()
    page.wait_for_url("**/parked", timeout=60_000)
    _html_has(page, "poison-7")
    _html_has(page, "OOM: killed by the kernel")  # its last error, in the grid's accessibility table
    _html_has(page, "1/1")  # its attempts, of those allowed
    _save(page, tmp_path, "dashboard-parked.png")

    _open_first_row(page)
    page.wait_for_url("**/job?job=poison-7", timeout=60_000)
    page.get_by_text("Attempts", exact=True).wait_for(timeout=60_000)
    page.set_default_timeout(60_000)  # the job page renders its parts one read after another: slow under load
    page.get_by_label("Admin secret").fill(ADMIN_SECRET)
    page.get_by_label("Admin secret").press("Enter")
    page.get_by_text("Admin actions unlocked").wait_for()
    page.get_by_role("button", name="Requeue job").click()
    page.get_by_role("button", name="Confirm requeue").click()
    page.get_by_text("recorded in its history").wait_for()
    job = writer.get("poison-7")
    assert job is not None and (job.state, job.attempts) == (tenure.JobState.PENDING, 0)
    last = writer.history("poison-7")[-1]
    assert (last.op, last.owner) == (tenure.Op.REQUEUE, "dashboard-admin")
    page.close()
