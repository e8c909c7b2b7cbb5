"""Reflection: each step alone and in order, scope rules, confidentiality, interruption, the tenant lock."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from engramdb import DynamicMemoryEngine, ForgettingPolicy, NotFound, TransactionError, ValidationError
from engramdb.agent import Agent
from engramdb.embeddings.base import Embedder
from engramdb.errors import ConfigError
from engramdb.memories.model import Channel, Confidentiality, EdgeType, Memory, MemoryType
from engramdb.memories.reflection import (
    STEPS,
    ReflectionConfig,
    Reflector,
    reflect,
    rescored_importance,
)
from engramdb.memories.scoring import sigmoid
from engramdb.memories.transfer import export_records
from engramdb.storage.sqlite.locks import lock_path
from engramdb.testing import FixedClock, fake_embedder
from tests.rawsql import raw_count, raw_execute

HOUR = 3600.0
DAY = 24 * HOUR
KEY = "The deploy key for the billing service rotates every Monday at noon UTC"
DUP = "the deploy key for the billing service rotates every monday at noon utc!"  # cosine 1.0 with KEY
DAYS = ("Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")  # KEY with another day: 0.80–0.95
FILLER = (
    "Grafana dashboard for the search cluster shows p99 latency spikes after deploys",
    "Bought groceries: oat milk, lemons, basil and two loaves of sourdough bread",
    "The Lisbon customer wants a discount for a three-year contract",
    "Smaller learning rates reduced overfitting on the noisy benchmark",
    "Grandma's birthday dinner is at the Italian place by the river",
)


@pytest.fixture
def alice(eng: DynamicMemoryEngine) -> Agent:
    return eng.agent("alice")


def put(agent: Agent, content: str, **kw: Any) -> Memory:
    """Remember without dedup-on-write (reflection is what should find the duplicates)."""
    return agent.remember(content, dedup=False, **kw)


def fillers(agent: Agent) -> list[Memory]:
    return [put(agent, text) for text in FILLER]


def edges_of(agent: Agent, memory_id: str, etype: EdgeType | None = None) -> list[tuple[str, str, str, float]]:
    return sorted(
        (e.source, e.target, e.type.value, e.weight) for e in agent.edges(memory_id) if etype is None or e.type is etype
    )


def count(eng: DynamicMemoryEngine, sql: str, *params: object) -> int:
    return raw_count(eng, sql, params)


def snapshot(eng: DynamicMemoryEngine) -> tuple[int, ...]:
    return tuple(
        count(eng, sql)
        for sql in (
            "SELECT count(*) FROM engram_memories",
            "SELECT coalesce(sum(archived), 0) FROM engram_memories",
            "SELECT count(*) FROM engram_edges",
            "SELECT count(*) FROM engram_access",
            "SELECT value FROM engram_counters WHERE name = 'memories'",
        )
    )


class FakeReconciler:
    """Says the older of two memories whose ids are in `pairs` is replaced by the newer."""

    name = "fake-reconciler@1"

    def __init__(self, answer: Mapping[str, str] | Exception | None = None) -> None:
        self.answer = answer
        self.clusters: list[list[str]] = []

    def reconcile(self, cluster: Sequence[Memory]) -> Mapping[str, str]:
        self.clusters.append([m.id for m in cluster])
        if isinstance(self.answer, Exception):
            raise self.answer
        if self.answer is not None:
            return self.answer
        return {cluster[0].id: cluster[-1].id}


class FakeReasoner:
    """Joins the first words of each episode; can block, or set an event, while it 'thinks'."""

    name = "fake-reasoner@1"

    def __init__(self, *, entered: threading.Event | None = None, release: threading.Event | None = None) -> None:
        self.calls: list[list[str]] = []
        self.entered = entered
        self.release = release

    def abstract(self, episodes: Sequence[str]) -> str | None:
        self.calls.append(list(episodes))
        if self.entered is not None:
            self.entered.set()
        if self.release is not None:
            assert self.release.wait(10)
        return "Gist: " + "; ".join(" ".join(e.split()[:3]) for e in episodes)


# -- 1. merge ---------------------------------------------------------------------------------


def test_merge_keeps_the_highest_scores_folds_strength_and_edges_and_archives_with_refines(
    alice: Agent, clock: FixedClock
) -> None:
    fillers(alice)
    a = put(alice, KEY, importance=4, salience=0.2, confidence=0.6, tags=["ops"])
    clock.advance(60)
    b = put(alice, DUP, importance=7, salience=0.1, confidence=0.9, tags=["keys"], entities=["billing"])
    other = put(alice, "Rotate the staging TLS certificate before the audit")
    alice.link(b.id, other.id, "related", 0.5)
    alice.link(other.id, b.id, "supports", 0.7)
    alice.get(a.id)  # strength 1
    alice.get(b.id)
    alice.get(b.id)  # strength 2
    before_a = alice.get(a.id, touch=False)
    before_b = alice.get(b.id, touch=False)

    report = Reflector(alice).merge()

    assert report.merged == 1 and report.step("merge").examined == 1 and not report.interrupted
    kept, gone = alice.get(a.id, touch=False), alice.get(b.id, touch=False)
    assert not kept.archived and gone.archived
    assert (kept.importance, kept.salience, kept.confidence) == (7.0, 0.2, 0.9)
    assert kept.strength == 3  # 1 + 2: the merge's own `reflected` access never reinforces
    assert kept.access_count == before_a.access_count + before_b.access_count
    assert sorted(kept.recent_accesses) == sorted(before_a.recent_accesses + before_b.recent_accesses)
    assert kept.tags == ("ops", "keys") and kept.entities == ("billing",)
    assert kept.content == KEY  # the survivor's text is untouched
    assert edges_of(alice, a.id) == sorted(
        [(a.id, other.id, "related", 0.5), (other.id, a.id, "supports", 0.7), (b.id, a.id, "refines", 1.0)]
    )
    assert a.id in {h.memory.id for h in alice.recall("deploy key billing rotation", k=10)}
    assert b.id not in {h.memory.id for h in alice.recall("deploy key billing rotation", k=10)}
    assert any(h.memory.id == a.id for h in alice.recall("keys", k=10))  # the folded tag is indexed
    logged = [r for r in alice.accesses(a.id) if r.channel is Channel.REFLECTED]
    assert len(logged) == 1 and logged[0].trace_ref == report.run_id and b.id in (logged[0].query or "")
    assert [r.channel for r in alice.accesses(b.id)][-1] is Channel.REFLECTED


def test_a_near_duplicate_that_says_more_is_linked_not_merged(alice: Agent, clock: FixedClock) -> None:
    """Cosine 0.96, and a number the older one lacks: another statement. Before, the older memory
    was archived into the newer; a merge now takes only the same statement, and the link step
    relates the two instead."""
    old = put(alice, KEY)
    clock.advance(60)
    new = put(alice, KEY + " 2025")
    assert Reflector(alice).merge().merged == 0
    assert not alice.get(old.id, touch=False).archived and not alice.get(new.id, touch=False).archived
    assert Reflector(alice).link().linked == 1
    assert [(s, d) for s, d, _, _ in edges_of(alice, old.id, EdgeType.RELATED)] == [(old.id, new.id)]


def test_merge_never_crosses_owners_tenants_types_status_or_validity(eng: DynamicMemoryEngine, alice: Agent) -> None:
    bob = eng.agent("bob")
    elsewhere = eng.agent("alice", tenant="other")
    put(alice, KEY)
    put(alice, DUP, shared=True)  # alice's own vs the tenant's shared: two owners
    put(bob, DUP)
    put(elsewhere, DUP)
    put(alice, DUP, type="episode")
    put(alice, "Call Dana about the deploy key", type="todo")
    put(alice, "call dana about the deploy key!", type="todo", status="done")
    put(alice, "The VPN gateway address is 10.0.0.1", valid_to=eng.clock() + DAY)
    put(alice, "the vpn gateway address is 10.0.0.1")
    before = snapshot(eng)
    for agent in (alice, bob, elsewhere):
        assert Reflector(agent).merge().merged == 0
    assert snapshot(eng)[:3] == before[:3]


def test_merge_survivor_takes_the_higher_confidentiality(alice: Agent, clock: FixedClock) -> None:
    a = put(alice, KEY, confidentiality=Confidentiality.PUBLIC)
    clock.advance(1)
    put(alice, DUP, confidentiality=Confidentiality.CONFIDENTIAL)
    assert Reflector(alice).merge().merged == 1
    assert alice.get(a.id, touch=False).confidentiality is Confidentiality.CONFIDENTIAL


# -- 3. link ----------------------------------------------------------------------------------


def test_link_adds_related_edges_in_the_band_at_most_five_per_memory(eng: DynamicMemoryEngine, alice: Agent) -> None:
    fillers(alice)
    hub = put(alice, KEY)
    ring = [put(alice, KEY.replace("Monday", day)) for day in DAYS]  # all pairs in [0.80, 0.95)
    near_dup = put(alice, KEY + " sharp")  # 0.955 with the hub, and a word more: linked, not merged
    twin = put(alice, DUP)  # the hub's statement again: the merge's to fold, never a link
    vec = {m.id: fake_embedder().embed([m.content])[0] for m in [hub, *ring, near_dup, twin]}

    report = Reflector(alice).link()

    new = count(eng, "SELECT count(*) FROM engram_edges WHERE type = 'related'")
    assert report.linked == new > 0
    for m in [hub, *ring, near_dup, twin]:
        mine = edges_of(alice, m.id, EdgeType.RELATED)
        assert len(mine) <= 5
        for src, dst, _, weight in mine:
            cos = float(vec[src] @ vec[dst])
            assert cos >= 0.80 and weight == pytest.approx(cos, abs=2e-4)
    hub_edges = edges_of(alice, hub.id, EdgeType.RELATED)
    assert len(hub_edges) == 5
    # the hub keeps its five nearest neighbours; the farthest ones are left out
    by_cos = sorted([*ring, near_dup], key=lambda m: -float(vec[hub.id] @ vec[m.id]))
    assert by_cos[0].id == near_dup.id
    assert {d for _, d, _, _ in hub_edges} == {m.id for m in by_cos[:5]}
    assert twin.id not in {x for e in hub_edges for x in e[:2]}
    # a second run adds nothing new between pairs already linked, and never more than the cap
    again = Reflector(alice).link()
    assert all(len(edges_of(alice, m.id, EdgeType.RELATED)) <= 10 for m in ring)
    assert again.linked <= report.linked


def test_link_never_crosses_owners_or_confidentiality_levels(eng: DynamicMemoryEngine, alice: Agent) -> None:
    put(alice, KEY)
    put(alice, KEY.replace("Monday", "Friday"), shared=True)
    put(alice, KEY.replace("Monday", "Sunday"), confidentiality=Confidentiality.CONFIDENTIAL)
    put(eng.agent("bob"), KEY.replace("Monday", "Tuesday"))
    assert Reflector(alice).link().linked == 0
    assert count(eng, "SELECT count(*) FROM engram_edges") == 0


# -- 4. rescore -------------------------------------------------------------------------------


def test_rescore_follows_the_formula_on_what_no_caller_scored_and_never_drops_one_at_eight_below_eight(
    eng: DynamicMemoryEngine, alice: Agent, clock: FixedClock
) -> None:
    plain = put(alice, "The cafeteria closes at three on Fridays", salience=0.5)  # nobody scored these
    high = put(alice, "Never restart the primary during business hours")
    edge = put(alice, "The backup bucket is in eu-west")
    top = put(alice, "Production credentials live in the vault", salience=1)
    below = put(alice, "The team lunch is on Thursday")
    for m, imp in ((high, 9.0), (edge, 8.0), (top, 10.0), (below, 7.9)):  # what earlier runs made of them
        raw_execute(eng, "UPDATE engram_memories SET importance = ?, imp_source = 2 WHERE id = ?", (imp, m.id))
    clock.advance(HOUR)
    changed_before = count(eng, "SELECT changed FROM engram_memories WHERE id = ?", plain.id)

    report = Reflector(alice).rescore()

    # one access (creation) an hour ago: B = ln(3600^-0.5)
    rec = sigmoid(math.log(HOUR**-0.5))
    got = {m.id: alice.get(m.id, touch=False) for m in (plain, high, edge, top, below)}
    assert got[plain.id].importance == pytest.approx(0.5 * 5 + 3 * 0.5 + 2 * rec)
    assert got[high.id].importance == 8.0  # 0.5·9 + 2σ(B) ≈ 4.53, floored
    assert got[edge.id].importance == 8.0
    assert got[top.id].importance == pytest.approx(5 + 3 + 2 * rec)
    assert got[below.id].importance == pytest.approx(0.5 * 7.9 + 2 * rec)  # under the floor: no protection
    assert {m.importance_source for m in got.values()} == {"reflection"}
    assert report.rescored == 4 and report.step("rescore").examined == 5  # the one at exactly 8 stays 8
    assert count(eng, "SELECT changed FROM engram_memories WHERE id = ?", plain.id) > changed_before


def test_reflect_never_rescores_an_importance_a_caller_set(
    eng: DynamicMemoryEngine, alice: Agent, clock: FixedClock
) -> None:
    """A default reflect() rewrote callers' importances (7 → 4.5, 5 → 3.5, 0 → 1.0)."""
    given = [7.0, 5.0, 0.0, 10.0, 2.5, 8.0, 9.5, 1.0, 6.0, 3.0]
    mine = [put(alice, f"{FILLER[i % len(FILLER)]} note number {i}", importance=imp) for i, imp in enumerate(given)]
    unscored = [put(alice, f"an unscored {FILLER[i % len(FILLER)]} remark {i}", salience=0.9) for i in range(10)]
    corrected = put(alice, "The standup moved to ten")
    alice.update(corrected.id, importance=6.5)  # a caller's too, set after the write
    clock.advance(HOUR)

    report = alice.reflect()

    for m, imp in zip(mine, given, strict=True):
        kept = alice.get(m.id, touch=False)
        assert (kept.importance, kept.importance_source) == (imp, "caller")
    assert alice.get(corrected.id, touch=False).importance == 6.5
    rescored = [alice.get(m.id, touch=False) for m in unscored]
    assert all(m.importance_source == "reflection" and m.importance != 5.0 for m in rescored)
    assert report.step("rescore").examined == len(unscored)
    # and a caller who scores a rescored memory takes it back
    alice.update(unscored[0].id, importance=4.0)
    alice.reflect()
    back = alice.get(unscored[0].id, touch=False)
    assert (back.importance, back.importance_source) == (4.0, "caller")


