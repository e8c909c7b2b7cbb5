"""What each inspector page shows, read through one `Agent` handle and nothing else.

Every function takes the agent the inspector views as and returns plain JSON-ready data; the
pages render it and the ``/api/…`` routes return it as it is. Visibility and the cap are the
engine's, inside its queries: these functions never see a memory the agent could not. They are
read-only: memories are read with ``get(…, touch=False)`` and ``browse()`` (neither logs an
access), the playground runs ``explain(query)`` (a dry recall that logs and reinforces nothing),
and raw-SQL tables are read with ``MemoryScope.read_page``, which runs SELECT statements only
under the scope's database guard.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from engramdb.errors import EngramError, NotFound, ValidationError
from engramdb.memories.model import AccessRecord, Components, Edge, Memory, MemoryType
from engramdb.retrieval.results import Explained
from engramdb.scopes.classify import Kind, classify
from engramdb.tools.sql import pick_scope

if TYPE_CHECKING:
    from engramdb.agent import Agent
    from engramdb.storage.ports import MemoryScope

PAGE_SIZE = 50
ROWS_PAGE = 50
STATUSES = ("active", "archived", "forgotten", "all")
#: the parts of a score, in the order the stacked bars draw them, with the weight each is scaled by
SCORE_PARTS = (
    ("rel", "w_rel"),
    ("rec", "w_rec"),
    ("imp", "w_imp"),
    ("when", "w_when"),
    ("entity", "w_entity"),
    ("ctx", "w_ctx"),
    ("dated", "w_dated"),
    ("spread", "gamma"),
)

Data = dict[str, Any]


def when(ts: float | None) -> str:
    """An epoch time as ``YYYY-MM-DD HH:MM:SS`` UTC ("" for None)."""
    if ts is None:
        return ""
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def page_number(raw: str | None) -> int:
    """A ``?page=`` value as a page number from 1 (`ValidationError` for anything else)."""
    if raw in (None, ""):
        return 1
    assert raw is not None
    if not raw.isdigit() or int(raw) < 1:
        raise ValidationError(f"page must be a whole number from 1, got {raw!r}")
    return int(raw)


def memory_summary(m: Memory) -> Data:
    """One memory as a row of the list (no access is logged)."""
    return {
        "id": m.id,
        "type": m.type.value,
        "title": m.title,
        "content": m.content,
        "owner": m.owner or "shared",
        "tags": list(m.tags),
        "status": m.status.value if m.status else None,
        "archived": m.archived,
        "importance": m.importance,
        "confidentiality": m.confidentiality.name.lower(),
        "created_at": when(m.created_at),
        "access_count": m.access_count,
        "retention": m.retention,
    }


# -- the memory list ----------------------------------------------------------------------------


def _forgotten(agent: Agent) -> list[Data]:
    """The tombstones this agent may know of (`Agent.tombstones`, which applies the cap), newest
    first: no text, only who, when and why."""
    return [
        {
            "id": s.memory_id,
            "owner": s.owner or "shared",
            "forgotten_by": s.forgotten_by,
            "forgotten_at": when(s.forgotten_at),
            "reason": s.reason,
        }
        for s in reversed(agent.tombstones())
    ]


def memory_list(
    agent: Agent, *, q: str = "", type: str = "", tag: str = "", status: str = "active", page: int = 1
) -> Data:
    """The memories the agent can see, filtered by text (content, title, tags), type, tag and
    status (active, archived, forgotten, all), newest first, `PAGE_SIZE` a page. The filters, the
    count and the page run inside the store's query (`Agent.browse`), so a page of a million
    memories costs what a page of a hundred does."""
    if status not in STATUSES:
        raise ValidationError(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
    if type and type not in {t.value for t in MemoryType}:
        raise ValidationError(f"unknown memory type {type!r}")
    base: Data = {"q": q, "type": type, "tag": tag, "status": status, "page": page, "page_size": PAGE_SIZE}
    base["types"] = [t.value for t in MemoryType]
    base["statuses"] = list(STATUSES)
    if status == "forgotten":
        stones = _forgotten(agent)
        base.update(_paged(stones, page), kind="tombstones")
        return base
    base["tags"] = sorted(agent.tags())
    found = agent.browse(
        contains=q or None,
        types=[type] if type else None,
        tag=tag or None,
        status=status,
        offset=(page - 1) * PAGE_SIZE,
        limit=PAGE_SIZE,
    )
    pages = max(1, -(-found.total // PAGE_SIZE))
    base.update(items=[memory_summary(m) for m in found.memories], total=found.total, pages=pages, kind="memories")
    return base


def _paged(items: Sequence[Data], page: int) -> Data:
    pages = max(1, -(-len(items) // PAGE_SIZE))
    start = (page - 1) * PAGE_SIZE
    return {"items": list(items[start : start + PAGE_SIZE]), "total": len(items), "pages": pages}


# -- one memory ---------------------------------------------------------------------------------


def _access(r: AccessRecord) -> Data:
    return {
        "ts": r.ts,
        "when": when(r.ts),
        "channel": r.channel.value,
        "reader": r.reader,
        "query": r.query,
        "score": r.score,
        "rank": r.rank,
        "recall_id": r.recall_id,
    }


def _edge(e: Edge, here: str) -> Data:
    out = e.source == here
    return {
        "source": e.source,
        "target": e.target,
        "other": e.target if out else e.source,
        "direction": "out" if out else "in",
        "type": e.type.value,
        "weight": e.weight,
        "created_at": when(e.created_at),
    }


def memory_detail(agent: Agent, memory_id: str) -> Data:
    """Everything about one memory the agent can see (`NotFound` otherwise, as for a missing
    one): content, levels, validity, versions, edges, its access stream."""
    m = agent.get(memory_id, touch=False)
    others = {}
    edges = [_edge(e, m.id) for e in agent.edges(m.id)]
    for e in edges:
        if e["other"] not in others:
            others[e["other"]] = _label(agent.get(e["other"], touch=False))
        e["other_label"] = others[e["other"]]
    accesses = [_access(r) for r in agent.accesses(m.id)]
    return {
        "memory": {
            **memory_summary(m),
            "author": m.author,
            "entities": list(m.entities),
            "salience": m.salience,
            "confidence": m.confidence,
            "strength": m.strength,
            "version": m.version,
            "recorded_at": when(m.recorded_at),
            "valid_from": when(m.valid_from),
            "valid_to": when(m.valid_to),
            "last_access": when(m.last_access),
            "prune_at": when(m.prune_at),
            "refs": [asdict(r) for r in m.refs],
        },
        "history": [
            {
                "version": v.version,
                "title": v.title,
                "content": v.content,
                "changed_at": when(v.changed_at),
                "changed_by": v.changed_by,
            }
            for v in agent.history(m.id)
        ],
        "edges": edges,
        "accesses": accesses,
        "timeline": _timeline(accesses),
    }


def _timeline(accesses: Iterable[Data]) -> Data:
    """Accesses per UTC day and channel, for the stacked bar chart of a memory's page."""
    days: dict[str, dict[str, int]] = {}
    channels: list[str] = []
    for a in accesses:
        day = when(a["ts"])[:10]
        ch = a["channel"]
        if ch not in channels:
            channels.append(ch)
        days.setdefault(day, {})
        days[day][ch] = days[day].get(ch, 0) + 1
    labels = sorted(days)
    return {"labels": labels, "series": {ch: [days[d].get(ch, 0) for d in labels] for ch in channels}}


