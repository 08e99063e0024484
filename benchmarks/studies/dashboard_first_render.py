"""The dashboard's first render in Chromium, A/B against another checkout and the Streamlit floor.

    PYTHONPATH=. python benchmarks/studies/dashboard_first_render.py [--backends sqlite,etcd,zk]
        [--jobs 100000] [--rounds 6] [--against DIR]

For each backend it seeds a store as ``dashboard_scale.py`` does and serves, side by side:
the bare Streamlit app that shows one number (``dashboard_bare_app.py``, the floor), this
checkout's dashboard, and with ``--against`` the dashboard of another source tree (for example
``git archive main | tar -x -C /tmp/main``). Each round visits every app, in an order that
rotates from round to round (the machine is shared and its load drifts): a new browser context
(an empty cache: "cold"), then a second load in that context ("warm": the browser's cache holds
Streamlit's content-hashed front-end files). A page load is timed from the navigation's start to
the moment the "Rejections (1h)" metric has its value in the page, recorded in the page by a
MutationObserver (not by polling from outside, whose interval would be added). Beside it: the
CPU time of the page's renderer main thread (from /proc: less sensitive to the machine's load
than the wall clock) and, for the first counted cold load, the files the page fetched within 3 s
of its counts. The first round
of each app is not counted: its server imports the app then.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.dashboard_scale import BARE_APP, CHROMIUM_ARGS, seeded_store  # noqa: E402
from devservers.ports import free_port  # noqa: E402
from tenure.dashboard import launcher  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
# Records in window.__counts the time (ms since navigation start) at which the
# "Rejections (1h)" metric first has its value in the page.
WATCH = """
(() => {
  const seen = () => [...document.querySelectorAll('[data-testid="stMetric"]')].some(
      m => m.textContent.includes('Rejections (1h)') && m.querySelector('[data-testid="stMetricValue"]'));
  new MutationObserver((_, observer) => {
    if (window.__counts === undefined && seen()) { window.__counts = performance.now(); observer.disconnect(); }
  }).observe(document, {subtree: true, childList: true, characterData: true});
})();
"""


@contextmanager
def serve(url: str, app: Path, pythonpath: Path | None = None) -> Iterator[str]:
    """A dashboard server for ``app``; ``pythonpath``: the source tree it imports tenure from."""
    port = free_port()
    env = launcher.environment(url, admin_secret=None, refresh=1.0)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env["PYTHONPATH"]])
    # In the tree's directory: ``python -m`` puts the working directory first on sys.path.
    proc = subprocess.Popen(launcher.command(port, "127.0.0.1", app), env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, cwd=pythonpath or ROOT)
    try:
        yield launcher.wait_ready(proc, "127.0.0.1", port, timeout=120)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _renderer_cpu() -> dict[int, float]:
    """CPU seconds of the main thread of each Chromium renderer this process started."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents.setdefault(int(stat[stat.rindex(")") + 2:].split()[1]), []).append(int(entry))
    out, todo = {}, [os.getpid()]
    while todo:
        pid = todo.pop()
        todo += parents.get(pid, [])
        try:
            if b"--type=renderer" in Path(f"/proc/{pid}/cmdline").read_bytes():
                fields = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                out[pid] = (int(fields[11]) + int(fields[12])) / TICK
        except OSError:
            continue
    return out


def load(context: Any, address: str, files: list[str] | None = None) -> tuple[float, float]:
    """Seconds from navigation start to the counts, and the renderer main thread's CPU seconds."""
    page = context.new_page()
    if files is not None:
        page.on("requestfinished",
                lambda r: files.append(f"{r.url.rsplit('/', 1)[-1]} {r.sizes()['responseBodySize']}"))
    before = _renderer_cpu()
    page.goto(address, timeout=120_000)
    page.wait_for_function("() => window.__counts !== undefined", polling=50, timeout=120_000)
    seconds = page.evaluate("window.__counts") / 1000
    cpu = sum(v - before.get(pid, 0.0) for pid, v in _renderer_cpu().items())
    if files is not None:
        page.wait_for_timeout(3000)  # what the page fetches after its counts too, for the list
    page.close()
    return seconds, cpu


def measure(addresses: dict[str, str], rounds: int) -> dict[str, dict[str, list[float]]]:
    from playwright.sync_api import sync_playwright

    results: dict[str, dict[str, list[float]]] = {name: {} for name in addresses}
    files: dict[str, list[str]] = {}
    names = list(addresses)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=CHROMIUM_ARGS)
        for n in range(rounds + 1):
            for name in names[n % len(names):] + names[:n % len(names)]:
                context = browser.new_context(viewport={"width": 1400, "height": 900})
                context.add_init_script(WATCH)
                fetched: list[str] | None = files.setdefault(name, []) if n == 1 else None
                for kind in ("cold", "warm"):
                    seconds, cpu = load(context, addresses[name], fetched if kind == "cold" else None)
                    if n > 0:  # round 0: each server imports the app
                        results[name].setdefault(kind, []).append(seconds)
                        results[name].setdefault(f"{kind} cpu", []).append(cpu)
                context.close()
        browser.close()
    for name, fetched in files.items():
        sizes = [int(f.rsplit(" ", 1)[1]) for f in fetched if f.split(" ")[0].endswith(".js")]
        print(f"  {name:10s} fetched {len(fetched)} files; JavaScript {len(sizes)} files, {sum(sizes) / 1e6:.2f} MB",
              flush=True)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="sqlite,etcd,zk")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--against", type=Path, help="another source tree to serve the dashboard of")
    args = parser.parse_args()
    apps: dict[str, tuple[Path, Path | None]] = {"bare": (BARE_APP, None)}
    if args.against is not None:
        apps["against"] = (args.against.resolve() / "tenure" / "dashboard" / "app.py", args.against.resolve())
    apps["this"] = (launcher.APP, None)
    for backend in args.backends.split(","):
        with seeded_store(backend, args.jobs) as url:
            with ExitStack() as stack:
                addresses = {name: stack.enter_context(serve(url, app, tree)) for name, (app, tree) in apps.items()}
                results = measure(addresses, args.rounds)
            print(f"  load average {os.getloadavg()[0]:.1f} at the end; seconds to the counts "
                  f"(median / fastest of {args.rounds}), renderer main-thread CPU s (median)")
            for name, r in results.items():
                print(f"  {name:10s} cold {statistics.median(r['cold']):5.2f} / {min(r['cold']):5.2f}   "
                      f"warm {statistics.median(r['warm']):5.2f} / {min(r['warm']):5.2f}   "
                      f"cpu cold {statistics.median(r['cold cpu']):4.2f} warm {statistics.median(r['warm cpu']):4.2f}",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
