"""Plain-text rendering shared by the CLI and the demo, and the CLI's three output forms."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from tenure.core.shown import when
from tenure.views.export import to_json, to_jsonl

OUTPUTS = ("table", "json", "jsonl")
__all__ = ["OUTPUTS", "render", "table", "when"]


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def render(output: str, value: Any, human: Callable[[], str]) -> str:
    """``value`` in the form asked for: a table (``human``), one JSON document, or JSON Lines
    (one record per line; a single record is one line)."""
    if output == "json":
        return to_json(value)
    if output == "jsonl":
        return to_jsonl(value if isinstance(value, list) else [value])
    return human()
