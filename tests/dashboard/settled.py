"""When a dashboard page in a browser is settled enough to look at or photograph."""

from __future__ import annotations

# No rerun in progress (the status widget) and no element marked stale: Streamlit fades the
# elements of a rerun that takes over half a second, which left sections greyed in pictures.
SETTLED = ("() => !document.querySelector("
           "'[data-testid=\"stStatusWidget\"], [data-stale=\"true\"]')")


def wait_settled(page: object, timeout: float = 60_000) -> None:
    """Wait, polling every 20 ms, for a moment between two live refreshes."""
    page.wait_for_function(SETTLED, polling=20, timeout=timeout)  # type: ignore[attr-defined]
