"""The storage ports: what the services need from a backend, one `Protocol` per concern.

Services (recall, writes, reflection, prospective memory, references, stats, tenancy rules) are
written against these Protocols only; a backend (``storage/sqlite``, ``storage/postgres``)
implements them. Each method says *what*, never how: no SQL, connection or driver type appears
here, and no SQL is written outside an adapter.

Conventions every implementation keeps:

- **Keys.** A memory has a public id (``"agent:hex"``) and an internal integer key, assigned by
  `MemoryRows.insert`, unique in the store, never reused. In-memory indexes are arrays by key.
- **Visibility inside.** A method that takes a `Visibility` applies it inside its query, before
  any ordering or limit, so nothing invisible is ever ranked, counted or relayed; a method without
  one is engine-internal and is only given keys the caller has already seen through one.
- **Transactions are per thread.** `Backend.atomic` opens a unit of work for the calling thread
  (nested: a savepoint); every port method called on that thread inside it joins it. Outside one,
  a write method commits on its own. Writes that must go together are always made inside
  `atomic`.
- **Change sequence.** Every write to a memory row stamps it with a number from
  `ChangeSequence.next` (called inside the write's transaction); caches reload the rows changed
  after the number they saw, so every process sees every other's committed writes.
- **Times** are epoch seconds (float). **Vectors** are float32 bytes in native order, one embedder
  (``model``) per row. **Access rings** are `engramdb.memories.text.pack_times` bytes.
- **Errors.** Driver exceptions never leave a port: they are translated into
  `engramdb.errors` (a full disk or a lock timeout is a `BackendError`).
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, Self, TypeAlias

from engramdb.errors import ValidationError
from engramdb.memories.model import (
    AccessRecord,
    Channel,
    Components,
    Confidentiality,
    Edge,
    Memory,
    MemoryRef,
    MemoryVersion,
    TodoStatus,
    Tombstone,
    Visibility,
)
from engramdb.scopes.namespace import Namespace

if TYPE_CHECKING:
    from engramdb.embeddings.base import Embedder


# -- records that cross the ports --------------------------------------------------------------


class Stored(NamedTuple):
    """A memory as read from the store, with its internal key."""

    key: int
    memory: Memory


@dataclass(frozen=True, slots=True)
class NewMemory:
    """A memory to insert: the record, and what the engine derived from it at write time."""

    memory: Memory
    content_hash: str  # `engramdb.memories.text.content_hash` of the content
    terms: str  # the distinct stems of title, content and tags, space-separated (lexical index)
    ring: bytes  # the packed access ring (creation is the first deliberate access)


@dataclass(frozen=True, slots=True)
class ContentChange:
    """The new state of an updated memory's editable fields (`MemoryRows.update`)."""

    content: str
    title: str
    tags: tuple[str, ...]
    importance: float
    salience: float
    confidence: float
    status: TodoStatus | None
    version: int
    n_chars: int
    n_tokens: int
    n_sentences: int
    content_hash: str
    terms: str
    confidentiality: Confidentiality
    importance_source: str = "caller"  # `Memory.importance_source`
    metadata: dict[str, Any] = field(default_factory=dict)  # `Memory.metadata`, whole


@dataclass(frozen=True, slots=True)
class Fold:
    """What a merge survivor becomes (`MemoryRows.fold`); the duplicate is archived."""

    importance: float
    salience: float
    confidence: float
    strength: int
    access_count: int
    ring: bytes
    old_count: int
    old_newest: float | None
    old_oldest: float | None
    last_access: float | None
    confidentiality: Confidentiality
    tags: tuple[str, ...]
    entities: tuple[str, ...]
    refs: tuple[MemoryRef, ...]
    terms: str
    importance_source: str = "caller"  # of the memory whose importance the survivor keeps


@dataclass(frozen=True, slots=True)
class Restored:
    """What an import sets on a memory it just inserted (`MemoryRows.restore`): the state that
    use and lifecycle gave it in the store it was exported from."""

    strength: int
    version: int
    archived: bool
    old_count: int
    old_newest: float | None
    old_oldest: float | None


@dataclass(frozen=True, slots=True)
class Touch:
    """One access to log: which memory, how, and (for recalls) its rank and components."""

    key: int
    channel: Channel
    score: float | None = None
    rank: int | None = None
    components: Components | None = None


@dataclass(frozen=True, slots=True)
class Usage:
    """Raw counts behind `engramdb.observability.stats.Stats`, over what a `Visibility` shows
    (husks of forgotten memories excluded)."""

    memories: int
    archived: int
    by_type: dict[str, int]
    reads_per_memory: list[int]  # deliberate reads per read memory, most read first
    read_live: int  # unarchived memories read at least once
    injected: int
    injected_memories: int
    injected_then_used: int
    cross_owner_reads: int
    reflection_reads: int
    recalls: int  # recall records of the reader in the tenant


