"""Reading memories: by id, listings, edges, history, the access stream, export, and replaying a
recall for `explain`. Everything is read as the `Principal` sees it, through the storage ports."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from typing import TypedDict, cast

from engramdb.errors import ValidationError
from engramdb.memories import model as mm
from engramdb.memories.access import log_accesses
from engramdb.memories.filters import Where
from engramdb.memories.model import (
    AccessRecord,
    Channel,
    Confidentiality,
    Edge,
    EdgeType,
    Memory,
    MemoryType,
    MemoryVersion,
    Principal,
    TodoStatus,
)
from engramdb.memories.runtime import Runtime
from engramdb.memories.writing import visible
from engramdb.observability.stats import Stats, compute_stats
from engramdb.retrieval.recall import explained_from_json
from engramdb.retrieval.results import Explanation
from engramdb.storage.ports import Touch


class EdgeRecord(TypedDict):
    """An edge as `Agent.export` gives it."""

    source: str
    target: str
    type: EdgeType
    weight: float
    created_at: float


class MemoryRecord(TypedDict):
    """A memory as `Agent.export` gives it: its fields (`Memory`) and its outgoing edges."""

    id: str
    tenant: str
    owner: str
    author: str
    type: MemoryType
    title: str
    content: str
    tags: tuple[str, ...]
    entities: tuple[str, ...]
    n_chars: int
    n_tokens: int
    n_sentences: int
    importance: float
    salience: float
    confidence: float
    strength: int
    confidentiality: Confidentiality
    created_at: float
    recorded_at: float
    valid_from: float | None
    valid_to: float | None
    archived: bool
    status: TodoStatus | None
    refs: tuple[dict[str, object], ...]
    version: int
    last_access: float | None
    access_count: int
    retention: float | None
    prune_at: float | None
    importance_source: str
    session: str | None
    metadata: dict[str, object]
    edges: list[EdgeRecord]


def check_types(types: Iterable[MemoryType | str] | None) -> frozenset[MemoryType] | None:
    """The memory types asked for (a single one may be given as a str); `ValidationError` for an unknown one."""
    if types is None:
        return None
    if isinstance(types, str):
        types = [types]
    return frozenset(mm.check_type(t) for t in mm.check_many("types", types, "a memory type or a list of them"))


def get(rt: Runtime, who: Principal, memory_id: str, *, touch: bool = True) -> Memory:
    """The memory if `who` may see it, else `NotFound`; a deliberate read (``deref``) unless not `touch`."""
    found = visible(rt, who, memory_id)
    if not touch:
        return rt.annotate(found.memory)
    store = rt.store
    with store.atomic():
        log_accesses(
            store, [Touch(found.key, Channel.DEREF)], now=rt.clock(), tenant=who.tenant, reader=who.agent_id,
            ring_size=rt.scoring.ring_size,
        )  # fmt: skip
    return rt.annotate(visible(rt, who, memory_id).memory)


def memories(
    rt: Runtime,
    who: Principal,
    *,
    types: Iterable[MemoryType | str] | None = None,
    include_archived: bool = False,
    where: Where | None = None,
) -> list[Memory]:
    """Every memory `who` can see (that `where` admits), oldest first (no access is logged);
    forgotten husks never listed."""
    wanted = check_types(types)
    rows = rt.store.memories.listing(who.visibility(include_archived=include_archived, where=where))
    now = rt.clock()
    out = [rt.annotate(m, now) for m in rows]
    return [m for m in out if wanted is None or m.type in wanted]


#: what `browse` lists: live memories, archived ones, or both
BROWSE_STATUSES = ("active", "archived", "all")
#: the largest page `browse` returns
MAX_PAGE = 1000


def browse(
    rt: Runtime,
    who: Principal,
    *,
    contains: str | None = None,
    types: Iterable[MemoryType | str] | None = None,
    tag: str | None = None,
    status: str = "active",
    offset: int = 0,
    limit: int = 50,
    where: Where | None = None,
) -> mm.MemoryPage:
    """A page of the memories `who` can see, newest first, filtered inside the query (no access is
    logged); see `Agent.browse`."""
    wanted = check_types(types)
    if status not in BROWSE_STATUSES:
        raise ValidationError(f"status must be one of {', '.join(BROWSE_STATUSES)}, got {status!r}")
    for name, value, low, high in (("offset", offset, 0, None), ("limit", limit, 1, MAX_PAGE)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
            span = f"from {low} to {high}" if high is not None else f"of {low} or more"
            raise ValidationError(f"{name} must be a whole number {span}, got {value!r}")
    limits = rt.limits
    text = mm.check_text("contains", contains, limits.query_chars) if contains is not None else None
    label = mm.check_text("tag", tag, limits.label_chars) if tag is not None else None
    rows, total = rt.store.memories.page(
        who.visibility(include_archived=status != "active", where=where),
        types=sorted(t.value for t in wanted) if wanted is not None else None,
        tag=label,
        contains=text or None,
        archived_only=status == "archived",
        offset=offset,
        limit=limit,
    )
    now = rt.clock()
    return mm.MemoryPage(tuple(rt.annotate(m, now) for m in rows), total, offset, limit)


def tags(rt: Runtime, who: Principal) -> dict[str, int]:
    """Every tag on a memory `who` can see, with how many carry it (no access is logged)."""
    return rt.store.memories.tag_counts(who.visibility())


def tombstones(rt: Runtime, who: Principal) -> list[mm.Tombstone]:
    """The tombstones `who` may know of — its own and shared memories', at or below its cap — oldest
    first. They hold a fingerprint, who, when and why; never the forgotten text."""
    return [s for s in rt.store.tombstones.listing(who.tenant, ["", who.agent_id]) if s.confidentiality <= who.cap]


def edges(rt: Runtime, who: Principal, memory_id: str) -> list[Edge]:
    """The edges touching a memory whose other end `who` can also see."""
    key = visible(rt, who, memory_id).key
    return rt.store.edges.touching(who.visibility(include_archived=True), key)


def history(rt: Runtime, who: Principal, memory_id: str) -> list[MemoryVersion]:
    """Earlier versions of a memory, oldest first."""
    return rt.store.versions.history(visible(rt, who, memory_id).key)


def accesses(rt: Runtime, who: Principal, memory_id: str) -> list[AccessRecord]:
    """The access stream of a memory, oldest first. Query texts and trace references are shown
    only for this agent's own accesses made under a cap no higher than `who`'s: another agent's,
    or this agent's own through a less capped handle, may say more than `who` may read."""
    key = visible(rt, who, memory_id).key
    records = rt.store.accesses.records(key)
    caps: dict[str, int] = {}

    def trusted(r: AccessRecord) -> bool:
        if r.reader != who.agent_id:
            return False
        if r.query is None and r.trace_ref is None:
            return True
        if r.recall_id is None:
            return who.cap >= Confidentiality.RESTRICTED  # made under an unknown cap
        if r.recall_id not in caps:
            record = rt.store.recalls.get(who.tenant, who.agent_id, r.recall_id)
            caps[r.recall_id] = _recall_cap(record.params if record else {})
        return caps[r.recall_id] <= who.cap

    return [r if trusted(r) else dataclasses.replace(r, query=None, trace_ref=None) for r in records]


