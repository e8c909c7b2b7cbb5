"""Recall of a tenant no cache holds, answered exactly by the server (PostgreSQL).

A tenant larger than `cache_budget`, or one whose caches another thread is loading, is recalled
from the server's rows (`engramdb.retrieval.server_channels`) instead of a cache. The rankings,
scores and every component must be those of the cached answer: the same memories, the same BM25
with its preceding-turn credit, coverage, cue, cosines, recency, entities, spreading over edges and
implicit episodes, visibility (readers, levels, archived, validity, types). On SQLite there is no
server path (one cache per file, always loaded): the tests that need it are skipped there.
"""

from __future__ import annotations

import dataclasses
import random
import threading
from collections.abc import Callable
from typing import Any

import pytest

from engramdb import Confidentiality, DynamicMemoryEngine, MemoryType
from engramdb.retrieval.server_channels import ServerPair
from engramdb.retrieval.tenant_caches import CachePair, TenantCaches
from engramdb.testing import FixedClock, fake_embedder

WORDS = (
    "payments team ships release Thursday Maya budget offsite Lisbon hotel billing alerts Arjun night "
    "deploy freeze grammar spec Dana owns customer wants migration database index vector search recall "
    "memory agent tenant cache budget eviction server"
).split()
QUERIES = [
    "who owns the grammar spec",
    "payments release Thursday",
    "offsite budget in Lisbon",
    "billing alerts at night",
    "Maya",
    "deploy freeze migration",
    "vector search recall memory",
    "when is the offsite",
    "what did Dana say about the database index",
    "nothing here matches zebra",
]


def _per_tenant(engine: DynamicMemoryEngine) -> bool:
    return engine._backend.caches_by_tenant


def _fill(engine: DynamicMemoryEngine, clock: FixedClock, tenant: str, seed: int) -> None:
    """A tenant with what recall ranks by: two agents' private and shared memories at four levels,
    types, entities, importance, validity, archived ones, edges, episodes a minute apart (and some
    at one instant), and recalls that left access rings."""
    rng = random.Random(seed)
    alice = engine.agent("alice", tenant=tenant)
    bob = engine.agent("bob", tenant=tenant)
    made: list[tuple[Any, str]] = []
    for i in range(120):
        who = alice if rng.random() < 0.6 else bob
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))
        m = who.remember(
            f"{text} #{i}",
            type=rng.choice([MemoryType.INFO, MemoryType.EPISODE, MemoryType.SKILL]),
            importance=rng.choice([None, 2.0, 8.0]),
            entities=rng.sample(["Maya", "Dana", "Arjun", "Lisbon"], rng.randint(0, 2)),
            shared=rng.random() < 0.5,
            confidentiality=rng.choice(list(Confidentiality)),
            valid_to=clock.now + 86_400 if rng.random() < 0.05 else None,
            dedup=False,
            # (not drawn from rng: the draws above stay those of the stores the other tests read)
            session=("s1", "s2", None)[i % 3],
            metadata={"team": "ab"[i % 2], "n": i} if i % 5 else {},
        )
        made.append((who, m.id))
        if rng.random() < 0.8:  # (else the next one is made at the same instant: no episode)
            clock.now += 60.0
    for _ in range(25):
        (who, a), (_, b) = rng.sample(made, 2)
        try:
            who.link(a, b, rng.choice(["related", "causes", "precedes"]))
        except Exception:  # (a target the linker cannot see: not an edge to make)
            continue
    for (who, old), (_, new) in zip(rng.sample(made, 6), rng.sample(made, 6), strict=True):
        try:
            who.supersede(old, new)  # the old one archived
        except Exception:  # (another agent's private memory, or the same one)
            continue
    clock.now += 3600.0
    for q in QUERIES[:5]:  # accesses: rings and strengths that recency reads
        alice.recall(q, k=5)
        clock.now += 120.0
    clock.now += 86_400 * 2  # past some validity ends


def _answer(engine: DynamicMemoryEngine, tenant: str, agent: str, query: str, **kw: Any) -> list[tuple[Any, ...]]:
    """The hits and near misses of a dry recall (nothing logged), with every component."""
    cap = kw.pop("cap", Confidentiality.RESTRICTED)
    ex = engine.agent(agent, tenant=tenant, cap=cap).explain(query, k=8, **kw)
    return [
        (h.memory_id, round(h.score, 9), tuple(round(float(c), 9) for c in dataclasses.astuple(h.components)))
        for h in [*ex.hits, *ex.near_misses]
    ]


@pytest.fixture
def stores(make_engine: Callable[..., DynamicMemoryEngine], clock: FixedClock) -> tuple[Any, Any]:
    cached = make_engine("shared", memory_embedder=fake_embedder(), vector_index="exact")
    if not _per_tenant(cached):
        pytest.skip("SQLite keeps one cache per file, always loaded: no server path")
    _fill(cached, clock, "acme", seed=1)
    _fill(cached, clock, "globex", seed=2)
    # The same database, a process whose budget no tenant fits in: every recall goes to the server.
    served = make_engine("shared", memory_embedder=fake_embedder(), vector_index="exact", cache_budget=0)
    return cached, served