@dataclass(frozen=True, slots=True)
class RecallRecord:
    """What `explain(recall_id)` replays: the query, parameters and ranked ids of one recall."""

    recall_id: str
    ts: float
    tenant: str
    reader: str
    query: str
    params: dict[str, Any]
    #: entries as `params["hits"]` holds them: lists (`retrieval.recall.COMPONENT_NAMES`), or
    #: objects with their keys in records logged before those
    near_misses: list[Any]


#: The access state of one memory: (key, ring, older count, older newest, older oldest).
AccessState: TypeAlias = tuple[int, bytes | None, int, float | None, float | None]
#: (ring, older count, older newest, older oldest, last access, strength bump 0/1, key)
AccessUpdate: TypeAlias = tuple[bytes, int, float | None, float | None, float, int, int]
#: The visibility attributes of a memory, in `VisibilityColumns.set_many` order:
#: (tenant, owner, confidentiality, archived, valid_from, valid_to, type).
VisibilityAttrs: TypeAlias = tuple[str, str, int, int, float | None, float | None, str]
#: A memory as the lexical index loads it: (key, tenant, owner, confidentiality, archived,
#: valid_from, valid_to, type, terms, n_tokens, importance, ring, old_count, old_newest,
#: old_oldest, created_at, entities as a JSON list).
IndexRow: TypeAlias = tuple[
    int, str, str, int, int, float | None, float | None, str, str, int, float, bytes | None, int,
    float | None, float | None, float, str,
]  # fmt: skip
#: A visible memory holding a query stem, as the server answers a lexical search of a tenant no
#: cache holds (`ServerIndex.lexical`): (key, n_tokens, created_at, the query stems it holds, the
#: tenant's next key or None, that memory's created_at, whether the reader sees it).
LexicalMatch: TypeAlias = tuple[int, int, float, tuple[str, ...], int | None, float | None, bool]
#: A memory as the vector cache loads it: (key, changed, tenant, owner, confidentiality,
#: archived, valid_from, valid_to, type, vector or None).
VectorRow: TypeAlias = tuple[int, int, str, str, int, int, float | None, float | None, str, bytes | None]
#: A memory's vector for reflection: (key, owner, type, confidentiality, vector).
ScopeVector: TypeAlias = tuple[int, str, str, int, bytes]
#: A memory whose text may repeat a new one's: (key, content hash, type, owner, confidentiality,
#: content, entities, context: `engramdb.memories.filters.context_of` its session and metadata).
ContentMatch: TypeAlias = tuple[int, str, str, str, int, str, tuple[str, ...], str]
#: A memory for rescoring: (key, importance, salience, ring, old_count, old_newest, old_oldest).
RescoreRow: TypeAlias = tuple[int, float, float, bytes | None, int, float | None, float | None]


# -- the ports ---------------------------------------------------------------------------------


