"""``submit_many``'s batches, shared by the backends that batch it (``RecordBackend``)."""

from __future__ import annotations

from collections.abc import Callable


def submit_in_batches(job_ids: list[str], size: int, batch: Callable[[list[str]], bool],
                      one: Callable[[str], None], weight: Callable[[str], int] | None = None,
                      budget: int = 0) -> None:
    """Submit ``job_ids`` (each once, in order) ``size`` at a time with ``batch``, one atomic
    write per batch that reports False when it cannot apply as a whole (a job exists, a race
    was lost); such a batch is submitted again job by job with ``one``. The call as a whole is
    not atomic, as with one ``submit`` per job. With ``weight``, a batch also holds no more
    than ``budget`` of it (bytes of a request: long job ids make large writes), one job at least."""
    for chunk in _chunks(list(dict.fromkeys(job_ids)), size, weight, budget):
        if not batch(chunk):
            for job_id in chunk:
                one(job_id)


def _chunks(items: list[str], size: int, weight: Callable[[str], int] | None, budget: int) -> list[list[str]]:
    chunks: list[list[str]] = []
    load = 0
    for item in items:
        cost = weight(item) if weight is not None else 0
        if not chunks or len(chunks[-1]) >= size or (weight is not None and load + cost > budget):
            chunks.append([])
            load = 0
        chunks[-1].append(item)
        load += cost
    return chunks
