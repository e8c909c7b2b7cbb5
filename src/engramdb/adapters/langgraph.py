"""A LangGraph `BaseStore` on engramdb (the ``langgraph`` extra).

    from engramdb import DynamicMemoryEngine
    from engramdb.adapters.langgraph import EngramStore

    store = EngramStore(DynamicMemoryEngine(".engramdb/memory.db"), tenant="acme")
    graph = builder.compile(store=store)          # LangGraph passes it to your nodes
    store.put(("users", "john_doe", "prefs"), "theme", {"text": "prefers dark mode"})
    store.search(("users", "john_doe"), query="what does John like?")

How namespaces map onto engramdb:

- **The tenant is fixed** when the store is made (`tenant`, with a confidentiality `cap`); a
  namespace can never reach another tenant.
- **Each namespace is its own agent**: ``("users", "john_doe", "prefs")`` is the agent
  ``lg-<hash of the exact namespace>``, so its items are private memories no other namespace's
  recall can rank, and distinct namespaces never share one — ``john_doe`` and ``john-doe``,
  ``("a", "b")`` and ``('a","b',)`` and ``("a", "b", "")`` all hash apart (BLAKE2b over the JSON of
  the labels, 96 bits). A search by query runs a recall inside each matching namespace's agent
  (visibility inside the query) and merges them by score.
- **Items** (namespace, key, JSON value, times) are rows of one table in the tenant's shared table
  scope (``shared_langgraph_store`` by default), so `get`, listing and filtering are exact; the
  namespace is stored as its JSON text, so prefix matching cannot be fooled by labels that
  contain separators.
- **The text that is searched** is, by default, every string in the value (``index=False`` on a
  put: none, so the item is found by filter only; ``index=["a.b", …]``: the strings at those
  dotted paths).

Not supported: TTLs (``supports_ttl`` is False).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from engramdb.errors import MissingExtra, NotFound, ValidationError
from engramdb.memories.model import Confidentiality

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
    )
except ImportError:  # pragma: no cover - the extra is optional
    raise MissingExtra("the LangGraph store", "langgraph") from None

if TYPE_CHECKING:
    from engramdb.agent import Agent
    from engramdb.engine import DynamicMemoryEngine
    from engramdb.storage.ports import MemoryScope

#: the most memories one namespace's recall may rank for a query search with a filter
MAX_CANDIDATES = 1000


def namespace_agent(namespace: Sequence[str]) -> str:
    """The engramdb agent id of a LangGraph namespace: distinct namespaces, distinct agents."""
    digest = hashlib.blake2b(_ns_text(namespace).encode("utf-8"), digest_size=12).hexdigest()
    return f"lg-{digest}"


def _ns_text(namespace: Sequence[str]) -> str:
    return json.dumps(list(namespace), ensure_ascii=False, separators=(",", ":"))


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, Mapping):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


def _at(value: Any, path: str) -> Any:
    for part in path.split("."):
        if part == "$":
            continue
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def _text(value: Mapping[str, Any], index: Sequence[str] | None) -> str:
    if index is None:
        return ". ".join(_strings(value))
    return ". ".join(s for path in index for s in _strings(_at(value, path)))


def _operator(value: Any, op: str, expected: Any) -> bool:
    if op == "$eq":
        return bool(value == expected)
    if op == "$ne":
        return bool(value != expected)
    try:
        a, b = float(value), float(expected)
    except (TypeError, ValueError):
        return False
    if op == "$gt":
        return a > b
    if op == "$gte":
        return a >= b
    if op == "$lt":
        return a < b
    if op == "$lte":
        return a <= b
    raise ValidationError(f"unsupported filter operator {op!r}; use $eq, $ne, $gt, $gte, $lt, $lte")


def _matches(value: Any, expected: Any) -> bool:
    """LangGraph's filter semantics (as its InMemoryStore applies them)."""
    if isinstance(expected, Mapping):
        if any(str(k).startswith("$") for k in expected):
            return all(_operator(value, str(k), v) for k, v in expected.items())
        return isinstance(value, Mapping) and all(_matches(value.get(k), v) for k, v in expected.items())
    if isinstance(expected, (list, tuple)):
        return (
            isinstance(value, (list, tuple))
            and len(value) == len(expected)
            and all(_matches(a, b) for a, b in zip(value, expected, strict=True))
        )
    return bool(value == expected)


def _condition(cond: MatchCondition, ns: tuple[str, ...]) -> bool:
    path = tuple(cond.path)
    if len(ns) < len(path):
        return False
    pairs = (
        zip(ns, path, strict=False) if cond.match_type == "prefix" else zip(reversed(ns), reversed(path), strict=False)
    )
    return all(p == "*" or k == p for k, p in pairs)