@pytest.mark.parametrize(
    "agent,kw",
    [
        ("alice", {}),
        ("bob", {}),
        ("alice", {"cap": Confidentiality.INTERNAL}),
        ("bob", {"types": ["episode"]}),
        ("alice", {"hops": 2}),
        ("alice", {"as_of": 1.0}),
        ("alice", {"where": {"team": "a"}}),
        ("bob", {"session": "s1", "where": {"$or": [{"n": {"$lt": 40}}, {"team": {"$exists": False}}]}}),
    ],
)
def test_a_tenant_too_large_for_the_budget_ranks_as_from_its_cache(
    stores: tuple[DynamicMemoryEngine, DynamicMemoryEngine], agent: str, kw: dict[str, Any]
) -> None:
    cached, served = stores
    answered = 0
    for query in QUERIES:
        want = _answer(cached, "acme", agent, query, **dict(kw))
        got = _answer(served, "acme", agent, query, **dict(kw))
        assert got == want, query
        answered += bool(want)
    assert answered >= len(QUERIES) // 2  # (not a comparison of empty answers)
    stats = served.cache_stats()
    assert stats is not None
    assert stats.tenants == 0 and stats.served_too_large >= len(QUERIES)  # nothing loaded, all served
    cstats = cached.cache_stats()
    assert cstats is not None and "acme" in cstats.held and cstats.served_too_large == 0


def test_recalls_served_by_the_server_are_logged_and_change_the_next_ranking_alike(
    stores: tuple[DynamicMemoryEngine, DynamicMemoryEngine], clock: FixedClock
) -> None:
    """A real recall through the server path logs its accesses; both processes then rank the
    next recall the same (the cached one reads the accesses back at its refresh)."""
    cached, served = stores
    hits = served.agent("alice", tenant="acme").recall("payments release Thursday", k=5).hits
    assert hits
    assert served.agent("alice", tenant="acme").accesses(hits[0].memory.id)
    clock.now += 600.0
    for query in QUERIES:
        assert _answer(served, "acme", "alice", query) == _answer(cached, "acme", "alice", query), query


def test_a_tenant_being_loaded_by_another_thread_is_answered_by_the_server(
    make_engine: Callable[..., DynamicMemoryEngine], clock: FixedClock
) -> None:
    """While one thread holds a tenant's first load, a recall of that tenant in another thread
    does not wait for it: it is answered by the server, with the cached ranking."""
    other = make_engine("one", memory_embedder=fake_embedder(), vector_index="exact")
    if not _per_tenant(other):
        pytest.skip("SQLite keeps one cache per file, always loaded: no server path")
    _fill(other, clock, "acme", seed=3)
    want = {q: _answer(other, "acme", "alice", q) for q in QUERIES}
    engine = make_engine("one", memory_embedder=fake_embedder(), vector_index="exact")  # a new process
    caches = engine._runtime.tenant_caches
    assert caches is not None
    pair = caches.of("acme")  # made, not loaded: a first load would hold its locks the whole time
    assert isinstance(pair, CachePair) and not pair.ready()
    held, release = threading.Event(), threading.Event()

    def loading() -> None:
        with pair.lexical.lock:
            held.set()
            release.wait(30)

    t = threading.Thread(target=loading)
    t.start()
    try:
        assert held.wait(10)
        for q in QUERIES:
            assert _answer(engine, "acme", "alice", q) == want[q], q
        stats = engine.cache_stats()
        assert stats is not None and stats.served_while_loading >= len(QUERIES)
    finally:
        release.set()
        t.join()
    # once the load is done, the cache answers, the same
    loaded_before = engine.cache_stats().served_while_loading  # type: ignore[union-attr]
    assert _answer(engine, "acme", "alice", QUERIES[0]) == want[QUERIES[0]]
    assert pair.ready() and engine.cache_stats().served_while_loading == loaded_before  # type: ignore[union-attr]


def test_tenant_caches_route_by_size_and_by_load() -> None:
    """`TenantCaches.for_recall` without a server: always the caches; with one, the server for a
    tenant whose rows × row cost exceed the budget, the caches for one that fits."""
    from engramdb.retrieval.lexical_channel import LexicalChannel
    from engramdb.retrieval.server_channels import ServerLexical

    made: list[str] = []

    def make(tenant: str) -> CachePair:
        made.append(tenant)
        return CachePair(LexicalChannel(tenant=tenant), None)

    sizes = {"small": 10, "big": 10_000}
    server_calls: list[str] = []

    def server(tenant: str) -> ServerPair:
        server_calls.append(tenant)
        return ServerPair(ServerLexical(None, tenant), None)  # type: ignore[arg-type]

    plain = TenantCaches(make, budget=1 << 20)
    assert isinstance(plain.for_recall("big"), CachePair)
    caches = TenantCaches(make, budget=1 << 20, server=server, size_of=sizes.__getitem__)
    assert isinstance(caches.for_recall("small"), CachePair)
    assert isinstance(caches.for_recall("big"), ServerPair)  # 10,000 × 2 KiB > 1 MiB
    assert made == ["big", "small"] and server_calls == ["big"]
    unbounded = TenantCaches(make, budget=None, server=server, size_of=sizes.__getitem__)
    assert isinstance(unbounded.for_recall("big"), CachePair)  # no budget: everything fits
    stats = caches.stats()
    assert stats.served_too_large == 1 and stats.served_while_loading == 0 and stats.held == ("small",)


