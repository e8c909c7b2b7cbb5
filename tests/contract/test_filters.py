"""Sessions and metadata filters, on the backend under test: one rule (`Where.matches`) that the
store's SQL (SQLite json1, PostgreSQL jsonb) and recall's array masks all follow, inside the query.

The reference semantics are `engramdb.memories.filters.Where.matches`; every listing, page, recall
and bulk forget here is compared with it over memories whose metadata mixes kinds (numbers, strings
that look like numbers, booleans, nulls, arrays, objects, missing keys).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engramdb import DynamicMemoryEngine
from engramdb.errors import ValidationError
from engramdb.memories.filters import Where
from engramdb.testing import FixedClock, fake_embedder

VALUES: list[Any] = [
    0,
    1,
    1.0,
    2,
    2.5,
    -3,
    "1",
    "a",
    "b",
    "2026-01-05",
    "2026-11-30",
    True,
    False,
    None,
    [1, 2],
    {"x": 1},
]
KEYS = ["k", "n", "tag", "day"]
SESSIONS = [None, "s1", "s2", "s3"]
WORDS = "release payments Lisbon budget deploy grammar Dana owns spec alerts night offsite".split()


def _fill(engine: DynamicMemoryEngine, clock: FixedClock, seed: int = 7, n: int = 48) -> list[Any]:
    rng = random.Random(seed)
    a = engine.agent("alice")
    made = []
    for i in range(n):
        meta = {k: rng.choice(VALUES) for k in KEYS if rng.random() < 0.7}
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8)))
        made.append(
            a.remember(
                f"{text} #{i}", session=rng.choice(SESSIONS), metadata=meta, shared=rng.random() < 0.3, dedup=False
            )
        )
        clock.now += 7200.0  # far apart: no implicit episodes between neighbours
    return made


scalars = st.sampled_from([v for v in VALUES if not isinstance(v, (list, dict))])
ranged = st.sampled_from([0, 1, 2, 2.5, -3, "1", "a", "b", "2026-01-05", "2026-06-01"])
key = st.sampled_from([*KEYS, "absent"])


def _leaf() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.builds(lambda k, v: {k: v}, key, scalars),
        st.builds(lambda k, op, v: {k: {op: v}}, key, st.sampled_from(["$eq", "$ne"]), scalars),
        st.builds(lambda k, op, v: {k: {op: v}}, key, st.sampled_from(["$gt", "$gte", "$lt", "$lte"]), ranged),
        st.builds(
            lambda k, op, v: {k: {op: v}},
            key,
            st.sampled_from(["$in", "$nin"]),
            st.lists(scalars, min_size=1, max_size=3),
        ),
        st.builds(lambda k, v: {k: {"$exists": v}}, key, st.booleans()),
    )


filters = st.recursive(
    _leaf(),
    lambda inner: st.one_of(
        st.builds(lambda xs: {"$or": xs}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda xs: {"$and": xs}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda a, b: {**a, **b}, inner, inner),
    ),
    max_leaves=6,
)
sessions = st.one_of(
    st.none(), st.sampled_from(["s1", "s2", "s3"]), st.lists(st.sampled_from(["s1", "s2"]), min_size=1, max_size=2)
)


class _Filled(tuple):  # type: ignore[type-arg]
    def __repr__(self) -> str:  # (hypothesis prints its arguments on failure: not 48 memories)
        return "<filled store>"


@pytest.fixture
def filled(make_engine: Callable[..., DynamicMemoryEngine], clock: FixedClock) -> tuple[DynamicMemoryEngine, list[Any]]:
    engine = make_engine(memory_embedder=fake_embedder(), vector_index="exact")
    return _Filled((engine, _fill(engine, clock)))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=filters, session=sessions)
def test_listing_and_page_follow_the_reference_rule(
    filled: tuple[DynamicMemoryEngine, list[Any]], spec: dict[str, Any], session: Any
) -> None:
    engine, made = filled
    where = Where.of(spec, session=session)
    assert where is not None
    want = sorted(m.id for m in made if where.matches(m.session, m.metadata))
    a = engine.agent("alice")
    assert sorted(m.id for m in a.memories(where=spec, session=session)) == want
    page = a.browse(where=spec, session=session, limit=1000)
    assert page.total == len(want) and sorted(m.id for m in page.memories) == want


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=filters, session=sessions)
def test_recall_considers_only_what_the_filter_admits(
    filled: tuple[DynamicMemoryEngine, list[Any]], spec: dict[str, Any], session: Any
) -> None:
    engine, made = filled
    where = Where.of(spec, session=session)
    assert where is not None
    admitted = {m.id for m in made if where.matches(m.session, m.metadata)}
    ex = engine.agent("alice").explain("release payments budget Dana", k=6, where=spec, session=session)
    shown = [h.memory_id for h in (*ex.hits, *ex.near_misses)]
    assert set(shown) <= admitted
    # not a filter after a top-k: every admitted memory has a vector, so k of them come back
    assert len(ex.hits) == min(6, len(admitted))


def test_a_filtered_recall_ranks_as_a_store_holding_only_what_it_admits(
    make_engine: Callable[..., DynamicMemoryEngine], clock: FixedClock
) -> None:
    """The filter acts before anything is ranked: BM25's statistics, the cosine pool, and the
    candidate cut are those of the admitted memories alone, so the ranking is the one a store
    holding just them gives (memories far apart in time: no implicit episodes differ)."""
    start = clock.now
    whole = make_engine("whole", memory_embedder=fake_embedder(), vector_index="exact")
    made = _fill(whole, clock, seed=11, n=60)
    spec = {"k": {"$in": [1, "a", True]}}
    where = Where.of(spec)
    assert where is not None
    clock.now = start
    alone = make_engine("alone", memory_embedder=fake_embedder(), vector_index="exact")
    a = alone.agent("alice")
    for m in made:  # the same draws, in order, kept only when admitted
        if where.matches(m.session, m.metadata):
            a.remember(m.content, session=m.session, metadata=m.metadata, shared=m.shared, dedup=False)
        clock.now += 7200.0
    for query in ["release payments", "Dana owns the grammar spec", "budget offsite Lisbon", "night alerts deploy"]:
        got = whole.agent("alice").explain(query, k=5, where=spec)
        want = alone.agent("alice").explain(query, k=5)
        contents = {m.id: m.content for m in made}
        alone_contents = {m.id: m.content for m in alone.agent("alice").memories()}
        assert [(contents[h.memory_id], round(h.score, 9)) for h in got.hits] == [
            (alone_contents[h.memory_id], round(h.score, 9)) for h in want.hits
        ], query
        assert got.hits


def test_metadata_and_session_come_back_on_every_read_path(
    make_engine: Callable[..., DynamicMemoryEngine],
) -> None:
    engine = make_engine(memory_embedder=fake_embedder())
    a = engine.agent("alice")
    meta = {"user_id": "u-7", "score": 0.5, "nested": {"list": [1, "two", None]}, "ok": True}
    m = a.remember("Dana owns the grammar spec", session="chat-1", metadata=meta)
    assert (m.session, m.metadata) == ("chat-1", meta)
    got = a.get(m.id)
    assert (got.session, got.metadata) == ("chat-1", meta)
    hit = a.recall("who owns the grammar spec", k=1).hits[0].memory
    assert (hit.session, hit.metadata) == ("chat-1", meta)
    assert a.browse().memories[0].metadata == meta
    exported = a.export()[0]
    # export gives them, but MemoryRecord (engramdb.memories.reading) does not declare them yet
    assert exported["session"] == "chat-1" and exported["metadata"] == meta
    meta["user_id"] = "changed"  # the caller's dict is copied, not kept
    assert a.get(m.id, touch=False).metadata["user_id"] == "u-7"
    updated = a.update(m.id, metadata={"user_id": "u-8"})
    assert updated.metadata == {"user_id": "u-8"} and a.get(m.id, touch=False).session == "chat-1"
    assert a.recall("grammar spec", where={"user_id": "u-7"}).hits == ()
    assert len(a.recall("grammar spec", where={"user_id": "u-8"}).hits) == 1


def test_export_and_import_keep_sessions_and_metadata(
    make_engine: Callable[..., DynamicMemoryEngine], tmp_path: Any
) -> None:
    src = make_engine("src", memory_embedder=fake_embedder()).agent("alice")
    src.remember("The offsite is in Lisbon", session="plan", metadata={"trip": 3})
    src.remember(
        messages=[{"role": "user", "content": "Book the hotel"}, {"role": "assistant", "content": "Done"}],
        session="plan",
    )
    path = tmp_path / "out.jsonl"
    src.export_jsonl(path)
    dst = make_engine("dst", memory_embedder=fake_embedder()).agent("alice")
    dst.import_jsonl(path)
    key = sorted((m.content, m.session, tuple(sorted(m.metadata.items()))) for m in src.memories())
    assert sorted((m.content, m.session, tuple(sorted(m.metadata.items()))) for m in dst.memories()) == key
    assert {m.content for m in dst.memories(where={"role": "user"})} == {"user: Book the hotel"}


def test_dedup_reinforces_only_within_the_same_session_and_metadata(
    make_engine: Callable[..., DynamicMemoryEngine],
) -> None:
    a = make_engine(memory_embedder=fake_embedder()).agent("alice")
    first = a.remember("The deploy freeze starts Friday", session="s1")
    assert a.remember("The deploy freeze starts Friday", session="s1").id == first.id
    other = a.remember("The deploy freeze starts Friday", session="s2")
    tagged = a.remember("The deploy freeze starts Friday", session="s1", metadata={"src": "slack"})
    assert len({first.id, other.id, tagged.id}) == 3
    assert [m.id for m in a.memories(session="s2")] == [other.id]


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        ({"metadata": ["not", "a", "dict"]}, "metadata must be a mapping"),
        ({"metadata": {"": 1}}, "non-empty str"),
        ({"metadata": {"$set": 1}}, "starts with '$'"),
        ({"metadata": {'a"b': 1}}, "quotes"),
        ({"metadata": {"x": float("nan")}}, "not a JSON number"),
        ({"metadata": {"x": object()}}, "not a value"),
        ({"metadata": {"x": "y" * 20_000}}, "more than the limit"),
        ({"session": ""}, "session id"),
        ({"session": 5}, "session id"),
    ],
)
def test_bad_metadata_or_session_is_refused_and_nothing_is_written(
    make_engine: Callable[..., DynamicMemoryEngine], kwargs: dict[str, Any], needle: str
) -> None:
    a = make_engine().agent("alice")
    with pytest.raises(ValidationError, match=re.escape(needle)):
        a.remember("a fact", **kwargs)
    assert a.memories() == []


@pytest.mark.parametrize(
    "spec,needle",
    [
        ({"k": {"$regex": "a"}}, "unknown operator"),
        ({"$nor": [{"k": 1}]}, "unknown logical operator"),
        ({"k": {"$gt": True}}, "compares numbers or strings"),
        ({"k": {"$in": []}}, "non-empty list"),
        ({"k": {"$exists": "yes"}}, "True or False"),
        ({"k": {}}, "empty operator object"),
        ({"$or": []}, "non-empty list"),
        ({}, "is empty"),
        ("k=1", "must be a mapping"),
        ({"k": [1, 2]}, "not a value a filter compares"),
    ],
)
def test_a_malformed_filter_is_a_validation_error_naming_what_is_wrong(
    make_engine: Callable[..., DynamicMemoryEngine], spec: Any, needle: str
) -> None:
    a = make_engine().agent("alice")
    a.remember("a fact", metadata={"k": 1})
    for call in (
        lambda: a.recall("fact", where=spec),
        lambda: a.browse(where=spec),
        lambda: a.memories(where=spec),
        lambda: a.forget_where(where=spec),
    ):
        with pytest.raises(ValidationError, match=re.escape(needle)):
            call()
    assert len(a.memories()) == 1


def test_a_repeated_filter_follows_every_write_in_between(
    make_engine: Callable[..., DynamicMemoryEngine], clock: FixedClock
) -> None:
    """The keys a filter admits are kept from one recall to the next and brought up to date from
    the change feed: a new memory, a metadata update, an archive, a forget, and a write made by
    another process (engine) on the same store all show in the next recall."""
    eng = make_engine("one", memory_embedder=fake_embedder(), vector_index="exact")
    a = eng.agent("alice")
    spec = {"project": "apollo"}

    def seen() -> set[str]:
        return {h.memory.content for h in a.recall("release payments budget", k=20, where=spec).hits}

    first = a.remember("release notes for payments", metadata=spec)
    a.remember("release notes for billing", metadata={"project": "zeus"})
    assert seen() == {first.content}
    clock.now += 60
    second = a.remember("budget for the payments release", metadata=spec)
    assert seen() == {first.content, second.content}
    a.update(first.id, metadata={"project": "zeus"})
    assert seen() == {second.content}
    a.update(first.id, metadata=spec)
    assert seen() == {first.content, second.content}
    a.forget(second.id)
    assert seen() == {first.content}
    other = make_engine("one", memory_embedder=fake_embedder(), vector_index="exact").agent("alice")
    third = other.remember("payments budget, third", metadata=spec)
    assert seen() == {first.content, third.content}
    a.forget_where(where=spec)
    assert seen() == set()