class MemoryRows(Protocol):
    """The memory records."""

    def insert(self, items: Sequence[NewMemory], change: int) -> list[int]:
        """Store `items` (in one transaction: call inside `Backend.atomic`); their new keys, in order."""
        ...

    @property
    def has_fresh_step(self) -> bool:
        """Whether `insert_fresh` can write (else it always answers None)."""
        ...

    def insert_fresh(
        self,
        item: NewMemory,
        latest: int | None,
        vector: tuple[str, bytes] | None,
        now: float,
        reader: str,
        channel: str,
        *,
        unless_forgotten: Confidentiality | None = None,
    ) -> tuple[int, int] | None:
        """One new memory outside any unit of work, as one atomic step of its own: if the tenant's
        change sequence still stands at `latest`, take the next change, store `item` at it, its
        `vector` (model, float32 bytes) and its creation access (`channel`, by `reader` at `now`);
        (key, change). `latest` None: the sequence as the step itself reads it (nothing looked up
        before), and with `unless_forgotten`, nothing is written if a tombstone of the item's
        owner and content hash at or below that level exists. None when the sequence has moved
        on, a tombstone refused it, or the backend has no such step: then nothing was written and
        the caller takes the general path (`insert` in a unit of work), which says why. A remember
        on PostgreSQL is then one round trip instead of five."""
        ...

    def get(self, vis: Visibility, memory_id: str) -> Stored | None:
        """The memory with public id `memory_id`, if `vis` shows it."""
        ...

    def get_key(self, key: int) -> Stored | None:
        """The memory with internal key `key`, whatever its visibility (engine-internal)."""
        ...

    def many(self, vis: Visibility, keys: Sequence[int]) -> dict[int, Memory]:
        """The memories among `keys` that `vis` shows, by key: new objects, the caller's own (recall
        fills in their read-time fields in place)."""
        ...

    def names(self, keys: Sequence[int]) -> dict[int, tuple[str, str]]:
        """(id, title) of each of `keys` (already seen through a visibility)."""
        ...

    def contents(self, keys: Sequence[int]) -> dict[int, tuple[str, tuple[str, ...], str]]:
        """The content, entities and context (`engramdb.memories.filters.context_of`) of each of
        `keys` (already seen through a visibility): what dedup compares a new memory with."""
        ...

    def retired_since(self, change: int) -> bool:
        """True when a write after change sequence `change` forgot a memory (retired its row):
        a cache saved from a snapshot at `change` may still hold what it forgot."""
        ...

    def same_content(self, vis: Visibility, hashes: Sequence[str]) -> list[ContentMatch]:
        """The memories `vis` shows whose content hash (`memories.text.content_hash`) is one of
        `hashes`, lowest key first: what dedup on write compares a new text with when there are
        no vectors (through a ``(tenant, content_hash)`` index; SQLite builds it on first use)."""
        ...

    def repeated_content(self, vis: Visibility) -> list[tuple[int, str, str, str]]:
        """(key, content hash, owner, type) of each memory `vis` shows whose content hash another
        memory `vis` shows shares, lowest key first: what reflection merges when there are no
        vectors."""
        ...

    def listing(self, vis: Visibility) -> list[Memory]:
        """Every memory `vis` shows, oldest (lowest key) first; husks of forgotten memories excluded."""
        ...

    def page(
        self,
        vis: Visibility,
        *,
        types: Sequence[str] | None = None,
        tag: str | None = None,
        contains: str | None = None,
        archived_only: bool = False,
        offset: int = 0,
        limit: int = 50,
    ) -> tuple[list[Memory], int]:
        """One page of what `vis` shows, newest (highest key) first, and how many match in all:
        of `types`, carrying `tag`, whose title, content or tags hold `contains` (ASCII case
        folded), archived only when asked. Husks of forgotten memories excluded."""
        ...

    def tag_counts(self, vis: Visibility) -> dict[str, int]:
        """Every tag on a memory `vis` shows, with how many of them carry it."""
        ...

    def visible_ids(self, vis: Visibility, ids: Sequence[str]) -> dict[str, int]:
        """{id: key} of those `ids` that `vis` shows."""
        ...

    def visible_keys(
        self, vis: Visibility, types: Iterable[str] | None = None, keys: Sequence[int] | None = None
    ) -> list[int]:
        """Every key `vis` shows (of `types`, and among `keys`, when given), ascending."""
        ...

    def admitted(self, vis: Visibility, since: int) -> list[tuple[int, bool]]:
        """(key, whether `vis` shows it) of every memory of `vis.tenant` changed after change
        `since`: what keeps a set of the keys a filter admits up to date without reading the
        rest (recall's `Visibility.only`)."""
        ...

    def key_of(self, tenant: str, memory_id: str) -> int | None:
        """The key of `memory_id` in `tenant` (engine-internal: no visibility)."""
        ...

    def taken_ids(self, tenant: str, ids: Sequence[str]) -> set[str]:
        """Those `ids` a new memory of `tenant` may not be given (engine-internal: no visibility):
        held in `tenant`, or — on a store whose memory ids are unique across tenants — in any."""
        ...

    def update(self, key: int, change: ContentChange, stamp: int) -> None:
        """Replace the editable fields of memory `key`; its confidentiality becomes the higher of
        the stored one and `change.confidentiality` (an update never lowers a level)."""
        ...

    def archive(self, tenant: str, ids: Sequence[str], stamp: int) -> int:
        """Archive the unarchived memories among `ids` of `tenant`; how many were archived."""
        ...

    def unarchive(self, tenant: str, ids: Sequence[str], stamp: int) -> int:
        """Bring back the archived memories among `ids` of `tenant` (never the husk of a
        forgotten one); how many were brought back."""
        ...

    def archive_keys(self, keys: Sequence[int], stamp: int) -> int:
        """Archive memories `keys`; how many rows were written."""
        ...

    def close_validity(self, tenant: str, memory_id: str, until: float | None, stamp: int) -> None:
        """Set ``valid_to`` of `memory_id` (the fact stopped being true at `until`; None: open again)."""
        ...

    def raise_level(self, keys: Sequence[int], level: Confidentiality, stamp: int) -> None:
        """Raise the confidentiality of those `keys` below `level` to `level`."""
        ...

    def retire(self, key: int, retired_id: str, stamp: int) -> None:
        """Empty a forgotten memory: archived, text, labels and terms gone, id replaced by `retired_id`."""
        ...

    def restore(self, key: int, state: Restored, stamp: int) -> None:
        """Set strength, version, archival and the older-access summary of memory `key` as
        `state` says (an import, right after `insert`)."""
        ...

    def fold(self, keep: int, fold: Fold, dup: int, stamp: int) -> None:
        """Merge: memory `keep` takes the fields of `fold`, memory `dup` is archived."""
        ...

    def set_importance(self, updates: Sequence[tuple[float, int]], stamp: int) -> None:
        """Set importance of memories: (new importance, key) pairs."""
        ...

    def access_state(self, keys: Sequence[int]) -> list[AccessState]:
        """The access rings and older-access summaries of `keys`."""
        ...

    def set_access_state(self, updates: Sequence[AccessUpdate], stamp: int) -> None:
        """Record accesses: new rings and summaries, last access, one more access, strength bumps."""
        ...

    def scan(self, vis: Visibility, after: int, limit: int) -> list[RescoreRow]:
        """Up to `limit` memories `vis` shows with a key above `after`, by key."""
        ...

    def todo_ids(self, vis: Visibility, status: TodoStatus | None, *, by_importance: bool) -> list[str]:
        """Ids of the todos `vis` shows with `status` (None: any); oldest first, or most important first."""
        ...

    def intents(
        self, vis: Visibility, owner: str, *, now: float, event: str | None, cues: bool
    ) -> list[tuple[int, str, tuple[MemoryRef, ...]]]:
        """(key, id, refs) of `owner`'s intents `vis` shows with a trigger that may fire: a time
        trigger due at `now`, an `event` trigger for that event, or (with `cues`) any cue trigger.
        Trigger refs are the ``kind == "trigger"`` refs; keys as in `engramdb.memories.prospective`."""
        ...

    def set_refs(
        self, key: int, expected: tuple[MemoryRef, ...], refs: tuple[MemoryRef, ...], stamp: int, *, archive: bool
    ) -> bool:
        """Compare and set: replace `key`'s refs by `refs` (and archive it, with `archive`) only if
        they still are `expected` and the memory is unarchived; True when this call did it."""
        ...

    def weak(self, vis: Visibility, owner: str, *, below_strength: float, now: float, min_age: float) -> list[int]:
        """Keys of `owner`'s memories `vis` shows, not skills, with strength below `below_strength`
        and made more than `min_age` seconds before `now`."""
        ...

    def undistilled_episodes(self, vis: Visibility, max_level: Confidentiality) -> list[tuple[int, str]]:
        """(key, owner) of the episodes `vis` shows, at or below `max_level`, that no unarchived
        reflection of the same owner was derived from; by owner, then creation time."""
        ...

    def levels_by_age(self, vis: Visibility) -> list[tuple[int, int]]:
        """(key, confidentiality) of every memory `vis` shows, oldest first."""
        ...

    def index_rows(self, since: int, tenant: str | None = None) -> list[IndexRow]:
        """Every memory changed after `since`, as the lexical index loads it; of `tenant` alone
        when given (required with `Backend.caches_by_tenant`: `since` is a number of its sequence)."""
        ...

    def index_row_batches(self, since: int, size: int, tenant: str | None = None) -> Iterator[list[IndexRow]]:
        """`index_rows` in batches of about `size` rows, all from one read of the store (a first
        load of a million memories, without holding them all as Python objects at once)."""
        ...

    def term_tip(self, upto: int, limit: int) -> list[tuple[int, int, str, str]]:
        """(key, changed, terms, entities) of the `limit` most recently changed memories at or
        before `upto`, newest first (ties by key, newest first): what a saved lexical index checks."""
        ...

    def visibility_rows(self) -> list[tuple[int, str, str, int, int, float | None, float | None, str]]:
        """(key, *VisibilityAttrs) of every memory, by key."""
        ...

    def changed_upto(self, stamp: int) -> list[tuple[int, int]]:
        """(key, changed) of every memory changed at or before `stamp`."""
        ...


