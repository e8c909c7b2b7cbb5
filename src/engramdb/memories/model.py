"""The memory record and its parts: types, edges, references, access records, validation, and
who is looking (`Principal`, `Visibility`).

Pure values, no I/O: every backend stores and reads these, and each compiles a `Visibility` into
its own form (a SQL predicate, an array mask).
"""

from __future__ import annotations

import enum
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Protocol, TypeVar

from engramdb.errors import ConfigError, ValidationError
from engramdb.memories.filters import Where

_T = TypeVar("_T")


class MemoryType(enum.StrEnum):
    """What kind of thing a memory is."""

    INFO = "info"  # a fact or observation
    SKILL = "skill"  # how to do something (protected from pruning)
    EPISODE = "episode"  # something that happened
    INTENT = "intent"  # prospective: when X occurs, do Y
    TODO = "todo"  # a commitment with a status
    REFLECTION = "reflection"  # a gist distilled from other memories
    SCRATCH = "scratch"  # working notes


class EdgeType(enum.StrEnum):
    """How two memories relate; causal edges spread activation at full weight, others at 0.6."""

    DERIVED_FROM = "derived_from"  # causal provenance
    CREATED_BY = "created_by"  # causal provenance
    SUPPORTS = "supports"  # evidential
    CONTRADICTS = "contradicts"  # evidential
    REFINES = "refines"  # this updates a prior memory
    CAUSES = "causes"  # domain causality
    PRECEDES = "precedes"  # temporal order
    RELATED = "related"  # associative
    PART_OF = "part_of"  # compositional

    @property
    def causal(self) -> bool:
        return self in _CAUSAL


_CAUSAL = frozenset({EdgeType.DERIVED_FROM, EdgeType.CREATED_BY, EdgeType.CAUSES})


class Channel(enum.StrEnum):
    """How a memory was accessed. Only deliberate channels count toward recency and strength."""

    CREATED = "created"
    RECALLED = "recalled"
    SEARCHED = "searched"
    INJECTED = "injected"  # shown by the harness, not asked for: never reinforces
    REINFORCED = "reinforced"
    DEREF = "deref"
    REFLECTED = "reflected"
    EXTRACTED = "extracted"  # an extractor's decision made or changed it (engramdb.llm.worker)

    @property
    def deliberate(self) -> bool:
        return self in _DELIBERATE


_DELIBERATE = frozenset({Channel.CREATED, Channel.RECALLED, Channel.SEARCHED, Channel.REINFORCED, Channel.DEREF})


class TodoStatus(enum.StrEnum):
    """The lifecycle of a todo: open, then done or dropped. Only todos carry a status."""

    OPEN = "open"
    DONE = "done"
    DROPPED = "dropped"


class Confidentiality(enum.IntEnum):
    """Ordered levels: PUBLIC < INTERNAL < CONFIDENTIAL < RESTRICTED."""

    PUBLIC = 0
    INTERNAL = 1
    CONFIDENTIAL = 2
    RESTRICTED = 3


@dataclass(frozen=True, slots=True)
class MemoryRef:
    """A pointer to something outside the memory (a file, a URL, a ticket) with a preview."""

    kind: str
    key: str
    preview: str = ""
    captured_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "key": self.key, "preview": self.preview, "captured_at": self.captured_at}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MemoryRef:
        return cls(str(data["kind"]), str(data["key"]), str(data.get("preview", "")), data.get("captured_at"))


@dataclass(frozen=True, slots=True)
class Edge:
    """A typed, weighted link from `source` to `target` (memory ids)."""

    source: str
    target: str
    type: EdgeType
    weight: float = 1.0
    created_at: float = 0.0


@dataclass(frozen=True, slots=True)
class Components:
    """The parts of a recall score. Normalised values are in [0, 1] over the candidates."""

    rel: float
    rec: float
    imp: float
    spread: float = 0.0
    cos: float = 0.0  # raw cosine of query and memory
    cue: float = 0.0  # raw share of query keywords found in the memory
    bm25: float = 0.0  # raw BM25 (higher is better), 0 when not a lexical candidate
    when: float = 0.0  # 1 when the memory was created inside a time window the query names, else 0
    entity: float = 0.0  # 1 when the query names one of the memory's entities, else 0
    ctx: float = 0.0  # temporal context: the best candidate's rel, faded by how far apart in time they were made
    dated: float = 0.0  # 1 when the query asks when and the memory holds a time expression, else 0
    rerank: float = 0.0  # the reranker's score in [0, 1]; 0 without a reranker or when it did not score this one


