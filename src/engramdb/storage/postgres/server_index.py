"""`engramdb.storage.ports.ServerIndex` on PostgreSQL: recall's candidate reads for a tenant this
process does not cache, answered by exact scans of that tenant's rows.

Every statement runs as the engine role with the tenant set (`PgStore.run`), so row-level
security applies as to any other engine statement, and names the tenant in its WHERE (the
visibility predicate begins with it), so the planner reads the tenant's rows through the
``(tenant, …)`` indexes and Citus routes it to the one shard holding them. Nothing here uses an
approximate index: the vector ordering is an expression no operator class can serve (``+ 0``), so
an HNSW or IVFFlat index a DBA adds to ``engram_vectors`` is never taken, and an ANN index's
filtered answer (recall 0.15 for a tenant's share of a shared HNSW graph, measured in issue 30)
can never stand in for the exact one.

Lexical reads return the raw material of BM25, not scores: the shown count, their total length,
and each matching memory's length and the query stems it holds. The caller scores them with the
arithmetic the in-process cache uses (`engramdb.retrieval.server_channels`), so a tenant's ranking
is the same whichever way it is answered.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from engramdb.memories.model import Visibility
from engramdb.storage.ports import IndexRow, LexicalMatch
from engramdb.storage.postgres.connection import PgStore
from engramdb.storage.postgres.vectors import _raw, _vec
from engramdb.storage.postgres.visibility import predicate

M = "engram.engram_memories"
V = "engram.engram_vectors"

#: the lexical cache's columns of a memory (`engramdb.storage.ports.IndexRow`)
_INDEX_COLUMNS = (
    "m.n, m.tenant, m.owner, m.confidentiality, m.archived, m.valid_from, m.valid_to, m.type, m.terms, "
    "m.n_tokens, m.importance, m.ring, m.old_count, m.old_newest, m.old_oldest, m.created_at, m.entities"
)


def _shown(vis: Visibility, types: frozenset[str] | None, alias: str = "m") -> tuple[str, dict[str, Any]]:
    """The visibility predicate over `alias`, with the type filter when `types` is given."""
    pred, params = predicate(vis, alias)
    if types is not None:
        pred += f" AND {alias}.type = ANY(%(v_types)s)"
        params["v_types"] = sorted(types)
    return pred, params


class PgServerIndex:
    """`engramdb.storage.ports.ServerIndex` over the engine's tables (see the module docstring)."""

    def __init__(self, store: PgStore) -> None:
        self._store = store

    def _fetch(self, tenant: str, query: str, params: Any, *, binary: bool = False) -> list[tuple[Any, ...]]:
        def go(db: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            return list(db.execute(query, params, binary=binary).fetchall())

        return self._store.run(tenant, go)

    def size(self, tenant: str) -> int:
        rows = self._fetch(tenant, f"SELECT count(*) FROM {M} WHERE tenant = %s", (tenant,))  # noqa: S608 - engine table name, values bound
        return int(rows[0][0])

    def lexical(
        self, vis: Visibility, types: frozenset[str] | None, stems: Sequence[str], *, successors: bool
    ) -> tuple[int, int, list[LexicalMatch]]:
        pred, params = _shown(vis, types)
        params["q_stems"] = list(stems)
        if successors:
            # The tenant's next memory by key, whatever its visibility (the cache's next slot), and
            # whether this reader sees it: the same predicate over that row.
            nxt_pred, _ = _shown(vis, types, "x")
            nxt = (
                f"LEFT JOIN LATERAL (SELECT x.n, x.created_at, ({nxt_pred}) AS shown FROM {M} x "  # noqa: S608 - engine table names and predicates, values bound
                "WHERE x.tenant = %(v_tenant)s AND x.n > h.n ORDER BY x.n LIMIT 1) nx ON true"
            )
            nxt_cols = "nx.n, nx.created_at, nx.shown"
        else:
            nxt, nxt_cols = "", "NULL::bigint, NULL::double precision, false"
        query = (
            f"WITH v AS MATERIALIZED (SELECT m.n, m.n_tokens, m.created_at, string_to_array(m.terms, ' ') AS t "  # noqa: S608 - engine table names and predicates, values bound
            f"FROM {M} m WHERE {pred}), "
            "s AS (SELECT count(*) AS c, coalesce(sum(GREATEST(n_tokens, 1)), 0) AS l FROM v), "
            "h AS (SELECT v.n, v.n_tokens, v.created_at, "
            "ARRAY(SELECT DISTINCT u FROM unnest(v.t) u WHERE u = ANY(%(q_stems)s)) AS held "
            "FROM v WHERE v.t && %(q_stems)s::text[]) "
            f"SELECT s.c, s.l, h.n, h.n_tokens, h.created_at, h.held, {nxt_cols} "
            f"FROM s LEFT JOIN h ON true {nxt}"
        )
        rows = self._fetch(vis.tenant, query, params)
        if not rows:
            return 0, 0, []
        visible, total = int(rows[0][0]), int(rows[0][1])
        matches: list[LexicalMatch] = [
            (
                int(n), int(length or 0), float(created), tuple(held),
                None if nx is None else int(nx), None if nx_created is None else float(nx_created), bool(shown),
            )
            for _c, _l, n, length, created, held, nx, nx_created, shown in rows
            if n is not None
        ]  # fmt: skip
        return visible, total, matches

    def term_counts(
        self, vis: Visibility, types: frozenset[str] | None, stems: Sequence[str]
    ) -> tuple[int, dict[str, int]]:
        pred, params = _shown(vis, types)
        params["q_stems"] = list(stems)
        rows = self._fetch(
            vis.tenant,
            f"WITH v AS MATERIALIZED (SELECT string_to_array(m.terms, ' ') AS t FROM {M} m WHERE {pred}) "  # noqa: S608 - engine table names and predicates, values bound
            "SELECT NULL::text, count(*) FROM v UNION ALL "
            "SELECT s, (SELECT count(*) FROM v WHERE s = ANY(v.t)) FROM unnest(%(q_stems)s::text[]) s",
            params,
        )
        visible = next(int(c) for s, c in rows if s is None)
        return visible, {str(s): int(c) for s, c in rows if s is not None}

    def fields(self, vis: Visibility, types: frozenset[str] | None, keys: Sequence[int]) -> list[IndexRow]:
        if not keys:
            return []
        pred, params = _shown(vis, types)
        params["q_keys"] = list(keys)
        rows = self._fetch(
            vis.tenant,
            f"SELECT {_INDEX_COLUMNS} FROM {M} m WHERE {pred} AND m.n = ANY(%(q_keys)s)",  # noqa: S608 - engine table names and predicates, values bound
            params,
        )
        return [(*r[:11], None if r[11] is None else bytes(r[11]), *r[12:]) for r in rows]

    def created(self, vis: Visibility, types: frozenset[str] | None, keys: Sequence[int]) -> dict[int, float]:
        if not keys:
            return {}
        pred, params = _shown(vis, types)
        params["q_keys"] = list(keys)
        rows = self._fetch(
            vis.tenant,
            f"SELECT m.n, m.created_at FROM {M} m WHERE {pred} AND m.n = ANY(%(q_keys)s)",  # noqa: S608 - engine table names and predicates, values bound
            params,
        )
        return {int(n): float(c) for n, c in rows}

    def beside(self, tenant: str, keys: Sequence[int]) -> dict[int, tuple[int | None, int | None]]:
        if not keys:
            return {}
        rows = self._fetch(
            tenant,
            # (the tenant a constant in each subquery, not `k.tenant`: Citus then sees one shard)
            f"SELECT k.n, (SELECT max(p.n) FROM {M} p WHERE p.tenant = %(t)s AND p.n < k.n), "  # noqa: S608 - engine table names, values bound
            f"(SELECT min(x.n) FROM {M} x WHERE x.tenant = %(t)s AND x.n > k.n) "
            f"FROM {M} k WHERE k.tenant = %(t)s AND k.n = ANY(%(keys)s)",
            {"t": tenant, "keys": list(keys)},
        )
        return {int(n): (None if p is None else int(p), None if x is None else int(x)) for n, p, x in rows}

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
        if k <= 0:
            return []
        pred, params = _shown(vis, types)
        if owner is not None:
            pred += " AND m.owner = %(q_owner)s"
            params["q_owner"] = owner
        if min_level is not None:
            pred += " AND m.confidentiality >= %(q_min_level)s"
            params["q_min_level"] = int(min_level)
        params.update(q=_vec(query), q_model=model, q_k=k)
        rows = self._fetch(
            vis.tenant,
            f"SELECT m.n, v.vec FROM {M} m JOIN {V} v ON v.tenant = m.tenant AND v.n = m.n AND v.model = %(q_model)s "  # noqa: S608 - engine table names and predicates, values bound
            f"WHERE {pred} ORDER BY (v.vec <#> %(q)s) + 0, m.n LIMIT %(q_k)s",
            params,
            binary=True,
        )
        return [(int(n), _raw(vec) or b"") for n, vec in rows]

    def vectors(self, tenant: str, model: str, keys: Sequence[int]) -> dict[int, bytes]:
        if not keys:
            return {}
        rows = self._fetch(
            tenant,
            f"SELECT n, vec FROM {V} WHERE tenant = %s AND model = %s AND n = ANY(%s)",  # noqa: S608 - engine table name, values bound
            (tenant, model, list(keys)),
            binary=True,
        )
        return {int(n): _raw(vec) or b"" for n, vec in rows}


__all__ = ["PgServerIndex"]
