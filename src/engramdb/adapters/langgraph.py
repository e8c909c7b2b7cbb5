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
- **Scores** of a search by query are each memory's relevance (`engramdb.Hit.relevance`): 0–1 on
  an absolute scale, like the cosine similarity of LangGraph's own stores (higher is closer), the
  same on SQLite and PostgreSQL for the same embedder. Items are ranked by that score, ties in
  LangGraph's listing order (namespaces by first insertion, then keys), so order and score agree
  and neither depends on the backend or on how often an item was read. Each namespace's recall
  gives every candidate it finds, not its own top-k (which ranks by ACT-R activation, the
  engramdb score); the items no recall finds, and unindexed ones, follow with no score.
- **TTLs** (``supports_ttl``): ``put(..., ttl=minutes)``, or ``ttl_config={"default_ttl": …}``; an
  item expires ``ttl`` minutes after its last write, or its last read when the read refreshes
  (``refresh_on_read``, default True, or the op's ``refresh_ttl``). Expired items are never
  returned, searched or listed — every batch first deletes the items expired by its instant
  (forgetting their memories, as a delete does), so a search's top-k is taken over live items
  only, and its reads ask for rows alive at that instant — and
  `sweep_ttl` deletes them on demand (``sweep_interval_minutes``: a background sweeper,
  `start_ttl_sweeper` / `stop_ttl_sweeper`). Times come from the engine's clock.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from engramdb.errors import MissingExtra, NotFound, ValidationError
from engramdb.memories.model import Confidentiality
from engramdb.retrieval.recall import check_min_relevance

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
        TTLConfig,
    )
except ImportError:  # pragma: no cover - the extra is optional
    raise MissingExtra("the LangGraph store", "langgraph") from None

if TYPE_CHECKING:
    from engramdb.agent import Agent
    from engramdb.engine import DynamicMemoryEngine
    from engramdb.storage.ports import MemoryScope

#: the most memories one namespace's recall may rank for a query search (recall's own limit)
MAX_CANDIDATES = 1000