class Edges(Protocol):
    """Typed, weighted edges between memories of one tenant."""

    def put(
        self, tenant: str, edges: Sequence[tuple[int, int, str, float]], *, now: float, by: str, replace: bool
    ) -> int:
        """Add (src, dst, type, weight) edges; an existing one is replaced with `replace`, else
        kept as it is. How many were written."""
        ...

    def delete_touching(self, key: int) -> None:
        """Delete every edge from or to `key`."""
        ...

    def move(self, dup: int, keep: int) -> None:
        """Copy `dup`'s edges onto `keep` (an edge `keep` already has keeps the higher weight)."""
        ...

    def neighbours(self, vis: Visibility, nodes: Sequence[int]) -> dict[int, list[tuple[int, str, float]]]:
        """{node: [(other, edge type, weight)]} over edges either way whose far end `vis` shows."""
        ...

    def contradictions(self, vis: Visibility, keys: Sequence[int]) -> dict[int, list[tuple[str, str]]]:
        """{key: [(other id, first 120 characters of its content)]} over ``contradicts`` edges
        either way whose other end `vis` shows."""
        ...

    def touching(self, vis: Visibility, key: int) -> list[Edge]:
        """The edges from or to `key` whose other end `vis` shows, oldest first."""
        ...

    def pairs(self, tenant: str) -> set[tuple[int, int]]:
        """Every linked pair of `tenant` as (smaller key, larger key)."""
        ...

    def contradicting(self, vis: Visibility) -> list[tuple[int, int]]:
        """(src, dst) of ``contradicts`` edges between two memories of one owner that `vis` shows."""
        ...


class AccessStream(Protocol):
    """The full access stream: one record per access, never trimmed."""

    def append(
        self,
        touches: Sequence[Touch],
        *,
        now: float,
        tenant: str,
        reader: str,
        query: str | None = None,
        trace_ref: str | None = None,
        recall_id: str | None = None,
    ) -> None:
        """Append one record per touch (the query is kept to its first 200 characters; of the
        components, the four that make the score: rel, rec, imp and spread)."""
        ...

    def records(self, key: int) -> list[AccessRecord]:
        """Every access to memory `key`, oldest first."""
        ...

    def usage(self, vis: Visibility) -> Usage:
        """The raw usage counts over what `vis` shows."""
        ...


