"""Prospective memory: intents that fire on a time, an event or a cue; todos that get done.

An ``intent`` memory carries one **trigger**. There is no trigger column: the trigger is a
`MemoryRef` of kind ``"trigger"`` in the intent's ``refs`` JSON, whose key is the canonical
trigger spec (its preview is a human description, its ``captured_at`` the creation time)::

    time:<epoch>                  once, when the clock reaches <epoch> (seconds since the epoch, UTC)
    every <seconds> time:<epoch>  first at <epoch>, then every <seconds>; the key moves on as it fires
    event:<name>                  once, the first time `due(event=<name>)` is asked
    repeat event:<name>           every time
    cue:<phrase>                  once, when `due(text=…)` contains <phrase> as a whole phrase
    repeat cue:<phrase>           every time

A spec is accepted with an ISO-8601 time with a UTC offset (``time:2025-11-25T09:00:00Z``) and
stored with epoch seconds. Names and phrases are stored normalised (NFKC, case-folded, invisible
characters removed, white space collapsed), so matching is an equality (events) or a whole-phrase
search (cues) over text normalised the same way (`engramdb.memories.triggers`). The store narrows
the candidates of `due` by the spec (`engramdb.storage.ports.MemoryRows.intents`).

**Fired state.** A one-shot intent is *archived* when it fires: it leaves recall, injection and
`due` at once, stays readable by id (``agent.get``) and in ``memories(include_archived=True)``, and
the firing is in its access stream (channel ``injected``, query ``"fired <spec>"``). The archive
is a compare-and-set inside the write transaction, so the same event twice — or two threads asking
at once — fires it once. Repeating event and cue intents keep no state and fire on every match;
a periodic time intent advances its key past `now` (missed periods collapse into one firing).

Only the agent's own intents fire for it: shared intents (owner ``''``) and other agents'
intents never do — an intent is one agent's commitment. Todos are listed as the agent sees them
(its own and the tenant's shared ones).

Example::

    from engramdb.memories.prospective import due, intend, ride_along, todos

    intend(me, "Ask ops to rotate the deploy key", cue="deploy key")
    intend(me, "Post the stand-up summary", when="2025-11-25T09:00:00Z")
    me.remember("Review Bob's PR", type="todo")
    fired = due(me, text="the deploy key expired")        # -> [the first intent], now archived
    extra = ride_along(me, me.recall("what is left to do?"))  # due intents + open todos, injected
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Literal, overload

from engramdb.errors import ValidationError
from engramdb.memories import reading, writing
from engramdb.memories.model import Channel, Memory, MemoryRef, MemoryType, TodoStatus, check_time
from engramdb.memories.runtime import Acting
from engramdb.memories.triggers import (
    TRIGGER_KIND,
    Trigger,
    TriggerKind,
    _name,
    make_trigger,
    normalise,
    parse_time,
    parse_trigger,
    trigger_of,
)
from engramdb.retrieval.budget import TokenCounter, approx_tokens
from engramdb.retrieval.evidence import EvidenceItem, render_evidence
from engramdb.retrieval.results import Recall
from engramdb.storage.ports import Touch

__all__ = [
    "TRIGGER_KIND",
    "Injected",
    "Injection",
    "Trigger",
    "TriggerKind",
    "complete",
    "drop",
    "due",
    "intend",
    "make_trigger",
    "normalise",
    "parse_time",
    "parse_trigger",
    "reopen",
    "ride_along",
    "todos",
    "trigger_of",
]


# -- writing intents --------------------------------------------------------------------------


def intend(
    agent: Acting,
    content: str,
    *,
    when: object = None,
    every: object = None,
    on_event: object = None,
    cue: object = None,
    trigger: object = None,
    repeat: bool = False,
    importance: float | None = None,
    title: str = "",
    tags: Iterable[str] | None = None,
    refs: Iterable[MemoryRef] | None = None,
) -> Memory:
    """Store a private intent of `agent` that fires on one trigger, and return it.

    Give exactly one of `when` (epoch seconds, an aware datetime or ISO-8601 text with an offset),
    `on_event` (an event name), `cue` (a phrase) or `trigger` (a spec, see the module docstring).
    `repeat` makes an event or cue intent fire on every match; a time intent repeats with
    `every` (seconds) instead. `refs` are further references (not triggers).

    A trigger that cannot parse, and any other bad field, is a `ValidationError` and nothing is
    written. Intents are never deduplicated against each other: the same words with another
    trigger are another intent.

    Example::

        intend(me, "Post the stand-up summary", when="2025-11-25T09:00:00Z", every=86_400)
        intend(me, "Ask ops about the key", cue="deploy key")
        intend(me, "Re-run the benchmarks", on_event="deploy-finished", repeat=True)
    """
    trig = make_trigger(when=when, every=every, on_event=on_event, cue=cue, trigger=trigger, repeat=repeat)
    extra = tuple(refs or ())
    if any(not isinstance(r, MemoryRef) for r in extra):
        raise ValidationError("refs must be MemoryRef values")
    if any(r.kind == TRIGGER_KIND for r in extra):
        raise ValidationError("pass the trigger as when=, on_event=, cue= or trigger=, not as a ref")
    rt = agent._runtime
    now = rt.clock()
    return writing.remember_many(
        rt,
        agent._principal,
        [
            {
                "content": content,
                "type": MemoryType.INTENT,
                "importance": importance,
                "title": title,
                "tags": tags,
                "refs": (trig.to_ref(now), *extra),
            }
        ],
        dedup=False,
    )[0]


# -- firing -----------------------------------------------------------------------------------


def _check_now(now: object) -> float:
    return check_time("now", now)


def _fire(
    agent: Acting,
    *,
    now: float,
    event: str | None,
    text: str | None,
    trace_ref: str | None,
    recall_id: str | None = None,
) -> list[tuple[str, Trigger]]:
    """Fire the matching intents inside the caller's unit of work; [(memory id, trigger that fired)]."""
    rt, who = agent._runtime, agent._principal
    store = rt.store
    vis = dataclasses.replace(who.visibility(), as_of=now)
    rows = store.memories.intents(vis, who.agent_id, now=now, event=event, cues=bool(text))
    fired: list[tuple[str, Trigger]] = []
    change: int | None = None
    for n, mid, refs in rows:
        new_refs = list(refs)
        hit: Trigger | None = None
        one_shot = moved = False
        for i, ref in enumerate(refs):
            if ref.kind != TRIGGER_KIND:
                continue
            try:
                trig = parse_trigger(ref.key)
            except ValidationError:
                continue  # written around `intend`; it can never fire
            if not trig._match(now, event, text):
                continue
            hit = hit or trig
            if trig.every is not None:
                try:
                    new_refs[i] = replace(ref, key=trig.next_after(now).spec)
                    moved = True
                except ValidationError:  # the next period would fall after 9999: this was the last one
                    one_shot = True
            elif not trig.repeat:
                one_shot = True
        if hit is None:
            continue
        change = store.changes.next(who.tenant) if change is None else change
        # compare-and-set: whoever archives (or moves) it first fired it
        if (one_shot or moved) and not store.memories.set_refs(n, refs, tuple(new_refs), change, archive=one_shot):
            continue
        store.accesses.append(
            [Touch(n, Channel.INJECTED)], now=now, tenant=who.tenant, reader=who.agent_id, query=f"fired {hit.spec}",
            trace_ref=trace_ref, recall_id=recall_id,
        )  # fmt: skip
        fired.append((mid, hit))
    return fired


