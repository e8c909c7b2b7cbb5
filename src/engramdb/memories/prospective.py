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
search (cues) over text normalised the same way. The spec stays queryable in SQL through
``json_each(m.refs)``, which is how `due` narrows its candidates.

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

import datetime as dt
import functools
import json
import math
import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal, overload

from engramdb.errors import ValidationError
from engramdb.memories.model import Channel, Memory, MemoryRef, MemoryType, TodoStatus
from engramdb.memories.store import Touch, Visibility, append_stream, next_change
from engramdb.retrieval.budget import TokenCounter, approx_tokens
from engramdb.retrieval.evidence import EvidenceItem, render_evidence
from engramdb.retrieval.results import Recall
from engramdb.storage.sqlite import translate

if TYPE_CHECKING:
    import sqlite3

    from engramdb.agent import Agent

#: the `MemoryRef.kind` that holds an intent's trigger
TRIGGER_KIND = "trigger"

TriggerKind = Literal["time", "event", "cue"]

_MAX_TIME = 253_402_300_799.0  # 9999-12-31T23:59:59Z: the last instant a datetime can show
_MIN_EVERY, _MAX_EVERY = 1.0, 100 * 366 * 86_400.0
_MAX_NAME = 200
_SPEC = re.compile(
    r"(?:(?P<repeat>repeat)\s+|every\s+(?P<every>\S+)\s+)?(?P<kind>time|event|cue):(?P<value>.*)",
    re.IGNORECASE | re.DOTALL,
)
_EPOCH = re.compile(r"[0-9]+(?:\.[0-9]+)?")
_WS = re.compile(r"\s+")
_WORD = re.compile(r"\w")
_SPEC_HELP = (
    "use time:<epoch or ISO-8601 with offset>, event:<name> or cue:<phrase>, "
    "optionally 'repeat ' before event/cue or 'every <seconds> ' before time"
)


def normalise(text: str) -> str:
    """Text as triggers compare it: NFKC, case-folded, invisible characters removed, white space collapsed.

    ``normalise("Ｄｅｐｌｏｙ\\u200b  KEY") == "deploy key"``.
    """
    s = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    if not s.isprintable():
        s = "".join(ch for ch in s if ch.isspace() or unicodedata.category(ch) not in ("Cf", "Cc", "Co", "Cs", "Cn"))
    return _WS.sub(" ", s).strip()


@functools.lru_cache(maxsize=1024)
def _phrase_pattern(phrase: str) -> re.Pattern[str]:
    words = phrase.split(" ")
    return re.compile(r"(?<!\w)" + r"\s+".join(re.escape(w) for w in words) + r"(?!\w)")


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _num(x: float) -> str:
    return repr(float(x))


