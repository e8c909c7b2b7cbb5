"""The LangGraph store adapter behaves like LangGraph's own InMemoryStore, namespaces kept apart."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from engramdb import Confidentiality, DynamicMemoryEngine, ValidationError
from engramdb.testing import fake_embedder

pytest.importorskip("langgraph.store.base", reason="needs the langgraph extra")
from langgraph.store.base import BaseStore, Item
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