STATEMENTS = [
    "Maya owns the grammar spec",
    "the payments release ships Thursday",
    "the offsite is in Lisbon",
    "billing alerts page Arjun at night",
    "Dana wants a database index migration",
    "the deploy freeze starts Monday",
]


def _dedup_story(engine: DynamicMemoryEngine, tenant: str, seed: int) -> list[tuple[bool, str, int]]:
    """Writes with repeats — exact, capitalised, of another owner, level or type, one at a time
    and in batches with repeats inside — and per write: (folded into a memory there before,
    the content of the memory it returned, its access count)."""
    rng = random.Random(seed)
    out: list[tuple[bool, str, int]] = []
    for step in range(40):
        who = engine.agent(rng.choice(["alice", "bob"]), tenant=tenant)
        items: list[dict[str, Any]] = []
        for _ in range(1 if step % 3 else rng.randint(2, 4)):
            text = rng.choice(STATEMENTS)
            items.append(
                {
                    "content": text.upper() if rng.random() < 0.2 else text,
                    "type": rng.choice([MemoryType.INFO] * 4 + [MemoryType.SKILL, MemoryType.TODO]),
                    "confidentiality": rng.choice([Confidentiality.INTERNAL, Confidentiality.CONFIDENTIAL]),
                    "shared": rng.random() < 0.5,
                }
            )
        before = {m.id for m in who.memories()}
        made = who.remember_many(items) if len(items) > 1 else [who.remember(**items[0])]
        for m in made:
            out.append((m.id in before, m.content, m.access_count))
    return out


def test_dedup_of_a_tenant_too_large_for_the_budget_decides_as_its_cache(
    make_engine: Callable[..., DynamicMemoryEngine], clock: FixedClock
) -> None:
    """A write of a tenant that does not fit in the budget looks up its near-duplicates on the
    server (it loads nothing): every write folds, or not, into the memory the cached lookup picks."""
    cached = make_engine("dedup", memory_embedder=fake_embedder(), vector_index="exact")
    if not _per_tenant(cached):
        pytest.skip("SQLite keeps one cache per file, always loaded: no server path")
    _fill(cached, clock, "cached", seed=5)
    _fill(cached, clock, "served", seed=5)  # the same memories, in a tenant of their own
    served = make_engine("dedup", memory_embedder=fake_embedder(), vector_index="exact", cache_budget=0)
    want = _dedup_story(cached, "cached", seed=11)
    got = _dedup_story(served, "served", seed=11)
    assert got == want
    folded = sum(1 for was_there, _, _ in want if was_there)
    assert folded >= 10 and folded < len(want) - 10  # (repeats folded, other owners' and levels' kept)
    stats = served.cache_stats()
    assert stats is not None and stats.tenants == 0 and stats.served_too_large >= 40


def test_a_write_during_another_threads_load_does_not_wait_for_it(
    make_engine: Callable[..., DynamicMemoryEngine], clock: FixedClock
) -> None:
    """While another thread holds a tenant's first load, a write's dedup lookup goes to the server
    and folds a repeat into the stored memory, instead of waiting for the load."""
    other = make_engine("load", memory_embedder=fake_embedder(), vector_index="exact")
    if not _per_tenant(other):
        pytest.skip("SQLite keeps one cache per file, always loaded: no server path")
    _fill(other, clock, "acme", seed=3)
    first = other.agent("alice", tenant="acme").remember("the offsite budget is in Lisbon")
    engine = make_engine("load", memory_embedder=fake_embedder(), vector_index="exact")
    caches = engine._runtime.tenant_caches
    assert caches is not None
    pair = caches.of("acme")
    assert isinstance(pair, CachePair) and pair.vectors is not None and not pair.ready()
    held, release = threading.Event(), threading.Event()

    def loading() -> None:
        with pair.vectors.lock:  # type: ignore[union-attr]
            held.set()
            release.wait(30)

    t = threading.Thread(target=loading)
    t.start()
    done: list[Any] = []
    try:
        assert held.wait(10)
        writer = threading.Thread(
            target=lambda: done.append(engine.agent("alice", tenant="acme").remember("the offsite budget is in Lisbon"))
        )
        writer.start()
        writer.join(10)
        assert done, "the write waited for the other thread's load"
        assert done[0].id == first.id and done[0].access_count == first.access_count + 1  # reinforced
        stats = engine.cache_stats()
        assert stats is not None and stats.served_while_loading >= 1
    finally:
        release.set()
        t.join()