def _label(m: Memory) -> str:
    text = m.title or m.content
    return text if len(text) <= 60 else text[:57] + "…"


# -- the graph ----------------------------------------------------------------------------------


def graph(agent: Agent, memory_id: str, depth: int = 1) -> Data:
    """The memories linked to `memory_id` up to `depth` (1 or 2) edges away, as cytoscape
    elements. Only edges whose both ends the agent can see exist here (`Agent.edges`)."""
    if depth not in (1, 2):
        raise ValidationError(f"depth must be 1 or 2, got {depth!r}")
    root = agent.get(memory_id, touch=False)
    nodes: dict[str, Memory] = {root.id: root}
    level = {root.id: 0}  # edges away from the root: the rings of the drawing
    seen_edges: dict[tuple[str, str, str], Edge] = {}
    frontier = [root.id]
    for hop in range(1, depth + 1):
        nxt = []
        for mid in frontier:
            for e in agent.edges(mid):
                seen_edges[(e.source, e.target, e.type.value)] = e
                for end in (e.source, e.target):
                    if end not in nodes:
                        nodes[end] = agent.get(end, touch=False)
                        level[end] = hop
                        nxt.append(end)
        frontier = nxt
    elements: list[Data] = [
        {"data": {"id": m.id, "label": _label(m), "type": m.type.value, "root": m.id == root.id, "level": level[m.id]}}
        for m in nodes.values()
    ]
    elements += [
        {"data": {"id": f"{s}>{t}:{ty}", "source": s, "target": t, "label": ty, "weight": e.weight}}
        for (s, t, ty), e in seen_edges.items()
        if s in nodes and t in nodes
    ]
    n_edges = len(elements) - len(nodes)
    return {"root": root.id, "depth": depth, "nodes": len(nodes), "edges": n_edges, "elements": elements}


