"""Conversations in (`remember(messages=…)`) and bulk forgetting by filter (`forget_where`), on the
backend under test."""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from engramdb import DynamicMemoryEngine, EdgeType, MemoryType
from engramdb.agent import Agent
from engramdb.errors import NotFound, ValidationError
from engramdb.testing import FixedClock

CHAT = [
    {"role": "system", "content": "You are a travel assistant."},
    {"role": "user", "content": "I live in Paris and I'm allergic to peanuts", "name": "Maya"},
    {
        "role": "assistant",
        "content": [{"type": "text", "text": "Noted: Paris,"}, {"type": "text", "text": "no peanuts."}],
    },
    {"role": "user", "content": "Book me a hotel in Lisbon", "created_at": "2026-03-01T10:00:00+00:00"},
]


def test_a_conversation_is_stored_as_one_episode_per_turn_linked_in_order(me: Agent, clock: FixedClock) -> None:
    turns = me.remember(messages=CHAT, session="chat-1", metadata={"channel": "web"})
    assert [t.content for t in turns] == [
        "system: You are a travel assistant.",
        "Maya: I live in Paris and I'm allergic to peanuts",
        "assistant: Noted: Paris,\nno peanuts.",
        "user: Book me a hotel in Lisbon",
    ]
    assert all(t.type is MemoryType.EPISODE and t.session == "chat-1" for t in turns)
    assert [t.entities for t in turns] == [("system",), ("Maya",), ("assistant",), ("user",)]
    assert [t.metadata for t in turns] == [
        {"channel": "web", "role": r} for r in ("system", "user", "assistant", "user")
    ]
    assert [t.created_at for t in turns[:3]] == [clock.now] * 3
    assert turns[3].created_at == dt.datetime(2026, 3, 1, 10, tzinfo=dt.UTC).timestamp()
    for a, b in itertools.pairwise(turns):
        assert [e.type for e in me.edges(a.id) if e.source == a.id and e.target == b.id] == [EdgeType.PRECEDES]
    # the user's turns alone, as LongMemEval's "user turns only" reads them
    assert {m.id for m in me.memories(where={"role": "user"})} == {turns[1].id, turns[3].id}
    assert me.recall("where does Maya live", k=1, session="chat-1").hits[0].memory.id == turns[1].id


def test_turns_are_never_merged_and_the_callers_role_key_is_kept(me: Agent) -> None:
    a = me.remember(messages=[{"role": "user", "content": "yes"}, {"role": "user", "content": "yes"}])
    assert len({m.id for m in a}) == 2
    b = me.remember(messages=[{"role": "user", "content": "ok"}], metadata={"role": "customer"})
    assert b[0].metadata == {"role": "customer"}


def test_langchain_style_messages_are_read_by_their_type(me: Agent) -> None:
    @dataclass
    class Msg:  # the attributes LangChain's BaseMessage has
        type: str
        content: Any
        name: str | None = None

    turns = me.remember(messages=[Msg("human", "the deploy is on Friday"), Msg("ai", "Got it", name="helper")])
    assert [t.content for t in turns] == ["user: the deploy is on Friday", "helper: Got it"]
    assert [t.metadata["role"] for t in turns] == ["user", "assistant"]


@pytest.mark.parametrize(
    "messages,needle",
    [
        ([], "messages is empty"),
        ("hello", "a list of messages"),
        ([{"role": "user"}], "needs a role and a content"),
        ([{"role": "user", "content": "   "}], "has no text"),
        ([{"role": "", "content": "x"}], "role must be a non-empty str"),
        ([{"role": "user", "content": "x", "created_at": "yesterday"}], "not an ISO 8601"),
        ([{"role": "user", "content": "x", "created_at": "2026-03-01T10:00:00"}], "no time zone"),
        ([{"role": "user", "content": "x", "mood": "happy"}], "unknown field"),
        ([{"role": "user", "content": 5}], "content must be a str"),
        ([42], "must be a mapping"),
    ],
)
def test_a_bad_message_is_refused_and_no_turn_is_stored(me: Agent, messages: Any, needle: str) -> None:
    good = [{"role": "user", "content": "first turn"}]
    with pytest.raises(ValidationError, match=needle):
        me.remember(messages=good + messages if isinstance(messages, list) and messages else messages)
    assert me.memories() == []


def test_messages_and_single_memory_arguments_do_not_mix(me: Agent) -> None:
    with pytest.raises(ValidationError, match="not both"):
        me.remember("a fact", messages=[{"role": "user", "content": "x"}])  # type: ignore[call-overload]
    with pytest.raises(ValidationError, match="type cannot be given with messages"):
        me.remember(messages=[{"role": "user", "content": "x"}], type="skill")  # type: ignore[call-overload]
    with pytest.raises(ValidationError, match="needs content"):
        me.remember()  # type: ignore[call-overload]
    assert me.memories() == []