def test_what_sets_an_importance_is_kept_through_export_and_import(
    make_engine: Callable[..., DynamicMemoryEngine], alice: Agent
) -> None:
    a = put(alice, "A scored memory", importance=7)
    b = put(alice, "An unscored memory")
    records = list(export_records(alice))
    other = make_engine("other", memory_embedder=fake_embedder()).agent("alice")
    other.import_records(records)
    assert other.get(a.id, touch=False).importance_source == "caller"
    assert other.get(b.id, touch=False).importance_source == "default"
    # an export from before the field existed: 5.0 counts as nobody's, other values as a caller's
    for r in records:
        r.pop("importance_source", None)
    third = make_engine("third", memory_embedder=fake_embedder()).agent("alice")
    third.import_records(records)
    assert third.get(a.id, touch=False).importance_source == "caller"
    assert third.get(b.id, touch=False).importance_source == "default"


def test_rescored_importance_is_clamped_and_floored() -> None:
    cfg = ReflectionConfig()
    assert rescored_importance(10, 1, 50.0, cfg) == 10.0
    assert rescored_importance(0, 0, -math.inf, cfg) == 0.0
    assert rescored_importance(8, 0, -math.inf, cfg) == 8.0
    assert rescored_importance(7.99, 0, -math.inf, cfg) == pytest.approx(3.995)


