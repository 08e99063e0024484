"""Regenerate the dashboard pictures in docs/img from a seeded store, in headless Chromium.

    PYTHONPATH=. python scripts/dashboard_screenshots.py [--out docs/img] [--chromium /usr/bin/chromium]

Seeds a SQLite store with the story of ``tests/dashboard/seeding.py`` (worker A's lease
(token 1) runs out, B claims token 2, A's late completion and a ledger write are rejected), serves
it with ``tenure dashboard`` from the store's own directory as ``sqlite:///dash.db`` (so no
temporary path appears in a picture), and saves each page between two live refreshes.
Needs Playwright (``pip install playwright``) and a Chromium.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tenure.dashboard import launcher  # noqa: E402
from tests.dashboard.seeding import JOB, seeded  # noqa: E402
from tests.dashboard.settled import wait_settled  # noqa: E402

# picture -> (page path, text that shows the page has its data, height of the window in pixels)
PICTURES = {
    "dashboard.png": ("timeline", None, 560),  # the README's: the expiry timeline
    "dashboard-rejections.png": ("rejections", "superseded", 500),
    "dashboard-job.png": (f"job?job={JOB}", "renew", 900),  # the history's cells ...
    "dashboard-workers.png": ("workers", "worker-e", 480),
}
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--hide-scrollbars"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def shoot(out: Path, chromium: str) -> list[Path]:
    from playwright.sync_api import sync_playwright

    saved = []
    with tempfile.TemporaryDirectory(prefix="tenure-shots-") as tmp:
        seeded("sqlite", Path(tmp)).store.close()  # writes dash.db there
        port = _free_port()
        here = Path.cwd()
        os.chdir(tmp)  # the dashboard opens sqlite:///dash.db relative to its working directory
        try:
            proc = launcher.start("sqlite:///dash.db", port=port, refresh=5.0)
        finally:
            os.chdir(here)
        try:
            address = launcher.wait_ready(proc, "127.0.0.1", port, timeout=120)
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=chromium, args=ARGS, headless=True)
                page = browser.new_page(viewport={"width": 1400, "height": 640})
                for name, (path, text, height) in PICTURES.items():
                    page.set_viewport_size({"width": 1400, "height": height})
                    page.goto(f"{address}/{path}")
                    if text is None:  # the timeline, narrowed to the story's two minutes
                        slider = page.get_by_role("slider")
                        slider.wait_for(timeout=120_000)
                        slider.press("ArrowLeft")  # 5 -> 2 minutes
                        page.wait_for_function(
                            "() => document.querySelector('[data-testid=stSliderThumbValue]')?.textContent === '2'",
                            polling=100, timeout=120_000)
                        page.locator("[data-testid='stVegaLiteChart']").first.wait_for(timeout=120_000)
                    else:  # the grid's cells are in its accessibility table once drawn
                        page.wait_for_function("t => document.body.innerHTML.includes(t)", arg=text,
                                               polling=250, timeout=120_000)
                        if "job?" in path:  # ... and the rejections'
                            page.wait_for_function("() => document.body.innerHTML.includes('effect')",
                                                   polling=250, timeout=120_000)
                    wait_settled(page, timeout=120_000)  # between two live refreshes: not dimmed by a rerun
                    target = out / name
                    page.screenshot(path=str(target), full_page=True)
                    saved.append(target)
                browser.close()
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    return saved


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for path in shoot(args.out, args.chromium):
        print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
