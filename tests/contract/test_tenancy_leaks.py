"""The leak suite: nothing crosses a tenant, a namespace or a confidentiality cap, on any path.

A small world — two tenants, two agents, every level, private and shared, linked, read — is built
on both layouts (tenants sharing one store on the backend under test, and — SQLite — a database
file per tenant). Every memory carries a
unique marker word. A viewer (tenant, agent, cap) may see exactly the memories of its tenant that
are shared or its own, at or below its cap; for everything else neither the marker nor the id may
appear in anything a public method returns, and an id it may not see must answer exactly like a
missing one. Then the downgrade attacks: a level below the floor, an update to a lower level, a
link or a merge into a lower level, a recall asking above the cap.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engramdb import (
    CallerError,
    Confidentiality,
    DynamicMemoryEngine,
    EdgeType,
    Explanation,
    Memory,
    NotFound,
    Recall,
    ScoringConfig,
)
from engramdb.agent import Agent
from engramdb.tenancy.contract import ALL_NAMESPACES, MemoryEntry, MemoryQuery, TenantScope
from engramdb.tenancy.namespaced import AgentSource, NamespacedMemory, TenantFiles
from engramdb.testing import FixedClock, fake_embedder

PUBLIC, INTERNAL, CONFIDENTIAL, RESTRICTED = (
    Confidentiality.PUBLIC,
    Confidentiality.INTERNAL,
    Confidentiality.CONFIDENTIAL,
    Confidentiality.RESTRICTED,
)
TENANTS = ("acme", "globex")
AGENTS = ("alice", "bob")
COMMON = "quarterly plan note"
MISSING = "alice:00000000deadbeef"
FILLER = ("harbor", "violet", "engine", "maple", "copper", "lantern", "meadow", "orbit")
LAYOUTS = ("one-store", "per-file")


# -- the world ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Seed:
    """One memory of the world and what it is: where it lives, who wrote it, its level, its marker."""

    id: str
    tenant: str
    author: str
    shared: bool
    level: Confidentiality
    marker: str


@dataclass
class World:
    source: AgentSource
    seeds: list[Seed]
    recall_ids: dict[tuple[str, str], str]  # (tenant, agent) -> an uncapped recall of that agent

    def allowed(self, tenant: str, agent: str, cap: Confidentiality, *, cross: bool = False) -> list[Seed]:
        return [
            s for s in self.seeds if s.tenant == tenant and (cross or s.shared or s.author == agent) and s.level <= cap
        ]

    def forbidden(self, tenant: str, agent: str, cap: Confidentiality, *, cross: bool = False) -> list[Seed]:
        ok = {s.id for s in self.allowed(tenant, agent, cap, cross=cross)}
        return [s for s in self.seeds if s.id not in ok]


@pytest.fixture
def make_source(
    make_engine: Callable[..., DynamicMemoryEngine], backend_name: str, tmp_path: Path, clock: FixedClock
) -> Callable[..., Any]:
    """``make_source(layout, **options)``: one store of the backend under test, or a file per tenant."""

    def make(layout: str, **options: Any) -> Any:
        options.setdefault("memory_embedder", fake_embedder())
        if layout == "one-store":
            return make_engine(**options)
        if backend_name != "sqlite":
            pytest.skip("a database file per tenant is the SQLite layout")
        return TenantFiles(tmp_path / "tenants", clock=clock, **options)

    return make


@pytest.fixture(params=LAYOUTS)
def source(request: pytest.FixtureRequest, make_source: Callable[..., Any]) -> Iterator[Any]:
    src = make_source(request.param)
    yield src
    src.close()


def build_world(source: AgentSource) -> World:
    seeds: list[Seed] = []
    recall_ids: dict[tuple[str, str], str] = {}
    for tenant in TENANTS:
        for agent in AGENTS:
            handle = source.agent(agent, tenant=tenant)
            items, shape = [], []
            for level in Confidentiality:
                for shared in (False, True):
                    marker = f"zq{tenant}{agent}{int(level)}{'s' if shared else 'p'}"
                    filler = " ".join(FILLER[(int(level) * 2 + shared + i) % len(FILLER)] for i in range(3))
                    items.append(
                        {
                            "content": f"{COMMON} {marker} {filler}",
                            "title": f"title {marker}",
                            "tags": [f"tag{marker}"],
                            "shared": shared,
                            "confidentiality": level,
                        }
                    )
                    shape.append((shared, level, marker))
            stored = handle.remember_many(items, dedup=False)
            for m, (shared, level, marker) in zip(stored, shape, strict=True):
                assert m.confidentiality is level
                seeds.append(Seed(m.id, tenant, agent, shared, level, marker))
            mine = [s for s in seeds if s.tenant == tenant and s.author == agent]
            for level in Confidentiality:
                private, shared_one = (
                    next(s for s in mine if s.level is level and s.shared is sh) for sh in (False, True)
                )
                handle.link(private.id, shared_one.id, EdgeType.SUPPORTS)  # same level: nothing is raised
            handle.get(mine[0].id)
            recall = handle.recall(COMMON, k=100, hops=2)
            assert recall.recall_id is not None
            recall_ids[(tenant, agent)] = recall.recall_id
    assert len({s.id for s in seeds}) == len(seeds) == 2 * 2 * 4 * 2
    return World(source, seeds, recall_ids)


@pytest.fixture
def world(source: Any) -> World:
    return build_world(source)


# -- checks ---------------------------------------------------------------------------------------


def assert_hidden(output: object, forbidden: list[Seed], where: str) -> None:
    # What came back, not the query echoed in it (a probe's query names forbidden markers itself).
    if isinstance(output, Recall):
        output = output.hits
    elif isinstance(output, Explanation):
        output = (output.hits, output.near_misses)
    text = repr(output)
    for s in forbidden:
        assert s.marker not in text, f"{where} reveals the content of {s}"
        assert s.id not in text, f"{where} reveals the id of {s}"


def message(exc: BaseException, memory_id: str) -> str:
    return str(exc).replace(repr(memory_id), "<id>")


def assert_like_missing(call: Callable[[str], object], hidden_id: str, where: str) -> None:
    """`call(hidden_id)` must fail exactly as `call(MISSING)` does (class and message, modulo the id)."""
    with pytest.raises(CallerError) as missing:
        call(MISSING)
    with pytest.raises(CallerError) as hidden:
        call(hidden_id)
    assert type(hidden.value) is type(missing.value), where
    assert message(hidden.value, hidden_id) == message(missing.value, MISSING), where


def capped_handle(source: AgentSource, tenant: str, agent: str, cap: Confidentiality) -> Agent:
    return source.agent(agent, tenant=tenant, cap=cap)


def marker_queries(seeds: list[Seed]) -> list[str]:
    markers = [s.marker for s in seeds]
    return [" ".join(markers[i : i + 12]) for i in range(0, len(markers), 12)]


# -- every path of the agent handle --------------------------------------------------------------


@pytest.mark.parametrize("cap", list(Confidentiality), ids=lambda c: c.name)
def test_agent_handle_shows_only_what_it_may(world: World, cap: Confidentiality) -> None:
    tenant, agent = "acme", "alice"
    me = capped_handle(world.source, tenant, agent, cap)
    allowed, forbidden = world.allowed(tenant, agent, cap), world.forbidden(tenant, agent, cap)
    allowed_ids = {s.id for s in allowed}
    assert allowed and forbidden

    recall = me.recall(COMMON, k=100, hops=3)
    assert {h.memory.id for h in recall} == allowed_ids  # everything allowed matches, nothing else
    assert_hidden(recall, forbidden, "recall")
    assert_hidden(recall.as_evidence(token_budget=10_000), forbidden, "evidence")
    assert_hidden(me.search(COMMON, k=100), forbidden, "search")
    for q in marker_queries(forbidden):
        assert_hidden(me.recall(q, k=100, hops=3), forbidden, "recall by marker")
        assert_hidden(me.explain(q, k=100, hops=3), forbidden, "explain(query) by marker")
    assert_hidden(me.explain(COMMON, k=3, hops=3), forbidden, "explain(query) near misses")
    assert_hidden(me.explain(recall), forbidden, "explain(own recall)")
    assert {m.id for m in me.memories(include_archived=True)} == allowed_ids
    stats = me.stats()
    assert stats.memories == len(allowed) and sum(stats.by_type.values()) == len(allowed)
    assert_hidden(stats, forbidden, "stats")
    for s in allowed:
        assert_hidden(me.edges(s.id), forbidden, "edges")
        # (the query text of each access is the caller's own probe, so only what was read is checked)
        assert_hidden([(a.memory_id, a.reader, a.recall_id) for a in me.accesses(s.id)], forbidden, "accesses")
        assert_hidden(me.history(s.id), forbidden, "history")

    own = next(s for s in allowed if s.author == agent and not s.shared)
    for s in forbidden:
        for name, call in {
            "get": lambda i: me.get(i),
            "update": lambda i: me.update(i, content="overwritten"),
            "history": lambda i: me.history(i),
            "accesses": lambda i: me.accesses(i),
            "edges": lambda i: me.edges(i),
            "link to": lambda i: me.link(own.id, i),
            "link from": lambda i: me.link(i, own.id),
            "forget": lambda i: me.forget(i),
        }.items():
            assert_like_missing(call, s.id, f"{name} of {s}")
    # Nothing above was changed by the refused calls.
    assert {m.id for m in capped_handle(world.source, tenant, agent, RESTRICTED).memories()} >= allowed_ids


def test_explain_replay_never_names_what_the_replaying_handle_may_not_see(world: World) -> None:
    """A recall made uncapped, replayed by the same agent under a lower cap, must not name what
    that cap hides (two handles of one agent: trusted code uncapped, an LLM tool capped)."""
    tenant, agent = "acme", "alice"
    capped = capped_handle(world.source, tenant, agent, PUBLIC)
    rid = world.recall_ids[(tenant, agent)]
    # Since issue 14 a capped copy does not replay an uncapped recall at all (its query is
    # trusted text); it reads exactly like an unknown id.
    with pytest.raises(NotFound) as err:
        capped.explain(rid)
    assert_hidden(str(err.value), world.forbidden(tenant, agent, PUBLIC), "Agent.explain(recall id) refusal")
    # Replayed under the cap it was made with, it still names only what that handle sees now.
    full = world.source.agent(agent, tenant=tenant)
    assert_hidden(full.explain(rid), world.forbidden(tenant, agent, RESTRICTED), "Agent.explain(recall id) replay")


# -- every path of the namespace ------------------------------------------------------------------


@pytest.mark.parametrize("cross", [False, True], ids=["own", "cross"])
@pytest.mark.parametrize("cap", list(Confidentiality), ids=lambda c: c.name)
def test_namespace_shows_only_what_it_may(world: World, cap: Confidentiality, cross: bool) -> None:
    tenant, agent, scope = "acme", "alice", TenantScope("acme")
    ns = NamespacedMemory(world.source, agent).with_max_confidentiality(cap).with_cross_namespace_recall(cross)
    allowed, forbidden = (
        world.allowed(tenant, agent, cap, cross=cross),
        world.forbidden(tenant, agent, cap, cross=cross),
    )
    allowed_ids = {s.id for s in allowed}

    # The caller asks for everything; the namespace gives what it may.
    greedy = MemoryQuery(COMMON, k=100, hops=3, agent_prefix=ALL_NAMESPACES, max_confidentiality=RESTRICTED)
    recall = ns.recall(scope, greedy)
    assert {h.memory.id for h in recall} == allowed_ids
    assert_hidden(recall, forbidden, "ns.recall")
    assert_hidden(recall.as_evidence(token_budget=10_000), forbidden, "ns evidence")
    for q in marker_queries(forbidden):
        asked = MemoryQuery(q, k=100, hops=3, agent_prefix=ALL_NAMESPACES, max_confidentiality=RESTRICTED)
        assert_hidden(ns.recall(scope, asked), forbidden, "ns.recall by marker")
        assert_hidden(ns.explain(scope, asked), forbidden, "ns.explain(query)")
    assert_hidden(ns.explain(scope, recall), forbidden, "ns.explain(own recall)")
    uncapped = world.recall_ids[(tenant, agent)]
    if cap < RESTRICTED:  # a capped namespace does not replay an uncapped recall (issue 14)
        with pytest.raises(NotFound):
            ns.explain(scope, uncapped)
    else:
        assert_hidden(ns.explain(scope, uncapped), forbidden, "ns.explain(uncapped replay)")
    stats = ns.stats(scope)
    assert stats.memories == len(world.allowed(tenant, agent, cap))  # stats are the own view, capped
    assert_hidden(stats, forbidden, "ns.stats")

    own = next(s for s in allowed if s.author == agent and not s.shared)
    for s in forbidden + [x for x in allowed if x.author != agent]:
        # Reads answer like a missing id for what is hidden; writes do for anything not this agent's.
        if s in forbidden:
            assert_like_missing(lambda i: ns.get(scope, i), s.id, f"ns.get of {s}")
        assert_like_missing(lambda i: ns.update(scope, i, "overwritten"), s.id, f"ns.update of {s}")
        assert_like_missing(lambda i: ns.add_link(scope, own.id, i), s.id, f"ns.add_link to {s}")
        assert_like_missing(lambda i: ns.add_link(scope, i, own.id), s.id, f"ns.add_link from {s}")
        assert ns.forget(scope, s.id) is False
    assert {h.memory.id for h in ns.recall(scope, greedy)} == allowed_ids  # the refused calls changed nothing


def test_other_scopes_see_nothing_of_a_tenant(world: World) -> None:
    ns = NamespacedMemory(world.source, "alice").with_cross_namespace_recall()
    for scope in (TenantScope("initech"), TenantScope("acme", "u1"), TenantScope("ACME")):
        everything = MemoryQuery(COMMON, k=100, hops=3, agent_prefix=ALL_NAMESPACES)
        assert ns.recall(scope, everything).hits == ()
        assert ns.explain(scope, everything).hits == ()
        assert ns.stats(scope).memories == 0
        assert ns.prune(scope, min_strength=1e9, min_age=0) == 0

        def get(i: str, sc: TenantScope = scope) -> object:
            return ns.get(sc, i)

        for s in world.seeds:
            assert_like_missing(get, s.id, f"get from {scope}")


def test_prune_counts_only_what_the_namespace_sees(world: World, clock: FixedClock) -> None:
    clock.advance(30 * 86_400)
    scope = TenantScope("acme")
    ns = NamespacedMemory(world.source, "alice")
    assert ns.with_max_confidentiality(INTERNAL).prune(scope, min_strength=1e9, min_age=86_400) == 2
    assert ns.prune(scope, min_strength=1e9, min_age=86_400) == 2  # CONFIDENTIAL and RESTRICTED, uncapped
    others = [s for s in world.seeds if not (s.tenant == "acme" and s.author == "alice" and not s.shared)]
    for s in others:  # other tenant, other agent, shared: untouched
        assert world.source.agent(s.author, tenant=s.tenant).get(s.id, touch=False).archived is False


# -- spreading, notes and edges that should never exist ------------------------------------------


def _raw_edge(eng: DynamicMemoryEngine, src: Memory, dst: Memory, tenant: str, etype: str = "related") -> None:
    """An edge written through the storage port itself, past every check of the API."""
    keys = [eng._backend.memories.key_of(m.tenant, m.id) for m in (src, dst)]
    assert None not in keys
    eng._backend.edges.put(tenant, [(keys[0], keys[1], etype, 1.0)], now=0.0, by="raw", replace=False)  # type: ignore[list-item]


def test_spreading_and_notes_neither_leak_nor_relay_over_edges_the_api_refuses(make_source: Callable[..., Any]) -> None:
    """Edges written behind the API's back (an old file, another tool) to another tenant, another
    agent's private memory, or a higher level: recall must neither show the far end, nor relay
    through it, nor quote it in a 'contradicted by' note."""
    with make_source("one-store") as eng:
        me = eng.agent("alice", tenant="acme")
        start = me.remember("the lighthouse beacon schedule")
        beyond = me.remember("zqbeyond marmalade quartz")  # no word of the query
        hidden = {
            "other tenant": eng.agent("alice", tenant="globex").remember("zqtenant marmalade"),
            "other agent": eng.agent("bob", tenant="acme").remember("zqagent marmalade"),
            "higher level": me.remember("zqlevel marmalade", confidentiality=RESTRICTED),
        }
        for far in hidden.values():
            _raw_edge(eng, start, far, "acme", "contradicts")
            _raw_edge(eng, far, beyond, "acme", "causes")
        viewer = capped_handle(eng, "acme", "alice", CONFIDENTIAL)
        forbidden = [
            Seed(m.id, m.tenant, m.author, False, m.confidentiality, m.content.split()[0]) for m in hidden.values()
        ]
        recall = viewer.recall("lighthouse beacon schedule", k=10, hops=3)
        assert recall.hits[0].memory.id == start.id and recall.hits[0].notes == ()
        # `beyond` is reachable only through hidden nodes: no activation may arrive there.
        assert all(h.components.spread == 0 for h in recall)
        assert_hidden(recall, forbidden, "recall over raw edges")
        assert_hidden(viewer.explain("lighthouse beacon schedule", k=1, hops=3), forbidden, "explain over raw edges")
        assert_hidden(viewer.edges(start.id), forbidden, "edges over raw edges")
        ns = NamespacedMemory(eng, "alice").with_max_confidentiality(CONFIDENTIAL).with_cross_namespace_recall()
        wide = ns.recall(TenantScope("acme"), MemoryQuery("lighthouse beacon schedule", k=10, hops=3, agent_prefix="*"))
        # Across namespaces bob's memory is fair game; the other tenant and the higher level never are.
        assert_hidden(wide, [forbidden[0], forbidden[2]], "cross-namespace recall over raw edges")


# -- another tenant's data must not change what a tenant gets ------------------------------------


def _snapshot(ns: NamespacedMemory, scope: TenantScope, text: str, k: int) -> Any:
    ex = ns.explain(scope, MemoryQuery(text, k=k, hops=1))
    return [(e.memory_id, e.rank, round(e.score, 9), e.components, e.source) for e in (*ex.hits, *ex.near_misses)]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_another_tenants_data_changes_no_score_a_tenant_is_shown(make_source: Callable[..., Any], layout: str) -> None:
    """Scores and their components (BM25 included) must be the same with or without a neighbour:
    a shared full-text index computes BM25 from every tenant's rows, so a tenant could read
    another's term frequencies off the `bm25` it is shown."""
    with make_source(layout) as source:
        ns = NamespacedMemory(source, "alice")
        acme, globex = TenantScope("acme"), TenantScope("globex")
        ns.store(acme, MemoryEntry("the merger with zorblax closes in march"))
        ns.store(acme, MemoryEntry("lunch with the zorblax team, short notes"))
        before = _snapshot(ns, acme, "zorblax merger", 5)
        ns.agent(globex).remember_many(
            [{"content": f"zorblax acquisition memo {i}: merger terms and a long body"} for i in range(40)], dedup=False
        )
        assert _snapshot(ns, acme, "zorblax merger", 5) == before