# -- 2. reconcile and 5. abstract: opt-in -----------------------------------------------------


def test_reconcile_and_abstract_are_skipped_without_their_callables(alice: Agent) -> None:
    put(alice, "Met the vendor about the renewal", type="episode")
    report = Reflector(alice).reflect()
    assert report.step("reconcile").skipped and "reconciler" in (report.step("reconcile").skipped or "")
    assert report.step("abstract").skipped and "reasoner" in (report.step("abstract").skipped or "")
    assert report.step("reconcile").calls == report.step("abstract").calls == 0


def test_reconcile_supersedes_what_the_reconciler_says_is_outdated(
    eng: DynamicMemoryEngine, alice: Agent, clock: FixedClock
) -> None:
    fillers(alice)
    old = put(alice, "The office wifi password is tulip42")
    clock.advance(DAY)
    new = put(alice, "The office wifi password is orchid77")
    alice.link(new.id, old.id, "contradicts")
    fake = FakeReconciler()

    report = Reflector(alice, reconciler=fake).reconcile()

    assert fake.clusters == [[old.id, new.id]]  # oldest first
    assert report.reconciled == 1 and report.step("reconcile").calls == 1
    closed = alice.get(old.id, touch=False)
    assert closed.valid_to == clock.now and not closed.archived
    assert (new.id, old.id, "refines", 1.0) in edges_of(alice, old.id)
    hits = {h.memory.id for h in alice.recall("office wifi password", k=5)}
    assert new.id in hits and old.id not in hits
    assert old.id in {h.memory.id for h in alice.recall("office wifi password", k=5, as_of=clock.now - HOUR)}
    # nothing left to reconcile: the outdated fact is out of scope now
    assert Reflector(alice, reconciler=FakeReconciler()).reconcile().reconciled == 0


