"""The dashboard app with its store's reads counted, for ``benchmarks/dashboard_scale.py``.

Streamlit runs this script instead of ``tenure/dashboard/app.py``: on its first run it wraps
the read methods of the server's one store (the shared snapshot's) with counters, and a thread
writes the counts as JSON to ``$TENURE_BENCH_READS`` every 0.2 s; then it runs the real app.
Reads the snapshot's watch makes are counted too (they go through the same methods).
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tenure.dashboard import config, shared
from tests.reads import count_reads

APP = Path(__file__).resolve().parents[1] / "tenure" / "dashboard" / "app.py"


def _install(out: Path) -> None:
    store = shared.snapshot(config.from_env()).store
    if getattr(store, "bench_reads", None) is not None:  # counted since an earlier run
        return
    reads = count_reads(store)
    store.bench_reads = reads  # type: ignore[attr-defined]

    def dump() -> None:
        while True:
            out.with_suffix(".tmp").write_text(json.dumps(reads.snapshot()))
            os.replace(out.with_suffix(".tmp"), out)
            threading.Event().wait(0.2)

    threading.Thread(target=dump, daemon=True).start()


_install(Path(os.environ["TENURE_BENCH_READS"]))
runpy.run_path(str(APP), run_name="__main__")