def due(
    agent: Acting,
    *,
    now: float | None = None,
    event: str | None = None,
    text: str | None = None,
    trace_ref: str | None = None,
) -> list[Memory]:
    """Fire and return `agent`'s intents whose trigger matches, oldest first.

    Time triggers are checked against `now` (default: the engine clock) on every call; event
    triggers against `event`, cue triggers against `text`. Each firing is logged on the
    ``injected`` channel (it never reinforces) with the query ``"fired <spec>"``. One-shot intents
    come back archived and never fire again, so asking twice fires once.

    Raises `ValidationError` for a `now` that is not a number, or an empty or over-long event name.
    """
    reading.check_trace_ref(trace_ref)
    rt = agent._runtime
    t = rt.clock() if now is None else _check_now(now)
    ev = None if event is None else _name("the event name", event)
    if text is not None and not isinstance(text, str):
        raise ValidationError(f"text must be a str, got {type(text).__name__}")
    tx = None if text is None else normalise(text)
    with rt.store.atomic():
        fired = _fire(agent, now=t, event=ev, text=tx, trace_ref=trace_ref)
    return [reading.get(rt, agent._principal, mid, touch=False) for mid, _ in fired]


# -- todos ------------------------------------------------------------------------------------


def _status(value: object) -> TodoStatus:
    try:
        return TodoStatus(str(value))
    except ValueError:
        raise ValidationError(f"unknown todo status {value!r}; use open, done or dropped") from None