@pytest.mark.parametrize("layout", LAYOUTS)
def test_another_tenants_data_changes_no_answer(make_source: Callable[..., Any], layout: str) -> None:
    """With the lexical candidates cut at the top N by BM25, a neighbour's rows move the cut."""
    with make_source(layout, memory_embedder=None, scoring=ScoringConfig(candidates=2)) as source:
        ns = NamespacedMemory(source, "alice")
        acme, globex = TenantScope("acme"), TenantScope("globex")
        for text in ("alpha one", "alpha two", "beta three"):
            ns.store(acme, MemoryEntry(text))
        before = _snapshot(ns, acme, "alpha beta", 3)
        ns.agent(globex).remember_many([{"content": f"beta filler {i}"} for i in range(50)], dedup=False)
        assert [row[0] for row in _snapshot(ns, acme, "alpha beta", 3)] == [row[0] for row in before]


# -- dedup on write --------------------------------------------------------------------------------


def test_dedup_never_merges_across_tenants_agents_or_upward_levels(source: Any) -> None:
    text = "the vault combination is kept in the blue binder"
    acme, globex = TenantScope("acme"), TenantScope("globex")
    alice, bob = NamespacedMemory(source, "alice"), NamespacedMemory(source, "bob")
    a = alice.store(acme, MemoryEntry(text, tags=("zqalicetag",)))
    g = alice.store(globex, MemoryEntry(text, tags=("zqglobextag",)))
    b = bob.store(acme, MemoryEntry(text, tags=("zqbobtag",)))
    assert len({a.id, g.id, b.id}) == 3
    assert [h.memory.id for h in alice.recall(globex, MemoryQuery(text, k=10))] == [g.id]
    assert "zqbobtag" not in repr(alice.recall(acme, MemoryQuery(text, k=10)))
    assert alice.store(acme, MemoryEntry(text)).id == a.id  # within one namespace it does dedup

    # A capped writer never gets back (nor reinforces) the confidential twin it may not see.
    secret = alice.store(acme, MemoryEntry("the launch code is kept in the red binder", confidentiality=CONFIDENTIAL))
    low = alice.with_max_confidentiality(PUBLIC)
    twin = low.store(acme, MemoryEntry("the launch code is kept in the red binder"))
    assert twin.id != secret.id and twin.confidentiality is PUBLIC
    assert alice.agent(acme).get(secret.id, touch=False).access_count == 1  # only its creation

    # Merging a confidential write into a public memory must not hand it to public readers.
    pub = alice.store(acme, MemoryEntry("the office wifi password is on the fridge", tags=("zqpubtag",)))
    conf = alice.store(
        acme,
        MemoryEntry("the office wifi password is on the fridge", tags=("zqconftag",), confidentiality=CONFIDENTIAL),
    )
    assert conf.confidentiality >= CONFIDENTIAL
    public_view = low.recall(acme, MemoryQuery("office wifi password fridge", k=10))
    assert "zqconftag" not in repr(public_view) and conf.id not in repr(public_view)
    assert pub.id in {h.memory.id for h in public_view} or conf.id == pub.id


