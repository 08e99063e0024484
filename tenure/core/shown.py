"""Store times as people read them, the same in every table, line and error message."""

from __future__ import annotations

import time

DAY = 86400.0
_SECONDS_SHOWN = 90.0  # below this an age keeps its tenths (a lease's seconds matter); above, words


def duration(seconds: float) -> str:
    """A length of time in words: "12 s", "4 min", "2.5 h", "3 d"."""
    size = abs(seconds)
    if size < 90:
        return f"{size:.0f} s"
    if size < 90 * 60:
        return f"{size / 60:.0f} min"
    if size < 48 * 3600:
        return f"{size / 3600:.1f} h"
    return f"{size / 86400:.0f} d"


def when(at: float | None, now: float | None = None) -> str:
    """A store time as UTC clock time to a tenth of a second, plus how far it is from ``now``
    (the store's clock too) when that is known: ``16:20:19.5 (in 27.6s)``, ``16:20:19.5 (2.5 h
    ago)``; a time a day or more from ``now`` carries its date, ``2026-12-01 16:20:19.5 (2 d ago)``."""
    if at is None:
        return "-"
    clock = time.strftime("%H:%M:%S", time.gmtime(at)) + f".{int(at % 1 * 10)}"
    if now is None:
        return clock
    delta = at - now
    if abs(delta) >= DAY:
        clock = time.strftime("%Y-%m-%d ", time.gmtime(at)) + clock
    size = f"{abs(delta):.1f}s" if abs(delta) < _SECONDS_SHOWN else duration(delta)
    return f"{clock} ({'in ' if delta >= 0 else ''}{size}{'' if delta >= 0 else ' ago'})"


def attempts(used: int, allowed: int | None) -> str:
    """A job's attempts as tables show them: ``2/5`` (used of those allowed), ``2`` without a limit."""
    return str(used) if allowed is None else f"{used}/{allowed}"


def first_line(error: str | None) -> str:
    """A last error in a table cell: its first line (" ..." after it when there are more); a
    job's own page shows it whole."""
    lines = (error or "").strip().splitlines()
    return "" if not lines else lines[0] + (" ..." if len(lines) > 1 else "")
