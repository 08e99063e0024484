"""The one bounded map (tenure.core.bounded): what goes first past the limit, what a refresh
moves, and that threads using one map at once do not trip over each other."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator

import pytest

from tenure.core.bounded import Bounded


def filled(limit: int, *keys: str) -> Bounded[str, int]:
    got: Bounded[str, int] = Bounded(limit)
    for i, key in enumerate(keys):
        got.put(key, i)
    return got


def kept(cache: Bounded[str, int], *keys: str) -> list[str]:
    return [k for k in keys if cache.get(k) is not None]


def test_past_the_limit_the_first_put_goes_first() -> None:
    cache = filled(2, "a", "b", "c")
    assert kept(cache, "a", "b", "c") == ["b", "c"] and len(cache) == 2
    cache.put("d", 3)
    assert kept(cache, "a", "b", "c", "d") == ["c", "d"]


def test_a_put_again_keeps_its_place_unless_refreshed() -> None:
    cache = filled(2, "a", "b")
    cache.put("a", 10)
    cache.put("c", 2)
    assert kept(cache, "a", "b", "c") == ["b", "c"]  # "a" was still the oldest

    cache = filled(2, "a", "b")
    cache.put("a", 10, refresh=True)
    cache.put("c", 2)
    assert kept(cache, "a", "b", "c") == ["a", "c"] and cache.get("a") == 10


def test_a_get_moves_its_entry_only_when_it_refreshes() -> None:
    cache = filled(2, "a", "b")
    assert cache.get("a") == 0
    cache.put("c", 2)
    assert kept(cache, "a", "b", "c") == ["b", "c"]

    cache = filled(2, "a", "b")
    assert cache.get("a", refresh=True) == 0
    cache.put("c", 2)
    assert kept(cache, "a", "b", "c") == ["a", "c"]
    assert cache.get("zz", refresh=True) is None and len(cache) == 2  # a miss adds nothing


def test_setdefault_keeps_the_first_value_and_may_refresh() -> None:
    cache = filled(2, "a", "b")
    assert cache.setdefault("a", 10) == 0
    cache.put("c", 2)
    assert kept(cache, "a", "b", "c") == ["b", "c"]

    cache = filled(2, "a", "b")
    assert cache.setdefault("a", 10, refresh=True) == 0
    assert cache.setdefault("c", 2) == 2  # new: set, and "b" (now the oldest) goes
    assert kept(cache, "a", "b", "c") == ["a", "c"]


def test_pop_returns_what_was_there() -> None:
    cache = filled(3, "a", "b")
    assert cache.pop("a") == 0 and cache.pop("a") is None
    assert kept(cache, "a", "b") == ["b"]


@pytest.fixture
def switching_often() -> Iterator[None]:
    """Threads switch every microsecond, so unguarded steps of a map would interleave."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def run_together(work: Callable[[int], None], threads: int) -> None:
    """``work(i)`` in ``threads`` threads started at once; re-raises what any of them raised."""
    start, errors = threading.Barrier(threads), []

    def one(i: int) -> None:
        start.wait()
        try:
            work(i)
        except BaseException as exc:  # carried to the test's thread
            errors.append(exc)

    running = [threading.Thread(target=one, args=(i,)) for i in range(threads)]
    for t in running:
        t.start()
    for t in running:
        t.join()
    if errors:
        raise errors[0]


@pytest.mark.usefixtures("switching_often")
def test_threads_refreshing_and_popping_one_key_never_trip_over_each_other() -> None:
    """A refresh that found the key must still find it when it moves it: a pop in between
    raises KeyError without the lock (it did, every run, with the lock taken out)."""
    cache: Bounded[str, int] = Bounded(4)
    cache.put("other", -1)

    def work(i: int) -> None:
        for n in range(50_000):
            if i % 2:
                cache.pop("k")
            else:
                cache.get("k", refresh=True)
                cache.setdefault("k", n, refresh=True)

    run_together(work, 4)
    assert cache.get("other") == -1 and len(cache) <= 2