def test_reflection_stays_in_its_tenant_and_level(world: World) -> None:
    if not hasattr(Agent, "reflect"):
        pytest.skip("no engine-made reflection yet (Agent.reflect); the manual path is in the link tests")
    me = world.source.agent("alice", tenant="acme")
    me.reflect()
    for cap in Confidentiality:
        viewer = capped_handle(world.source, "acme", "alice", cap)
        made = viewer.memories(types=["reflection"])
        assert_hidden(made, world.forbidden("acme", "alice", cap), f"reflections seen at {cap.name}")


def test_export_stays_in_its_tenant_and_level(world: World) -> None:
    if not hasattr(Agent, "export"):
        pytest.skip("no export yet (Agent.export)")
    viewer = capped_handle(world.source, "acme", "alice", INTERNAL)
    assert_hidden(viewer.export(), world.forbidden("acme", "alice", INTERNAL), "export")


# -- downgrade attacks ----------------------------------------------------------------------------


def test_a_level_below_the_floor_is_raised_on_every_write_path(source: Any) -> None:
    scope = TenantScope("acme")
    ns = NamespacedMemory(source, "alice").with_default_store_confidentiality(CONFIDENTIAL)
    assert ns.store(scope, MemoryEntry("dm one", confidentiality=PUBLIC)).confidentiality is CONFIDENTIAL
    assert ns.store(scope, MemoryEntry("dm two", confidentiality=0)).confidentiality is CONFIDENTIAL  # type: ignore[arg-type]
    assert ns.store(scope, MemoryEntry("dm three", shared=True)).confidentiality is CONFIDENTIAL
    handle = ns.agent(scope)
    assert handle.remember("dm four", confidentiality=INTERNAL).confidentiality is CONFIDENTIAL
    many = handle.remember_many([{"content": "dm five", "confidentiality": 0}, {"content": "dm six"}])
    assert {m.confidentiality for m in many} == {CONFIDENTIAL}
    assert ns.with_max_confidentiality(INTERNAL).recall(scope, MemoryQuery("dm", k=10)).hits == ()


