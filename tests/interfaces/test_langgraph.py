"""The LangGraph store adapter behaves like LangGraph's own InMemoryStore, namespaces kept apart."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, cast

import pytest

from engramdb import Confidentiality, DynamicMemoryEngine, ValidationError
from engramdb.testing import fake_embedder

pytest.importorskip("langgraph.store.base", reason="needs the langgraph extra")
from langgraph.store.base import BaseStore, Item, TTLConfig
from langgraph.store.memory import InMemoryStore

from engramdb.adapters.langgraph import EngramStore, namespace_agent


@pytest.fixture
def store(make_engine: Callable[..., DynamicMemoryEngine]) -> EngramStore:
    return EngramStore(make_engine(memory_embedder=fake_embedder()), tenant="acme")


def _plain(items: Any) -> Any:
    """Results without timestamps (the two stores stamp at different instants)."""
    if isinstance(items, list):
        return [_plain(i) for i in items]
    if isinstance(items, Item):
        return (items.namespace, items.key, items.value)
    return items


def _script(s: BaseStore) -> list[Any]:
    out: list[Any] = []
    s.put(("users", "john_doe", "prefs"), "theme", {"text": "prefers dark mode", "n": 3})
    s.put(("users", "john-doe", "prefs"), "theme", {"text": "prefers light mode", "n": 5})
    s.put(("users", "john_doe", "prefs"), "food", {"text": "likes ramen", "tags": ["food"], "n": 1})
    s.put(("users", "john_doe"), "name", {"text": "John Doe"})
    s.put(("users", "john_doe", "prefs", "deep"), "x", {"text": "deep value", "n": 9})
    s.put(("docs",), "readme", {"title": "Read me", "meta": {"lang": "en"}})
    s.put(("users", "john_doe", "prefs"), "theme", {"text": "prefers solarized", "n": 4})  # an update
    out.append(s.get(("users", "john_doe", "prefs"), "theme"))
    out.append(s.get(("users", "john-doe", "prefs"), "theme"))
    out.append(s.get(("users", "john_doe", "prefs"), "missing"))
    out.append(s.get(("users", 'john_doe","prefs'), "theme"))  # a label that looks like a separator
    s.put(("users", 'john_doe","prefs'), "fake", {"text": "not under john_doe"})
    out.append(s.search(("users", "john_doe")))
    out.append(s.search(("users", "john_doe", "prefs"), filter={"n": {"$gte": 2}}))
    out.append(s.search(("users",), filter={"tags": ["food"]}))
    out.append(s.search(("docs",), filter={"meta": {"lang": "en"}}))
    out.append(s.search(("users",), limit=2, offset=1))
    out.append(s.search(()))
    out.append(s.list_namespaces())
    out.append(s.list_namespaces(prefix=("users",), max_depth=2))
    out.append(s.list_namespaces(suffix=("prefs",)))
    out.append(s.list_namespaces(prefix=("users", "*", "prefs")))
    out.append(s.list_namespaces(limit=2, offset=1))
    s.delete(("users", "john_doe", "prefs"), "food")
    out.append(s.get(("users", "john_doe", "prefs"), "food"))
    out.append(s.search(("users", "john_doe", "prefs")))
    out.append(s.batch([]))
    return [_plain(x) for x in out]


def test_same_behaviour_as_langgraphs_in_memory_store(store: EngramStore) -> None:
    assert _script(store) == _script(InMemoryStore())


def test_async_and_batch(store: EngramStore) -> None:
    async def main() -> list[Any]:
        await store.aput(("a",), "k", {"text": "async value"})
        got = await store.aget(("a",), "k")
        found = await store.asearch(("a",))
        spaces = await store.alist_namespaces()
        await store.adelete(("a",), "k")
        return [got, found, spaces, await store.aget(("a",), "k")]

    got, found, spaces, gone = asyncio.run(main())
    assert got is not None and got.value == {"text": "async value"}
    assert [i.key for i in found] == ["k"] and spaces == [("a",)] and gone is None


def test_search_by_meaning_stays_inside_namespaces(store: EngramStore) -> None:
    store.put(("users", "john_doe"), "a", {"text": "John's favourite colour is green"})
    store.put(("users", "john-doe"), "a", {"text": "The other John's favourite colour is red"})
    store.put(("users", "jane"), "b", {"text": "Jane works on the billing service"})
    store.put(("users", "john_doe"), "n", {"text": "unindexed note about colour"}, index=False)
    hits = store.search(("users", "john_doe"), query="what colour does John like?")
    assert [h.key for h in hits] == ["a", "n"]  # the unindexed item comes after the ranked ones, unscored
    assert hits[0].value["text"].endswith("green") and hits[0].score is not None and hits[1].score is None
    everyone = store.search(("users",), query="favourite colour", limit=10)
    # Every namespace under the prefix is searched (like a vector store, weak matches score low).
    assert {(h.namespace, h.key) for h in everyone[:2]} == {(("users", "john_doe"), "a"), (("users", "john-doe"), "a")}
    assert [h.score for h in everyone if h.score is not None] == sorted(
        (h.score for h in everyone if h.score is not None), reverse=True
    )
    assert store.search(("users", "jane"), query="colour", filter={"text": {"$ne": "x"}})[0].key == "b"


def test_namespaces_map_to_distinct_agents_of_one_tenant(store: EngramStore) -> None:
    spaces = [("john_doe",), ("john-doe",), ("a", "b"), ('a","b',), ("a", "b", ""), ("A", "b"), ("ab",)]
    agents = {namespace_agent(ns) for ns in spaces}
    assert len(agents) == len(spaces)
    assert all(a.startswith("lg-") and len(a) <= 63 for a in agents)
    store.put(("john_doe",), "k", {"text": "underscore"})
    handle = store.agent(("john_doe",))
    assert handle.tenant == "acme" and handle.cap is Confidentiality.RESTRICTED
    assert [m.content for m in handle.memories()] == ["underscore"]
    assert store.agent(("john-doe",)).memories() == []
    # A deleted item's text is forgotten with it, and may be stored again.
    store.delete(("john_doe",), "k")
    assert handle.memories() == []
    store.put(("john_doe",), "k", {"text": "underscore"})
    assert [m.content for m in handle.memories()] == ["underscore"]


def test_bad_table_names_are_refused(make_engine: Callable[..., DynamicMemoryEngine]) -> None:
    with pytest.raises(ValueError, match="shared_<name>"):
        EngramStore(make_engine(), table="private_x_items")


@pytest.mark.parametrize("value", [[], ["a"], "text", 3, (1, 2), {"n": float("nan")}, {"f": object()}, {(1, 2): "x"}])
def test_a_value_that_is_not_a_json_object_is_refused_and_changes_nothing(store: EngramStore, value: Any) -> None:
    """A put's value is a dict (a JSON object) by the store contract: anything else was stored as a
    dict (`[]`) or raised the TypeError / ValueError of `dict()` or `json.dumps` from inside."""
    from langgraph.store.base import PutOp

    store.put(("users", "u1"), "kept", {"text": "the original value"})
    with pytest.raises(ValidationError, match="LangGraph store value"):
        store.put(("users", "u1"), "kept", value)
    with pytest.raises(ValidationError, match="LangGraph store value"):  # a batch is checked before it runs
        store.batch([PutOp(("users", "u1"), "other", {"text": "x"}), PutOp(("users", "u1"), "bad", value)])
    item = store.get(("users", "u1"), "kept")
    assert item is not None and item.value == {"text": "the original value"}
    assert store.get(("users", "u1"), "other") is None and store.get(("users", "u1"), "bad") is None


# -- scores ------------------------------------------------------------------------------------


def test_search_scores_are_relevances_from_0_to_1_and_rank_the_items(store: EngramStore) -> None:
    store.put(("docs",), "fsync", {"text": "fsync in the write-ahead log dominates p99 latency"})
    store.put(("docs",), "cache", {"text": "the cache miss rate doubles past batch size 512"})
    store.put(("docs",), "lunch", {"text": "lunch is served at noon in the cafeteria"})
    store.put(("other",), "fsync2", {"text": "batching writes cuts the fsync cost of the log"})
    hits = store.search((), query="why is p99 latency dominated by fsync", limit=10)
    scores = [h.score for h in hits]
    assert all(s is not None and 0.0 <= s <= 1.0 for s in scores)
    assert scores == sorted(scores, reverse=True)  # type: ignore[type-var]  # the order is the score's
    assert hits[0].key == "fsync" and hits[0].score > hits[-1].score  # type: ignore[operator]
    # an exact restatement is as relevant as it gets, whatever else the namespace holds
    exact = store.search(("docs",), query="lunch is served at noon in the cafeteria", limit=1)
    assert exact[0].key == "lunch" and exact[0].score == pytest.approx(1.0, abs=0.05)


def test_the_top_item_agrees_with_langgraphs_in_memory_store_on_the_same_embedder(store: EngramStore) -> None:
    embedder = fake_embedder()
    theirs = InMemoryStore(index={"dims": embedder.dim, "embed": lambda texts: embedder.embed(list(texts)).tolist()})
    texts = {
        "fsync": "fsync in the write-ahead log dominates p99 latency",
        "cache": "the cache miss rate doubles past batch size 512",
        "lunch": "lunch is served at noon in the cafeteria",
    }
    for s in (store, theirs):
        for key, text in texts.items():
            s.put(("docs",), key, {"text": text})
    for query in texts.values():
        ours, other = store.search(("docs",), query=query, limit=1), theirs.search(("docs",), query=query, limit=1)
        assert ours[0].key == other[0].key


DOCS = {
    "fsync": "fsync in the write-ahead log dominates p99 latency",
    "cache": "the cache miss rate doubles past batch size 512",
    "lunch": "lunch is served at noon in the cafeteria",
    "wal": "the write-ahead log is flushed with fsync on every commit",
    "p99": "p99 latency rose after the upgrade",
    "dup": "fsync in the write-ahead log dominates p99 latency",  # the same text: a tie, broken by order
}


def test_the_ranking_is_the_scores_and_reading_an_item_does_not_move_it(store: EngramStore) -> None:
    for i, (key, text) in enumerate(DOCS.items()):
        store.put(("docs", str(i % 2)), key, {"text": text, "n": i})
    query = "why is p99 latency dominated by fsync"
    before = [(h.namespace, h.key, h.score) for h in store.search(("docs",), query=query, limit=10)]
    assert [k for _, k, _ in before[:2]] == ["fsync", "dup"]  # equal relevance: insertion order
    for _ in range(5):  # reads raise the engramdb activation of "lunch" (the recall's own score), not its relevance
        store.search(("docs",), query="lunch is served at noon in the cafeteria", limit=1)
    after = [(h.namespace, h.key, h.score) for h in store.search(("docs",), query=query, limit=10)]
    assert after == before
    # pages are slices of one ranking, and a top-1 is its first item
    pages = [store.search(("docs",), query=query, limit=2, offset=o) for o in range(0, 6, 2)]
    assert [(h.namespace, h.key, h.score) for page in pages for h in page] == before
    # a filter is applied before the page is cut: `limit` items come back however few pass
    low = store.search(("docs",), query=query, filter={"n": {"$gte": 2}}, limit=2)
    assert [h.key for h in low] == [k for _, k, _ in before if list(DOCS).index(k) >= 2][:2] and len(low) == 2


def test_times_keep_their_seconds_on_every_backend(make_engine: Callable[..., DynamicMemoryEngine], clock: Any) -> None:
    """PostgreSQL's REAL is 4 bytes: epoch seconds stored in it come back rounded to minutes."""
    store = EngramStore(make_engine(memory_embedder=fake_embedder(), clock=clock), tenant="acme")
    store.put(("u",), "k", {"text": "first"})
    clock.advance(1.5)
    store.put(("u",), "k", {"text": "second"})
    item = store.get(("u",), "k")
    assert item is not None
    assert item.created_at.timestamp() == clock.now - 1.5 and item.updated_at.timestamp() == clock.now