class Tombstones(Protocol):
    """What is left of forgotten memories: value fingerprints, who, when, why."""

    def add(self, stone: Tombstone) -> None: ...

    def listing(self, tenant: str, owners: Sequence[str]) -> list[Tombstone]:
        """Every tombstone of `tenant` whose owner is among `owners`, oldest first (an export)."""
        ...

    def find(
        self,
        tenant: str,
        owners: Sequence[str],
        hashes: Sequence[str],
        max_level: Confidentiality = Confidentiality.RESTRICTED,
    ) -> dict[tuple[str, str], Tombstone]:
        """The latest tombstone at or below `max_level` of each (owner, content hash) asked about
        that has one."""
        ...

    def find_at(
        self,
        tenant: str,
        owners: Sequence[str],
        hashes: Sequence[str],
        max_level: Confidentiality = Confidentiality.RESTRICTED,
    ) -> tuple[int, dict[tuple[str, str], Tombstone]]:
        """`find`, with the tenant's change sequence (`ChangeSequence.current`) read first, in one
        read where the store can (PostgreSQL: one round trip, one snapshot)."""
        ...


class RecallLog(Protocol):
    """One record per logged recall, for `explain(recall_id)`."""

    def add(self, record: RecallRecord) -> None: ...

    def get(self, tenant: str, reader: str, recall_id: str) -> RecallRecord | None:
        """The record of `recall_id` if `reader` of `tenant` made it."""
        ...

    def mentioning(self, tenant: str, memory_id: str) -> list[RecallRecord]:
        """Records of `tenant` that may name `memory_id` among their hits or near misses."""
        ...

    def rewrite(self, record: RecallRecord) -> None:
        """Replace the params and near misses of the record with that recall id."""
        ...


@dataclass(frozen=True, slots=True)
class Job:
    """One queued extraction: the turns one ``remember(messages=…)`` call stored, by id.

    It holds ids only, never text, so forgetting a turn leaves nothing of it here. `agent` stored
    the turns; the facts are written as that agent. `status` is ``pending`` (waiting, or claimed
    by `worker` until `lease_until`), ``done`` (`decisions` says what was applied, by ids) or
    ``failed`` (`attempts` ran out; `last_error` says why; `ExtractionJobs.requeue` tries again).
    """

    job_id: str
    tenant: str
    agent: str
    memory_ids: tuple[str, ...]
    created_at: float
    status: str = "pending"
    attempts: int = 0
    not_before: float = 0.0
    lease_until: float | None = None
    worker: str | None = None
    last_error: str | None = None
    done_at: float | None = None
    decisions: tuple[Mapping[str, Any], ...] = ()


class ExtractionJobs(Protocol):
    """The durable queue of extraction work (`engramdb.llm.worker`).

    A job is added inside the transaction that stores its turns, so either both are stored or
    neither. A worker claims jobs (a lease: another worker takes a job whose lease ran out, as
    after a crash), and finishes one inside the transaction that writes its facts: `finish`
    returns False, and the caller rolls back, when the claim is no longer its own, so a job's
    facts are written once.
    """

    def add(self, job: Job) -> None: ...

    def claim(self, *, worker: str, now: float, lease: float, limit: int, tenant: str | None = None) -> list[Job]:
        """Up to `limit` due pending jobs (of `tenant`, or of every tenant), oldest first, each
        now leased to `worker` until ``now + lease`` with one more attempt counted. Call inside
        `Backend.atomic`; concurrent claimers never get the same job."""
        ...

    def finish(self, tenant: str, job_id: str, worker: str, now: float, decisions: Sequence[Mapping[str, Any]]) -> bool:
        """Mark the job done with what was applied, if `worker` still holds it; else False."""
        ...

    def release(
        self, tenant: str, job_id: str, worker: str, *, error: str, retry_at: float, failed: bool, now: float
    ) -> bool:
        """Give the job back after a failed attempt: pending again from `retry_at`, or ``failed``;
        False when `worker` no longer held it."""
        ...

    def get(self, tenant: str, job_id: str) -> Job | None: ...

    def listing(
        self, tenant: str | None = None, *, agent: str | None = None, statuses: Sequence[str] = ("pending", "failed")
    ) -> list[Job]:
        """The jobs of `tenant` (or every tenant), of `agent` if given, in those statuses, oldest first."""
        ...

    def requeue(self, tenant: str, now: float, job_ids: Sequence[str] | None = None) -> int:
        """Failed jobs of `tenant` (those of `job_ids`, or all) pending again with fresh attempts."""
        ...

    def set_decisions(self, tenant: str, job_id: str, decisions: Sequence[Mapping[str, Any]]) -> None:
        """Replace what the job records as applied (a revert marks its decisions reverted)."""
        ...

    def delete(self, tenant: str, agent: str | None = None) -> int:
        """Drop the jobs of `tenant` (of `agent` only, if given); how many."""
        ...


