"""Recall's caches per tenant (PostgreSQL: `Backend.caches_by_tenant`) and each tenant's change sequence.

A process loads a tenant's caches at that tenant's first use, from that tenant's rows alone, and
drops the least recently used past `cache_budget`; the rankings are those of the same tenant
alone in a store of its own. On SQLite (one cache per file) the same calls give the same answers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from engramdb import DynamicMemoryEngine
from engramdb.errors import ConfigError
from engramdb.memories.model import Visibility
from engramdb.storage.ports import IndexRow
from engramdb.testing import FixedClock, fake_embedder

TEXTS = [
    "Maya leads the payments team since March",
    "the payments team ships on Thursdays",
    "Maya asked about the offsite budget",
    "the offsite is in Lisbon this year",
    "deploys freeze during the offsite week",
    "Arjun owns the billing service",
    "billing alerts page Arjun at night",
    "the Lisbon hotel is booked for twelve people",
]
QUERIES = ["payments team", "offsite budget Lisbon", "who owns billing", "Maya", "deploy freeze"]


def _ranked(engine: DynamicMemoryEngine, tenant: str, query: str) -> list[tuple[str, float]]:
    """The ranking (texts, scores) of `query`, without logging it (an access would change the next)."""
    agent = engine.agent("alice", tenant=tenant)
    vis = Visibility(tenant, "alice")

    def text(memory_id: str) -> str:  # read through the port: `Agent.get` would count as an access
        found = engine._backend.memories.get(vis, memory_id)
        assert found is not None
        return found.memory.content

    return [(text(h.memory_id), round(h.score, 9)) for h in agent.explain(query, k=5).hits]


def _fill(engine: DynamicMemoryEngine, clock: FixedClock, tenants: list[str]) -> None:
    """TEXTS into each of `tenants`, the tenants' writes interleaved one by one, a minute between
    texts ("solo" writes acme's texts)."""
    for text in TEXTS:
        for tenant in tenants:
            engine.agent("alice", tenant=tenant).remember(
                f"{text} ({tenant})" if tenant != "solo" else f"{text} (acme)"
            )
        clock.now += 60.0


def _per_tenant(engine: DynamicMemoryEngine) -> bool:
    return engine._backend.caches_by_tenant


def test_a_tenant_ranks_as_it_would_alone_in_its_own_store(
    make_engine: Callable[..., DynamicMemoryEngine], clock: FixedClock
) -> None:
    """Interleaved with three other tenants' writes, a tenant's recalls (scores included) are
    those of the same memories alone: BM25's statistics, the cosines and the implicit episodes
    ("the memory written just before") are the tenant's own."""
    shared = make_engine("shared", memory_embedder=fake_embedder(), vector_index="exact")
    _fill(shared, clock, ["acme", "globex", "initech", "umbrella"])
    clock.now = FixedClock().now
    alone = make_engine("alone", memory_embedder=fake_embedder(), vector_index="exact")
    _fill(alone, clock, ["solo"])
    clock.now += 3600.0
    for query in QUERIES:
        got = _ranked(shared, "acme", query)
        assert got and all(text.endswith("(acme)") for text, _ in got)
        if _per_tenant(shared):
            assert got == _ranked(alone, "solo", query), query


@pytest.mark.parametrize("budget", [None, 20_000])
def test_only_the_tenants_served_are_loaded_and_the_budget_drops_the_least_recent(
    make_engine: Callable[..., DynamicMemoryEngine], clock: FixedClock, budget: int | None
) -> None:
    engine = make_engine(memory_embedder=fake_embedder(), cache_budget=budget)
    writer = make_engine(memory_embedder=fake_embedder())  # another process wrote the store
    _fill(writer, clock, ["acme", "globex", "initech"])
    before = {q: _ranked(engine, "acme", q) for q in QUERIES}
    caches = engine._runtime.tenant_caches
    if caches is None:
        assert not _per_tenant(engine)  # one cache of the whole file
        return
    assert caches.stats().held == ("acme",)
    pair = engine._runtime.caches("acme")
    assert len(pair.slots) == len(TEXTS)  # acme's rows alone, not the store's
    _ranked(engine, "globex", "payments")
    stats = caches.stats()
    if budget is None:
        assert stats.held == ("acme", "globex") and stats.evictions == 0
    else:  # room for one tenant's 8 rows at 2 KiB each, not two tenants' caches: the least recent goes
        assert stats.held == ("globex",) and stats.evictions == 1
        assert stats.nbytes > budget  # the tenant served is held even past the budget
        assert stats.served_too_large == 0
    # Dropped or not, acme answers as before (a dropped tenant loads again).
    assert {q: _ranked(engine, "acme", q) for q in QUERIES} == before
    assert "initech" not in caches.stats().held


def test_a_write_to_one_tenant_is_not_read_by_another_tenants_cache(
    make_engine: Callable[..., DynamicMemoryEngine], clock: FixedClock
) -> None:
    engine = make_engine(memory_embedder=fake_embedder())
    _fill(engine, clock, ["acme", "globex"])
    engine.agent("alice", tenant="acme").recall("payments")
    before = engine._backend.changes.current("acme")
    engine.agent("bob", tenant="globex").remember("globex moved its offsite to Porto")
    if not _per_tenant(engine):
        assert engine._backend.changes.current("acme") > before  # one sequence per file
        return
    assert engine._backend.changes.current("acme") == before
    reads: list[Any] = []
    memories = engine._backend.memories
    real = memories.index_rows

    def index_rows(since: int, tenant: str | None = None) -> list[IndexRow]:
        reads.append(tenant)
        return real(since, tenant)

    memories.index_rows = index_rows  # type: ignore[method-assign]
    engine.agent("alice", tenant="acme").recall("offsite")
    assert "acme" not in reads  # nothing of acme's changed: its cache reads nothing
    hits = engine.agent("bob", tenant="globex").recall("Porto offsite", k=1)
    assert hits[0].memory.content == "globex moved its offsite to Porto"


def test_writers_of_different_tenants_do_not_wait_for_each_other(
    make_engine: Callable[..., DynamicMemoryEngine],
) -> None:
    """A write of one tenant holding its change sequence in an open transaction does not hold up
    a write of another tenant (on SQLite the file's one write lock does, by design)."""
    engine = make_engine(memory_embedder=fake_embedder(), busy_timeout=2.0)
    acme, globex = engine.agent("alice", tenant="acme"), engine.agent("bob", tenant="globex")
    acme.remember("acme's first memory")
    globex.remember("globex's first memory")
    if not _per_tenant(engine):
        pytest.skip("SQLite: one writer per file")
    held, done = threading.Event(), threading.Event()
    store = engine._backend

    def hold() -> None:
        with store.atomic():
            store.changes.next("acme")
            held.set()
            done.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    try:
        assert held.wait(10)
        written = globex.remember("globex writes while acme's writer waits")
        assert globex.get(written.id).content == "globex writes while acme's writer waits"
    finally:
        done.set()
        t.join()


def test_implicit_episodes_follow_the_tenants_own_order(
    make_engine: Callable[..., DynamicMemoryEngine], clock: FixedClock
) -> None:
    """A question's answer written right after the matching turn is reached through the implicit
    episode even when other tenants wrote in between (their keys sit between the two)."""
    engine = make_engine(memory_embedder=None)
    acme, other = engine.agent("alice", tenant="acme"), engine.agent("bob", tenant="globex")
    acme.remember("What did the auditors say about the ledger?")
    clock.now += 5.0
    other.remember("globex notes about something else entirely")
    clock.now += 5.0
    answer = acme.remember("They were satisfied, no findings")
    clock.now += 600.0
    hits = acme.recall("auditors ledger", k=3)
    found = [h.memory.id for h in hits]
    if _per_tenant(engine):
        assert answer.id in found


def test_a_cache_budget_that_is_not_bytes_is_refused(make_engine: Callable[..., DynamicMemoryEngine]) -> None:
    for bad in (-1, 1.5, "512MB", True):
        with pytest.raises(ConfigError, match="cache_budget"):
            make_engine(cache_budget=bad)


def test_a_write_without_dedup_loads_no_cache_and_one_with_dedup_keeps_the_budget(
    make_engine: Callable[..., DynamicMemoryEngine], clock: FixedClock
) -> None:
    engine = make_engine(memory_embedder=fake_embedder(), cache_budget=1)
    assert engine.cache_stats() is None  # nothing made yet
    engine.agent("alice", tenant="acme").recall("anything")  # the caches exist in this process
    caches = engine._runtime.tenant_caches
    engine.agent("bob", tenant="globex").remember("globex plans", dedup=False)
    if caches is None:
        assert engine.cache_stats() is None  # one cache of the whole file
        return
    assert caches.stats().held == ("acme",)  # a write hands rows only to caches already held
    engine.agent("bob", tenant="initech").remember("initech plans")  # dedup reads initech's vectors
    assert caches.stats().held == ("initech",)  # and the budget (1 byte) dropped acme
    public = engine.cache_stats()
    assert public is not None and public.held == ("initech",) and public.evictions >= 1 and public.budget == 1
    again = engine.agent("bob", tenant="initech").remember("initech plans")
    assert again.access_count >= 1  # the loaded cache found the duplicate