def _recall_cap(params: dict[str, object]) -> int:
    """The cap a logged recall ran under (older records, without one, count as the highest)."""
    cap = params.get("cap")
    return int(cap) if isinstance(cap, int) else int(Confidentiality.RESTRICTED)


def stats(rt: Runtime, who: Principal) -> Stats:
    """Usage statistics over the memories `who` can see."""
    return compute_stats(rt.store, who.visibility(include_archived=True))


def export(rt: Runtime, who: Principal, *, include_archived: bool = False) -> list[MemoryRecord]:
    """Every memory `who` can see as JSON-ready dicts, with the edges whose both ends it sees."""
    out = []
    for m in memories(rt, who, include_archived=include_archived):
        record = dataclasses.asdict(m)
        for private in ("recent_accesses", "older_count", "older_newest", "older_oldest"):
            record.pop(private)
        record["edges"] = [dataclasses.asdict(e) for e in edges(rt, who, m.id) if e.source == m.id]
        out.append(cast(MemoryRecord, record))
    return out


#: ``rc_`` and 24 hex digits (`text.id_tokens`: a second, then randomness); 16 in ids minted before ids carried their second (still accepted).
_RECALL_ID = re.compile(r"rc_(?:[0-9a-f]{8})?[0-9a-f]{16}")