@pytest.mark.parametrize("answer", [RuntimeError("model timed out"), {"nope": "nada"}])
def test_a_failing_reconciler_changes_nothing(
    eng: DynamicMemoryEngine, alice: Agent, answer: Mapping[str, str] | Exception
) -> None:
    old = put(alice, "The office wifi password is tulip42")
    new = put(alice, "The office wifi password is orchid77")
    alice.link(new.id, old.id, "contradicts")
    before = snapshot(eng)
    report = Reflector(alice, reconciler=FakeReconciler(answer)).reconcile()
    assert report.step("reconcile").errors == 1 and report.reconciled == 0
    assert snapshot(eng) == before


def test_abstract_writes_gists_with_derived_from_edges_and_confidentiality_travels(
    eng: DynamicMemoryEngine, alice: Agent, clock: FixedClock
) -> None:
    mine = []
    for i, level in enumerate([0, 2, 0, 1]):
        clock.advance(60)
        mine.append(
            put(alice, f"Episode {i}: walked the on-call runbook with Dana", type="episode", confidentiality=level)
        )
    shared = [put(alice, f"Team retro {i} went well", type="episode", shared=True) for i in range(3)]
    put(alice, "Lone episode of bob", type="episode")  # fifth private episode: 4 + 1 < 8, one batch of 5
    reasoner = FakeReasoner()

    report = Reflector(alice, reasoner=reasoner).abstract()

    assert report.abstracted == 2 and report.step("abstract").calls == 2
    assert reasoner.calls[0][0].startswith("Team retro 0")  # shared owner '' sorts first; oldest first
    assert reasoner.calls[1][0].startswith("Episode 0")
    gists = alice.memories(types=["reflection"])
    by_owner = {g.owner: g for g in gists}
    assert set(by_owner) == {"", "alice"}
    private, public = by_owner["alice"], by_owner[""]
    assert private.confidentiality is Confidentiality.CONFIDENTIAL  # max of its sources
    assert public.confidentiality is Confidentiality.PUBLIC
    assert {d for s, d, t, _ in edges_of(alice, private.id) if t == "derived_from"} >= {m.id for m in mine}
    assert {d for s, d, t, _ in edges_of(alice, public.id) if t == "derived_from"} == {m.id for m in shared}
    assert private.type is MemoryType.REFLECTION and private.author == "alice"
    assert all(r.channel is Channel.REFLECTED for r in alice.accesses(mine[0].id)[-1:])
    # episodes already distilled are not sent again
    assert Reflector(alice, reasoner=FakeReasoner()).abstract().abstracted == 0


