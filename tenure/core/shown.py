"""Store times as people read them, the same in every table, line and error message."""

from __future__ import annotations

import time


def when(at: float | None, now: float | None = None) -> str:
    """A store time as UTC clock time to a tenth of a second, plus how far it is from ``now``
    (the store's clock too) when that is known: ``16:20:19.5 (in 27.6s)``."""
    if at is None:
        return "-"
    clock = time.strftime("%H:%M:%S", time.gmtime(at)) + f".{int(at % 1 * 10)}"
    if now is None:
        return clock
    delta = at - now
    return f"{clock} ({'in ' if delta >= 0 else ''}{abs(delta):.1f}s{'' if delta >= 0 else ' ago'})"
