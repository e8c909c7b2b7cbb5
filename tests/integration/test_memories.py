"""Typed memories through the agent handle: writes, validation, recall, spreading, explain, stats."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest

from engramdb import Confidentiality, DynamicMemoryEngine, NotFound, ValidationError
from engramdb.agent import Agent
from engramdb.embeddings.hashing import HashingEmbedder
from engramdb.storage.sqlite.backend import SqliteBackend
from engramdb.testing import FixedClock, fake_embedder
from tests.rawsql import raw_count

DAY = 86_400.0


def _count(eng: DynamicMemoryEngine, table: str) -> int:
    return raw_count(eng, f"SELECT count(*) FROM {table}")


# -- writing ----------------------------------------------------------------------------------


def test_remember_fills_the_record(me: Agent, clock: FixedClock) -> None:
    m = me.remember(
        "The deploy key rotates every Monday. Ask ops first!", importance=7, salience=0.4, tags=["ops"], title="keys"
    )
    assert m.id.startswith("alice:") and m.owner == "alice" and m.author == "alice" and m.tenant == "default"
    assert (m.importance, m.salience, m.confidence, m.strength) == (7.0, 0.4, 1.0, 0)
    assert m.n_chars == 51 and m.n_sentences == 2 and m.n_tokens == 13
    assert m.created_at == m.recorded_at == clock.now and m.tags == ("ops",) and m.status is None
    assert me.remember("shared fact", shared=True).owner == ""
    assert me.remember("call bob", type="todo").status == "open"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"content": ""}, "content is empty"),
        ({"content": "   "}, "content is empty"),
        ({"content": 3}, "content must be a str"),
        ({"content": "x", "type": "fact"}, "unknown memory type 'fact'"),
        ({"content": "x", "importance": 11}, "importance must be from 0 to 10"),
        ({"content": "x", "salience": -0.1}, "salience must be from 0 to 1"),
        ({"content": "x", "confidence": float("nan")}, "confidence must be a number"),
        ({"content": "x", "status": "done"}, "status is for todo memories only"),
        ({"content": "x", "type": "todo", "status": "maybe"}, "unknown todo status"),
        ({"content": "x", "valid_from": 10, "valid_to": 5}, "valid_to .* is before valid_from"),
        ({"content": "x", "tags": "ops"}, "tags must be a list"),
    ],
)
def test_bad_input_is_a_clear_error_and_writes_nothing(
    eng: DynamicMemoryEngine, me: Agent, kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        me.remember(**kwargs)  # type: ignore[call-overload]
    assert _count(eng, "engram_memories") == 0


def test_remember_many_is_all_or_nothing(eng: DynamicMemoryEngine, me: Agent) -> None:
    with pytest.raises(ValidationError, match="unknown memory field"):
        me.remember_many([{"content": "fine"}, {"content": "bad", "colour": "red"}])
    assert _count(eng, "engram_memories") == 0
    assert len(me.remember_many([{"content": f"note {i}"} for i in range(20)])) == 20


def test_private_memories_are_invisible_and_indistinguishable_from_missing(eng: DynamicMemoryEngine, me: Agent) -> None:
    secret = me.remember("alice's private plan")
    bob = eng.agent("bob")
    with pytest.raises(NotFound) as invisible:
        bob.get(secret.id)
    with pytest.raises(NotFound) as missing:
        bob.get("alice:0000000000000000")
    assert str(invisible.value).replace(secret.id, "ID") == str(missing.value).replace("alice:0000000000000000", "ID")
    other_tenant = eng.agent("alice", tenant="globex")
    with pytest.raises(NotFound):
        other_tenant.get(secret.id)
    assert bob.recall("private plan").hits == ()


def test_update_keeps_the_old_version_and_reindexes(me: Agent) -> None:
    m = me.remember("the server lives in Frankfurt")
    me.update(m.id, content="the server moved to Dublin", importance=9)
    now = me.get(m.id, touch=False)
    assert now.content == "the server moved to Dublin" and now.version == 2 and now.importance == 9
    assert [(v.version, v.content) for v in me.history(m.id)] == [(1, "the server lives in Frankfurt")]
    assert [h.memory.id for h in me.search("Dublin")] == [m.id]
    assert me.search("Frankfurt", k=1)[0].components.bm25 == 0.0  # no longer a lexical match


def test_status_is_for_todos_only(me: Agent) -> None:
    todo = me.remember("renew the certificate", type="todo")
    assert me.update(todo.id, status="done").status == "done"
    fact = me.remember("the sky is blue")
    with pytest.raises(ValidationError, match="todo memories only"):
        me.update(fact.id, status="done")


def test_link_validation(eng: DynamicMemoryEngine, me: Agent) -> None:
    a, b = me.remember("a"), me.remember("b")
    assert me.link(a.id, b.id, "causes", 0.5).type == "causes"
    with pytest.raises(ValidationError, match="unknown edge type"):
        me.link(a.id, b.id, "likes")
    with pytest.raises(ValidationError, match="weight"):
        me.link(a.id, b.id, "related", 2.0)
    with pytest.raises(ValidationError, match="itself"):
        me.link(a.id, a.id)
    hidden = eng.agent("bob").remember("bob's")
    with pytest.raises(NotFound):
        me.link(a.id, hidden.id)
    with pytest.raises(NotFound):
        me.link(a.id, "nope")
    assert [(e.source, e.target) for e in me.edges(a.id)] == [(a.id, b.id)]


# -- recall -----------------------------------------------------------------------------------


def test_recall_ranks_and_reinforces(me: Agent) -> None:
    key = me.remember("The deploy key rotates every Monday", importance=7)
    me.remember("Lunch is at noon on Fridays", importance=2)
    r = me.recall("when does the deploy key rotate", k=2)
    assert r[0].memory.id == key.id and r[0].rank == 1 and r[0].source in ("lexical", "both")
    assert r.recall_id is not None and r.recall_id.startswith("rc_")
    assert me.get(key.id, touch=False).strength == 1


def test_injected_reads_log_but_never_reinforce(me: Agent) -> None:
    m = me.remember("standing instruction: reply in English")
    before = me.get(m.id, touch=False)
    me.recall("reply English", channel="injected")
    after = me.get(m.id, touch=False)
    assert after.strength == before.strength and after.recent_accesses == before.recent_accesses
    assert [a.channel for a in me.accesses(m.id)] == ["created", "injected"]


def test_dry_run_and_explain_touch_nothing(eng: DynamicMemoryEngine, me: Agent) -> None:
    for i in range(12):
        me.remember(f"fact number {i} about rotation keys", dedup=False)
    accesses, recalls = _count(eng, "engram_access"), _count(eng, "engram_recalls")
    ex = me.explain("rotation keys", k=3)
    assert ex.recall_id is None and len(ex.hits) == 3 and len(ex.near_misses) == 5
    assert all(not n.selected for n in ex.near_misses) and ex.hits[-1].score >= ex.near_misses[0].score
    assert (_count(eng, "engram_access"), _count(eng, "engram_recalls")) == (accesses, recalls)


def test_explain_replays_a_past_recall_from_the_stream(me: Agent, clock: FixedClock) -> None:
    for i in range(8):
        me.remember(f"the key rotation schedule entry {i}", importance=i, dedup=False)
    r = me.recall("key rotation schedule", k=3)
    clock.advance(DAY)
    me.remember("the key rotation schedule changed completely", importance=10)
    ex = me.explain(r.recall_id or "")
    assert ex.recall_id == r.recall_id and ex.query == "key rotation schedule"
    assert [e.memory_id for e in ex.hits] == [h.memory.id for h in r]
    assert [e.components for e in ex.hits] == [h.components for h in r]
    assert len(ex.near_misses) == 5
    assert me.explain(r).recall_id == r.recall_id
    with pytest.raises(ValidationError, match="Recall or a str"):
        me.explain(me.explain("key"))  # type: ignore[arg-type]


def test_the_recall_log_keeps_entries_as_lists_and_replays_them_exactly(
    eng: DynamicMemoryEngine, me: Agent, clock: FixedClock
) -> None:
    """Each hit and near miss is logged as a list with the component names once per record (not
    an object repeating its keys), and the replay is the recall's explanation, float for float."""
    for i in range(8):
        me.remember(f"the key rotation schedule entry {i}", importance=i, dedup=False)
    live = me.explain("key rotation schedule", k=3)  # a dry run at the same moment: nothing logged
    r = me.recall("key rotation schedule", k=3)
    record = eng._backend.recalls.get("default", me.agent_id, r.recall_id or "")
    assert record is not None
    assert all(isinstance(e, list) for e in (*record.params["hits"], *record.near_misses))
    assert record.params["components"] == [
        "rel",
        "rec",
        "imp",
        "spread",
        "cos",
        "cue",
        "bm25",
        "when",
        "entity",
        "ctx",
        "dated",
        "rerank",
    ]
    clock.advance(DAY)
    replay = me.explain(r.recall_id or "")
    assert (replay.hits, replay.near_misses, replay.weights) == (live.hits, live.near_misses, live.weights)
    assert len(replay.near_misses) == 5