def _todo_ids(
    agent: Acting, status: TodoStatus | None, *, by_importance: bool = False, now: float | None = None
) -> list[str]:
    rt = agent._runtime
    vis = dataclasses.replace(agent._principal.visibility(), as_of=rt.clock() if now is None else now)
    return rt.store.memories.todo_ids(vis, status, by_importance=by_importance)


def todos(agent: Acting, status: TodoStatus | str | None = TodoStatus.OPEN) -> list[Memory]:
    """The todos `agent` can see with `status` (``None``: every status), oldest first; logs nothing.

    Archived todos are left out. An unknown status is a `ValidationError`.
    """
    st = None if status is None else _status(status)
    return [reading.get(agent._runtime, agent._principal, mid, touch=False) for mid in _todo_ids(agent, st)]


_MOVES: dict[TodoStatus, frozenset[TodoStatus]] = {
    TodoStatus.DONE: frozenset({TodoStatus.OPEN}),
    TodoStatus.DROPPED: frozenset({TodoStatus.OPEN}),
    TodoStatus.OPEN: frozenset({TodoStatus.DONE, TodoStatus.DROPPED}),
}


def _move(agent: Acting, memory_id: str, to: TodoStatus, verb: str, done: str) -> Memory:
    rt, who = agent._runtime, agent._principal
    with rt.store.atomic():
        current = reading.get(rt, who, memory_id, touch=False)
        if current.type is not MemoryType.TODO:
            raise ValidationError(f"{verb}() is for todos; memory {memory_id!r} is a {current.type.value}")
        if current.status is to:
            return current
        if current.status not in _MOVES[to]:
            state = current.status.value if current.status else "without a status"
            hint = "; reopen() it first" if to is not TodoStatus.OPEN else ""
            raise ValidationError(f"todo {memory_id!r} is {state}; it cannot be {done}{hint}")
        return writing.update(rt, who, memory_id, status=to.value)


def complete(agent: Acting, memory_id: str) -> Memory:
    """Mark an open todo done and return it; already done is a no-op.

    `NotFound` for an id the agent cannot see or write; `ValidationError` for a memory that is not
    a todo, or a dropped todo (reopen it first). Nothing is written on error.
    """
    return _move(agent, memory_id, TodoStatus.DONE, "complete", "completed")


def drop(agent: Acting, memory_id: str) -> Memory:
    """Mark an open todo dropped and return it; already dropped is a no-op (errors as `complete`)."""
    return _move(agent, memory_id, TodoStatus.DROPPED, "drop", "dropped")


def reopen(agent: Acting, memory_id: str) -> Memory:
    """Move a done or dropped todo back to open and return it; already open is a no-op (errors as `complete`)."""
    return _move(agent, memory_id, TodoStatus.OPEN, "reopen", "reopened")


# -- riding along with a recall ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Injected:
    """One memory injected beside a recall: a due intent (with the trigger that fired) or an open todo."""

    memory: Memory
    why: Literal["due intent", "open todo"]
    trigger: Trigger | None = None