class Versions(Protocol):
    """Earlier contents of updated memories."""

    def add(self, key: int, version: MemoryVersion) -> None: ...

    def history(self, key: int) -> list[MemoryVersion]:
        """Earlier versions of memory `key`, oldest first."""
        ...

    def delete(self, key: int) -> None: ...


class ChangeSequence(Protocol):
    """The write sequence numbers caches follow: they reload what changed after the one they saw.

    A backend with `Backend.caches_by_tenant` keeps one sequence per tenant (PostgreSQL): a
    memory's ``changed`` is then a number of its tenant's sequence, and only reads of one tenant
    may compare with it. Otherwise (SQLite) one sequence serves the whole store and `tenant` is
    ignored.
    """

    def next(self, tenant: str) -> int:
        """The next number of `tenant`'s sequence (call inside the write's transaction; it holds
        the sequence until the transaction ends, so numbers commit in order)."""
        ...

    def current(self, tenant: str | None = None) -> int:
        """The latest committed number of `tenant`'s sequence (0 before its first write); None:
        the store's one sequence (a backend without per-tenant caches only)."""
        ...


class MemoryVectors(Protocol):
    """Each memory's embedding (the truth; search indexes are caches)."""

    def put(self, rows: Sequence[tuple[int, str, bytes]], *, replace: bool = False) -> None:
        """Store (key, model, vector) rows; with `replace`, over an existing one."""
        ...

    def delete(self, key: int) -> None: ...

    def in_scope(self, vis: Visibility, model: str) -> Iterator[list[ScopeVector]]:
        """The vectors of `model` of what `vis` shows, in batches, by owner, creation time, key."""
        ...

    def cache_rows(self, model: str, since: int, tenant: str | None = None) -> list[VectorRow]:
        """Every memory changed after `since`, with its `model` vector or None; of `tenant` alone
        when given (required with `Backend.caches_by_tenant`, as for `MemoryRows.index_rows`)."""
        ...

    def cache_rows_for(self, model: str, keys: Sequence[int]) -> list[VectorRow]:
        """Memories `keys`, with their `model` vector or None."""
        ...

    def tip(self, model: str, upto: int, limit: int) -> list[tuple[int, int, bytes]]:
        """(key, changed, vector) of the `limit` most recently changed memories at or before `upto`
        (newest first, ties by key, newest first)."""
        ...

    def cache_row_batches(
        self, model: str, since: int, size: int, tenant: str | None = None
    ) -> Iterator[list[VectorRow]]:
        """`cache_rows` in batches of about `size` rows, all from one read of the store."""
        ...


class RowVectorStore(Protocol):
    """Embeddings of raw-SQL table rows for the retriever of spec 000."""

    def digests(self, table: str, column: str, model: str) -> dict[int, bytes]:
        """{row id: digest of the text its vector was made from}."""
        ...

    def apply(
        self, table: str, column: str, model: str, gone: Sequence[int], new: Sequence[tuple[int, bytes, bytes]]
    ) -> None:
        """Drop the vectors of `gone` rows and store (row id, digest, vector) of `new` ones, atomically."""
        ...

    def load(self, table: str, column: str, model: str) -> list[tuple[int, bytes]]:
        """(row id, vector) of every stored row, by row id."""
        ...

    def version(self) -> int:
        """A number that changes whenever anything is committed to the store (cheap to ask)."""
        ...