def test_explain_of_another_agents_recall_is_not_replayed(eng: DynamicMemoryEngine, me: Agent) -> None:
    me.remember("shared budget numbers", shared=True)
    r = me.recall("budget numbers")
    assert r.recall_id is not None
    with pytest.raises(NotFound) as theirs:
        eng.agent("bob").explain(r.recall_id)  # not replayed, and not run as a query text either
    with pytest.raises(NotFound) as unknown:
        eng.agent("bob").explain("rc_0123456789abcdef")
    # another agent's recall reads exactly like an unknown id
    assert str(theirs.value).replace(r.recall_id, "X") == str(unknown.value).replace("rc_0123456789abcdef", "X")
    assert "unknown id" in str(unknown.value)
    assert me.explain(r.recall_id).recall_id == r.recall_id
    assert me.explain("rc_ budget numbers").recall_id is None  # any other text is a dry-run query


def test_types_filter_and_k(me: Agent) -> None:
    me.remember("deploy on friday", type="episode")
    todo = me.remember("deploy the hotfix", type="todo")
    assert [h.memory.id for h in me.recall("deploy", types=["todo"])] == [todo.id]
    with pytest.raises(ValidationError, match="unknown memory type"):
        me.recall("deploy", types=["nope"])
    with pytest.raises(ValidationError, match="k must be"):
        me.recall("deploy", k=0)


