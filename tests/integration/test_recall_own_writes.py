"""A recall hands its own committed access write to the caches instead of reading it back (#15):
caches kept that way answer exactly as caches loaded from the rows, whoever else writes."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from engramdb import DynamicMemoryEngine
from engramdb.testing import FixedClock, fake_embedder

WORDS = ["deploy", "release", "budget", "kafka", "latency", "review", "schema", "invoice", "pager", "backup"]
QUERIES = ["deploy release", "budget invoice", "kafka latency", "schema review", "pager backup", "release latency"]


def _fill(engine: DynamicMemoryEngine) -> None:
    me = engine.agent("a")
    items = [
        {"content": f"note {i}: {WORDS[i % 10]} {WORDS[(i * 3 + 1) % 10]} {WORDS[(i * 7 + 2) % 10]}", "importance": (i % 5) / 5}
        for i in range(60)
    ]  # fmt: skip
    me.remember_many(items, dedup=False)


def _answers(engine: DynamicMemoryEngine) -> list[list[tuple[str, float, Any]]]:
    me = engine.agent("a")
    out = []
    for q in QUERIES:
        ex = me.explain(q, k=5, hops=1)
        out.append([(e.memory_id, e.score, e.components) for e in (*ex.hits, *ex.near_misses)])
    return out


def test_own_access_writes_keep_the_caches_true(
    make_engine: Callable[..., DynamicMemoryEngine], clock: FixedClock
) -> None:
    warm = make_engine(memory_embedder=fake_embedder())
    _fill(warm)
    other = make_engine(memory_embedder=fake_embedder())  # the same store, caches of its own
    for i in range(24):
        clock.advance(90)
        # mostly the warm engine's own writes back to back; every fifth, another engine's between
        (other if i % 5 == 4 else warm).agent("a").recall(QUERIES[i % len(QUERIES)], k=5)
    fresh = make_engine(memory_embedder=fake_embedder())  # caches loaded from the rows as they are now
    assert _answers(warm) == _answers(fresh)
    assert _answers(other) == _answers(fresh)


def test_concurrent_recalls_keep_the_caches_true(
    make_engine: Callable[..., DynamicMemoryEngine], clock: FixedClock
) -> None:
    warm = make_engine(memory_embedder=fake_embedder())
    _fill(warm)
    errors: list[BaseException] = []

    def work(j: int) -> None:
        try:
            for i in range(12):
                warm.agent("a").recall(QUERIES[(i + j) % len(QUERIES)], k=5)
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(j,)) for j in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    clock.advance(60)
    assert _answers(warm) == _answers(make_engine(memory_embedder=fake_embedder()))