def looks_like_recall_id(text: str) -> bool:
    """True for text shaped like the ids recalls are given (``rc_`` and 24 hex digits, or 16 for
    recalls made before ids carried their second)."""
    return _RECALL_ID.fullmatch(text) is not None


def replay(rt: Runtime, who: Principal, recall_id: str) -> Explanation | None:
    """The explanation of recall `recall_id` made by `who`, or None when there is none.

    Only what `who` may see now is named: a recall made under a higher cap (or before a memory
    was forgotten or hidden) must not name it to a handle that cannot see it.
    """
    record = rt.store.recalls.get(who.tenant, who.agent_id, recall_id)
    if record is None or _recall_cap(record.params) > who.cap:
        # A recall made under a higher cap is not this handle's to replay: its query alone may
        # say more than the handle may read. It reads as unknown.
        return None
    params = record.params
    names = params.get("components")  # (none in records of entries with their keys)
    hits = [explained_from_json(h, names) for h in params["hits"]]
    near = [explained_from_json(h, names) for h in record.near_misses]
    ids = sorted({e.memory_id for e in (*hits, *near)})
    shown = set(rt.store.memories.visible_ids(who.visibility(include_archived=True), ids)) if ids else set()
    return Explanation(
        recall_id=recall_id,
        query=record.query,
        reader=who.agent_id,
        ts=record.ts,
        k=params["k"],
        hops=params["hops"],
        hits=tuple(e for e in hits if e.memory_id in shown),
        near_misses=tuple(e for e in near if e.memory_id in shown),
        weights=params["weights"],
    )


def check_trace_ref(trace_ref: object) -> None:
    """A trace reference is a str (a span or run id the caller's tracing knows) or None."""
    if trace_ref is not None and (not isinstance(trace_ref, str) or len(trace_ref) > 1000):
        raise ValidationError(f"trace_ref must be a str of at most 1000 characters, or None, got {trace_ref!r:.80}")
    if trace_ref is not None:
        mm.check_text("trace_ref", trace_ref, 1000)


def check_k(k: object, hops: object) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 1000:
        raise ValidationError(f"k must be an integer from 1 to 1000, got {k!r}")
    if isinstance(hops, bool) or not isinstance(hops, int) or not 0 <= hops <= 5:
        raise ValidationError(f"hops must be an integer from 0 to 5, got {hops!r}")


def with_origins(rt: Runtime, who: Principal, explanation: Explanation) -> Explanation:
    """`explanation` with `Explanation.origins` filled from the access stream (channel
    ``extracted``) of the memories it shows."""
    ids = [e.memory_id for e in (*explanation.hits, *explanation.near_misses)]
    if not ids:
        return explanation
    keys = rt.store.memories.visible_ids(who.visibility(include_archived=True), ids)
    origins: dict[str, tuple[str, ...]] = {}
    for memory_id, key in keys.items():
        said = tuple(
            f"{r.query} (job {r.trace_ref})" for r in rt.store.accesses.records(key) if r.channel is Channel.EXTRACTED
        )
        if said:
            origins[memory_id] = said
    return dataclasses.replace(explanation, origins=origins) if origins else explanation