def test_validity_time_and_as_of(me: Agent, clock: FixedClock) -> None:
    t0 = clock.now
    me.remember("the office is in Berlin", valid_from=t0 - 100 * DAY, valid_to=t0 - DAY)
    me.remember("the office is in Lisbon", valid_from=t0 - DAY)
    assert [h.memory.content for h in me.search("office")] == ["the office is in Lisbon"]
    assert [h.memory.content for h in me.search("office", as_of=t0 - 50 * DAY)] == ["the office is in Berlin"]


def test_spreading_brings_in_linked_memories(me: Agent) -> None:
    a = me.remember("incident INC-42 took down checkout")
    b = me.remember("root cause was an expired certificate")
    me.link(a.id, b.id, "causes")
    r = me.recall("INC-42", k=2, hops=1)
    assert [h.memory.id for h in r] == [a.id, b.id]
    assert r[1].source in ("spread", "vector") and r[1].components.spread > 0
    assert next(h.memory.id for h in me.recall("INC-42", k=2, hops=0)) == a.id


def test_spreading_neither_leaks_nor_relays(eng: DynamicMemoryEngine, me: Agent) -> None:
    bob = eng.agent("bob")
    own1 = me.remember("zebra project kickoff notes")
    foreign = bob.remember("bob's secret salary negotiation")
    own2 = me.remember("unrelated grocery list")
    # Edges that no agent could create through the API (neither sees both ends) — planted directly.
    n = {m.id: eng._backend.memories.key_of("default", m.id) for m in (own1, foreign, own2)}
    eng._backend.edges.put(
        "default",
        [(n[own1.id], n[foreign.id], "causes", 1.0), (n[foreign.id], n[own2.id], "causes", 1.0)],  # type: ignore[list-item]
        now=0.0,
        by="test",
        replace=False,
    )
    ex = me.explain("zebra kickoff", k=5, hops=3)
    got = {e.memory_id: e for e in (*ex.hits, *ex.near_misses)}
    assert foreign.id not in got  # no leak: own -> foreign
    assert own2.id not in got or got[own2.id].components.spread == 0.0  # no relay: own -> foreign -> own