def test_an_update_below_the_floor_is_refused(source: Any) -> None:
    me = source.agent("alice", tenant="acme")
    m = me.remember("the board deck draft", confidentiality=CONFIDENTIAL)
    me = source.agent("alice", tenant="acme", floor=INTERNAL)
    with pytest.raises(CallerError):
        me.update(m.id, confidentiality=PUBLIC)
    assert me.get(m.id, touch=False).confidentiality is CONFIDENTIAL


def test_an_update_to_a_lower_level_is_refused(source: Any) -> None:
    me = source.agent("alice", tenant="acme")
    m = me.remember("the board deck draft", confidentiality=CONFIDENTIAL)
    with pytest.raises(CallerError):
        me.update(m.id, confidentiality=INTERNAL)  # the floor is PUBLIC: lowering itself is the attack
    assert me.get(m.id, touch=False).confidentiality is CONFIDENTIAL
    assert me.update(m.id, confidentiality=RESTRICTED).confidentiality is RESTRICTED  # raising is fine


def test_lowering_a_memory_never_exposes_what_it_held(source: Any) -> None:
    """Were a lowering allowed, the earlier (confidential) versions would reach public readers."""
    me = source.agent("alice", tenant="acme")
    m = me.remember("zqsecret: the acquisition target is Initech", confidentiality=CONFIDENTIAL)
    try:
        me.update(m.id, content="an acquisition is being considered", confidentiality=PUBLIC)
    except CallerError:
        pass
    public = capped_handle(source, "acme", "alice", PUBLIC)
    seen = [public.recall("acquisition target", k=10), public.memories()]
    try:
        seen.append(public.history(m.id))
    except NotFound:
        pass
    assert "zqsecret" not in repr(seen)