@dataclass(frozen=True, slots=True)
class Injection(Sequence[Injected]):
    """What rode along with one recall: due intents first (oldest first), then open todos (most important first).

    Every item was logged on the ``injected`` channel, which never reinforces.
    """

    query: str
    items: tuple[Injected, ...]
    recall_id: str | None
    ts: float

    @overload
    def __getitem__(self, i: int) -> Injected: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Injected]: ...
    def __getitem__(self, i: int | slice) -> Injected | Sequence[Injected]:
        return self.items[i]

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[Injected]:
        return iter(self.items)

    @property
    def memories(self) -> list[Memory]:
        return [i.memory for i in self.items]

    def as_evidence(self, token_budget: int = 256, token_counter: TokenCounter = approx_tokens) -> str:
        """The items as untrusted evidence within `token_budget` (the same wrapper as `Recall.as_evidence`)."""
        items = []
        for it in self.items:
            m = it.memory
            fields: list[tuple[str, str]] = []
            if m.title:
                fields.append(("title", m.title))
            if it.trigger is not None:
                fields.append(("trigger", it.trigger.describe()))
            owner = "shared" if m.shared else f"private to {m.owner}"
            items.append(EvidenceItem(f"memory {m.id} · {it.why} · {owner}", m.content, tuple(fields)))
        return render_evidence(items, token_budget, token_counter)


def ride_along(
    agent: Acting,
    recall_or_query: Recall | str,
    *,
    now: float | None = None,
    event: str | None = None,
    max_todos: int = 5,
    trace_ref: str | None = None,
) -> Injection:
    """The intents that fire for this recall and the open todos, to inject beside it.

    The recall's query is the cue text: `due(now, event, text=query)` fires what matches (and
    archives one-shot intents, so they ride along once). Then up to `max_todos` open todos the
    agent can see, most important first, skipping memories already among the recall's hits. All
    is logged on the ``injected`` channel (tied to the recall's id) and never reinforces; all or
    nothing in one transaction.
    """
    if isinstance(recall_or_query, Recall):
        query, recall_id = recall_or_query.query, recall_or_query.recall_id
        seen = {h.memory.id for h in recall_or_query.hits}
    elif isinstance(recall_or_query, str):
        query, recall_id, seen = recall_or_query, None, set()
    else:
        raise ValidationError(f"ride_along() takes a Recall or a query str, got {type(recall_or_query).__name__}")
    if isinstance(max_todos, bool) or not isinstance(max_todos, int) or not 0 <= max_todos <= 100:
        raise ValidationError(f"max_todos must be an integer from 0 to 100, got {max_todos!r}")
    reading.check_trace_ref(trace_ref)
    rt, who = agent._runtime, agent._principal
    t = rt.clock() if now is None else _check_now(now)
    ev = None if event is None else _name("the event name", event)
    store = rt.store
    with store.atomic():
        fired = _fire(agent, now=t, event=ev, text=normalise(query), trace_ref=trace_ref, recall_id=recall_id)
        todo_ids = [mid for mid in _todo_ids(agent, TodoStatus.OPEN, by_importance=True, now=t) if mid not in seen]
        todo_ids = todo_ids[:max_todos]
        if todo_ids:
            keys = store.memories.visible_ids(dataclasses.replace(who.visibility(), as_of=t), todo_ids)
            store.accesses.append(
                [Touch(keys[mid], Channel.INJECTED) for mid in todo_ids], now=t, tenant=who.tenant,
                reader=who.agent_id, query=query, trace_ref=trace_ref, recall_id=recall_id,
            )  # fmt: skip
        items = [
            Injected(reading.get(rt, who, mid, touch=False), "due intent", trig)
            for mid, trig in fired
            if mid not in seen
        ]
        items += [Injected(reading.get(rt, who, mid, touch=False), "open todo") for mid in todo_ids]
    return Injection(query, tuple(items), recall_id, t)