def test_shared_memory_does_not_spread_into_a_private_one(eng: DynamicMemoryEngine, me: Agent) -> None:
    bob = eng.agent("bob")
    shared = bob.remember("team offsite in Porto", shared=True)
    private = bob.remember("bob will skip the offsite", type="episode")
    bob.link(shared.id, private.id, "related")
    assert private.id in [h.memory.id for h in bob.recall("offsite Porto", k=5)]
    ids = [e.memory_id for e in (*me.explain("offsite Porto", k=5).hits, *me.explain("offsite Porto", k=5).near_misses)]
    assert shared.id in ids and private.id not in ids
    assert me.edges(shared.id) == []  # the edge's other end is invisible to alice


def test_access_ring_keeps_every_access_in_the_base_level(
    eng: DynamicMemoryEngine, me: Agent, clock: FixedClock
) -> None:
    m = me.remember("frequently used fact")
    for _ in range(100):
        clock.advance(60)
        me.get(m.id)
    got = me.get(m.id, touch=False)
    assert len(got.recent_accesses) == eng.scoring.ring_size
    assert got.older_count == 101 - eng.scoring.ring_size  # created + 100 gets; touch=False does not count
    assert got.access_count == 101 and len(me.accesses(m.id)) == 101


def test_stats(eng: DynamicMemoryEngine, me: Agent) -> None:
    used = me.remember("used fact about zebras", shared=True)
    me.remember("never read at all")
    me.recall("zebras", k=1)
    eng.agent("bob").recall("zebras", k=1)
    me.recall("zebras", k=1, channel="injected")
    s = me.stats()
    assert s.memories == 2 and s.by_type == {"info": 2} and s.never_fetched_share == 0.5
    assert s.reads == 2 and s.cross_owner_reads == 1 and s.injected == 1 and s.recalls == 2
    assert s.fetch_concentration == 1.0
    assert used.id


def test_lexical_only_without_an_embedder(make_engine: Callable[..., DynamicMemoryEngine]) -> None:
    e = make_engine(memory_embedder=None)
    a = e.agent("alice")
    m = a.remember("the deploy key rotates weekly")
    a.remember("other things")
    r = a.recall("deploy key")
    assert r[0].memory.id == m.id and r[0].components.cos == 0.0 and r[0].source == "lexical"
    e.close()


def test_without_an_embedder_dedup_matches_the_same_text(make_engine: Callable[..., DynamicMemoryEngine]) -> None:
    """No vectors, so no cosine: the same text but for case, white space and punctuation is the
    duplicate, under the rules the vector path keeps (type, owner, level, visibility, order)."""
    e = make_engine(memory_embedder=None)
    a = e.agent("alice")
    first = a.remember("The deploy key rotates weekly.")
    again = a.remember("the deploy key  rotates weekly")
    assert again.id == first.id and again.access_count == 2 and again.strength == 1  # reinforced
    assert a.remember("The deploy key rotates monthly.").id != first.id  # another text
    assert a.remember("The deploy key rotates weekly.", type="skill").id != first.id  # another type
    shared = a.remember("The deploy key rotates weekly.", shared=True)
    assert shared.id != first.id and shared.owner == ""  # another owner: the shared copy is new
    assert a.remember("The deploy key rotates weekly.", dedup=False).id != first.id
    # A match must be at or above the new text's level: a public copy does not absorb a secret one.
    secret = a.remember("The deploy key rotates weekly.", confidentiality=Confidentiality.RESTRICTED)
    assert secret.id != first.id and secret.confidentiality == Confidentiality.RESTRICTED
    # What the writer cannot see is never its match.
    hidden = a.remember("a restricted sentence", confidentiality=Confidentiality.RESTRICTED)
    capped = e.agent("alice", cap=Confidentiality.INTERNAL)
    assert capped.remember("a restricted sentence").id != hidden.id
    assert e.agent("bob").remember("the deploy key rotates weekly").id != first.id  # alice's private one
    assert e.agent("bob").remember("the deploy key rotates weekly", shared=True).id == shared.id
    # The same words about another person are another fact; about the same one, the same.
    dana = a.remember("Went to the dentist on Monday.", entities=["Dana"])
    assert a.remember("went to the dentist on monday", entities=["Lee"]).id != dana.id
    assert a.remember("went to the dentist on Monday", entities=["DANA"]).id == dana.id
    assert a.remember("went to the dentist on Monday", entities=[]).id == dana.id  # names no one new
    # A todo is a new commitment each time it is said.
    t1, t2 = a.remember("renew the cert", type="todo"), a.remember("renew the cert", type="todo")
    assert t1.id != t2.id
    # Within one batch, as one call at a time: the second copy merges into the first of the batch.
    batch = a.remember_many(
        [{"content": "ship it friday"}, {"content": "ship it,  friday!"}, {"content": "ship it monday"}]
    )
    assert batch[0].id == batch[1].id != batch[2].id
    e.close()