def test_llm_cap_keeps_confidential_memories_away_from_the_model(alice: Agent) -> None:
    for i in range(3):
        put(alice, f"Secret incident {i} at the bank", type="episode", confidentiality=Confidentiality.CONFIDENTIAL)
    reasoner = FakeReasoner()
    cfg = ReflectionConfig(llm_cap=Confidentiality.INTERNAL)
    assert Reflector(alice, cfg, reasoner=reasoner).abstract().abstracted == 0
    assert reasoner.calls == []


# -- the whole run ----------------------------------------------------------------------------


def test_reflect_runs_every_step_in_order_and_reports_counts(
    make_engine: Callable[..., DynamicMemoryEngine], clock: FixedClock
) -> None:
    eng = make_engine("decay", memory_embedder=fake_embedder(), forgetting=ForgettingPolicy(archive_by_decay=True))
    alice = eng.agent("alice")
    fillers(alice)
    put(alice, KEY)
    put(alice, DUP)
    for day in DAYS[:3]:
        put(alice, KEY.replace("Monday", day))
    for i in range(3):
        put(alice, f"Standup {i}: the build is green again", type="episode")
    put(alice, "Scratch: try the new linter", type="scratch", importance=1)
    clock.advance(90 * DAY)  # old enough for the scratch note to be pruned

    report = reflect(alice, reconciler=FakeReconciler({}), reasoner=FakeReasoner())

    assert [s.step for s in report.steps] == list(STEPS)
    assert not report.interrupted and report.stopped_in is None and report.run_id.startswith("rf_")
    assert report.merged == 1
    assert report.linked == count(eng, "SELECT count(*) FROM engram_edges WHERE type = 'related'") > 0
    assert report.abstracted == 1
    assert report.rescored >= 10
    assert report.pruned >= 1 and report.step("prune").note
    assert all(s.duration_s >= 0 and s.skipped is None for s in report.steps)
    assert report.duration_s >= sum(s.duration_s for s in report.steps) * 0.99
    assert report.reflection_rows_share == pytest.approx(alice.stats().reflection_rows_share)
    assert report.reflection_rows_share is not None and report.reflection_rows_share > 0
    assert report.reflection_reads_share == 0.0