# -- the recall playground ----------------------------------------------------------------------


def _parts(c: Components, weights: dict[str, float]) -> dict[str, float]:
    values = asdict(c)
    return {name: values[name] * weights.get(w, 0.0) for name, w in SCORE_PARTS}


def _explained(agent: Agent, e: Explained, weights: dict[str, float]) -> Data:
    m = agent.get(e.memory_id, touch=False)
    return {
        "id": e.memory_id,
        "rank": e.rank,
        "score": e.score,
        "relevance": e.relevance,
        "source": e.source,
        "selected": e.selected,
        "type": m.type.value,
        "label": _label(m),
        "content": m.content,
        "components": asdict(e.components),
        "parts": _parts(e.components, weights),
    }


def playground(agent: Agent, query: str, *, k: int = 5, hops: int = 1) -> Data:
    """A dry-run recall of `query` (`Agent.explain`, which logs and reinforces nothing): each
    hit with its score components and their weighted parts (which sum to its score), and the
    near misses just below the cut."""
    ex = agent.explain(query, k=k, hops=hops)
    w = dict(ex.weights)
    return {
        "query": ex.query,
        "k": ex.k,
        "hops": ex.hops,
        "weights": w,
        "parts": [name for name, _ in SCORE_PARTS],
        "hits": [_explained(agent, e, w) for e in ex.hits],
        "near_misses": [_explained(agent, e, w) for e in ex.near_misses],
    }


# -- stats --------------------------------------------------------------------------------------


def stats(agent: Agent) -> Data:
    """The agent's usage KPIs (`Agent.stats`) as plain data."""
    s = agent.stats()
    return {**asdict(s), "by_type": dict(s.by_type)}


# -- raw-SQL tables -----------------------------------------------------------------------------


def _scopes(agent: Agent) -> list[MemoryScope]:
    return [agent.shared, agent.private]


def tables(agent: Agent) -> Data:
    """The tables of the agent's two scopes (shared and private), with their columns."""
    return {
        "scopes": [
            {"label": s.label, "tables": [{"name": t, "columns": s.columns(t)} for t in s.list_tables()]}
            for s in _scopes(agent)
        ]
    }


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def table_rows(agent: Agent, table: str, *, page: int = 1) -> Data:
    """One page of a table of the agent's scopes, read through that scope's guarded read path.
    A table of neither scope reads like a missing one (`NotFound`)."""
    for scope in _scopes(agent):
        if table in scope.list_tables():
            try:
                # a stable order, so pages neither repeat nor skip rows (PostgreSQL has no
                # implicit one): the integer row key when the table has one
                order = f" ORDER BY {scope.row_key(table)}"
            except EngramError:
                order = ""
            offset = (page - 1) * ROWS_PAGE
            # a listed table name, quoted, and integers: nothing of the caller's reaches the SQL
            sql = f"SELECT * FROM {_quote(table)}{order} LIMIT {ROWS_PAGE + 1} OFFSET {offset}"  # noqa: S608
            got = scope.read_page(sql, limit=ROWS_PAGE)
            return {
                "scope": scope.label,
                "table": table,
                "page": page,
                "columns": list(got.columns) or scope.columns(table),
                "rows": [[_cell(v) for v in row] for row in got.rows],
                "more": got.more,
            }
    raise NotFound(f"no table {table!r} in this agent's scopes")


def run_select(agent: Agent, sql: str) -> Data:
    """One SELECT in the scope whose tables it names, at most `ROWS_PAGE` rows. Anything but a
    read is refused here; the scope's database guard refuses what reaches outside it. A refusal
    comes back as its typed error's name and message, not raised."""
    try:
        stmt = classify(sql)
        if stmt.kind is not Kind.READ:
            raise ValidationError("the inspector is read-only: only SELECT statements run here")
        scope = pick_scope(_scopes(agent), stmt)
        got = scope.read_page(sql, limit=ROWS_PAGE)
    except EngramError as exc:
        return {"sql": sql, "error": type(exc).__name__, "message": str(exc)}
    return {
        "sql": sql,
        "scope": scope.label,
        "columns": list(got.columns),
        "rows": [[_cell(v) for v in row] for row in got.rows],
        "more": got.more,
    }


def _cell(v: object) -> object:
    if isinstance(v, (bytes, bytearray, memoryview)):
        return f"<{len(bytes(v))} bytes>"
    return v