# -- TTL ---------------------------------------------------------------------------------------


def _ttl_store(make_engine: Callable[..., DynamicMemoryEngine], clock: Any, **config: Any) -> EngramStore:
    return EngramStore(
        make_engine(memory_embedder=fake_embedder(), clock=clock),
        tenant="acme",
        ttl_config=cast("TTLConfig | None", config or None),  # the keys the tests pass are TTLConfig's
    )


def test_an_item_expires_ttl_minutes_after_its_last_write_or_refreshing_read(
    make_engine: Callable[..., DynamicMemoryEngine], clock: Any
) -> None:
    store = _ttl_store(make_engine, clock)
    assert store.supports_ttl
    store.put(("u",), "k", {"text": "short-lived note about the launch"}, ttl=1)
    store.put(("u",), "kept", {"text": "kept note about the launch"})
    clock.advance(50)
    assert store.get(("u",), "k") is not None  # read: refreshed to 60 s from now
    clock.advance(50)
    assert store.get(("u",), "k", refresh_ttl=False) is not None  # 100 s after the put: alive thanks to the read
    clock.advance(11)  # 61 s after the refreshing read
    assert store.get(("u",), "k") is None
    assert [i.key for i in store.search(("u",))] == ["kept"]
    assert [m.content for m in store.agent(("u",)).memories()] == ["kept note about the launch"]  # forgotten with it
    store.put(("u",), "k", {"text": "short-lived note about the launch"}, ttl=1)  # may be stored again
    assert store.get(("u",), "k") is not None