class MemoryScope(abc.ABC):
    """Raw SQL inside one table namespace (``shared_*`` or ``private_<agent>_*``), enforced by the
    database: SQLite's authorizer, PostgreSQL's grants. A scope never rewrites SQL; it allows or
    refuses it. Every refusal reads alike whether or not a foreign object exists.

    Safe to use from many threads: a transaction begun on a thread belongs to that thread alone.
    A nominal base (not a structural Protocol) so that ``isinstance(x, MemoryScope)`` is exact and
    never evaluates a property.

    Example::

        shared = engine.get_shared_scope()
        shared.execute("CREATE TABLE IF NOT EXISTS shared_notes (id INTEGER PRIMARY KEY, content TEXT)")
        shared.execute("INSERT INTO shared_notes (content) VALUES (?)", ("Finding: X implies Y",))
        rows = shared.query("SELECT id, content FROM shared_notes")
    """

    __slots__ = ()

    @property
    @abc.abstractmethod
    def namespace(self) -> Namespace:
        """The table namespace of this scope (fixed for its life)."""

    @property
    def label(self) -> str:
        """``"shared"`` or ``"private:<agent>"``."""
        return self.namespace.label

    @property
    def prefix(self) -> str:
        """The table-name prefix of this namespace, e.g. ``"shared_"``."""
        return self.namespace.prefix

    @property
    @abc.abstractmethod
    def embedder(self) -> Embedder | None:
        """The engine's embedder for retrieval, or None when embeddings are off."""

    @property
    @abc.abstractmethod
    def row_vectors(self) -> RowVectorStore:
        """Where retrievers keep row embeddings (engine-internal)."""

    @abc.abstractmethod
    def execute(self, sql: str, params: Params = None) -> ExecResult:
        """Run one statement in this namespace; rows changed, last row id, rows returned.

        Raises `ScopeViolation` or `ForbiddenDDLError` before anything executes when the
        statement reaches outside the namespace or the DDL safelist; a failed call changes nothing.
        """

    @abc.abstractmethod
    def executemany(self, sql: str, seq_of_params: Iterable[Sequence[Any] | Mapping[str, Any]]) -> ExecResult:
        """Run one INSERT / UPDATE / DELETE for each parameter set, all or nothing."""

    @abc.abstractmethod
    def stream(self, sql: str, params: Params = None, *, batch: int = 256) -> Generator[list[Row], None, None]:
        """Run one read and yield its rows in batches, so a caller can stop reading early."""

    @abc.abstractmethod
    def query(self, sql: str, params: Params = None) -> list[Row]:
        """Run one statement and return its rows as tuples (``for a, b in scope.query(...)``)."""

    @abc.abstractmethod
    def begin(self) -> None:
        """Open a transaction for this thread on this scope."""

    @abc.abstractmethod
    def commit(self) -> None:
        """Commit this thread's open transaction on this scope."""

    @abc.abstractmethod
    def rollback(self) -> None:
        """Roll back this thread's open transaction on this scope; a no-op when none is open."""

    @property
    @abc.abstractmethod
    def in_transaction(self) -> bool:
        """True while this thread has a transaction open on this scope."""

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Self]:
        """``with scope.transaction():`` — commit on success, roll back on any exception."""
        self.begin()
        try:
            yield self
        except BaseException:
            self.rollback()
            raise
        self.commit()

    def read_page(self, sql: str, params: Params = None, *, limit: int) -> Page:
        """Run one read and return at most `limit` rows, their column names, and whether more
        rows were left unread (the SQL tool's view). This default reads through `stream` and
        knows no column names; an adapter overrides it to name them."""
        if limit < 1:
            raise ValidationError("limit must be at least 1")
        rows: list[Row] = []
        gen = self.stream(sql, params, batch=limit + 1)
        try:
            for batch in gen:
                rows.extend(batch)
                if len(rows) > limit:
                    break
        finally:
            gen.close()
        return Page((), rows[:limit], len(rows) > limit)

    @abc.abstractmethod
    def list_tables(self) -> list[str]:
        """The tables of this namespace only, sorted by name."""

    @abc.abstractmethod
    def columns(self, table: str) -> list[str]:
        """The column names of this namespace's `table`, in order; `SqlError` when there is no
        such table (said alike for a table of another namespace)."""

    @abc.abstractmethod
    def row_key(self, table: str) -> str:
        """The SQL name of `table`'s integer row key, for retrievers to select, sort and look rows
        up by (SQLite: ``rowid``; PostgreSQL: the table's single-column integer primary key);
        `SqlError` when the table has none, or is no table of this namespace."""

    def __repr__(self) -> str:
        return f"MemoryScope({self.label!r})"


Params: TypeAlias = Sequence[Any] | Mapping[str, Any] | None
Row: TypeAlias = tuple[Any, ...]


class Page(NamedTuple):
    """What `MemoryScope.read_page` read: column names (empty when the adapter cannot tell),
    the first rows, and whether more were left unread."""

    columns: tuple[str, ...]
    rows: list[Row]
    more: bool


class ExecResult(NamedTuple):
    """What `MemoryScope.execute` did: rows changed, the last inserted row id, and any rows returned."""

    rowcount: int
    lastrowid: int | None
    rows: list[Row]


class ServerIndex(Protocol):
    """Recall's candidate reads answered by the server, exactly, for a tenant this process does not
    cache (larger than the cache budget, or being loaded by another thread:
    `engramdb.retrieval.server_channels`). Each read scans the tenant's rows through its index with
    the visibility predicate (and `types`, when given) inside the statement; nothing is
    approximate and nothing is filtered after a top-k."""

    def size(self, tenant: str) -> int:
        """How many memories `tenant` holds (archived and invisible ones too)."""
        ...

    def lexical(
        self, vis: Visibility, types: frozenset[str] | None, stems: Sequence[str], *, successors: bool
    ) -> tuple[int, int, list[LexicalMatch]]:
        """(how many memories `vis` shows, the sum of their lengths — each ``max(n_tokens, 1)`` —,
        every shown memory holding one of `stems`); with `successors`, each match's next memory
        of the tenant by key (else None, None, False)."""
        ...

    def term_counts(
        self, vis: Visibility, types: frozenset[str] | None, stems: Sequence[str]
    ) -> tuple[int, dict[str, int]]:
        """(how many memories `vis` shows, {stem: how many of them hold it})."""
        ...

    def fields(self, vis: Visibility, types: frozenset[str] | None, keys: Sequence[int]) -> list[IndexRow]:
        """Those of memories `keys` that `vis` shows, as the lexical cache loads them (any order)."""
        ...

    def created(self, vis: Visibility, types: frozenset[str] | None, keys: Sequence[int]) -> dict[int, float]:
        """{key: created_at} of those of `keys` that `vis` shows."""
        ...

    def beside(self, tenant: str, keys: Sequence[int]) -> dict[int, tuple[int | None, int | None]]:
        """{key: (the tenant's memory just before it by key, the one just after)} of those of
        `keys` that exist; None where there is none."""
        ...

    def nearest(
        self,
        vis: Visibility,
        types: frozenset[str] | None,
        model: str,
        query: bytes,
        k: int,
        *,
        owner: str | None = None,
        min_level: int | None = None,
    ) -> list[tuple[int, bytes]]:
        """(key, vector) of the `k` memories `vis` shows (of `types`, of `owner`, at or above
        `min_level`, when given: dedup's filter) whose `model` vectors have the highest inner
        product with `query` (float32 bytes), by an exact scan (no approximate index)."""
        ...

    def vectors(self, tenant: str, model: str, keys: Sequence[int]) -> dict[int, bytes]:
        """{key: `model` vector} of those of `keys` that have one."""
        ...