def test_a_full_run_archives_nothing_by_decay_unless_the_policy_says_so(alice: Agent, clock: FixedClock) -> None:
    """What a user stored does not disappear because nobody read it: a full reflect() leaves
    decayed memories alone by default; asking for the prune step (or Agent.prune) archives them."""
    fact = put(alice, "The office wifi password is tulip42")
    clock.advance(42 * DAY)  # unread for six weeks, default importance
    report = reflect(alice)
    assert report.pruned == 0 and "archiving by decay is off" in (report.step("prune").skipped or "")
    assert alice.get(fact.id, touch=False).archived is False
    assert [h.memory.id for h in alice.recall("wifi password", k=1)] == [fact.id]
    clock.advance(200 * DAY)  # the recall above rehearsed it: it fades more slowly now
    explicit = Reflector(alice).reflect(steps=["prune"])
    assert explicit.pruned == 1
    assert alice.recall("wifi password", k=1).hits == ()
    assert [h.memory.id for h in alice.recall("wifi password", k=1, include_archived=True)] == [fact.id]
    assert [m.id for m in alice.memories(include_archived=True) if m.archived] == [fact.id]
    assert alice.restore(fact.id).archived is False
    assert [h.memory.id for h in alice.recall("wifi password", k=1)] == [fact.id]


def test_restore_is_for_archived_memories_this_agent_may_write(eng: DynamicMemoryEngine, alice: Agent) -> None:
    mine = put(alice, "a note to keep")
    assert alice.restore(mine.id).id == mine.id  # not archived: returned as it is
    theirs = eng.agent("bob").remember("bob's private note")
    with pytest.raises(NotFound):
        alice.restore(theirs.id)
    gone = put(alice, "a note to forget")
    alice.forget(gone.id)
    with pytest.raises(NotFound):
        alice.restore(gone.id)


def test_without_an_embedder_merge_takes_only_the_same_text_and_link_is_skipped(
    make_engine: Callable[..., DynamicMemoryEngine],
) -> None:
    with make_engine("plain", memory_embedder=None) as plain:
        me = plain.agent("alice")
        old = put(me, "The office wifi password is tulip42")
        new = put(me, "The office wifi password is orchid77")
        me.link(new.id, old.id, "contradicts")
        key = put(me, KEY)
        dup = put(me, DUP)  # the same text but for case and punctuation (put stores it: dedup off)
        again = put(me, KEY, importance=9)
        shared = put(me, KEY, shared=True)  # another owner: never merged with alice's own
        bob = plain.agent("bob")
        theirs = put(bob, KEY)  # another agent's: not in alice's scope
        merged = Reflector(me).merge()
        assert merged.merged == 2 and "same text" in (merged.step("merge").note or "")
        survivor = me.get(key.id, touch=False)
        assert not survivor.archived and survivor.importance == 9.0  # the oldest keeps, the highest scores
        assert me.get(dup.id, touch=False).archived and me.get(again.id, touch=False).archived
        assert not me.get(shared.id, touch=False).archived and not bob.get(theirs.id, touch=False).archived
        assert edges_of(me, key.id, EdgeType.REFINES) == sorted(
            [(dup.id, key.id, "refines", 1.0), (again.id, key.id, "refines", 1.0)]
        )
        report = Reflector(me, reconciler=FakeReconciler()).reflect()
        assert report.merged == 0 and "no memory embedder" in (report.step("link").skipped or "")
        assert report.reconciled == 1 and "contradicts edges only" in (report.step("reconcile").note or "")
        assert report.rescored > 0