def test_a_conversation_is_one_transaction(me: Agent, eng: DynamicMemoryEngine) -> None:
    """A turn refused by a tombstone takes the whole conversation back with it."""
    gone = me.remember("user: forget this turn", type="episode", dedup=False)
    me.forget(gone.id)
    with pytest.raises(Exception, match="forgotten"):
        me.remember(messages=[{"role": "user", "content": "kept?"}, {"role": "user", "content": "forget this turn"}])
    assert me.memories() == []


# -- forget_where ------------------------------------------------------------------------------------


def _store(eng: DynamicMemoryEngine) -> tuple[Agent, Agent, list[Any]]:
    alice, bob = eng.agent("alice"), eng.agent("bob")
    made = [
        *alice.remember(
            messages=[{"role": "user", "content": "my card ends 4242"}, {"role": "assistant", "content": "saved"}],
            session="s1",
        ),
        alice.remember("Maya prefers window seats", session="s2", metadata={"user_id": "u1"}),
        alice.remember("Shared: the office closes at 6", shared=True, session="s1"),
        bob.remember("Bob's own note in s1", session="s1"),
    ]
    return alice, bob, made


def test_forget_where_forgets_a_session_as_forget_does(
    eng: DynamicMemoryEngine, make_engine: Callable[..., DynamicMemoryEngine]
) -> None:
    alice, bob, made = _store(eng)
    dry = alice.forget_where(session="s1", dry_run=True)
    assert dry.dry_run and dry.count == 3 and set(dry.ids) == {made[0].id, made[1].id, made[3].id}
    assert len(alice.memories()) == 4  # a dry run changes nothing
    done = alice.forget_where(session="s1", reason="user asked")
    assert done.count == 3 and not done.dry_run
    for mid in done.ids:
        with pytest.raises(NotFound):
            alice.get(mid)
    assert {s.memory_id for s in alice.tombstones()} >= set(done.ids)
    assert all(s.reason == "user asked" for s in alice.tombstones() if s.memory_id in done.ids)
    assert [m.content for m in alice.memories()] == ["Maya prefers window seats"]
    assert [m.content for m in bob.memories(session="s1")] == ["Bob's own note in s1"]  # not alice's to forget
    with pytest.raises(Exception, match="forgotten"):
        alice.remember("user: my card ends 4242", type="episode", session="s1", dedup=False)
    assert alice.recall("card 4242", k=5, session="s1").hits == ()
    assert alice.forget_where(session="s1").count == 0  # again: nothing left


def test_forget_where_by_metadata_and_everything(eng: DynamicMemoryEngine) -> None:
    alice, bob, made = _store(eng)
    assert alice.forget_where(where={"user_id": "u1"}).ids == (made[2].id,)
    with pytest.raises(ValidationError, match="everything=True"):
        alice.forget_where()
    with pytest.raises(ValidationError, match="not both"):
        alice.forget_where(session="s1", everything=True)
    assert alice.forget_where(everything=True).count == 3
    assert alice.memories() == [] and len(bob.memories()) == 1


def test_the_engine_forgets_a_whole_agent_or_tenant(eng: DynamicMemoryEngine) -> None:
    _, bob, _ = _store(eng)
    other = eng.agent("carol", tenant="globex")
    other.remember("globex keeps this")
    report = eng.forget_agent("alice", dry_run=True)
    assert report.count == 3  # alice's own, not the tenant's shared memories
    assert eng.forget_agent("alice").count == 3
    assert [m.content for m in bob.memories()] == ["Shared: the office closes at 6", "Bob's own note in s1"]
    assert eng.forget_tenant("default").count == 2
    assert bob.memories() == [] and [m.content for m in other.memories()] == ["globex keeps this"]


@pytest.mark.sqlite_only
def test_forget_where_leaves_no_byte_of_the_turns_or_their_metadata_on_disk(tmp_path: Any, clock: FixedClock) -> None:
    marker, secret = "Zanzibarquux", "Quokkavault"
    with DynamicMemoryEngine(tmp_path / "m.db", clock=clock) as eng:
        me = eng.agent("alice")
        for i in range(200):  # enough rows that the turns share their pages with others
            me.remember(f"filler note {i} about the weekly deploy rota", dedup=False)
        me.remember(
            messages=[
                {"role": "user", "content": f"my passphrase is {marker}"},
                {"role": "assistant", "content": "ok"},
            ],
            session="chat-9",
            metadata={"account": secret},
        )
        me.recall("passphrase")  # loads the caches (and their side files)
        assert _files_holding(tmp_path, [marker]) and _files_holding(tmp_path, [secret])
        assert me.forget_where(session="chat-9").count == 2
        assert not _files_holding(tmp_path, [marker, secret]), "a forgotten turn is still on disk"
    assert not _files_holding(tmp_path, [marker, secret])


def _files_holding(root: Any, words: list[str]) -> list[str]:
    needles = [w.lower().encode() for w in words]
    return sorted(str(f) for f in root.rglob("*") if f.is_file() and any(n in f.read_bytes().lower() for n in needles))