@pytest.mark.sqlite_only
def test_the_hash_index_exists_only_once_a_lookup_by_text_needs_it(tmp_path: Path) -> None:
    """With an embedder no query reads the (tenant, content_hash) index, so no write keeps it
    up to date; the first dedup without an embedder builds it, and from then on it is kept."""
    path = tmp_path / "m.db"

    def has_index() -> bool:
        with contextlib.closing(sqlite3.connect(path)) as raw:
            found = raw.execute("SELECT 1 FROM sqlite_master WHERE name = 'engram_memories_hash'").fetchone()
            return found is not None

    with DynamicMemoryEngine(path, memory_embedder=HashingEmbedder(dim=64)) as e:
        a = e.agent("alice")
        first = a.remember("The deploy key rotates weekly.")
        assert (
            a.remember_many([{"content": "ship it friday"}, {"content": "the deploy key rotates weekly"}])[1].id
            == first.id
        )
        assert not has_index()
    with DynamicMemoryEngine(path, memory_embedder=None) as e:
        a = e.agent("alice")
        assert a.remember("the deploy key  rotates weekly").id == first.id  # found through the index
        assert has_index()
        a.remember("a note written once the index is there")
    with DynamicMemoryEngine(path, memory_embedder=HashingEmbedder(dim=64)) as e:
        later = e.agent("alice").remember("another note, indexed by every writer now")
    with DynamicMemoryEngine(path, memory_embedder=None) as e:
        assert e.agent("alice").remember("Another note, indexed by every writer now!").id == later.id
        assert has_index()


def test_dedup_keeps_the_same_words_about_another_entity_apart(make_engine: Callable[..., DynamicMemoryEngine]) -> None:
    e = make_engine(memory_embedder=HashingEmbedder(dim=64))
    a = e.agent("alice")
    mel = a.remember("went on a camping trip with the kids", entities=["Melanie"])
    car = a.remember("went on a camping trip with the kids", entities=["Caroline"])
    assert car.id != mel.id and car.entities == ("Caroline",)
    assert a.remember("went on a camping trip with the kids", entities=["melanie"]).id == mel.id
    batch = a.remember_many(
        [{"content": "flew to Oslo", "entities": ["Ann"]}, {"content": "flew to Oslo", "entities": ["Bo"]}]
    )
    assert batch[0].id != batch[1].id
    e.close()


def test_memories_survive_reopen_and_other_processes_see_them(make_engine: Callable[..., DynamicMemoryEngine]) -> None:
    e1 = make_engine("p", memory_embedder=HashingEmbedder(dim=64))
    e2 = make_engine("p", memory_embedder=HashingEmbedder(dim=64))
    a1, a2 = e1.agent("alice"), e2.agent("alice")
    assert a2.recall("walrus").hits == ()
    m = a1.remember("the walrus sleeps on ice")
    assert [h.memory.id for h in a2.recall("walrus")] == [m.id]  # the other engine's cache refreshed
    assert next(h.source for h in a2.recall("sleeping walrus")) in ("both", "vector", "lexical")
    e1.close()
    e2.close()