@pytest.mark.parametrize("etype", [EdgeType.RELATED, EdgeType.DERIVED_FROM, EdgeType.SUPPORTS])
def test_a_link_into_a_higher_level_raises_the_lower_end(source: Any, etype: EdgeType) -> None:
    me = source.agent("alice", tenant="acme")
    secret = me.remember("zqhigh: the layoffs list", confidentiality=CONFIDENTIAL)
    gist = me.remember("gist: reorganisation notes", type="reflection")
    note = me.remember("follow-up on the reorganisation")
    me.link(gist.id, secret.id, etype)  # low → high
    me.link(secret.id, note.id, etype)  # high → low
    assert me.get(gist.id, touch=False).confidentiality >= CONFIDENTIAL
    assert me.get(note.id, touch=False).confidentiality >= CONFIDENTIAL
    public = capped_handle(source, "acme", "alice", PUBLIC)
    assert public.recall("reorganisation layoffs gist follow-up", k=10, hops=3).hits == ()


def test_a_namespace_link_raises_the_lower_end_and_a_capped_one_cannot_reach_up(source: Any) -> None:
    scope = TenantScope("acme")
    ns = NamespacedMemory(source, "alice")
    secret = ns.store(scope, MemoryEntry("zqhigh: the salary bands", confidentiality=CONFIDENTIAL))
    note = ns.store(scope, MemoryEntry("salary review notes"))
    low = ns.with_max_confidentiality(PUBLIC)
    assert_like_missing(lambda i: low.add_link(scope, note.id, i), secret.id, "capped add_link up")
    ns.add_link(scope, note.id, secret.id)
    assert ns.get(scope, note.id).confidentiality is CONFIDENTIAL
    assert low.recall(scope, MemoryQuery("salary", k=10, hops=3)).hits == ()


def test_a_recall_asking_above_the_cap_gets_the_cap(source: Any) -> None:
    """What an LLM tool call hands over, verbatim: the namespace's cap and namespace still win."""
    scope = TenantScope("acme")
    ns = NamespacedMemory(source, "alice")
    for level in Confidentiality:
        ns.store(scope, MemoryEntry(f"incident review {level.name}", confidentiality=level))
    NamespacedMemory(source, "bob").store(scope, MemoryEntry("incident review by bob"))
    tool = ns.with_max_confidentiality(INTERNAL)
    llm_args = {"text": "incident review", "k": 50, "max_confidentiality": 3, "agent_prefix": "*", "hops": 5}
    query = MemoryQuery(**llm_args)  # type: ignore[arg-type]
    got = tool.recall(scope, query)
    assert {h.memory.confidentiality for h in got} == {PUBLIC, INTERNAL}
    assert {h.memory.author for h in got} == {"alice"}
    assert {e.memory_id for e in tool.explain(scope, query).hits} == {h.memory.id for h in got}