def _value_json(value: object) -> str:
    """A put's value as stored (JSON text); `ValidationError` unless it is a JSON object, as the
    store contract types it (``dict[str, Any]``), with text keys and JSON values throughout."""
    if not isinstance(value, Mapping):
        raise ValidationError(
            f"a LangGraph store value must be a dict (a JSON object), got {type(value).__name__}: "
            "wrap it, e.g. {'value': ...}"
        )
    try:
        return json.dumps(dict(value), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(
            f"a LangGraph store value must hold only JSON values (text keys; str, numbers, bools, None, "
            f"lists and dicts; no NaN or infinity): {exc}"
        ) from None


class EngramStore(BaseStore):
    """A LangGraph store whose items are engramdb memories of one tenant (see the module docstring).

    Args:
        engine: the engramdb engine.
        tenant: the tenant every namespace lives in (fixed for the store's life).
        cap: the most confidential level the store's agents read.
        table: the shared table holding the items (``shared_…``).
        index: the default dotted paths whose strings are searched (None: every string).
    """

    supports_ttl = False

    def __init__(
        self,
        engine: DynamicMemoryEngine,
        *,
        tenant: str = "default",
        cap: Confidentiality = Confidentiality.RESTRICTED,
        table: str = "shared_langgraph_store",
        index: Sequence[str] | None = None,
    ) -> None:
        if not table.startswith("shared_") or not table.replace("_", "").isalnum():
            raise ValidationError(f"table must be a shared_<name> table of letters, digits and _, got {table!r}")
        self._engine = engine
        self._tenant = tenant
        self._cap = cap
        self._table = table
        self._index = None if index is None else list(index)
        self._scope: MemoryScope = engine.get_shared_scope(tenant)
        self._agents: dict[str, Agent] = {}
        self._scope.execute(
            # `seq` keeps insertion order in plain SQL (no rowid), so the table reads the same on any backend.
            f"CREATE TABLE IF NOT EXISTS {table} (ns TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, "
            "memory_id TEXT, created_at REAL NOT NULL, updated_at REAL NOT NULL, seq INTEGER NOT NULL, "
            "PRIMARY KEY (ns, key))"
        )

    @property
    def tenant(self) -> str:
        """The tenant of every namespace of this store."""
        return self._tenant

    def agent(self, namespace: Sequence[str]) -> Agent:
        """The engramdb agent handle a namespace's items belong to."""
        aid = namespace_agent(namespace)
        handle = self._agents.get(aid)
        if handle is None:
            handle = self._agents[aid] = self._engine.agent(aid, tenant=self._tenant, cap=self._cap)
        return handle

    # -- the BaseStore protocol ---------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run `ops` in order; one result per op (None for a put)."""
        ops = list(ops)
        # Every value is checked before any op runs: a bad one changes nothing.
        for op in ops:
            if isinstance(op, PutOp) and op.value is not None:
                _value_json(op.value)
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(tuple(op.namespace), op.key))
            elif isinstance(op, PutOp):
                self._put(op)
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list(op))
            else:
                raise ValidationError(f"unknown LangGraph store operation {type(op).__name__}")
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """`batch` in a worker thread (the one async mechanism of `engramdb.aio`)."""
        return await asyncio.to_thread(self.batch, list(ops))

    # -- operations ---------------------------------------------------------------------------

    def _item(self, row: Sequence[Any], score: float | None = None, *, search: bool = False) -> Item:
        ns, key, value, _mid, created, updated = row
        args = {
            "namespace": tuple(json.loads(ns)), "key": key, "value": json.loads(value),
            "created_at": dt.datetime.fromtimestamp(created, dt.UTC),
            "updated_at": dt.datetime.fromtimestamp(updated, dt.UTC),
        }  # fmt: skip
        return SearchItem(**args, score=score) if search else Item(**args)

    def _row(self, ns: tuple[str, ...], key: str) -> Sequence[Any] | None:
        rows = self._scope.query(
            f"SELECT ns, key, value, memory_id, created_at, updated_at FROM {self._table} WHERE ns = ? AND key = ?",  # noqa: S608 - a checked table name
            (_ns_text(ns), key),
        )
        return rows[0] if rows else None

    def _get(self, ns: tuple[str, ...], key: str) -> Item | None:
        row = self._row(ns, key)
        return None if row is None else self._item(row)

    def _put(self, op: PutOp) -> None:
        ns, key = tuple(op.namespace), op.key
        row = self._row(ns, key)
        agent = self.agent(ns)
        old_mid = None if row is None else row[3]
        if op.value is None:
            if row is not None:
                self._forget(agent, old_mid)
                self._scope.execute(f"DELETE FROM {self._table} WHERE ns = ? AND key = ?", (_ns_text(ns), key))  # noqa: S608 - a checked table name
            return
        encoded = _value_json(op.value)
        value = dict(op.value)
        index = self._index if op.index is None else (None if op.index is False else list(op.index))
        text = "" if op.index is False else _text(value, index)
        mid = self._index_text(agent, key, text, old_mid)
        now = self._engine.clock()
        self._scope.execute(
            f"INSERT INTO {self._table} (ns, key, value, memory_id, created_at, updated_at, seq) "  # noqa: S608 - a checked table name
            f"VALUES (?, ?, ?, ?, ?, ?, (SELECT coalesce(max(seq), 0) + 1 FROM {self._table})) "
            "ON CONFLICT (ns, key) DO UPDATE SET value = excluded.value, memory_id = excluded.memory_id, "
            "updated_at = excluded.updated_at",
            (_ns_text(ns), key, encoded, mid, now, now),
        )

    def _forget(self, agent: Agent, memory_id: str | None) -> None:
        if memory_id:
            try:
                agent.forget(memory_id, reason="deleted from the LangGraph store")
            except NotFound:
                pass

    def _index_text(self, agent: Agent, key: str, text: str, old: str | None) -> str | None:
        """The memory holding `text` for search (None for no text): the old one updated, or a new one."""
        if not text.strip():
            self._forget(agent, old)
            return None
        if old:
            try:
                current = agent.get(old, touch=False)
                if current.content != text:
                    agent.update(old, content=text)
                return old
            except NotFound:
                pass
        # dedup=False: each item is its own memory; force: a deleted item's text may come back.
        return agent.remember(text, title=key, dedup=False, force=True).id

    def _rows(self, prefix: tuple[str, ...]) -> list[tuple[Any, ...]]:
        """Every item under `prefix`, in LangGraph's order: namespaces by first insertion, then keys."""
        t = self._table
        select = f"SELECT ns, key, value, memory_id, created_at, updated_at FROM {t} t"  # noqa: S608 - a checked table name
        order = f" ORDER BY (SELECT min(seq) FROM {t} u WHERE u.ns = t.ns), seq"  # noqa: S608 - a checked table name
        if not prefix:
            return self._scope.query(select + order)
        exact = _ns_text(prefix)
        under = exact[:-1] + ","  # '["a","b"' + ',' : JSON escaping keeps labels from faking it
        return self._scope.query(select + " WHERE ns = ? OR substr(ns, 1, ?) = ?" + order, (exact, len(under), under))

    def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        rows = [r for r in self._rows(prefix) if not op.filter or self._passes(r, op.filter)]
        if not op.query:
            return [self._item(r, search=True) for r in rows[op.offset : op.offset + op.limit]]  # type: ignore[misc]
        by_mid = {r[3]: r for r in rows if r[3]}
        want = MAX_CANDIDATES if op.filter else min(MAX_CANDIDATES, op.offset + op.limit)
        scored: list[tuple[float, int, Sequence[Any]]] = []
        order = {id(r): i for i, r in enumerate(rows)}
        for ns in dict.fromkeys(r[0] for r in rows if r[3]):
            hits = self.agent(tuple(json.loads(ns))).search(op.query, k=max(1, want))
            for h in hits:
                row = by_mid.get(h.memory.id)
                if row is not None:
                    scored.append((h.score, order[id(row)], row))
        scored.sort(key=lambda t: (-t[0], t[1]))
        seen = {id(r) for _, _, r in scored}
        ranked = [self._item(r, s, search=True) for s, _, r in scored]
        ranked += [self._item(r, search=True) for r in rows if id(r) not in seen and not r[3]]
        return ranked[op.offset : op.offset + op.limit]  # type: ignore[return-value]

    @staticmethod
    def _passes(row: Sequence[Any], filt: Mapping[str, Any]) -> bool:
        value = json.loads(row[2])
        return all(_matches(value.get(k), v) for k, v in filt.items())

    def _list(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        found = [tuple(json.loads(ns)) for (ns,) in self._scope.query(f"SELECT DISTINCT ns FROM {self._table}")]  # noqa: S608 - a checked table name
        if op.match_conditions:
            found = [ns for ns in found if all(_condition(c, ns) for c in op.match_conditions)]
        listed = sorted({ns[: op.max_depth] for ns in found}) if op.max_depth is not None else sorted(found)
        return listed[op.offset : op.offset + op.limit]


__all__ = ["MAX_CANDIDATES", "EngramStore", "namespace_agent"]
