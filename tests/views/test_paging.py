"""``paging.Thinned``: the page of ids left when a few held jobs are taken out of every id,
cut without copying the 100,000 others; checked against the list it stands for."""

from __future__ import annotations

import random

from tenure.views.paging import Thinned


def test_slices_match_the_list_without_the_gone_names() -> None:
    rng = random.Random(7)
    for _ in range(300):
        names = sorted({f"j{rng.randrange(10_000):05d}" for _ in range(rng.randrange(0, 60))})
        gone = set(rng.sample(names, rng.randrange(0, len(names) + 1)) if names else [])
        gone |= {"absent-a", "j99999x"}  # not among the names: left out of nothing
        thinned, kept = Thinned(names, gone), [n for n in names if n not in gone]
        assert len(thinned) == len(kept)
        for _ in range(10):
            start = rng.randrange(0, len(names) + 3)
            stop = start + rng.randrange(0, 8)
            assert thinned[start:stop] == kept[start:stop]
