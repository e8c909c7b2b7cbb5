"""Forgetting as pure functions of (memory, now, policy): retention, prune time, prune guards.

Retention follows the Ebbinghaus curve, evaluated lazily on read (no sweep keeps it current)::

    R(t) = exp(−Δt / S)        Δt = now − last deliberate access (or creation)
    S    = τ · (1 + ln(1 + strength))

τ is an **e-folding time** — the time for retention to fall to 1/e ≈ 37%, not to one half (the
half-life is τ·ln 2). nooa-memory uses τ = 336 h (two weeks); so do we. A memory's projected prune
time is when R reaches the prune threshold: last + S · ln(1 / threshold).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from engramdb.errors import ConfigError, ValidationError
from engramdb.memories.model import Memory, MemoryType, TodoStatus

HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class ForgettingPolicy:
    """When memories fade and which ones `prune` may archive."""

    #: τ, the e-folding time of a memory never rehearsed (seconds); 336 h as nooa-memory
    e_folding: float = 336 * HOUR
    #: prune archives memories whose retention is below this
    threshold: float = 0.05
    #: never prune a memory younger than this (seconds since creation)
    min_age: float = 24 * HOUR
    #: types never pruned
    protected_types: frozenset[MemoryType] = field(default_factory=lambda: frozenset({MemoryType.SKILL}))
    #: memories at or above this importance are never pruned
    importance_floor: float = 8.0
    #: whether a full `reflect()` run archives decayed memories on its own. Off by default: what a
    #: user stored does not disappear because nobody read it for a few weeks. `Agent.prune()`, or
    #: ``reflect(steps=[…, "prune"])``, archives by decay when asked, whatever this says.
    archive_by_decay: bool = False

    def __post_init__(self) -> None:
        for name in ("e_folding", "threshold", "min_age", "importance_floor"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ConfigError(f"ForgettingPolicy.{name} must be a finite number, got {v!r}")
        if self.e_folding <= 0 or not 0 < self.threshold < 1 or self.min_age < 0:
            raise ConfigError("ForgettingPolicy: e_folding must be > 0, threshold in (0, 1), min_age >= 0")
        if not isinstance(self.archive_by_decay, bool):
            raise ConfigError(f"ForgettingPolicy.archive_by_decay must be True or False, got {self.archive_by_decay!r}")


def stability(strength: int, policy: ForgettingPolicy) -> float:
    """S = τ · (1 + ln(1 + strength)), in seconds: rehearsal slows forgetting, with diminishing returns."""
    return policy.e_folding * (1.0 + math.log1p(max(strength, 0)))


def _anchor(memory: Memory) -> float:
    return memory.last_access if memory.last_access is not None else memory.recorded_at


def _check(memory: object, policy: object, now: object = 0.0) -> None:
    """The arguments of the public math, refused with a `ValidationError` rather than an AttributeError."""
    if not isinstance(memory, Memory):
        raise ValidationError(f"memory must be a Memory (from remember, get or recall), got {type(memory).__name__}")
    if not isinstance(policy, ForgettingPolicy):
        raise ValidationError(f"policy must be a ForgettingPolicy, got {type(policy).__name__}")
    if isinstance(now, bool) or not isinstance(now, (int, float)) or not math.isfinite(now):
        raise ValidationError(f"now must be epoch seconds (a finite number), got {now!r}")


def retention(memory: Memory, now: float, policy: ForgettingPolicy) -> float:
    """exp(−Δt / S) in (0, 1]; 1 right after an access (a clock before the access counts as Δt = 0)."""
    _check(memory, policy, now)
    dt = max(now - _anchor(memory), 0.0)
    return math.exp(-dt / stability(memory.strength, policy))


def prune_time(memory: Memory, policy: ForgettingPolicy) -> float:
    """When retention will reach the prune threshold, if nothing reads the memory before then."""
    _check(memory, policy)
    return _anchor(memory) + stability(memory.strength, policy) * math.log(1.0 / policy.threshold)


def guarded(memory: Memory, now: float, policy: ForgettingPolicy) -> str | None:
    """Why `memory` may never be pruned now, or None when only its retention decides."""
    if memory.type in policy.protected_types:
        return f"{memory.type.value} memories are protected"
    if memory.type is MemoryType.TODO and memory.status is TodoStatus.OPEN:
        return "open todos are kept"
    if memory.type is MemoryType.INTENT:
        return "intents are kept until they fire (a fired one-shot intent is archived)"
    if memory.importance >= policy.importance_floor:
        return f"importance {memory.importance:g} is at or above {policy.importance_floor:g}"
    if now - memory.recorded_at < policy.min_age:
        return "younger than the minimum age"
    return None


def prunable(memory: Memory, now: float, policy: ForgettingPolicy) -> bool:
    """True when no guard protects `memory` and its retention has fallen below the threshold."""
    return (
        not memory.archived
        and guarded(memory, now, policy) is None
        and retention(memory, now, policy) < policy.threshold
    )


_FIELDS = tuple(f.name for f in fields(Memory))
_set = object.__setattr__


def with_lifecycle(memory: Memory, now: float, policy: ForgettingPolicy) -> Memory:
    """`memory` with its read-time `retention` and `prune_at` filled in."""
    # A field-by-field copy with two fields set: dataclasses.replace re-runs __init__ and copy.copy
    # goes through the frozen dataclass's getstate; this is cheaper than either (measured).
    out = object.__new__(Memory)
    for name in _FIELDS:
        _set(out, name, getattr(memory, name))
    _set(out, "retention", retention(memory, now, policy))
    _set(out, "prune_at", prune_time(memory, policy))
    return out


def fill_lifecycle(memory: Memory, now: float, policy: ForgettingPolicy) -> Memory:
    """`with_lifecycle` for a memory the caller has just read from its row and holds alone (no one
    else has seen the object yet): the two fields are set on it rather than on a copy, which was
    most of a recall's cost per hit. Returns `memory`."""
    _set(memory, "retention", retention(memory, now, policy))
    _set(memory, "prune_at", prune_time(memory, policy))
    return memory