@dataclass(frozen=True, slots=True)
class AccessRecord:
    """One access to a memory, as the access stream stores it."""

    ts: float
    channel: Channel
    reader: str
    memory_id: str
    trace_ref: str | None = None
    query: str | None = None
    score: float | None = None
    rank: int | None = None
    components: Components | None = None
    recall_id: str | None = None


@dataclass(frozen=True, slots=True)
class Tombstone:
    """What is left of a forgotten memory: a value-level fingerprint, who, when and why — no content."""

    memory_id: str
    tenant: str
    owner: str
    content_hash: str
    forgotten_by: str
    forgotten_at: float
    reason: str
    #: the level of the memory it replaced: a writer whose cap is below it is not told of it (its
    #: id, author and reason are as confidential as the memory was); tombstones written before
    #: levels were kept count as RESTRICTED
    confidentiality: Confidentiality = Confidentiality.RESTRICTED


@dataclass(frozen=True, slots=True)
class MemoryVersion:
    """An earlier content of a memory, kept when an update replaced it."""

    version: int
    title: str
    content: str
    changed_at: float
    changed_by: str


class AdmittedKeys(Protocol):
    """The keys a `Visibility.where` admits, as an array-mask channel takes them
    (`engramdb.retrieval.columns.KeySet`)."""

    def mask(self, locate: Any, n: int, owner: object) -> Any:
        """A boolean array over a cache's rows [0, n) (`locate` maps keys to its rows): True where
        one of the keys is."""
        ...


@dataclass(frozen=True, slots=True)
class Visibility:
    """Who is looking, and at what: the one rule every read of memories carries.

    A memory is visible when it is in the reader's `tenant`; shared or owned by the reader (any
    agent's with `cross_agent`, the reader's own only with `own_only`); at or below the
    confidentiality `cap`; not archived (unless `include_archived`); at `as_of`, valid
    (``valid_from ≤ as_of < valid_to``, a missing bound being open); and, with a `where`, of the
    sessions and metadata it names (`engramdb.memories.filters`).

    The SQL forms compile `where` themselves; the array masks cannot (they hold no metadata), so a
    caller that searches them first resolves `where` to the keys it admits (`only`, by one query
    of the store with this same rule) and the masks keep those.

    The rule is this value; each backend compiles it (`engramdb.storage.sqlite.visibility` to a SQL
    predicate, `engramdb.retrieval.columns` to an array mask) and a property test holds the
    compiled forms equal. Every compiled form is placed *inside* the query it restricts, before
    any ranking or limit.
    """

    tenant: str
    reader: str
    cap: Confidentiality = Confidentiality.RESTRICTED
    as_of: float | None = None
    cross_agent: bool = False
    include_archived: bool = False
    own_only: bool = False
    where: Where | None = None
    #: the keys `where` admits, resolved by the store for the array masks (None: not resolved)
    only: AdmittedKeys | None = None


@dataclass(frozen=True, slots=True)
class Principal:
    """Who acts: one agent of one tenant, with the confidentiality it may read up to (`cap`)
    and the lowest level it stores at (`floor`). Fixed for the life of an agent handle."""

    tenant: str
    agent_id: str
    cap: Confidentiality = Confidentiality.RESTRICTED
    floor: Confidentiality = Confidentiality.PUBLIC

    def visibility(
        self, *, as_of: float | None = None, include_archived: bool = False, where: Where | None = None
    ) -> Visibility:
        """What this principal sees: its tenant, shared and its own memories, up to its cap (and
        of the sessions and metadata `where` names)."""
        when = None if as_of is None else check_time("as_of", as_of)
        return Visibility(self.tenant, self.agent_id, self.cap, when, include_archived=include_archived, where=where)