def parse_time(value: object) -> float:
    """Epoch seconds from a number, an aware `datetime`, or a string (epoch digits or ISO-8601 with an offset).

    Raises `ValidationError` for anything else, for a time without a UTC offset (ambiguous), and
    for times before 1970 or after 9999.
    """
    if isinstance(value, bool):
        raise ValidationError(f"a trigger time must be epoch seconds, a datetime or ISO-8601 text, got {value!r}")
    if isinstance(value, (int, float)):
        t = float(value)
    elif isinstance(value, dt.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValidationError(f"the trigger time {value.isoformat()} has no UTC offset; it would be ambiguous")
        t = value.timestamp()
    elif isinstance(value, str):
        text = value.strip()
        if _EPOCH.fullmatch(text):
            t = float(text)
        else:
            try:
                parsed = dt.datetime.fromisoformat(text)
            except ValueError:
                raise ValidationError(
                    f"cannot parse the trigger time {value!r}; use epoch seconds or ISO-8601 such as 2025-11-25T09:00:00Z"
                ) from None
            if parsed.tzinfo is None or parsed.utcoffset() is None:
                raise ValidationError(
                    f"the trigger time {value!r} has no UTC offset; add one (Z, +02:00) so it is not ambiguous"
                )
            t = parsed.timestamp()
    else:
        raise ValidationError(
            f"a trigger time must be epoch seconds, a datetime or ISO-8601 text, got {type(value).__name__}"
        )
    if not math.isfinite(t) or not 0 <= t <= _MAX_TIME:
        raise ValidationError(f"a trigger time must be between 1970 and 9999, got {value!r}")
    return t


def _period(value: object) -> float:
    if isinstance(value, str) and _EPOCH.fullmatch(value.strip()):
        value = float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValidationError(f"every must be a number of seconds, got {value!r}")
    if not _MIN_EVERY <= value <= _MAX_EVERY:
        raise ValidationError(f"every must be from {_MIN_EVERY:g} s to 100 years, got {value!r}")
    return float(value)


def _name(what: str, value: object) -> str:
    if not isinstance(value, str):
        raise ValidationError(f"{what} must be a str, got {type(value).__name__}")
    norm = normalise(value)
    if not norm:
        raise ValidationError(f"{what} is empty")
    if len(norm) > _MAX_NAME:
        raise ValidationError(f"{what} is longer than {_MAX_NAME} characters")
    if not _WORD.search(norm):
        raise ValidationError(f"{what} {value!r} has no letter or digit to match on")
    return norm


@dataclass(frozen=True, slots=True)
class Trigger:
    """When an intent fires: at a time, on an event, or on a cue phrase; once unless it repeats.

    Build one with `Trigger.at_time`, `Trigger.on_event`, `Trigger.on_cue` or `parse_trigger`;
    the fields are canonical (``value`` is epoch seconds as text for time triggers, the
    normalised name or phrase otherwise). ``every`` is the period of a repeating time trigger.
    """

    kind: TriggerKind
    value: str
    repeat: bool = False
    every: float | None = None

    def __post_init__(self) -> None:
        # Direct construction gets the same checks as the builders: no trigger that can never fire.
        if self.kind == "time":
            at = parse_time(self.value)
            if self.every is not None:
                _period(self.every)
            if self.repeat != (self.every is not None) or self.value != _num(at):
                raise ValidationError("a time trigger repeats exactly when it has a period; its value is epoch seconds")
        elif self.kind in ("event", "cue"):
            if self.every is not None:
                raise ValidationError(f"'every' is for time triggers, not {self.kind} triggers")
            if _name(f"the {self.kind} text", self.value) != self.value:
                raise ValidationError(f"a trigger value is stored normalised; use Trigger.on_{self.kind}()")
        else:
            raise ValidationError(f"unknown trigger kind {self.kind!r}; use time, event or cue")

    @classmethod
    def at_time(cls, when: object, *, every: object = None) -> Trigger:
        """A time trigger (see `parse_time`); with `every` (seconds) it repeats with that period."""
        return cls("time", _num(parse_time(when)), every is not None, None if every is None else _period(every))

    @classmethod
    def on_event(cls, name: object, *, repeat: bool = False) -> Trigger:
        """An event trigger; the name matches `due(event=…)` after `normalise`."""
        return cls("event", _name("an event name", name), _flag(repeat))

    @classmethod
    def on_cue(cls, phrase: object, *, repeat: bool = False) -> Trigger:
        """A cue trigger; the phrase matches `due(text=…)` as a whole phrase after `normalise`."""
        return cls("cue", _name("a cue phrase", phrase), _flag(repeat))

    @property
    def at(self) -> float | None:
        """The (next) firing time of a time trigger, else None."""
        return float(self.value) if self.kind == "time" else None

    @property
    def spec(self) -> str:
        """The canonical spec, as stored in the trigger ref's key (`parse_trigger` reads it back)."""
        if self.every is not None:
            return f"every {_num(self.every)} time:{self.value}"
        return f"{'repeat ' if self.repeat else ''}{self.kind}:{self.value}"

    def describe(self) -> str:
        """A short human description: ``"at 2025-11-25T09:00:00Z, then every 3600 s"``."""
        if self.kind == "time":
            text = f"at {_iso(float(self.value))}"
            return text + (f", then every {self.every:g} s" if self.every is not None else "")
        what = f"on event “{self.value}”" if self.kind == "event" else f"on cue “{self.value}”"
        return what + (", every time" if self.repeat else "")

    def to_ref(self, captured_at: float | None = None) -> MemoryRef:
        """The `MemoryRef` that stores this trigger on an intent."""
        return MemoryRef(TRIGGER_KIND, self.spec, self.describe(), captured_at)

    def matches(self, *, now: float | None = None, event: str | None = None, text: str | None = None) -> bool:
        """Whether this trigger fires for the given clock, event or text (raw; normalised here)."""
        return self._match(now, None if event is None else normalise(event), None if text is None else normalise(text))

    def _match(self, now: float | None, event: str | None, text: str | None) -> bool:
        if self.kind == "time":
            return now is not None and float(self.value) <= now
        if self.kind == "event":
            return event is not None and event == self.value
        return text is not None and _phrase_pattern(self.value).search(text) is not None

    def next_after(self, now: float) -> Trigger:
        """A periodic time trigger moved to its first firing time after `now` (itself if not periodic)."""
        if self.every is None:
            return self
        at = float(self.value)
        if at > now:
            return self
        steps = math.floor((now - at) / self.every) + 1
        nxt = at + steps * self.every
        while nxt <= now:  # float rounding
            nxt += self.every
        return replace(self, value=_num(nxt))


def _flag(repeat: object) -> bool:
    if not isinstance(repeat, bool):
        raise ValidationError(f"repeat must be True or False, got {repeat!r}")
    return repeat


def parse_trigger(spec: object) -> Trigger:
    """A `Trigger` from its spec text (see the module docstring); `ValidationError` if it cannot parse.

    ``parse_trigger("repeat Event: Deploy Done").spec == "repeat event:deploy done"``.
    """
    if not isinstance(spec, str):
        raise ValidationError(f"a trigger spec must be a str, got {type(spec).__name__}")
    m = _SPEC.fullmatch(spec.strip())
    if m is None:
        raise ValidationError(f"cannot parse the trigger {spec!r}; {_SPEC_HELP}")
    kind, value = m["kind"].lower(), m["value"]
    if m["every"] is not None:
        if kind != "time":
            raise ValidationError(f"'every' is for time triggers; use 'repeat {kind}:…' in {spec!r}")
        return Trigger.at_time(value, every=m["every"])
    if kind == "time":
        if m["repeat"]:
            raise ValidationError(f"a repeating time trigger needs a period: 'every <seconds> time:…', not {spec!r}")
        return Trigger.at_time(value)
    if kind == "event":
        return Trigger.on_event(value, repeat=m["repeat"] is not None)
    return Trigger.on_cue(value, repeat=m["repeat"] is not None)


def make_trigger(
    *,
    when: object = None,
    every: object = None,
    on_event: object = None,
    cue: object = None,
    trigger: object = None,
    repeat: object = False,
) -> Trigger:
    """The one trigger that `intend`'s keyword arguments describe; `ValidationError` otherwise."""
    given = [
        k for k, v in (("when", when), ("on_event", on_event), ("cue", cue), ("trigger", trigger)) if v is not None
    ]
    if len(given) != 1:
        raise ValidationError(
            "an intent needs exactly one trigger: when=, on_event=, cue= or trigger=<spec>"
            + (f" (got {', '.join(given)})" if given else "")
        )
    rep = _flag(repeat)
    if every is not None and when is None:
        raise ValidationError("every= is the period of a time trigger; give when= as well")
    if when is not None:
        if rep and every is None:
            raise ValidationError("a repeating time trigger needs a period: pass every=<seconds>")
        return Trigger.at_time(when, every=every)
    if on_event is not None:
        return Trigger.on_event(on_event, repeat=rep)
    if cue is not None:
        return Trigger.on_cue(cue, repeat=rep)
    parsed = parse_trigger(trigger)
    if rep and not parsed.repeat:
        raise ValidationError("repeat=True with a trigger spec: write the repeat in the spec ('repeat event:…')")
    return parsed


def trigger_of(memory: Memory) -> Trigger | None:
    """The trigger of an intent (its first parseable trigger ref), or None."""
    for ref in memory.refs:
        if ref.kind == TRIGGER_KIND:
            try:
                return parse_trigger(ref.key)
            except ValidationError:
                continue
    return None


# -- writing intents --------------------------------------------------------------------------


def intend(
    agent: Agent,
    content: str,
    *,
    when: object = None,
    every: object = None,
    on_event: object = None,
    cue: object = None,
    trigger: object = None,
    repeat: bool = False,
    importance: float = 5.0,
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
    now = agent.engine.clock()
    return agent.remember(
        content,
        type=MemoryType.INTENT,
        importance=importance,
        title=title,
        tags=tags,
        refs=(trig.to_ref(now), *extra),
        dedup=False,
    )


# -- firing -----------------------------------------------------------------------------------


def _check_now(now: object) -> float:
    if isinstance(now, bool) or not isinstance(now, (int, float)) or not math.isfinite(now):
        raise ValidationError(f"now must be epoch seconds (a number), got {now!r}")
    return float(now)


def _key_sql(j: str) -> str:
    return f"json_extract({j}.value, '$.key')"


def _fire(
    agent: Agent,
    db: sqlite3.Connection,
    *,
    now: float,
    event: str | None,
    text: str | None,
    trace_ref: str | None,
    recall_id: str | None = None,
) -> list[tuple[str, Trigger]]:
    """Fire the matching intents inside the caller's transaction; [(memory id, trigger that fired)]."""
    vis = Visibility(agent.tenant, agent.agent_id, agent.cap, as_of=now)
    pred, params = vis.sql("m")
    k = _key_sql("j")
    kinds = [
        f"(({k} LIKE 'time:%' OR {k} LIKE 'every % time:%') AND CAST(substr({k}, instr({k}, 'time:') + 5) AS REAL) <= :f_now)"
    ]
    params = dict(params, f_now=now, f_me=agent.agent_id)
    if event is not None:
        kinds.append(f"{k} IN (:f_ev1, :f_ev2)")
        params.update(f_ev1=f"event:{event}", f_ev2=f"repeat event:{event}")
    if text:
        kinds.append(f"({k} LIKE 'cue:%' OR {k} LIKE 'repeat cue:%')")
    rows = db.execute(
        f"SELECT m.n, m.id, m.refs FROM engram_memories m WHERE m.type = 'intent' AND m.owner = :f_me AND {pred} "  # noqa: S608 - engine-built fragments, values bound
        f"AND EXISTS (SELECT 1 FROM json_each(m.refs) j WHERE json_extract(j.value, '$.kind') = '{TRIGGER_KIND}' "
        f"AND ({' OR '.join(kinds)})) ORDER BY m.n",
        params,
    ).fetchall()
    fired: list[tuple[str, Trigger]] = []
    change: int | None = None
    for n, mid, refs_json in rows:
        refs = [MemoryRef.from_json(r) for r in json.loads(refs_json)]
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
        change = next_change(db) if change is None else change
        new_json = json.dumps([r.to_json() for r in new_refs])
        if one_shot:
            # compare-and-set: whoever archives it first fired it
            cur = db.execute(
                "UPDATE engram_memories SET archived = 1, refs = ?, changed = ? WHERE n = ? AND archived = 0",
                (new_json, change, n),
            )
            if cur.rowcount != 1:
                continue
        elif moved:
            cur = db.execute(
                "UPDATE engram_memories SET refs = ?, changed = ? WHERE n = ? AND refs = ?",
                (new_json, change, n, refs_json),
            )
            if cur.rowcount != 1:
                continue
        append_stream(
            db, [Touch(int(n), Channel.INJECTED)], now=now, tenant=agent.tenant, reader=agent.agent_id,
            query=f"fired {hit.spec}", trace_ref=trace_ref, recall_id=recall_id,
        )  # fmt: skip
        fired.append((str(mid), hit))
    return fired


def due(
    agent: Agent,
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
    t = agent.engine.clock() if now is None else _check_now(now)
    ev = None if event is None else _name("the event name", event)
    if text is not None and not isinstance(text, str):
        raise ValidationError(f"text must be a str, got {type(text).__name__}")
    tx = None if text is None else normalise(text)
    conn = agent.engine.store.connection("engine")
    with agent.engine.store.atomic(conn), translate(conn):
        fired = _fire(agent, conn.raw, now=t, event=ev, text=tx, trace_ref=trace_ref)
    return [agent.get(mid, touch=False) for mid, _ in fired]


# -- todos ------------------------------------------------------------------------------------


def _status(value: object) -> TodoStatus:
    try:
        return TodoStatus(str(value))
    except ValueError:
        raise ValidationError(f"unknown todo status {value!r}; use open, done or dropped") from None


def _todo_ids(
    agent: Agent, status: TodoStatus | None, *, by_importance: bool = False, now: float | None = None
) -> list[str]:
    vis = Visibility(agent.tenant, agent.agent_id, agent.cap, as_of=agent.engine.clock() if now is None else now)
    pred, params = vis.sql("m")
    where = f"m.type = 'todo' AND {pred}" + (" AND m.status = :t_status" if status is not None else "")
    order = "m.importance DESC, m.created_at, m.n" if by_importance else "m.created_at, m.n"
    conn = agent.engine.store.connection("engine")
    with translate(conn):
        rows = conn.raw.execute(
            f"SELECT m.id FROM engram_memories m WHERE {where} ORDER BY {order}",  # noqa: S608 - engine-built fragments, values bound
            dict(params, t_status=None if status is None else status.value),
        ).fetchall()
    return [str(r[0]) for r in rows]


def todos(agent: Agent, status: TodoStatus | str | None = TodoStatus.OPEN) -> list[Memory]:
    """The todos `agent` can see with `status` (``None``: every status), oldest first; logs nothing.

    Archived todos are left out. An unknown status is a `ValidationError`.
    """
    st = None if status is None else _status(status)
    return [agent.get(mid, touch=False) for mid in _todo_ids(agent, st)]


_MOVES: dict[TodoStatus, frozenset[TodoStatus]] = {
    TodoStatus.DONE: frozenset({TodoStatus.OPEN}),
    TodoStatus.DROPPED: frozenset({TodoStatus.OPEN}),
    TodoStatus.OPEN: frozenset({TodoStatus.DONE, TodoStatus.DROPPED}),
}


def _move(agent: Agent, memory_id: str, to: TodoStatus, verb: str, done: str) -> Memory:
    conn = agent.engine.store.connection("engine")
    with agent.engine.store.atomic(conn):
        current = agent.get(memory_id, touch=False)
        if current.type is not MemoryType.TODO:
            raise ValidationError(f"{verb}() is for todos; memory {memory_id!r} is a {current.type.value}")
        if current.status is to:
            return current
        if current.status not in _MOVES[to]:
            state = current.status.value if current.status else "without a status"
            hint = "; reopen() it first" if to is not TodoStatus.OPEN else ""
            raise ValidationError(f"todo {memory_id!r} is {state}; it cannot be {done}{hint}")
        return agent.update(memory_id, status=to.value)


def complete(agent: Agent, memory_id: str) -> Memory:
    """Mark an open todo done and return it; already done is a no-op.

    `NotFound` for an id the agent cannot see or write; `ValidationError` for a memory that is not
    a todo, or a dropped todo (reopen it first). Nothing is written on error.
    """
    return _move(agent, memory_id, TodoStatus.DONE, "complete", "completed")


def drop(agent: Agent, memory_id: str) -> Memory:
    """Mark an open todo dropped and return it; already dropped is a no-op (errors as `complete`)."""
    return _move(agent, memory_id, TodoStatus.DROPPED, "drop", "dropped")


def reopen(agent: Agent, memory_id: str) -> Memory:
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
    agent: Agent,
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
    t = agent.engine.clock() if now is None else _check_now(now)
    ev = None if event is None else _name("the event name", event)
    conn = agent.engine.store.connection("engine")
    with agent.engine.store.atomic(conn), translate(conn):
        db = conn.raw
        fired = _fire(
            agent, db, now=t, event=ev, text=normalise(query), trace_ref=trace_ref, recall_id=recall_id
        )  # fmt: skip
        todo_ids = [mid for mid in _todo_ids(agent, TodoStatus.OPEN, by_importance=True, now=t) if mid not in seen]
        todo_ids = todo_ids[:max_todos]
        if todo_ids:
            marks = ",".join("?" * len(todo_ids))
            ns = dict(
                db.execute(
                    f"SELECT id, n FROM engram_memories WHERE tenant = ? AND id IN ({marks})",  # noqa: S608 - placeholders only
                    (agent.tenant, *todo_ids),
                ).fetchall()
            )
            append_stream(
                db, [Touch(int(ns[mid]), Channel.INJECTED) for mid in todo_ids], now=t, tenant=agent.tenant,
                reader=agent.agent_id, query=query, trace_ref=trace_ref, recall_id=recall_id,
            )  # fmt: skip
        items = [Injected(agent.get(mid, touch=False), "due intent", trig) for mid, trig in fired if mid not in seen]
        items += [Injected(agent.get(mid, touch=False), "open todo") for mid in todo_ids]
    return Injection(query, tuple(items), recall_id, t)
