"""Plain-text rendering shared by the CLI and the demo."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence


def when(at: float | None, now: float) -> str:
    """A store time as UTC clock time plus how far from now."""
    if at is None:
        return "-"
    clock = time.strftime("%H:%M:%S", time.gmtime(at)) + f".{int(at % 1 * 10)}"
    delta = at - now
    return f"{clock} ({'in ' if delta >= 0 else ''}{abs(delta):.1f}s{'' if delta >= 0 else ' ago'})"


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
