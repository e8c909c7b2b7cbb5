"""Prospective memory: intents that fire on a time, an event or a cue; todos; injection beside a recall."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from engramdb import DynamicMemoryEngine, NotFound, ValidationError
from engramdb.agent import Agent
from engramdb.memories.model import Channel, MemoryRef, TodoStatus
from engramdb.memories.prospective import (
    Trigger,
    complete,
    drop,
    due,
    intend,
    normalise,
    parse_trigger,
    reopen,
    ride_along,
    todos,
    trigger_of,
)
from engramdb.testing import FixedClock
from tests.rawsql import raw_count

HOUR = 3600.0
START = 1_764_000_000.0  # FixedClock's default: 2025-11-24T16:00:00Z


def _counts(eng: DynamicMemoryEngine) -> tuple[int, int]:
    return raw_count(eng, "SELECT count(*) FROM engram_memories"), raw_count(eng, "SELECT count(*) FROM engram_access")


def _ids(memories: Any) -> list[str]:
    return [m.id for m in memories]


# -- triggers ---------------------------------------------------------------------------------


def test_time_trigger_fires_once_when_the_clock_reaches_it(me: Agent, clock: FixedClock) -> None:
    m = intend(me, "Post the stand-up summary", when=clock.now + HOUR)
    assert m.type == "intent" and not m.archived
    assert due(me) == []
    clock.advance(HOUR - 1)
    assert due(me) == []
    clock.advance(1)
    fired = due(me)
    assert _ids(fired) == [m.id] and fired[0].archived
    assert due(me) == [] and due(me, now=clock.now + 10 * HOUR) == []  # fired once, whatever comes next
    assert m.id not in _ids(me.memories(types=["intent"]))
    assert m.id in _ids(me.memories(types=["intent"], include_archived=True))
    firing = [a for a in me.accesses(m.id) if a.channel is Channel.INJECTED]
    assert len(firing) == 1 and firing[0].query == f"fired time:{START + HOUR!r}" and firing[0].ts == clock.now


@pytest.mark.parametrize(
    "when",
    [
        "2025-11-24T17:00:00Z",
        "2025-11-24T18:00:00+01:00",
        "2025-11-24 17:00:00+00:00",
        dt.datetime(2025, 11, 24, 17, tzinfo=dt.UTC),
        START + HOUR,
        int(START + HOUR),
        "1764003600",
    ],
)
def test_time_trigger_accepts_epoch_and_iso_8601(me: Agent, when: object) -> None:
    m = intend(me, "stand-up", when=when)
    trig = trigger_of(m)
    assert trig is not None and trig.at == START + HOUR and trig.spec == f"time:{START + HOUR!r}"
    assert m.refs[0].preview == "at 2025-11-24T17:00:00Z"
    assert due(me, now=START + HOUR - 0.5) == [] and _ids(due(me, now=START + HOUR)) == [m.id]


def test_event_trigger_fires_once_and_matches_normalised_names(me: Agent) -> None:
    m = intend(me, "Re-run the benchmarks", on_event="Deploy Finished")
    assert trigger_of(m) == Trigger("event", "deploy finished")
    assert due(me, event="deploy started") == []
    assert due(me, text="deploy finished") == []  # an event is not a cue
    assert _ids(due(me, event="  DEPLOY\tfinished ")) == [m.id]
    assert due(me, event="deploy finished") == []  # the same event twice fires once


@pytest.mark.parametrize(
    ("text", "fires"),
    [
        ("we should rotate the DEPLOY key today", True),
        ("Deploy\n   key!", True),
        ("ｄｅｐｌｏｙ ｋｅｙ", True),  # full-width: NFKC folds it
        ("deploy\u200b key", True),  # a zero-width space cannot hide the phrase
        ("the deploy keys", False),  # whole phrase only
        ("redeploy key", False),
        ("deploy the key", False),
        ("", False),
    ],
)
def test_cue_trigger_is_a_case_insensitive_whole_phrase_match(me: Agent, text: str, fires: bool) -> None:
    m = intend(me, "Ask ops to rotate it", cue="Deploy Key")
    assert _ids(due(me, text=text)) == ([m.id] if fires else [])


def test_cue_fires_once(me: Agent) -> None:
    m = intend(me, "Ask ops to rotate it", cue="deploy key")
    assert _ids(due(me, text="the deploy key")) == [m.id]
    assert due(me, text="the deploy key") == []


def test_repeating_event_and_cue_fire_every_time_and_stay_live(me: Agent) -> None:
    ev = intend(me, "Re-run the benchmarks", on_event="deploy-finished", repeat=True)
    cue = intend(me, "Mention the runbook", cue="incident", repeat=True)
    assert trigger_of(ev) == Trigger("event", "deploy-finished", repeat=True)
    for _ in range(3):
        assert _ids(due(me, event="deploy-finished", text="another incident")) == [ev.id, cue.id]
    assert not me.get(ev.id, touch=False).archived and not me.get(cue.id, touch=False).archived
    assert sum(a.channel is Channel.INJECTED for a in me.accesses(ev.id)) == 3


def test_periodic_time_trigger_moves_past_now(me: Agent, clock: FixedClock) -> None:
    m = intend(me, "Check the queue", when=clock.now + 60, every=HOUR)
    assert trigger_of(m) == Trigger("time", repr(START + 60), repeat=True, every=HOUR)
    assert due(me) == []
    clock.advance(60)
    assert _ids(due(me)) == [m.id]
    assert due(me) == []  # the same instant fires once
    trig = trigger_of(me.get(m.id, touch=False))
    assert trig is not None and trig.at == START + 60 + HOUR
    clock.advance(3.5 * HOUR)  # three periods missed: one firing, next one after now
    assert _ids(due(me)) == [m.id]
    trig = trigger_of(me.get(m.id, touch=False))
    assert trig is not None and trig.at == START + 60 + 4 * HOUR and not me.get(m.id, touch=False).archived


def test_due_fires_time_triggers_alongside_events_and_orders_oldest_first(me: Agent, clock: FixedClock) -> None:
    a = intend(me, "first", when=clock.now)
    b = intend(me, "second", on_event="standup")
    c = intend(me, "third", cue="release")
    intend(me, "not yet", when=clock.now + HOUR)
    assert _ids(due(me, event="standup", text="cut the release")) == [a.id, b.id, c.id]


@pytest.mark.parametrize(
    ("spec", "canonical"),
    [
        ("event:Deploy Done", "event:deploy done"),
        ("repeat  Event: Deploy Done", "repeat event:deploy done"),
        ("cue:Deploy  Key", "cue:deploy key"),
        ("repeat cue:x", "repeat cue:x"),
        ("time:1764003600", "time:1764003600.0"),
        ("time:2025-11-24T17:00:00Z", "time:1764003600.0"),
        ("every 3600 time:2025-11-24T17:00:00Z", "every 3600.0 time:1764003600.0"),
    ],
)
def test_specs_parse_to_a_canonical_form_that_round_trips(spec: str, canonical: str) -> None:
    trig = parse_trigger(spec)
    assert trig.spec == canonical and parse_trigger(trig.spec) == trig


def test_trigger_spec_argument(me: Agent) -> None:
    m = intend(me, "Re-run the benchmarks", trigger="repeat event:deploy-finished")
    assert trigger_of(m) == Trigger("event", "deploy-finished", repeat=True)
    assert Trigger.on_cue("Deploy KEY").matches(text="the deploy key!")
    assert normalise("Ｄｅｐｌｏｙ\u200b  KEY") == "deploy key"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one trigger"),
        ({"when": START, "cue": "x"}, "exactly one trigger"),
        ({"when": "tomorrow"}, "cannot parse the trigger time"),
        ({"when": "2025-11-24T17:00:00"}, "no UTC offset"),
        ({"when": dt.datetime(2025, 11, 24, 17)}, "no UTC offset"),
        ({"when": float("nan")}, "between 1970 and 9999"),
        ({"when": -5}, "between 1970 and 9999"),
        ({"when": True}, "epoch seconds"),
        ({"when": START, "repeat": True}, "needs a period"),
        ({"when": START, "every": 0}, "every must be from"),
        ({"every": 60, "cue": "x"}, "give when="),
        ({"cue": ""}, "is empty"),
        ({"cue": "   \u200b "}, "is empty"),
        ({"cue": "!!!"}, "no letter or digit"),
        ({"cue": "x" * 201}, "longer than 200"),
        ({"cue": 3}, "must be a str"),
        ({"on_event": ""}, "is empty"),
        ({"on_event": "x", "repeat": "yes"}, "repeat must be True or False"),
        ({"trigger": "bogus:x"}, "cannot parse the trigger"),
        ({"trigger": "time:"}, "cannot parse the trigger time"),
        ({"trigger": "repeat time:1764003600"}, "needs a period"),
        ({"trigger": "every 60 event:x"}, "'every' is for time triggers"),
        ({"trigger": "every soon time:1764003600"}, "every must be a number"),
        ({"trigger": "event:x", "repeat": True}, "write the repeat in the spec"),
        ({"cue": "x", "refs": [MemoryRef("trigger", "event:y")]}, "not as a ref"),
        ({"cue": "x", "importance": 11}, "importance must be from 0 to 10"),
    ],
)
def test_bad_triggers_are_validation_errors_and_write_nothing(
    eng: DynamicMemoryEngine, me: Agent, kwargs: dict[str, Any], message: str
) -> None:
    before = _counts(eng)
    with pytest.raises(ValidationError, match=message):
        intend(me, "do the thing", **kwargs)
    assert _counts(eng) == before


def test_empty_content_writes_nothing(eng: DynamicMemoryEngine, me: Agent) -> None:
    before = _counts(eng)
    with pytest.raises(ValidationError, match="content is empty"):
        intend(me, "  ", cue="x")
    assert _counts(eng) == before


@pytest.mark.parametrize(
    "kwargs",
    [{"now": "soon"}, {"now": float("inf")}, {"now": True}, {"event": ""}, {"event": 3}, {"text": 3}],
)
def test_bad_due_arguments(me: Agent, kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        due(me, **kwargs)


def test_a_hand_written_malformed_trigger_is_refused_and_nothing_written(me: Agent) -> None:
    before = len(me.memories(include_archived=True))
    with pytest.raises(ValidationError):
        me.remember("odd", type="intent", refs=[MemoryRef("trigger", "event:"), MemoryRef("trigger", "soon")])
    with pytest.raises(ValidationError, match="trigger belongs on an intent"):
        me.remember("not an intent", refs=[MemoryRef("trigger", "event:deploy")])
    assert len(me.memories(include_archived=True)) == before
    ok = me.remember("fine", type="intent", refs=[MemoryRef("trigger", "cue:x y")])
    assert trigger_of(ok) == Trigger("cue", "x y")
    assert _ids(due(me, text="x y")) == [ok.id]


# -- visibility -------------------------------------------------------------------------------


def test_another_agents_intents_never_fire_for_you(eng: DynamicMemoryEngine, me: Agent, clock: FixedClock) -> None:
    bob = eng.agent("bob")
    other_tenant = eng.agent("alice", tenant="acme")
    b_event = intend(bob, "bob's reminder", on_event="deploy")
    b_time = intend(bob, "bob's alarm", when=clock.now)
    b_cue = intend(bob, "bob's cue", cue="deploy key")
    t_event = intend(other_tenant, "acme's reminder", on_event="deploy")
    shared = me.remember("a team intent", type="intent", shared=True, refs=[Trigger.on_event("deploy").to_ref()])
    assert due(me, event="deploy", text="the deploy key") == []
    # and nothing of theirs was marked fired
    assert _ids(due(bob, event="deploy", text="the deploy key")) == [b_event.id, b_time.id, b_cue.id]
    assert _ids(due(other_tenant, event="deploy")) == [t_event.id]
    assert not me.get(shared.id, touch=False).archived  # shared intents belong to no one agent: never fire


def test_expired_intents_do_not_fire(me: Agent, clock: FixedClock) -> None:
    m = me.remember(
        "too late", type="intent", valid_to=clock.now + 10, refs=[Trigger.on_event("deploy").to_ref(clock.now)]
    )
    clock.advance(20)
    assert due(me, event="deploy") == [] and not me.get(m.id, touch=False).archived


# -- todos ------------------------------------------------------------------------------------


def test_todos_list_and_move_open_to_done_or_dropped(eng: DynamicMemoryEngine, me: Agent, clock: FixedClock) -> None:
    a = me.remember("Review the login PR", type="todo")
    clock.advance(1)
    b = me.remember("Write the migration guide", type="todo")
    clock.advance(1)
    c = me.remember("Book the offsite venue", type="todo", shared=True)
    eng.agent("bob").remember("Bob's private chore", type="todo")
    assert _ids(todos(me)) == [a.id, b.id, c.id]
    assert _ids(todos(me, "open")) == _ids(todos(me, TodoStatus.OPEN))

    done = complete(me, a.id)
    assert done.status is TodoStatus.DONE
    assert complete(me, a.id).status is TodoStatus.DONE  # a no-op, not an error
    assert drop(me, b.id).status is TodoStatus.DROPPED
    assert _ids(todos(me)) == [c.id]
    assert _ids(todos(me, "done")) == [a.id] and _ids(todos(me, "dropped")) == [b.id]
    assert _ids(todos(me, None)) == [a.id, b.id, c.id]

    with pytest.raises(ValidationError, match="is dropped; it cannot be completed; reopen"):
        complete(me, b.id)
    with pytest.raises(ValidationError, match="is done; it cannot be dropped"):
        drop(me, a.id)
    assert reopen(me, b.id).status is TodoStatus.OPEN
    assert reopen(me, b.id).status is TodoStatus.OPEN
    assert complete(me, b.id).status is TodoStatus.DONE


def test_todo_errors_change_nothing(eng: DynamicMemoryEngine, me: Agent) -> None:
    fact = me.remember("The deploy key rotates on Mondays")
    bobs = eng.agent("bob").remember("Bob's private chore", type="todo")
    before = _counts(eng)
    with pytest.raises(ValidationError, match=r"complete\(\) is for todos; .* is a info"):
        complete(me, fact.id)
    with pytest.raises(NotFound):
        complete(me, "alice:nope")
    with pytest.raises(NotFound):
        drop(me, bobs.id)
    with pytest.raises(ValidationError, match="unknown todo status"):
        todos(me, "finished")
    assert _counts(eng) == before
    assert me.get(fact.id, touch=False).status is None
    assert eng.agent("bob").get(bobs.id, touch=False).status is TodoStatus.OPEN


# -- riding along with a recall ---------------------------------------------------------------


def test_due_intents_and_open_todos_ride_along_injected_without_reinforcing(me: Agent, clock: FixedClock) -> None:
    me.remember("The deploy key rotates every Monday")
    todo = me.remember("Review the login PR", type="todo", importance=7)
    low = me.remember("Tidy the wiki sidebar", type="todo", importance=2)
    closed = me.remember("Old finished chore", type="todo", status="done")
    intent = intend(me, "Ask ops whether the rotation moved", cue="deploy key")
    later = intend(me, "Not yet", when=clock.now + HOUR)
    clock.advance(60)
    before = {m.id: me.get(m.id, touch=False).strength for m in (todo, low, intent)}

    recall = me.recall("when does the deploy key rotate?", k=1)
    extra = ride_along(me, recall)

    assert [(i.memory.id, i.why) for i in extra] == [
        (intent.id, "due intent"),
        (todo.id, "open todo"),
        (low.id, "open todo"),
    ]
    assert extra[0].trigger == Trigger("cue", "deploy key") and extra.recall_id == recall.recall_id
    assert closed.id not in _ids(extra.memories) and later.id not in _ids(extra.memories)
    for mid, strength in before.items():
        assert me.get(mid, touch=False).strength == strength
    for mid in (todo.id, low.id, intent.id):
        injected = [a for a in me.accesses(mid) if a.channel is Channel.INJECTED]
        assert len(injected) == 1 and injected[0].recall_id == recall.recall_id
        assert {a.channel for a in me.accesses(mid)} == {Channel.CREATED, Channel.INJECTED}
    text = extra.as_evidence(400)
    assert "UNTRUSTED EVIDENCE START" in text and "Review the login PR" in text and "open todo" in text

    again = ride_along(me, recall)  # the intent fired already; only the todos come back
    assert _ids(again.memories) == [todo.id, low.id]


def test_ride_along_skips_hits_and_caps_todos(me: Agent) -> None:
    todo = me.remember("Review the login PR", type="todo", importance=9)
    other = me.remember("Write the release notes", type="todo", importance=8)
    me.remember("Tidy the wiki sidebar", type="todo", importance=1)
    recall = me.recall("review the login PR", k=1)
    assert recall.memories[0].id == todo.id
    assert _ids(ride_along(me, recall, max_todos=1).memories) == [other.id]
    assert ride_along(me, "anything", max_todos=0).items == ()
    with pytest.raises(ValidationError):
        ride_along(me, "x", max_todos=-1)
    with pytest.raises(ValidationError):
        ride_along(me, 42)  # type: ignore[arg-type]


def test_ride_along_with_an_event_and_a_plain_query(me: Agent) -> None:
    m = intend(me, "Re-run the benchmarks", on_event="deploy-finished")
    extra = ride_along(me, "status?", event="deploy-finished")
    assert _ids(extra.memories) == [m.id] and extra.recall_id is None
    assert me.get(m.id, touch=False).archived


def test_triggers_built_directly_are_checked() -> None:
    assert Trigger("time", repr(START)).at == START
    for args in [
        ("time", "soon"),
        ("time", repr(START), True),
        ("event", "Deploy"),
        ("cue", ""),
        ("event", "x", False, 60.0),
        ("mood", "x"),
    ]:
        with pytest.raises(ValidationError):
            Trigger(*args)  # type: ignore[arg-type]


def test_the_last_period_before_9999_archives_the_intent(me: Agent) -> None:
    last = 253_402_300_799.0 - 10
    m = intend(me, "the end of time", when=last, every=3600)
    assert _ids(due(me, now=last)) == [m.id] and me.get(m.id, touch=False).archived


def test_concurrent_due_calls_fire_a_one_shot_intent_once(eng: DynamicMemoryEngine, me: Agent) -> None:
    m = intend(me, "Re-run the benchmarks", on_event="deploy")
    barrier = threading.Barrier(4)
    results: list[list[str]] = []

    def ask() -> None:
        barrier.wait()
        results.append(_ids(due(eng.agent("alice"), event="deploy")))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [[], [], [], [m.id]]
    assert sum(a.channel is Channel.INJECTED for a in me.accesses(m.id)) == 1


# -- time arguments out of range --------------------------------------------------------------


@pytest.mark.parametrize("now", [1e15, 1e20, -1e20, 253_402_300_800.0])
def test_a_clock_past_9999_is_refused_and_changes_no_intent(eng: DynamicMemoryEngine, me: Agent, now: float) -> None:
    m = intend(me, "Post the stand-up summary", when=START, every=HOUR)
    before = _counts(eng)
    for call in (lambda: due(me, now=now), lambda: ride_along(me, "stand-up", now=now)):
        with pytest.raises(ValidationError, match="now must be epoch seconds from year 1 to 9999"):
            call()
    assert _counts(eng) == before
    assert trigger_of(me.get(m.id, touch=False)) == Trigger.at_time(START, every=HOUR)  # neither moved nor archived


@pytest.mark.sqlite_only
def test_due_far_past_9999_returns_at_once_and_leaves_the_store_open(tmp_path: Path) -> None:
    """The stepping loop this replaces spun forever at ``now=1e20`` holding the write lock."""
    path = tmp_path / "memory.db"
    script = textwrap.dedent(
        f"""
        from engramdb import DynamicMemoryEngine, ValidationError
        from engramdb.testing import FixedClock
        with DynamicMemoryEngine({str(path)!r}, clock=FixedClock(), memory_embedder=None) as engine:
            me = engine.agent("alice")
            me.intend("tick", when={START!r}, every=1)
            try:
                me.due(now=1e20)
            except ValidationError as exc:
                print(type(exc).__name__)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ValidationError", done.stderr
    with DynamicMemoryEngine(path, clock=FixedClock(), memory_embedder=None) as engine:
        assert [m.content for m in engine.agent("alice").memories(types=["intent"])] == ["tick"]