def test_an_expired_item_takes_no_place_in_a_searchs_top_k_nor_in_the_namespaces(
    make_engine: Callable[..., DynamicMemoryEngine], clock: Any
) -> None:
    store = _ttl_store(make_engine, clock)
    store.put(("a",), "exact", {"text": "the launch code is 7731"}, ttl=2)
    store.put(("b",), "only", {"text": "temporary"}, ttl=2)
    store.put(("a",), "near", {"text": "the launch is on Thursday"})
    assert store.search(("a",), query="the launch code is 7731", limit=1)[0].key == "exact"
    store.put(("a",), "code2", {"text": "the launch code was 7730"}, ttl=2)
    store.put(("a",), "far", {"text": "lunch at noon"})
    assert [h.key for h in store.search(("a",), query="the launch code is 7731", limit=2)] == ["exact", "code2"]
    clock.advance(121)
    assert [h.key for h in store.search(("a",), query="the launch code is 7731", limit=2)] == ["near", "far"]
    assert [i.key for i in store.search(("a",), limit=2)] == ["near", "far"]
    assert store.list_namespaces() == [("a",)]


def test_default_ttl_refresh_off_and_the_sweep(make_engine: Callable[..., DynamicMemoryEngine], clock: Any) -> None:
    store = _ttl_store(make_engine, clock, default_ttl=10, refresh_on_read=False)
    store.put(("u",), "a", {"text": "one"})
    store.put(("u",), "b", {"text": "two"}, ttl=None)  # an explicit None: no expiry
    clock.advance(9 * 60)
    assert store.get(("u",), "a") is not None  # read, not refreshed (refresh_on_read is off)
    clock.advance(61)
    assert store.sweep_ttl() == 1 and store.sweep_ttl() == 0
    assert [i.key for i in store.search(("u",))] == ["b"]