class _Anisotropic:
    """The fake embedder pushed towards one common direction: unrelated texts land at cosine ~0.9."""

    def __init__(self) -> None:
        self.inner = fake_embedder()
        rng = np.random.default_rng(7)
        c = rng.standard_normal(self.inner.dim).astype(np.float32)
        self.common = c / np.linalg.norm(c)

    @property
    def name(self) -> str:
        return "anisotropic-test@1"

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed(self, texts: Sequence[str]) -> Any:
        v = self.inner.embed(texts) + 3.0 * self.common
        return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def test_an_anisotropic_embedder_is_centred_before_thresholds_apply(
    make_engine: Callable[..., DynamicMemoryEngine],
) -> None:
    emb: Embedder = _Anisotropic()
    vecs = emb.embed(list(FILLER))
    assert float(vecs[0] @ vecs[1]) > 0.85  # unrelated texts look alike here
    counts = {}
    for center in (None, False):
        with make_engine(f"a{center}", memory_embedder=emb) as e:
            me = e.agent("alice")
            fillers(me)
            put(me, KEY)
            put(me, DUP)
            report = Reflector(me, ReflectionConfig(center=center)).reflect(steps=["merge", "link"])
            counts[center] = (report.merged, report.linked, report.step("link").note)
    merged, linked, note = counts[None]
    assert merged == 1 and linked == 0 and "centred" in (note or "")
    assert counts[False][1] >= 10  # uncentred, unrelated pairs become "neighbours"


# -- interruption -----------------------------------------------------------------------------


def _pairs_store(agent: Agent, clock: FixedClock) -> None:
    for topic in ("billing", "payments", "search", "ledger"):
        put(agent, f"The deploy key for the {topic} service rotates every Monday at noon UTC", importance=3)
        clock.advance(1)
        put(agent, f"the deploy key for the {topic} service rotates every monday at noon utc!", importance=6)
        clock.advance(1)
    fillers(agent)


def _state(agent: Agent) -> list[tuple[str, bool, float, int]]:
    return sorted(
        (m.content, m.archived, round(m.importance, 9), m.strength) for m in agent.memories(include_archived=True)
    )


def test_an_interrupted_run_commits_every_finished_item_and_converges(
    make_engine: Callable[..., DynamicMemoryEngine], eng: DynamicMemoryEngine, alice: Agent, clock: FixedClock
) -> None:
    _pairs_store(alice, clock)
    archived = "SELECT coalesce(sum(archived), 0) FROM engram_memories"

    report = Reflector(alice).reflect(should_stop=lambda: count(eng, archived) >= 2)

    assert report.interrupted and report.stopped_in == "merge" and report.merged == 2
    assert report.step("merge").interrupted
    assert [s.skipped for s in report.steps[1:]] == ["interrupted before this step"] * (len(STEPS) - 1)
    # every processed merge is whole: archived, folded, and linked by `refines`
    gone = [m for m in alice.memories(include_archived=True) if m.archived]
    assert len(gone) == 2
    for m in gone:
        refines = edges_of(alice, m.id, EdgeType.REFINES)
        assert len(refines) == 1 and alice.get(refines[0][1], touch=False).importance == 6.0
    assert count(eng, "SELECT count(*) FROM engram_edges WHERE type = 'related'") == 0

    Reflector(alice).reflect()  # the next run picks up where this one stopped

    clock2 = FixedClock()
    with make_engine("fresh", clock=clock2, memory_embedder=fake_embedder()) as fresh:
        other = fresh.agent("alice")
        _pairs_store(other, clock2)
        clock2.set(clock.now)
        Reflector(other).reflect()
        assert _state(other) == _state(alice)


def test_a_threading_event_stops_the_run_after_the_current_item(eng: DynamicMemoryEngine, alice: Agent) -> None:
    for i in range(6):
        put(alice, f"Deploy {i} of the search cluster rolled back", type="episode")
    stop = threading.Event()
    reasoner = FakeReasoner(entered=stop)  # the model call itself asks to stop
    cfg = ReflectionConfig(gist_min_episodes=3, gist_max_episodes=3)
    report = Reflector(alice, cfg, reasoner=reasoner).reflect(should_stop=stop)
    assert report.interrupted and report.stopped_in == "abstract"
    assert report.abstracted == 1 and len(reasoner.calls) == 1  # the paid-for gist is kept; no second call
    assert report.step("prune").skipped == "interrupted before this step"
    assert len(alice.memories(types=["reflection"])) == 1