class Backend(Protocol):
    """One store: the ports above, units of work, locks, migrations and raw-SQL scopes."""

    @property
    def memories(self) -> MemoryRows: ...

    @property
    def edges(self) -> Edges: ...

    @property
    def accesses(self) -> AccessStream: ...

    @property
    def tombstones(self) -> Tombstones: ...

    @property
    def recalls(self) -> RecallLog: ...

    @property
    def versions(self) -> Versions: ...

    @property
    def changes(self) -> ChangeSequence: ...

    @property
    def jobs(self) -> ExtractionJobs: ...

    @property
    def vectors(self) -> MemoryVectors: ...

    @property
    def row_vectors(self) -> RowVectorStore: ...

    @property
    def location(self) -> str:
        """Where the store is, for people: a file path or a URL without its password."""
        ...

    @property
    def cache_file(self) -> Path | None:
        """A file path beside which local caches (the vector side file) may be kept, or None."""
        ...

    @property
    def caches_by_tenant(self) -> bool:
        """True when recall's caches are kept per tenant (loaded at a tenant's first use, evicted
        past a byte budget) and each tenant has its own change sequence (PostgreSQL: a server
        of many tenants); False when one cache follows the whole store (SQLite: a file)."""
        ...

    @property
    def server_index(self) -> ServerIndex | None:
        """Candidate reads the server answers exactly for a tenant no cache holds, or None when
        every recall reads caches (SQLite: the file is local, its cache is always loaded)."""
        ...

    def atomic(self) -> AbstractContextManager[None]:
        """A unit of work for the calling thread: all or nothing (nested: a savepoint)."""
        ...

    def snapshot(self) -> AbstractContextManager[None]:
        """Reads inside see one consistent state of the store (a read transaction)."""
        ...

    def in_transaction(self) -> bool:
        """True when the calling thread has a unit of work open (its reads may not be committed)."""
        ...

    def tenant_lock(self, tenant: str, holder: str) -> AbstractContextManager[None]:
        """Hold the one reflection lock of `tenant` across threads and processes; `TransactionError`
        at once, changing nothing, when another holder has it. A crashed holder never leaves it held."""
        ...

    def migrate(self, now: float) -> int:
        """Bring the store to this code's schema version; the version in force."""
        ...

    def instance_id(self) -> str | None:
        """The store's random identity, given once (caches kept outside it check it)."""
        ...

    def erasing(self) -> contextlib.AbstractContextManager[None]:
        """While open, what the store deletes or rewrites is overwritten on disk, in the pages it
        frees too (a forget runs inside it, within the forget's transaction: the overwriting is part
        of it); outside it the store may leave freed pages as they were. A backend whose files keep
        no such traces has nothing to do here."""
        ...

    def compact(self) -> None:
        """Rewrite the store's files from their live rows (SQLite: VACUUM, then an empty log;
        PostgreSQL: VACUUM FULL of the engine's tables), so that nothing deleted survives in them,
        not even in the unused space of pages still in use. Outside any transaction; slow on a
        large store (the whole file is rewritten) and needs room for a second copy."""
        ...

    def after_forget(self) -> None:
        """Best effort, after a forget committed: make deleted text unrecoverable from the
        store's files (a log checkpoint), waiting at most a moment for other readers."""
        ...

    def scope(self, namespace: Namespace, embedder: Embedder | None, *, tenant: str = "default") -> MemoryScope:
        """A raw-SQL scope over `namespace`'s tables of `tenant` (the caller keeps one per pair).

        Each tenant has its own raw-SQL tables: a scope of one tenant never reads, counts, writes
        or names another tenant's tables, even ones of the same name (SQLite: a file of tables per
        tenant beside the store; PostgreSQL: a schema per tenant and namespace)."""
        ...

    def table_names(self) -> list[str]:
        """Every table of the store, engine tables included, sorted (the admin view)."""
        ...

    def close(self) -> None:
        """Close every connection; further use raises `BackendError`."""
        ...