def test_the_sweeper_thread_deletes_expired_items(make_engine: Callable[..., DynamicMemoryEngine], clock: Any) -> None:
    import time

    store = _ttl_store(make_engine, clock, sweep_interval_minutes=0.001)
    store.put(("u",), "a", {"text": "one"}, ttl=1)
    clock.advance(61)
    thread = store.start_ttl_sweeper()
    assert store.start_ttl_sweeper() is thread  # one sweeper at a time
    deadline = time.monotonic() + 10
    rows: Sequence[object] = [1]
    while rows and time.monotonic() < deadline:
        rows = store._scope.query("SELECT 1 FROM shared_langgraph_store")  # the table itself, not a (sweeping) read
        time.sleep(0.02)
    assert rows == [] and store.stop_ttl_sweeper(timeout=5) and not thread.is_alive()


@pytest.mark.parametrize("ttl", [0, -1, float("nan"), float("inf"), "5", True])
def test_a_bad_ttl_is_refused_and_changes_nothing(store: EngramStore, ttl: Any) -> None:
    with pytest.raises(ValidationError, match="ttl"):
        store.put(("u",), "k", {"text": "x"}, ttl=ttl)
    assert store.get(("u",), "k") is None


def test_a_bad_ttl_config_is_refused(make_engine: Callable[..., DynamicMemoryEngine]) -> None:
    for config in ({"default_tll": 5}, {"default_ttl": -1}, {"omit_expired": False}, ["x"]):
        with pytest.raises(ValidationError):
            EngramStore(make_engine(), ttl_config=config)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="sweep_interval_minutes"):
        EngramStore(make_engine()).start_ttl_sweeper()


def test_a_table_made_before_ttls_gets_its_columns(make_engine: Callable[..., DynamicMemoryEngine]) -> None:
    engine = make_engine(memory_embedder=fake_embedder())
    engine.get_shared_scope("acme").execute(
        "CREATE TABLE shared_langgraph_store (ns TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, "
        "memory_id TEXT, created_at REAL NOT NULL, updated_at REAL NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (ns, key))"
    )
    store = EngramStore(engine, tenant="acme")
    store.put(("u",), "k", {"text": "x"}, ttl=5)
    assert store.get(("u",), "k") is not None


def test_min_relevance_leaves_out_what_does_not_answer(make_engine: Callable[..., DynamicMemoryEngine]) -> None:
    store = EngramStore(make_engine(), tenant="acme", min_relevance=0.3)
    for i, (key, text) in enumerate(DOCS.items()):
        store.put(("docs",), key, {"text": text, "n": i})
    found = store.search(("docs",), query="why is p99 latency dominated by fsync", limit=10)
    assert found and all(h.score is not None and h.score >= 0.3 for h in found)
    assert "lunch" not in {h.key for h in found}
    assert store.search(("docs",), query="quantum chromodynamics lattice", limit=10) == []
    assert len(store.search(("docs",), limit=10)) == len(DOCS)  # a listing has no query to be relevant to
    with pytest.raises(ValidationError, match="min_relevance"):
        EngramStore(make_engine(name="other"), min_relevance=2.0)