@dataclass(frozen=True, slots=True)
class Memory:
    """One memory as stored. Scores are separate on purpose: only `strength` moves with use."""

    id: str
    tenant: str
    owner: str  # '' = shared with the tenant's agents, else the owning agent's id
    author: str
    type: MemoryType
    title: str
    content: str
    tags: tuple[str, ...] = ()
    entities: tuple[str, ...] = ()
    n_chars: int = 0
    n_tokens: int = 0
    n_sentences: int = 0
    importance: float = 5.0  # 0–10, how much it matters
    salience: float = 0.0  # 0–1, how surprising or outcome-relevant it was
    confidence: float = 1.0  # 0–1, how sure we are it is true
    strength: int = 0  # rehearsal counter: deliberate reads add one
    confidentiality: Confidentiality = Confidentiality.PUBLIC
    created_at: float = 0.0  # when the memory was made (event time as given)
    recorded_at: float = 0.0  # when the engine stored it
    valid_from: float | None = None  # when the fact became true
    valid_to: float | None = None  # when it stopped being true
    archived: bool = False
    status: TodoStatus | None = None
    refs: tuple[MemoryRef, ...] = ()
    version: int = 1
    last_access: float | None = None
    access_count: int = 0  # deliberate accesses ever
    recent_accesses: tuple[float, ...] = field(default=(), repr=False)
    #: the deliberate accesses older than the ring: how many, the newest and the oldest of them
    older_count: int = field(default=0, repr=False)
    older_newest: float | None = field(default=None, repr=False)
    older_oldest: float | None = field(default=None, repr=False)
    #: who set `importance`: "caller" (given to remember / update / import), "default" (nobody:
    #: 5.0), or "reflection" (rescored by `Agent.reflect`, which only rescores what no caller set)
    importance_source: str = "caller"
    #: retention now (exp(−Δt/S), evaluated on read) and the projected prune time, when known
    retention: float | None = None
    prune_at: float | None = None
    #: the conversation or run this memory came from (filterable: ``recall(…, session=…)``)
    session: str | None = None
    #: the caller's JSON object (a copy; filterable: ``recall(…, where={…})``)
    metadata: dict[str, Any] = field(default_factory=dict, hash=False)

    @property
    def shared(self) -> bool:
        return self.owner == ""


_SENTENCE = re.compile(r"[.!?]+(?:\s|$)")


def count_sentences(text: str) -> int:
    """Sentences in `text`: terminal punctuation runs, at least one for non-empty text."""
    n = len(_SENTENCE.findall(text.strip()))
    return max(n, 1 if text.strip() else 0)


def _unit(name: str, value: object, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValidationError(f"{name} must be a number from {lo:g} to {hi:g}, got {value!r}")
    if not lo <= value <= hi:
        raise ValidationError(f"{name} must be from {lo:g} to {hi:g}, got {value!r}")
    return float(value)


#: `Memory.importance_source` values, by the number the stores keep
IMPORTANCE_SOURCES = ("default", "caller", "reflection")


def check_scores(importance: object, salience: object, confidence: object) -> tuple[float, float, float]:
    return (
        _unit("importance", importance, 0, 10),
        _unit("salience", salience, 0, 1),
        _unit("confidence", confidence, 0, 1),
    )


def check_type(value: object) -> MemoryType:
    try:
        return MemoryType(str(value))
    except ValueError:
        options = ", ".join(t.value for t in MemoryType)
        raise ValidationError(f"unknown memory type {value!r}; use one of: {options}") from None


def check_edge_type(value: object) -> EdgeType:
    try:
        return EdgeType(str(value))
    except ValueError:
        options = ", ".join(t.value for t in EdgeType)
        raise ValidationError(f"unknown edge type {value!r}; use one of: {options}") from None


def check_status(mtype: MemoryType, status: object) -> TodoStatus | None:
    """Todos always carry a status (default open); no other type may carry one."""
    if mtype is not MemoryType.TODO:
        if status is not None:
            raise ValidationError(f"status is for todo memories only; a {mtype.value} memory cannot carry one")
        return None
    if status is None:
        return TodoStatus.OPEN
    try:
        return TodoStatus(str(status))
    except ValueError:
        raise ValidationError(f"unknown todo status {status!r}; use open, done or dropped") from None


@dataclass(frozen=True, slots=True)
class MemoryPage:
    """One page of `Agent.browse`: the memories on it (newest first), how many match in all, and
    where the page starts."""

    memories: tuple[Memory, ...]
    total: int
    offset: int
    limit: int

    @property
    def has_more(self) -> bool:
        """Whether a later page holds more."""
        return self.offset + len(self.memories) < self.total


@dataclass(frozen=True, slots=True)
class Limits:
    """The largest input the engine takes, in characters (or items); anything bigger is a
    `ValidationError` before any work is done. Defaults are sized for agent memories — notes,
    facts, turns of a dialogue — with room to spare: a 64,000-character memory is ~16,000 tokens.
    Give an engine others with ``DynamicMemoryEngine(…, limits=Limits(content_chars=…))``.
    """

    content_chars: int = 64_000
    title_chars: int = 1_000
    label_chars: int = 200  # one tag or entity
    labels: int = 64  # tags (or entities) of one memory
    query_chars: int = 8_000
    metadata_chars: int = 16_000  # one memory's metadata, as JSON

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"Limits.{f.name} must be a whole number of 1 or more, got {v!r}")


