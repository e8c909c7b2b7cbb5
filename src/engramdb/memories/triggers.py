"""Intent triggers: the grammar of a trigger spec, parsing and matching (pure; no storage).

An ``intent`` memory carries one **trigger**: a `MemoryRef` of kind ``"trigger"`` in its refs, whose
key is the canonical spec (its preview a human description, its ``captured_at`` the creation time)::

    time:<epoch>                  once, when the clock reaches <epoch> (seconds since the epoch, UTC)
    every <seconds> time:<epoch>  first at <epoch>, then every <seconds>; the key moves on as it fires
    event:<name>                  once, the first time `due(event=<name>)` is asked
    repeat event:<name>           every time
    cue:<phrase>                  once, when `due(text=…)` contains <phrase> as a whole phrase
    repeat cue:<phrase>           every time

A spec is accepted with an ISO-8601 time with a UTC offset (``time:2025-11-25T09:00:00Z``) and
stored with epoch seconds. Names and phrases are stored normalised (NFKC, case-folded, invisible
characters removed, white space collapsed), so matching is an equality (events) or a whole-phrase
search (cues) over text normalised the same way. See `engramdb.memories.prospective` for firing.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import re
import unicodedata
from dataclasses import dataclass, replace
from typing import Literal

from engramdb.errors import ValidationError
from engramdb.memories.model import MAX_TIME, Memory, MemoryRef, check_time

#: the `MemoryRef.kind` that holds an intent's trigger
TRIGGER_KIND = "trigger"

TriggerKind = Literal["time", "event", "cue"]

_MIN_EVERY, _MAX_EVERY = 1.0, 100 * 366 * 86_400.0
_MAX_NAME = 200
_SPEC = re.compile(
    r"(?:(?P<repeat>repeat)\s+|every\s+(?P<every>\S+)\s+)?(?P<kind>time|event|cue):(?P<value>.*)",
    re.IGNORECASE | re.DOTALL,
)
_EPOCH = re.compile(r"[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")  # repr() of a tiny time has an exponent
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
    if not math.isfinite(t) or not 0 <= t <= MAX_TIME:
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
        """A periodic time trigger moved to its first firing time after `now` (itself if not periodic).

        Closed form, no stepping: ``at + k·every`` for the least whole ``k`` that lands after `now`.
        `ValidationError` if `now` is not a time (see `engramdb.memories.model.check_time`) or the
        next firing would fall after 9999, where no later period exists.
        """
        now = check_time("now", now)
        if self.every is None:
            return self
        at = float(self.value)
        if at > now:
            return self
        # The float quotient can round across a whole number either way, so the answer is one of
        # three neighbours; a period of at least a second is far above the spacing of floats
        # anywhere in the time range, so one of them is always past `now`.
        k = math.floor((now - at) / self.every)
        for j in (k, k + 1, k + 2):
            nxt = at + j * self.every
            if nxt > now:
                return replace(self, value=_num(nxt))
        raise ValidationError(f"the period {self.every!r} s is too short to move past {now!r}")


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
