"""The dashboard app with its store's reads counted, for ``benchmarks/dashboard_scale.py``.

Streamlit runs this script instead of ``tenure/dashboard/app.py``: on its first run it wraps
the read methods of the server's one store (the shared snapshot's) with counters, and a thread
writes the counts as JSON to ``$TENURE_BENCH_READS`` every 0.2 s; then it runs the real app.
Reads the snapshot's watch makes are counted too (they go through the same methods). Each
run of a page's view (first render and every refresh of its fragment) is timed on the server
and written to ``runs.json`` beside it.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tenure.dashboard import config, nav, shared
from tests.reads import count_reads

APP = Path(__file__).resolve().parents[1] / "tenure" / "dashboard" / "app.py"


def _timed(view: nav.View, name: str, runs: list[tuple[str, float]]) -> nav.View:
    def run(snap: Any, cfg: Any) -> None:
        start = time.perf_counter()
        try:
            view(snap, cfg)
        finally:
            runs.append((name, time.perf_counter() - start))
    return run


def _install(out: Path) -> None:
    store = shared.snapshot(config.from_env()).store
    if getattr(store, "bench_reads", None) is not None:  # counted since an earlier run
        return
    reads = count_reads(store)
    store.bench_reads = reads  # type: ignore[attr-defined]
    runs: list[tuple[str, float]] = []  # (page, seconds) of each run of a page's view
    for name, view in list(nav.VIEWS.items()):
        nav.VIEWS[name] = _timed(view, name, runs)

    def dump() -> None:
        while True:
            for path, value in ((out, reads.snapshot()), (out.with_name("runs.json"), runs)):
                path.with_suffix(".tmp").write_text(json.dumps(value))
                os.replace(path.with_suffix(".tmp"), path)
            threading.Event().wait(0.2)

    threading.Thread(target=dump, daemon=True).start()


_install(Path(os.environ["TENURE_BENCH_READS"]))
runpy.run_path(str(APP), run_name="__main__")