DEFAULT_LIMITS = Limits()


def check_text(name: str, value: object, limit: int, *, empty: bool = True) -> str:
    """`value` if it is a str of valid Unicode (no lone surrogates) of at most `limit`
    characters (and, without `empty`, not blank); else `ValidationError` saying which."""
    if not isinstance(value, str):
        raise ValidationError(f"{name} must be a str, got {type(value).__name__}")
    if len(value) > limit:
        raise ValidationError(
            f"{name} is {len(value):,} characters, more than the limit of {limit:,} "
            "(split it, or raise the engine's Limits)"
        )
    if not empty and not value.strip():
        raise ValidationError(f"{name} is empty: it needs some text")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValidationError(
            f"{name} is not valid Unicode text: a lone surrogate U+{ord(value[exc.start]):04X} at position "
            f"{exc.start} (decode the source with errors='replace', or fix the text)"
        ) from None
    return value


def check_content(content: object, limits: Limits = DEFAULT_LIMITS) -> str:
    if isinstance(content, str) and not content.strip():
        raise ValidationError("content is empty: a memory needs some text")
    return check_text("content", content, limits.content_chars, empty=False)


def check_many(name: str, values: _T, what: str = "a list") -> _T:
    """`values` when it is a collection to iterate (not a str or bytes), else `ValidationError`."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise ValidationError(f"{name} must be {what}, got {type(values).__name__}")
    return values


def check_path(name: str, value: object, error: type[ValidationError] | type[ConfigError] = ValidationError) -> str:
    """`value` as a non-empty file-system path string (a str or an ``os.PathLike``), else `error`."""
    path = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if not isinstance(path, str) or not path or "\0" in path:
        raise error(f"{name} must be a file-system path (a non-empty str or Path), got {value!r}")
    return path


def check_labels(name: str, values: Iterable[object] | None, limits: Limits = DEFAULT_LIMITS) -> tuple[str, ...]:
    if values is None:
        return ()
    if isinstance(values, str):
        raise ValidationError(f"{name} must be a list of strings, not one string")
    values = check_many(name, values, "a list of strings")
    out: list[str] = []
    for v in values:
        if not isinstance(v, str) or not v.strip():
            raise ValidationError(f"{name} must be non-empty strings, got {v!r}")
        label = check_text(f"each of {name}", v, limits.label_chars).strip()
        if label not in out:
            out.append(label)
            if len(out) > limits.labels:
                raise ValidationError(f"at most {limits.labels} {name} per memory (raise the engine's Limits)")
    return tuple(out)


#: The instants a time argument may name: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z, the range a
#: `datetime` can show. Past them a time cannot be printed, and float seconds lose whole periods.
MIN_TIME = -62_135_596_800.0
MAX_TIME = 253_402_300_799.0


def check_time(name: str, value: object) -> float:
    """`value` as epoch seconds: a finite number (not a bool) from year 1 to 9999, else `ValidationError`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValidationError(f"{name} must be epoch seconds (a finite number), got {value!r}")
    if not MIN_TIME <= value <= MAX_TIME:
        raise ValidationError(
            f"{name} must be epoch seconds from year 1 to 9999 ({MIN_TIME:.0f} to {MAX_TIME:.0f}), got {value!r}"
        )
    return float(value)


def check_validity(valid_from: object, valid_to: object) -> tuple[float | None, float | None]:
    def one(name: str, v: object) -> float | None:
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValidationError(f"{name} must be epoch seconds (a number) or None, got {v!r}")
        return check_time(name, v)

    lo, hi = one("valid_from", valid_from), one("valid_to", valid_to)
    if lo is not None and hi is not None and hi < lo:
        raise ValidationError(f"valid_to ({hi}) is before valid_from ({lo})")
    return lo, hi