def test_export_holds_what_the_agent_sees_and_nothing_else(eng: DynamicMemoryEngine, me: Agent) -> None:
    import json

    a = me.remember("alpha fact", tags=["x"])
    b = me.remember("beta fact", shared=True)
    me.link(a.id, b.id, "supports")
    hidden = eng.agent("bob").remember("bob's private fact")
    dump = me.export()
    assert [r["id"] for r in dump] == [a.id, b.id]
    assert dump[0]["edges"] == [
        {
            "source": a.id,
            "target": b.id,
            "type": "supports",
            "weight": 1.0,
            "created_at": dump[0]["edges"][0]["created_at"],
        }
    ]
    assert hidden.id not in json.dumps(dump)


def test_threads_remember_and_recall_at_once(eng: DynamicMemoryEngine) -> None:
    import threading

    errors: list[BaseException] = []
    stop = threading.Event()

    def writer(name: str) -> None:
        try:
            a = eng.agent(name)
            for i in range(120):
                a.remember(f"{name} note {i} about the quarterly deploy", dedup=i % 2 == 0)
        except BaseException as exc:
            errors.append(exc)

    def reader() -> None:
        try:
            a = eng.agent("reader")
            while not stop.is_set():
                a.recall("quarterly deploy", k=5)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(f"w{i}",)) for i in range(3)] + [
        threading.Thread(target=reader) for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads[:3]:
        t.join()
    stop.set()
    for t in threads[3:]:
        t.join()
    assert errors == []
    assert all(len(eng.agent(f"w{i}").memories()) == 120 for i in range(3))


def _run_threads(work: Callable[[int], None], count: int) -> list[BaseException]:
    import threading

    errors: list[BaseException] = []

    def run(j: int) -> None:
        try:
            work(j)
        except BaseException as exc:  # reported by the test, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(j,)) for j in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_concurrent_recalls_lose_no_access(make_engine: Callable[..., DynamicMemoryEngine]) -> None:
    """Every recall's reinforcement reaches the rings: ring + older count = access count for every
    memory, with threads of two engines (two connection pools on PostgreSQL) recalling at once.
    On PostgreSQL two recalls once read a ring before either wrote it, and the later commit
    dropped the other's access."""
    words = ["deploy", "release", "budget", "kafka", "latency", "review", "schema", "invoice"]
    one, two = make_engine(memory_embedder=fake_embedder()), make_engine(memory_embedder=fake_embedder())
    items = [
        {"content": f"note {i}: {words[i % 8]} {words[(i * 3 + 1) % 8]} {words[(i * 5 + 2) % 8]}"} for i in range(40)
    ]
    one.agent("a").remember_many(items, dedup=False)
    queries = ["deploy release", "budget invoice", "kafka latency", "schema review", "release latency"]

    def work(j: int) -> None:
        me = (one if j % 2 else two).agent("a")
        for i in range(12):
            me.recall(queries[(i + j) % len(queries)], k=5)

    assert _run_threads(work, 6) == []
    memories = one.agent("a").memories()
    assert sum(m.access_count for m in memories) == 40 + 6 * 12 * 5  # creation, and 5 hits a recall
    assert [m.id for m in memories if len(m.recent_accesses) + m.older_count != m.access_count] == []


def test_concurrent_updates_of_one_memory_keep_every_version(make_engine: Callable[..., DynamicMemoryEngine]) -> None:
    """Threads updating one memory at once: each update replaces the text it read under the write
    lock, so the versions run 1, 2, 3, … without a gap or a clash (on PostgreSQL two updates
    once kept the same version, and the second failed on the duplicate key)."""
    eng = make_engine(memory_embedder=fake_embedder())
    m = eng.agent("a").remember("the deploy window is monday")

    def work(j: int) -> None:
        me = eng.agent("a")
        for i in range(8):
            me.update(m.id, content=f"the deploy window is day {j}-{i}")

    assert _run_threads(work, 4) == []
    me = eng.agent("a")
    assert me.get(m.id, touch=False).version == 1 + 4 * 8
    assert sorted(v.version for v in me.history(m.id)) == list(range(1, 4 * 8 + 1))


@pytest.mark.sqlite_only
def test_terms_written_by_an_older_stemmer_are_restemmed_on_open(tmp_path: Path, clock: FixedClock) -> None:
    path = tmp_path / "m.db"
    with DynamicMemoryEngine(path, clock=clock, memory_embedder=None) as e:
        m = e.agent("ann").remember("the rotating keys of the ports", dedup=False)
    db = sqlite3.connect(path)
    db.execute("UPDATE engram_memories SET terms = 'keys of port rotating the'")  # the old light stems
    db.execute("DELETE FROM engram_migrations WHERE version >= 9")
    db.commit()
    db.close()
    with DynamicMemoryEngine(path, clock=clock, memory_embedder=None) as e:
        a = e.agent("ann")
        assert [h.memory.id for h in a.search("rotate key", k=3)] == [m.id]  # Porter2: rotat, key
        backend = cast(SqliteBackend, e._backend)  # a file engine's
        row = backend.store.connection("engine").raw.execute("SELECT terms FROM engram_memories").fetchone()
        assert row[0] == "key port rotat"  # stopwords are not stored


def test_an_access_does_not_re_add_an_unchanged_vector(eng: DynamicMemoryEngine, me: Agent) -> None:
    kept = me.remember("the deploy key rotates on Fridays")
    me.recall("deploy key")  # loads the cache
    channel = eng._runtime.vectors
    assert channel is not None
    added: list[list[int]] = []
    upsert = channel.index.upsert

    def spy(keys, vectors):  # type: ignore[no-untyped-def]
        added.append(keys.tolist())
        return upsert(keys, vectors)

    channel.index.upsert = spy  # type: ignore[method-assign]
    me.recall("deploy key")  # the last recall touched `kept`: only its ring changed
    me.recall("deploy key")
    assert added == []
    me.update(kept.id, content="the deploy key rotates on Mondays")
    me.recall("deploy key")
    assert len(added) == 1  # a new text is a new vector


def test_another_agents_query_text_is_not_shown_in_accesses(eng: DynamicMemoryEngine) -> None:
    alice, bob = eng.agent("alice"), eng.agent("bob")
    shared = alice.remember("the quarterly board meeting is on Thursday", shared=True)
    bob.recall("board meeting before my secret layoff announcement", trace_ref="bob-trace-7")
    theirs = [a for a in alice.accesses(shared.id) if a.reader == "bob"]
    assert theirs and all(a.query is None and a.trace_ref is None for a in theirs)
    assert all(a.score is not None for a in theirs)  # who, when, how it scored: still there
    mine = [a for a in bob.accesses(shared.id) if a.reader == "bob"]
    assert mine[0].query == "board meeting before my secret layoff announcement"
    assert mine[0].trace_ref == "bob-trace-7"


def test_a_restatement_in_capitals_is_stored_once(make_engine: Callable[..., DynamicMemoryEngine]) -> None:
    """The same text in capitals (or title case) is the same statement: it reinforces the memory,
    one call at a time and within a batch. Before, its capitalised words counted as names the
    lower-case memory lacked, and a second copy was stored."""
    e = make_engine(memory_embedder=HashingEmbedder(dim=64))
    a = e.agent("alice")
    low = a.remember("we deploy the billing api on friday")
    for text in (
        "WE DEPLOY THE BILLING API ON FRIDAY",
        "We Deploy The Billing Api On Friday",
        "we deploy the billing api on friday!",
    ):
        assert a.remember(text).id == low.id
    again = a.remember_many(
        [{"content": "WE DEPLOY THE BILLING API ON FRIDAY"}, {"content": "we deploy the billing api on friday"}]
    )
    assert [m.id for m in again] == [low.id, low.id]
    batch = a.remember_many(
        [{"content": "the pager rota starts monday"}, {"content": "THE PAGER ROTA STARTS MONDAY"},
         {"content": "The pager rota starts Monday."}]
    )  # fmt: skip
    assert batch[0].id == batch[1].id == batch[2].id
    assert a.browse(limit=100).total == 2  # two statements, each stored once
    e.close()