#: an item row alive at the instant given as the parameter
_LIVE = "(expires_at IS NULL OR expires_at > ?)"


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
        ttl_config: LangGraph's `TTLConfig` (``default_ttl`` and ``sweep_interval_minutes`` in
            minutes, ``refresh_on_read``); expired items are always omitted.
        min_relevance: a search by query returns only items at least this relevant (0-1, the
            scores it gives), so "nothing relevant" can be the answer; None (the default) ranks
            every item, the unfound ones last with no score, as LangGraph's own stores do.
    """

    supports_ttl = True

    def __init__(
        self,
        engine: DynamicMemoryEngine,
        *,
        tenant: str = "default",
        cap: Confidentiality = Confidentiality.RESTRICTED,
        table: str = "shared_langgraph_store",
        index: Sequence[str] | None = None,
        ttl_config: TTLConfig | None = None,
        min_relevance: float | None = None,
    ) -> None:
        if not table.startswith("shared_") or not table.replace("_", "").isalnum():
            raise ValidationError(f"table must be a shared_<name> table of letters, digits and _, got {table!r}")
        self.ttl_config = _check_ttl_config(ttl_config)
        self.min_relevance = check_min_relevance(min_relevance)
        self._sweeper: tuple[threading.Thread, threading.Event] | None = None
        self._engine = engine
        self._tenant = tenant
        self._cap = cap
        self._table = table
        self._index = None if index is None else list(index)
        self._scope: MemoryScope = engine.get_shared_scope(tenant)
        self._agents: dict[str, Agent] = {}
        self._scope.execute(
            # `seq` keeps insertion order in plain SQL (no rowid), so the table reads the same on any backend.
            # DOUBLE PRECISION, not REAL: PostgreSQL's REAL is 4 bytes, which rounds epoch seconds
            # to about two minutes (SQLite reads it as its 8-byte REAL).
            f"CREATE TABLE IF NOT EXISTS {table} (ns TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, "
            "memory_id TEXT, created_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL, "
            "seq INTEGER NOT NULL, ttl DOUBLE PRECISION, expires_at DOUBLE PRECISION, PRIMARY KEY (ns, key))"
        )
        have = set(self._scope.columns(table))
        for column in ("ttl", "expires_at"):  # a table made before TTLs
            if column not in have:
                self._scope.execute(f"ALTER TABLE {table} ADD COLUMN {column} DOUBLE PRECISION")
        self._scope.execute(f"CREATE INDEX IF NOT EXISTS {table}_expiry ON {table} (expires_at)")

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
        for op in ops:
            if isinstance(op, PutOp) and op.ttl is not None:
                _check_ttl(op.ttl)
        # One instant for the whole batch: what has expired by it is deleted first, so no expired
        # item takes a place in a search's top-k, and every read below also asks for live rows
        # (an item expiring while the batch runs, or one another process has not swept yet).
        now = self._engine.clock()
        self._sweep(now)
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(tuple(op.namespace), op.key, now, refresh=op.refresh_ttl))
            elif isinstance(op, PutOp):
                self._put(op, now)
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append(self._search(op, now))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list(op, now))
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

    def _row(self, ns: tuple[str, ...], key: str, live_at: float | None = None) -> Sequence[Any] | None:
        """The item's row (None: no such item, or, given `live_at`, none alive then)."""
        sql = f"SELECT ns, key, value, memory_id, created_at, updated_at FROM {self._table} WHERE ns = ? AND key = ?"  # noqa: S608 - a checked table name
        params: tuple[Any, ...] = (_ns_text(ns), key)
        if live_at is not None:
            sql, params = sql + f" AND {_LIVE}", (*params, live_at)
        rows = self._scope.query(sql, params)
        return rows[0] if rows else None

    def _get(self, ns: tuple[str, ...], key: str, now: float, *, refresh: bool = False) -> Item | None:
        row = self._row(ns, key, now)
        if row is None:
            return None
        if refresh:
            self._refresh([row], now)
        return self._item(row)

    def _refresh(self, rows: Sequence[Sequence[Any]], now: float) -> None:
        """Start the TTL of `rows` again from `now` (those that have one)."""
        for ns, key, *_ in rows:
            self._scope.execute(
                f"UPDATE {self._table} SET expires_at = ? + ttl * 60 WHERE ns = ? AND key = ? AND ttl IS NOT NULL",  # noqa: S608 - a checked table name
                (now, ns, key),
            )

    # -- TTL ----------------------------------------------------------------------------------

    def sweep_ttl(self) -> int:
        """Delete every expired item now, forgetting its memory as a delete does; how many."""
        return self._sweep(self._engine.clock())

    def _sweep(self, now: float) -> int:
        expired = self._scope.query(
            f"SELECT ns, key, memory_id FROM {self._table} WHERE expires_at <= ?",  # noqa: S608 - a checked table name
            (now,),
        )
        for ns, key, mid in expired:
            self._forget(self.agent(tuple(json.loads(ns))), mid)
            self._scope.execute(
                f"DELETE FROM {self._table} WHERE ns = ? AND key = ? AND expires_at <= ?",  # noqa: S608 - a checked table name
                (ns, key, now),
            )
        return len(expired)

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> threading.Thread:
        """Sweep every `sweep_interval_minutes` (default: the TTL config's) in a daemon thread,
        until `stop_ttl_sweeper`; the thread already running if there is one."""
        minutes = sweep_interval_minutes or (self.ttl_config or {}).get("sweep_interval_minutes")
        if not minutes or minutes <= 0:
            raise ValidationError("give sweep_interval_minutes > 0 (or set it in ttl_config)")
        if self._sweeper is not None and self._sweeper[0].is_alive():
            return self._sweeper[0]
        stop = threading.Event()

        def run() -> None:
            while not stop.wait(minutes * 60):
                self.sweep_ttl()

        thread = threading.Thread(target=run, name="engramdb-langgraph-ttl", daemon=True)
        self._sweeper = (thread, stop)
        thread.start()
        return thread

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper thread; whether it has ended (True when none was running)."""
        if self._sweeper is None:
            return True
        thread, stop = self._sweeper
        stop.set()
        thread.join(timeout)
        if not thread.is_alive():
            self._sweeper = None
        return not thread.is_alive()

    def _put(self, op: PutOp, now: float) -> None:
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
        ttl = op.ttl
        expires = None if ttl is None else now + ttl * 60
        self._scope.execute(
            f"INSERT INTO {self._table} (ns, key, value, memory_id, created_at, updated_at, seq, ttl, expires_at) "  # noqa: S608 - a checked table name
            f"VALUES (?, ?, ?, ?, ?, ?, (SELECT coalesce(max(seq), 0) + 1 FROM {self._table}), ?, ?) "
            "ON CONFLICT (ns, key) DO UPDATE SET value = excluded.value, memory_id = excluded.memory_id, "
            "updated_at = excluded.updated_at, ttl = excluded.ttl, expires_at = excluded.expires_at",
            (_ns_text(ns), key, encoded, mid, now, now, ttl, expires),
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

    def _rows(self, prefix: tuple[str, ...], now: float) -> list[tuple[Any, ...]]:
        """Every item under `prefix` alive at `now`, in LangGraph's order: namespaces by first
        insertion, then keys."""
        t = self._table
        select = f"SELECT ns, key, value, memory_id, created_at, updated_at FROM {t} t WHERE {_LIVE}"  # noqa: S608 - a checked table name
        order = f" ORDER BY (SELECT min(seq) FROM {t} u WHERE u.ns = t.ns), seq"  # noqa: S608 - a checked table name
        if not prefix:
            return self._scope.query(select + order, (now,))
        exact = _ns_text(prefix)
        under = exact[:-1] + ","  # '["a","b"' + ',' : JSON escaping keeps labels from faking it
        where = " AND (ns = ? OR substr(ns, 1, ?) = ?)"
        return self._scope.query(select + where + order, (now, exact, len(under), under))

    def _search(self, op: SearchOp, now: float) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        rows = [r for r in self._rows(prefix, now) if not op.filter or self._passes(r, op.filter)]
        page: list[tuple[Sequence[Any], float | None]]
        if not op.query:
            page = [(r, None) for r in rows[op.offset : op.offset + op.limit]]
        else:
            page = self._ranked(op.query, rows)[op.offset : op.offset + op.limit]
        if op.refresh_ttl:
            self._refresh([r for r, _ in page], now)
        return [self._item(r, score, search=True) for r, score in page]  # type: ignore[misc]

    def _ranked(self, query: str, rows: Sequence[Sequence[Any]]) -> list[tuple[Sequence[Any], float | None]]:
        """`rows` for `query`: those its recalls find, by relevance (ties in `rows`' order), then
        the rest (unindexed, or found by no recall) unscored, in `rows`' order."""
        by_mid = {r[3]: i for i, r in enumerate(rows) if r[3]}
        scored: dict[int, float] = {}
        for ns in dict.fromkeys(r[0] for r in rows if r[3]):
            # Every candidate of the namespace's recall (at most `ScoringConfig.candidates` per
            # channel, however large k is), not its top-k: the recall ranks by activation, this
            # store by relevance, and rows a filter drops must not take places either.
            for h in self.agent(tuple(json.loads(ns))).search(query, k=MAX_CANDIDATES):
                i = by_mid.get(h.memory.id)
                if i is not None:
                    # relevance is absolute (0-1, comparable across namespaces and backends); six
                    # places, so float noise in the last bits cannot reorder equal relevances
                    scored[i] = round(h.relevance, 6)
        order = sorted(scored, key=lambda i: (-scored[i], i))
        if self.min_relevance is not None:  # only what is relevant enough, nothing unscored
            return [(rows[i], scored[i]) for i in order if scored[i] >= self.min_relevance]
        ranked: list[tuple[Sequence[Any], float | None]] = [(rows[i], scored[i]) for i in order]
        return ranked + [(r, None) for i, r in enumerate(rows) if i not in scored]

    @staticmethod
    def _passes(row: Sequence[Any], filt: Mapping[str, Any]) -> bool:
        value = json.loads(row[2])
        return all(_matches(value.get(k), v) for k, v in filt.items())

    def _list(self, op: ListNamespacesOp, now: float) -> list[tuple[str, ...]]:
        live = self._scope.query(f"SELECT DISTINCT ns FROM {self._table} WHERE {_LIVE}", (now,))  # noqa: S608 - a checked table name
        found = [tuple(json.loads(ns)) for (ns,) in live]
        if op.match_conditions:
            found = [ns for ns in found if all(_condition(c, ns) for c in op.match_conditions)]
        listed = sorted({ns[: op.max_depth] for ns in found}) if op.max_depth is not None else sorted(found)
        return listed[op.offset : op.offset + op.limit]


def _check_ttl(ttl: object) -> float:
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0 or ttl == float("inf"):
        raise ValidationError(f"ttl must be a number of minutes > 0 (or None: no expiry), got {ttl!r}")
    return float(ttl)


def _check_ttl_config(config: object) -> TTLConfig | None:
    if config is None:
        return None
    if not isinstance(config, Mapping):
        raise ValidationError(f"ttl_config must be a TTLConfig dict, got {type(config).__name__}")
    known = {"default_ttl", "refresh_on_read", "sweep_interval_minutes", "omit_expired"}
    if unknown := sorted(set(config) - known):
        raise ValidationError(f"unknown ttl_config key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    for key in ("default_ttl", "sweep_interval_minutes"):
        if config.get(key) is not None:
            _check_ttl(config[key])
    if config.get("omit_expired") is False:
        raise ValidationError("omit_expired=False is not offered: an expired item is never returned by this store")
    return TTLConfig(**config)  # type: ignore[typeddict-item]


__all__ = ["MAX_CANDIDATES", "EngramStore", "namespace_agent"]
