"""``submit_many``'s batches, shared by the record stores that batch it (``steps.submit_many``)."""

from __future__ import annotations

from collections.abc import Callable


def batches(job_ids: list[str], size: int, weight: Callable[[str], int] | None = None,
            budget: int = 0) -> list[list[str]]:
    """``job_ids`` (each once, in order) ``size`` at a time, for one atomic write per batch.
    With ``weight``, a batch also holds no more than ``budget`` of it (bytes of a request: long
    job ids make large writes), one job at least."""
    chunks: list[list[str]] = []
    load = 0
    for item in dict.fromkeys(job_ids):
        cost = weight(item) if weight is not None else 0
        if not chunks or len(chunks[-1]) >= size or (weight is not None and load + cost > budget):
            chunks.append([])
            load = 0
        chunks[-1].append(item)
        load += cost
    return chunks