def test_an_interrupted_rescore_commits_exactly_the_rows_it_processed(
    eng: DynamicMemoryEngine, alice: Agent, clock: FixedClock
) -> None:
    mems = [put(alice, f"{text} ({i})") for i, text in enumerate(FILLER * 2)]  # nobody scored them
    clock.advance(DAY)
    calls = iter(range(1000))
    report = Reflector(alice, ReflectionConfig(batch=2)).rescore(should_stop=lambda: next(calls) >= 5)
    step = report.step("rescore")
    assert step.interrupted and 0 < step.examined < len(mems)
    changed = [m for m in mems if alice.get(m.id, touch=False).importance != 5]
    assert len(changed) == step.changed == step.examined  # each processed row committed, nothing more


def test_include_shared_false_leaves_the_tenant_s_shared_memories_alone(alice: Agent, clock: FixedClock) -> None:
    a = put(alice, KEY, shared=True)
    clock.advance(1)
    put(alice, DUP, shared=True)
    report = Reflector(alice, ReflectionConfig(include_shared=False)).reflect(steps=["merge", "rescore"])
    assert report.merged == 0 and report.rescored == 0
    assert Reflector(alice).merge().merged == 1  # the default covers them
    assert not alice.get(a.id, touch=False).archived


# -- one run per tenant -----------------------------------------------------------------------


@pytest.mark.sqlite_only  # the lock file beside the database; the lock itself is in the port contract
def test_a_second_run_on_the_tenant_is_refused_from_threads_and_processes(
    eng: DynamicMemoryEngine, alice: Agent
) -> None:
    for i in range(3):
        put(alice, f"Incident {i}: the queue backed up", type="episode")
    put(alice, KEY)
    put(alice, DUP)
    entered, release = threading.Event(), threading.Event()
    results: list[object] = []
    worker = threading.Thread(
        target=lambda: results.append(
            Reflector(alice, reasoner=FakeReasoner(entered=entered, release=release)).reflect(steps=["abstract"])
        )
    )
    worker.start()
    try:
        assert entered.wait(10)
        before = snapshot(eng)
        for agent in (alice, eng.agent("bob")):  # same tenant, any agent
            with pytest.raises(TransactionError, match="already running on tenant 'default'"):
                Reflector(agent).reflect()
        script = textwrap.dedent(
            f"""
            from engramdb import DynamicMemoryEngine, TransactionError
            from engramdb.memories.reflection import Reflector
            with DynamicMemoryEngine({str(eng.path)!r}, memory_embedder=None) as e:
                try:
                    Reflector(e.agent("carol")).merge()
                except TransactionError as exc:
                    print("refused:", exc)
            """
        )
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
        assert out.stdout.startswith("refused: a reflection is already running"), out.stderr
        assert "alice rf_" in out.stdout  # the message names the holder
        assert snapshot(eng) == before  # the refused runs wrote nothing
        # another tenant is not blocked
        assert Reflector(eng.agent("alice", tenant="other")).merge().merged == 0
    finally:
        release.set()
        worker.join(10)
    assert len(results) == 1 and getattr(results[0], "abstracted", None) == 1
    assert Reflector(alice).merge().merged == 1  # the lock is free again
    assert lock_path(eng.path, "default").exists()


# -- bad input --------------------------------------------------------------------------------


def test_bad_input_is_a_clear_error(alice: Agent) -> None:
    with pytest.raises(ValidationError, match="unknown reflection step"):
        Reflector(alice).reflect(steps=["dedupe"])
    with pytest.raises(ValidationError, match="reasoner must have"):
        Reflector(alice, reasoner=lambda texts: "x")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="should_stop"):
        Reflector(alice).reflect(should_stop=True)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="link_threshold must be below"):
        ReflectionConfig(link_threshold=0.96)
    with pytest.raises(ConfigError, match="max_new_edges"):
        ReflectionConfig(max_new_edges=-1)
    assert Reflector(alice).reflect(steps=["rescore"]).step("merge").skipped == "not requested"
