"""The `MemoryStore` contract of spec 002 through `NamespacedMemory`, on the backend under test:
scopes, store / recall / update / forget / add_link / prune, builders, async mirrors, layouts.

The leak suite (every path, across tenants, agents and levels) is in ``test_tenancy_leaks.py``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from engramdb import (
    CallerError,
    Confidentiality,
    DynamicMemoryEngine,
    EdgeType,
    InvalidAgentId,
    MemoryType,
    NotFound,
    ValidationError,
)
from engramdb.tenancy.contract import (
    ALL_NAMESPACES,
    AsyncMemoryStore,
    MemoryEntry,
    MemoryQuery,
    MemoryStore,
    TenantScope,
)
from engramdb.tenancy.namespaced import NamespacedMemory, TenantFiles, tenant_file_name
from engramdb.testing import FixedClock, fake_embedder

PUBLIC, INTERNAL, CONFIDENTIAL, RESTRICTED = (
    Confidentiality.PUBLIC,
    Confidentiality.INTERNAL,
    Confidentiality.CONFIDENTIAL,
    Confidentiality.RESTRICTED,
)
ACME = TenantScope("acme")
GLOBEX = TenantScope("globex")
DAY = 86_400.0


@pytest.fixture
def eng(make_engine: Callable[..., DynamicMemoryEngine]) -> DynamicMemoryEngine:
    return make_engine(memory_embedder=fake_embedder())


@pytest.fixture
def alice(eng: DynamicMemoryEngine) -> NamespacedMemory:
    return NamespacedMemory(eng, "alice")


def _ids(recall: object) -> list[str]:
    return [h.memory.id for h in recall]  # type: ignore[attr-defined]


# -- the value types ----------------------------------------------------------------------------


def test_tenant_scope_key_is_one_to_one() -> None:
    assert TenantScope("acme").key == "acme"
    assert TenantScope("acme", "u/42").key == "acme/u/42"
    assert TenantScope("acme", "u42") != TenantScope("acme")
    with pytest.raises(ValidationError, match="must not contain '/'"):
        TenantScope("acme/u42")  # would collide with TenantScope("acme", "u42")
    for bad in ("", " acme", "ac\nme", 3, None):
        with pytest.raises(ValidationError):
            TenantScope(bad)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        TenantScope("acme", "")
    with pytest.raises(ValidationError, match="at most"):
        TenantScope("a" * 100, "u" * 40)


def test_entry_and_query_validate_early() -> None:
    assert MemoryEntry("x", type="todo").type is MemoryType.TODO  # type: ignore[arg-type]
    assert MemoryEntry("x", tags=["a"]).tags == ("a",)  # type: ignore[arg-type]
    assert MemoryEntry("x", confidentiality=2).confidentiality is CONFIDENTIAL  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        MemoryEntry("x", tags="ops")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        MemoryEntry("x", confidentiality=7)  # type: ignore[arg-type]
    assert MemoryQuery("q", agent_prefix="bob:").agent_prefix == "bob"
    assert MemoryQuery("q", types=("info",)).types == (MemoryType.INFO,)  # type: ignore[arg-type]
    for kwargs in (
        {"k": 0},
        {"k": True},
        {"hops": 9},
        {"agent_prefix": "Bob_1"},
        {"max_confidentiality": "secret"},
        {"as_of": float("nan")},
        {"channel": "deref"},
        {"types": ("fact",)},
    ):
        with pytest.raises(CallerError):
            MemoryQuery("q", **kwargs)


def test_namespaced_memory_meets_both_protocols(alice: NamespacedMemory) -> None:
    assert isinstance(alice, MemoryStore) and isinstance(alice, AsyncMemoryStore)
    with pytest.raises(InvalidAgentId):
        NamespacedMemory(alice.inner, "Not_An_Agent")
    with pytest.raises(ValidationError):
        NamespacedMemory(object(), "alice")  # type: ignore[arg-type]


# -- the contract -------------------------------------------------------------------------------


def test_store_prefixes_ids_and_recall_finds_them(alice: NamespacedMemory) -> None:
    m = alice.store(ACME, MemoryEntry("The deploy key rotates every Monday", importance=7, tags=("ops",)))
    assert m.id.startswith("alice:") and m.author == "alice" and m.owner == "alice" and m.tenant == "acme"
    assert m.confidentiality is PUBLIC and m.tags == ("ops",)
    hits = alice.recall(ACME, MemoryQuery("when does the deploy key rotate", k=3))
    assert _ids(hits) == [m.id]
    assert alice.recall(GLOBEX, MemoryQuery("deploy key rotate")).hits == ()


def test_ids_without_prefix_name_this_agents_memories(alice: NamespacedMemory) -> None:
    m = alice.store(ACME, MemoryEntry("the first note"))
    short = m.id.split(":", 1)[1]
    assert alice.update(ACME, short, "the first note, revised").content == "the first note, revised"
    assert alice.get(ACME, short).id == m.id
    assert alice.forget(ACME, short) is True
    assert alice.forget(ACME, short) is False  # gone: like a missing id


def test_update_keeps_history_and_reindexes(eng: DynamicMemoryEngine, alice: NamespacedMemory) -> None:
    m = alice.store(ACME, MemoryEntry("the standup is at nine"))
    alice.update(ACME, m.id, "the standup moved to ten")
    assert _ids(alice.recall(ACME, MemoryQuery("standup moved ten"))) == [m.id]
    assert [v.content for v in alice.agent(ACME).history(m.id)] == ["the standup is at nine"]


def test_forget_is_for_visible_own_memories_only(eng: DynamicMemoryEngine, alice: NamespacedMemory) -> None:
    mine = alice.store(ACME, MemoryEntry("alice's scratch note"))
    bobs = NamespacedMemory(eng, "bob").store(ACME, MemoryEntry("bob's shared note", shared=True))
    assert alice.forget(ACME, bobs.id) is False  # visible, but bob's namespace
    assert alice.forget(GLOBEX, mine.id) is False  # another tenant
    assert alice.forget(ACME, "alice:0000000000000000") is False
    assert alice.forget(ACME, 42) is False  # type: ignore[arg-type]
    assert alice.forget(ACME, mine.id) is True
    assert _ids(alice.recall(ACME, MemoryQuery("scratch note"))) == [bobs.id]
    assert NamespacedMemory(eng, "bob").get(ACME, bobs.id).content == "bob's shared note"


def test_add_link_is_one_edge_seen_from_both_ends(alice: NamespacedMemory) -> None:
    a = alice.store(ACME, MemoryEntry("the outage began at the load balancer"))
    b = alice.store(ACME, MemoryEntry("postmortem written by the infra team"))
    edge = alice.add_link(ACME, a.id, b.id)
    assert (edge.source, edge.target, edge.type) == (a.id, b.id, EdgeType.RELATED)
    handle = alice.agent(ACME)
    assert handle.edges(a.id) == handle.edges(b.id) == [edge]
    # Spreading follows it from either end: a recall matching only b brings a in, and back.
    assert a.id in _ids(alice.recall(ACME, MemoryQuery("postmortem infra team", k=5, hops=1)))
    assert b.id in _ids(alice.recall(ACME, MemoryQuery("outage load balancer", k=5, hops=1)))
    assert alice.add_link(ACME, a.id, b.id, edge_type="causes").type is EdgeType.CAUSES
    with pytest.raises(ValidationError):
        alice.add_link(ACME, a.id, a.id)


def test_add_link_targets_are_validated(eng: DynamicMemoryEngine, alice: NamespacedMemory) -> None:
    a = alice.store(ACME, MemoryEntry("alice's note"))
    bobs = NamespacedMemory(eng, "bob").store(ACME, MemoryEntry("bob's shared note", shared=True))
    elsewhere = alice.store(GLOBEX, MemoryEntry("alice's note at globex"))
    for target in (bobs.id, elsewhere.id, "alice:0000000000000000"):
        with pytest.raises(NotFound):
            alice.add_link(ACME, a.id, target)
        with pytest.raises(NotFound):
            alice.add_link(ACME, target, a.id)
    assert alice.agent(ACME).edges(a.id) == []


def test_prune_retires_only_weak_old_private_memories_of_this_namespace(
    eng: DynamicMemoryEngine, clock: FixedClock, alice: NamespacedMemory
) -> None:
    bob = NamespacedMemory(eng, "bob")
    old = alice.store(ACME, MemoryEntry("an old private note nobody reads"))
    kept_skill = alice.store(ACME, MemoryEntry("how to rotate the deploy key", type=MemoryType.SKILL))
    shared = alice.store(ACME, MemoryEntry("an old shared note", shared=True))
    rehearsed = alice.store(ACME, MemoryEntry("an old note that gets read"))
    secret = alice.store(ACME, MemoryEntry("an old restricted note", confidentiality=RESTRICTED))
    bobs = bob.store(ACME, MemoryEntry("bob's old private note"))
    other_tenant = alice.store(GLOBEX, MemoryEntry("alice's old note at globex"))
    alice.get(ACME, rehearsed.id)  # a deliberate read: strength 1
    clock.advance(10 * DAY)
    young = alice.store(ACME, MemoryEntry("a young note"))
    capped = alice.with_max_confidentiality(CONFIDENTIAL)
    assert capped.prune(ACME, min_strength=1, min_age=dt.timedelta(days=5)) == 1
    handle = alice.agent(ACME)
    archived = {m.id for m in handle.memories(include_archived=True) if m.archived}
    assert archived == {old.id}
    assert {young.id, kept_skill.id, shared.id, rehearsed.id, secret.id} <= {m.id for m in handle.memories()}
    assert bob.get(ACME, bobs.id) and alice.get(GLOBEX, other_tenant.id)
    assert alice.prune(ACME, 1, 5 * DAY, agent_prefix="alice:") == 1  # the restricted one, uncapped
    with pytest.raises(ValidationError, match="only its own namespace"):
        alice.prune(ACME, 1, 0, agent_prefix="bob")
    with pytest.raises(ValidationError):
        alice.prune(ACME, 1, -1)


# -- caps, floors and namespaces ----------------------------------------------------------------


def test_builders_return_copies(alice: NamespacedMemory) -> None:
    capped = alice.with_max_confidentiality(INTERNAL)
    floored = capped.with_default_store_confidentiality(CONFIDENTIAL)
    assert alice.max_confidentiality is None and alice.cap is RESTRICTED
    assert capped.cap is INTERNAL and capped.default_store_confidentiality is PUBLIC
    assert floored.cap is INTERNAL and floored.default_store_confidentiality is CONFIDENTIAL
    assert floored.with_max_confidentiality(None).cap is RESTRICTED
    assert floored.inner is alice.inner and floored.agent_name == "alice"
    with pytest.raises(ValidationError):
        alice.with_max_confidentiality("high")  # type: ignore[arg-type]
    assert "cap=INTERNAL" in repr(capped)


def test_cap_is_the_tighter_of_namespace_and_query(alice: NamespacedMemory) -> None:
    levels = {
        lvl: alice.store(ACME, MemoryEntry(f"budget memo level {lvl.name}", confidentiality=lvl))
        for lvl in Confidentiality
    }
    capped = alice.with_max_confidentiality(INTERNAL)

    def seen(ns: NamespacedMemory, **kw: object) -> set[Confidentiality]:
        return {h.memory.confidentiality for h in ns.recall(ACME, MemoryQuery("budget memo level", k=10, **kw))}  # type: ignore[arg-type]

    assert seen(alice) == set(Confidentiality)
    assert seen(alice, max_confidentiality=CONFIDENTIAL) == {PUBLIC, INTERNAL, CONFIDENTIAL}
    assert seen(capped) == {PUBLIC, INTERNAL}
    assert seen(capped, max_confidentiality=RESTRICTED) == {PUBLIC, INTERNAL}
    assert seen(capped, max_confidentiality=PUBLIC) == {PUBLIC}
    with pytest.raises(NotFound):
        capped.get(ACME, levels[CONFIDENTIAL].id)


def test_floor_raises_what_is_stored_below_it(alice: NamespacedMemory) -> None:
    dm = alice.with_default_store_confidentiality(CONFIDENTIAL)
    assert dm.store(ACME, MemoryEntry("telegram DM: call me after six")).confidentiality is CONFIDENTIAL
    assert dm.store(ACME, MemoryEntry("asked for public", confidentiality=PUBLIC)).confidentiality is CONFIDENTIAL
    assert dm.store(ACME, MemoryEntry("asked for more", confidentiality=RESTRICTED)).confidentiality is RESTRICTED


def test_recall_across_namespaces_needs_the_permission(eng: DynamicMemoryEngine, alice: NamespacedMemory) -> None:
    bob = NamespacedMemory(eng, "bob")
    mine = alice.store(ACME, MemoryEntry("alice: the quarterly roadmap draft"))
    shared = bob.store(ACME, MemoryEntry("bob shared: the quarterly roadmap review", shared=True))
    private = bob.store(ACME, MemoryEntry("bob private: the quarterly roadmap worries"))
    q = MemoryQuery("quarterly roadmap", k=10)
    everywhere = MemoryQuery("quarterly roadmap", k=10, agent_prefix=ALL_NAMESPACES)
    assert set(_ids(alice.recall(ACME, q))) == {mine.id, shared.id}
    assert set(_ids(alice.recall(ACME, everywhere))) == {mine.id, shared.id}  # narrowed: no permission
    wide = alice.with_cross_namespace_recall()
    assert set(_ids(wide.recall(ACME, everywhere))) == {mine.id, shared.id, private.id}
    assert set(_ids(wide.recall(ACME, q))) == {mine.id, shared.id}  # only when asked
    assert set(_ids(wide.recall(GLOBEX, everywhere))) == set()
    with pytest.raises(ValidationError, match="agent_prefix"):
        wide.recall(ACME, MemoryQuery("quarterly roadmap", agent_prefix="bob"))
    # The wide read is logged as alice's read, never as bob's.
    rows = {a.reader for a in bob.agent(ACME).accesses(private.id)}
    assert "alice" in rows
    # Writes stay in the own namespace even with the permission.
    assert wide.forget(ACME, private.id) is False
    with pytest.raises(NotFound):
        wide.update(ACME, private.id, "rewritten by alice")


def test_user_scopes_are_partitions(alice: NamespacedMemory) -> None:
    u1, u2 = TenantScope("acme", "u1"), TenantScope("acme", "u2")
    dm = alice.store(u1, MemoryEntry("u1 told me their door code in a DM"))
    assert _ids(alice.recall(u1, MemoryQuery("door code"))) == [dm.id]
    assert alice.recall(u2, MemoryQuery("door code")).hits == ()
    assert alice.recall(ACME, MemoryQuery("door code")).hits == ()
    with pytest.raises(NotFound):
        alice.get(u2, dm.id)


def test_dedup_returns_the_memory_it_reinforced(alice: NamespacedMemory) -> None:
    first = alice.store(ACME, MemoryEntry("the vpn gateway certificate expires in june"))
    again = alice.store(ACME, MemoryEntry("the vpn gateway certificate expires in june"))
    assert again.id == first.id


# -- async mirrors ------------------------------------------------------------------------------


def test_async_mirrors_run_the_same_logic(alice: NamespacedMemory) -> None:
    async def scenario() -> None:
        a = await alice.astore(ACME, MemoryEntry("async: the cache warms at dawn"))
        b = await alice.astore(ACME, MemoryEntry("async: dawn is at six"))
        await alice.aadd_link(ACME, a.id, b.id)
        assert _ids(await alice.arecall(ACME, MemoryQuery("cache warms", k=1, hops=0))) == [a.id]
        assert (await alice.aupdate(ACME, b.id, "async: dawn is at seven")).content.endswith("seven")
        assert (await alice.aget(ACME, b.id)).version == 2
        assert (await alice.astats(ACME)).memories == 2
        assert (await alice.aexplain(ACME, MemoryQuery("cache"))).recall_id is None
        assert await alice.aprune(ACME, 0, 0) == 0
        assert await alice.aforget(ACME, a.id) is True
        with pytest.raises(NotFound):
            await alice.aupdate(GLOBEX, b.id, "no")

    asyncio.run(scenario())
    assert NamespacedMemory.arecall.__doc__ and "worker thread" in NamespacedMemory.arecall.__doc__


def test_concurrent_async_recalls_stay_in_their_tenants(eng: DynamicMemoryEngine, alice: NamespacedMemory) -> None:
    tenants = [TenantScope(f"t{i}") for i in range(8)]
    for scope in tenants:
        alice.store(scope, MemoryEntry(f"the shipping address of {scope.tenant_id} is on file"))

    async def scenario() -> list[tuple[str, list[str]]]:
        async def one(scope: TenantScope) -> tuple[str, list[str]]:
            r = await alice.arecall(scope, MemoryQuery("shipping address on file", k=10))
            return scope.key, [h.memory.tenant for h in r]

        return await asyncio.gather(*(one(s) for s in tenants * 3))

    for key, seen in asyncio.run(scenario()):
        assert seen == [key]


# -- layouts: one store, or a file per tenant ---------------------------------------------------


def test_each_tenant_of_one_store_has_its_own_sql_tables(eng: DynamicMemoryEngine) -> None:
    """Memories are per tenant (rows), and so are raw-SQL tables (SQLite: a file per tenant beside
    the store; PostgreSQL: schemas per tenant). tests/contract/test_tenant_tables.py has the rest."""
    acme, globex = eng.agent("alice", tenant="acme"), eng.agent("alice", tenant="globex")
    acme.shared.execute("CREATE TABLE shared_notes (body TEXT)")
    acme.shared.execute("INSERT INTO shared_notes VALUES ('acme only')")
    assert "shared_notes" not in globex.shared.list_tables()
    globex.shared.execute("CREATE TABLE shared_notes (body TEXT)")  # its own, unrelated table
    assert globex.shared.query("SELECT body FROM shared_notes") == []
    assert acme.shared.query("SELECT body FROM shared_notes") == [("acme only",)]


@pytest.mark.sqlite_only
def test_tenant_files_give_each_tenant_its_own_database(tmp_path: Path, clock: FixedClock) -> None:
    with TenantFiles(tmp_path / "tenants", clock=clock, memory_embedder=fake_embedder()) as files:
        ns = NamespacedMemory(files, "alice")
        a = ns.store(ACME, MemoryEntry("acme's roadmap"))
        ns.store(GLOBEX, MemoryEntry("globex's roadmap"))
        assert files.engine("acme") is not files.engine("globex")
        assert files.engine("acme").path == files.path_for("acme") and files.path_for("acme").exists()
        assert _ids(ns.recall(ACME, MemoryQuery("roadmap", k=10))) == [a.id]
        with pytest.raises(NotFound):
            ns.get(GLOBEX, a.id)
        acme_sql = files.agent("alice", tenant="acme").shared
        acme_sql.execute("CREATE TABLE shared_notes (body TEXT)")
        globex_sql = files.agent("alice", tenant="globex").shared
        assert "shared_notes" not in globex_sql.list_tables()
        globex_sql.execute("CREATE TABLE shared_notes (body TEXT)")  # its own, unrelated table
        db = sqlite3.connect(files.path_for("globex"))
        try:
            tenants = {r[0] for r in db.execute("SELECT DISTINCT tenant FROM engram_memories")}
        finally:
            db.close()
        assert tenants == {"globex"}
    with pytest.raises(ValidationError):
        files.engine("acme")


def test_tenant_file_names_are_safe_and_distinct() -> None:
    names = {tenant_file_name(t) for t in ("acme", "ACME", "Acme ", "../etc/passwd", "acme/u1", "acme/u2", "ü")}
    assert len(names) == 7
    assert all("/" not in n and not n.startswith(".") and n.endswith(".db") for n in names)
    assert tenant_file_name("acme").startswith("acme-")


def test_an_agent_handle_cannot_be_widened_after_it_is_made(eng: DynamicMemoryEngine) -> None:
    """A capped handle given to an LLM tool stays capped: no attribute of it can be set or deleted."""
    capped = eng.agent("alice", cap=INTERNAL, floor=INTERNAL)
    secret = eng.agent("alice").remember("zqsecret launch date", confidentiality=RESTRICTED)
    for name in ("cap", "floor", "_principal", "tenant", "_runtime", "anything"):
        with pytest.raises(AttributeError, match="fixed at construction"):
            setattr(capped, name, RESTRICTED)
    with pytest.raises(AttributeError):
        del capped._principal
    assert (capped.cap, capped.floor) == (INTERNAL, INTERNAL)
    assert capped.private is capped.private  # the private scope is still made once, on first use
    with pytest.raises(NotFound):
        capped.get(secret.id)
