"""A recall hands its own committed access write to the caches instead of reading it back (#15):
caches kept that way answer exactly as caches loaded from the rows, whoever else writes."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

from engramdb import DynamicMemoryEngine
from engramdb.storage.ports import VectorRow
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


def _vector_cache(engine: DynamicMemoryEngine) -> dict[int, tuple[Any, ...]]:
    """Every cached row of the engine's vector channel, by memory key: its vector's bytes and its
    visibility attributes, codes decoded (each cache numbers its strings its own way)."""
    channel = engine._runtime.vectors
    assert channel is not None
    index, cols = channel.index, channel.cols
    keys = index.keys()[: len(index)]
    vecs = index.vectors_of(keys)
    names, types = cols.codes.names(), cols.types.names()
    out = {}
    for key, vec in zip(keys.tolist(), vecs, strict=True):
        row = index.row_of(key)
        out[key] = (
            vec.tobytes(), names[int(cols.tenant[row])], names[int(cols.owner[row])], int(cols.level[row]),
            bool(cols.archived[row]), repr(float(cols.vfrom[row])), repr(float(cols.vto[row])), types[int(cols.type[row])],
        )  # fmt: skip
    return out


def _reads_back(engine: DynamicMemoryEngine, monkeypatch: Any) -> list[int]:
    """The change numbers the engine's vector cache reads rows back from, from now on."""
    reads: list[int] = []
    vectors = engine._runtime.store.vectors
    real = vectors.cache_rows

    def cache_rows(model: str, since: int, tenant: str | None = None) -> list[VectorRow]:
        reads.append(since)
        return real(model, since, tenant)

    monkeypatch.setattr(vectors, "cache_rows", cache_rows)
    return reads


def test_own_remembers_go_into_the_vector_cache_as_written(
    make_engine: Callable[..., DynamicMemoryEngine], clock: FixedClock, monkeypatch: Any
) -> None:
    """A `remember` that stores new memories and nothing else hands them to the vector cache
    (`VectorChannel.written`) instead of the next dedup lookup reading them back; the cache ends
    as one loaded from the rows, with other engines' writes in between and writes inside a
    caller's transaction (not handed: its commit is the caller's)."""
    warm = make_engine(memory_embedder=fake_embedder())
    _fill(warm)
    other = make_engine(memory_embedder=fake_embedder())
    me = warm.agent("a")
    me.recall("deploy", k=3)  # the caches are loaded
    reads = _reads_back(warm, monkeypatch)
    kinds: list[dict[str, Any]] = [
        {"shared": True},
        {"confidentiality": 2},
        {"valid_from": 1000.0, "valid_to": 5000.0},
        {"type": "skill"},
        {"type": "todo", "status": "open"},
        {},
    ]
    for i in range(18):
        clock.advance(30)
        fields: dict[str, Any] = {
            "content": f"fresh {i}: {WORDS[i % 10]} {WORDS[(i * 7 + 3) % 10]} number {i * 13}",
            **kinds[i % 6],
        }
        if i % 6 == 5:
            other.agent("b").remember(f"elsewhere {i}: {WORDS[(i + 4) % 10]}", shared=i % 2 == 0)
        if i % 9 == 4:
            with warm._backend.atomic():  # a caller's transaction: its commit is not the write's
                me.remember(**fields)
        else:
            me.remember(**fields)
    # Read back only after another engine's write or a write inside a transaction (not after each own one).
    assert 0 < len(reads) <= 6
    fresh = make_engine(memory_embedder=fake_embedder())
    fresh.agent("a").recall("deploy", k=3)
    assert _vector_cache(warm) == _vector_cache(fresh)
    assert _answers(warm) == _answers(fresh)


def test_caches_read_inside_a_rolled_back_transaction_start_over(
    make_engine: Callable[..., DynamicMemoryEngine], clock: FixedClock
) -> None:
    """A recall inside the caller's transaction reads the transaction's own memory into the caches;
    the transaction rolls back, and another engine's next write takes the same change number and
    key. The caches start over at their next refresh outside a transaction: the other memory is
    found by its own text, the rolled-back one by none (before, the cache kept the rolled-back
    vector and terms under that key: a query for the rolled-back text matched the other memory
    exactly)."""
    engine, other = make_engine(memory_embedder=fake_embedder()), make_engine(memory_embedder=fake_embedder())
    me = engine.agent("a")
    me.remember("warm up note about ferries")
    me.explain("ferries", k=3)  # the caches are loaded
    with contextlib.suppress(RuntimeError), engine._backend.atomic():
        inside = me.remember("the purple giraffe sings at dawn", dedup=False)
        assert me.explain("purple giraffe", k=1).hits[0].memory_id == inside.id  # its own write, seen
        raise RuntimeError("roll back")
    walrus = other.agent("a").remember("the orange walrus dances at noon", dedup=False)
    clock.advance(60)
    hits = me.explain("the orange walrus dances at noon", k=2).hits
    assert hits[0].memory_id == walrus.id and hits[0].components.cos > 0.99
    assert all(h.components.cos < 0.5 for h in me.explain("the purple giraffe sings at dawn", k=2).hits)
    assert all(h.components.bm25 == 0 for h in me.explain("giraffe", k=2).hits)  # no memory holds its stem
    assert _answers(engine) == _answers(make_engine(memory_embedder=fake_embedder()))


def test_own_remembers_that_reinforce_go_into_the_vector_cache_too(
    make_engine: Callable[..., DynamicMemoryEngine], clock: FixedClock, monkeypatch: Any
) -> None:
    """A `remember` whose items repeat stored memories (or earlier items of its batch) reinforces
    them: access state only, which the vector cache does not hold. The cache takes the new
    memories as written and passes over the reinforcement instead of reading those rows back, and
    ends as one loaded from the rows, the reinforced memories' rings and counts as stored."""
    warm = make_engine(memory_embedder=fake_embedder())
    _fill(warm)
    me = warm.agent("a")
    me.recall("deploy", k=3)  # the caches are loaded
    reads = _reads_back(warm, monkeypatch)
    stored = me.remember("note 1: release review deploy")  # _fill's note 1, again
    counts = [stored.access_count]
    for i in range(6):
        clock.advance(30)
        batch = [
            {"content": "note 1: release review deploy"},  # a stored memory, reinforced
            {"content": f"brand new {i}: {WORDS[(i + 2) % 10]} {WORDS[(i + 5) % 10]}"},  # new
            {"content": f"brand new {i}: {WORDS[(i + 2) % 10]} {WORDS[(i + 5) % 10]}"},  # an earlier item of the batch
        ]
        out = me.remember_many(batch)
        assert out[0].id == stored.id and out[2].id == out[1].id != stored.id
        counts.append(out[0].access_count)
        clock.advance(30)
        assert me.remember("note 1: release review deploy").id == stored.id  # reinforces only
    assert counts == sorted(counts) and len(set(counts)) == len(counts)  # each call reinforced it
    assert reads == []  # nothing read back: every write was handed over
    fresh = make_engine(memory_embedder=fake_embedder())
    fresh.agent("a").recall("deploy", k=3)
    assert _vector_cache(warm) == _vector_cache(fresh)
    assert _answers(warm) == _answers(fresh)
