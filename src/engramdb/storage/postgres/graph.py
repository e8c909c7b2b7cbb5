"""`Edges` on PostgreSQL: ``engram.engram_edges``, joined with ``engram.engram_memories`` for visibility.

An edge's far end is joined on (tenant, key), so an edge naming another tenant's memory (written
behind the API's back) reaches nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from engramdb.memories.model import Edge, EdgeType, Visibility
from engramdb.storage.postgres.connection import KEYS, PgStore, execute_rows
from engramdb.storage.postgres.visibility import predicate

E = "engram.engram_edges"
M = "engram.engram_memories"
# Start from the given nodes' edges, then look each far end up by its key (the visibility predicate
# inside that lookup): the CTE and OFFSET 0 keep the planner from walking every visible memory
# first, as it did before statistics existed (far slower per call, already at 2k memories).
_FROM_EDGES = (
    "WITH x AS MATERIALIZED ({edges}) SELECT {cols} FROM x CROSS JOIN LATERAL "  # noqa: S608 - engine table names and predicates, values bound
    "(SELECT m.id, m.content FROM " + M + " m WHERE m.tenant = %(v_tenant)s AND m.n = x.far AND {pred} OFFSET 0) o"
)
#: the edges of the given keys either way, as (near, far, …)
_NEAR = (
    "SELECT e.src AS near, e.dst AS far{cols} FROM " + E + " e WHERE e.tenant = %(v_tenant)s{where} "  # noqa: S608 - engine table names and predicates, values bound
    "AND e.src = ANY(%({keys})s) UNION ALL SELECT e.dst, e.src{cols} FROM " + E + " e "
    "WHERE e.tenant = %(v_tenant)s{where} AND e.dst = ANY(%({keys})s)"
)
_TENANT_OF = f"(SELECT t.tenant FROM {M} t WHERE t.n = %(key)s)"  # noqa: S608 - engine table names and predicates, values bound


class PgEdges:
    """`engramdb.storage.ports.Edges` over ``engram.engram_edges``."""

    def __init__(self, store: PgStore) -> None:
        self._store = store

    def _fetch(self, tenant: str, query: str, params: Any) -> list[tuple[Any, ...]]:
        def go(db: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            return list(db.execute(query, params).fetchall())

        return self._store.run(tenant, go)

    def put(
        self, tenant: str, edges: Sequence[tuple[int, int, str, float]], *, now: float, by: str, replace: bool
    ) -> int:
        if not edges:
            return 0
        conflict = (
            "DO UPDATE SET weight = excluded.weight, created_at = excluded.created_at, created_by = excluded.created_by"
            if replace
            else "DO NOTHING"
        )
        query = (
            f"INSERT INTO {E} (tenant, src, dst, type, weight, created_at, created_by) "  # noqa: S608 - engine table names and predicates, values bound
            f"VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (tenant, src, dst, type) {conflict}"
        )
        rows = [(tenant, s, d, t, w, now, by) for s, d, t, w in edges]

        def go(db: psycopg.Connection[Any]) -> int:
            written = 0
            with db.cursor() as cur:
                # One statement per edge: executemany's rowcount is the sum, so DO NOTHING is counted right.
                written = execute_rows(cur, query, rows)
            return written

        return self._store.run(tenant, go)

    def delete_touching(self, key: int) -> None:
        self._fetch(
            KEYS,
            f"DELETE FROM {E} WHERE tenant = {_TENANT_OF} AND (src = %(key)s OR dst = %(key)s) RETURNING 1",  # noqa: S608 - engine table names and predicates, values bound
            {"key": key},
        )

    def move(self, dup: int, keep: int) -> None:
        # The duplicate's edges move over (they stay on the archived record too, for provenance);
        # an edge the survivor already has keeps the higher weight.
        self._fetch(
            KEYS,
            f"INSERT INTO {E} (tenant, src, dst, type, weight, created_at, created_by) "  # noqa: S608 - engine table names and predicates, values bound
            "SELECT tenant, CASE WHEN src = %(dup)s THEN %(keep)s ELSE src END, "
            "CASE WHEN dst = %(dup)s THEN %(keep)s ELSE dst END, type, weight, created_at, created_by "
            f"FROM {E} WHERE tenant = (SELECT t.tenant FROM {M} t WHERE t.n = %(dup)s) "
            "AND (src = %(dup)s OR dst = %(dup)s) AND src <> %(keep)s AND dst <> %(keep)s "
            f"ON CONFLICT (tenant, src, dst, type) DO UPDATE SET weight = GREATEST({E}.weight, excluded.weight) "
            "RETURNING 1",
            {"dup": dup, "keep": keep},
        )

    def neighbours(self, vis: Visibility, nodes: Sequence[int]) -> dict[int, list[tuple[int, str, float]]]:
        adjacency: dict[int, list[tuple[int, str, float]]] = {}
        if not nodes:
            return adjacency
        pred, params = predicate(vis)
        # Edges spread both ways; the far end must be visible to be reached at all.
        query = _FROM_EDGES.format(
            edges=_NEAR.format(cols=", e.type, e.weight", where="", keys="nodes"),
            cols="x.near, x.far, x.type, x.weight",
            pred=pred,
        )
        for a, b, etype, weight in self._fetch(vis.tenant, query, dict(params, nodes=list(nodes))):
            adjacency.setdefault(int(a), []).append((int(b), str(etype), float(weight)))
        return adjacency

    def contradictions(self, vis: Visibility, keys: Sequence[int]) -> dict[int, list[tuple[str, str]]]:
        notes: dict[int, list[tuple[str, str]]] = {}
        if not keys:
            return notes
        pred, params = predicate(vis)
        query = _FROM_EDGES.format(
            edges=_NEAR.format(cols="", where=" AND e.type = 'contradicts'", keys="keys"),
            cols="x.near, o.id, substr(o.content, 1, 120)",
            pred=pred,
        )
        for n, other, preview in self._fetch(vis.tenant, query, dict(params, keys=list(keys))):
            notes.setdefault(int(n), []).append((str(other), str(preview)))
        return notes

    def touching(self, vis: Visibility, key: int) -> list[Edge]:
        pred, params = predicate(vis, "o")
        rows = self._fetch(
            vis.tenant,
            f"SELECT s.id, d.id, e.type, e.weight, e.created_at FROM {E} e "  # noqa: S608 - engine table names and predicates, values bound
            f"JOIN {M} s ON s.tenant = e.tenant AND s.n = e.src JOIN {M} d ON d.tenant = e.tenant AND d.n = e.dst "
            f"JOIN {M} o ON o.tenant = e.tenant AND o.n = CASE WHEN e.src = %(n)s THEN e.dst ELSE e.src END "
            f"WHERE e.tenant = %(v_tenant)s AND (e.src = %(n)s OR e.dst = %(n)s) AND {pred} "
            "ORDER BY e.created_at, e.src, e.dst, e.type",
            dict(params, n=key),
        )
        return [Edge(s, d, EdgeType(t), w, c) for s, d, t, w, c in rows]

    def pairs(self, tenant: str) -> set[tuple[int, int]]:
        rows = self._fetch(tenant, f"SELECT src, dst FROM {E} WHERE tenant = %(t)s", {"t": tenant})  # noqa: S608 - engine table names and predicates, values bound
        return {(min(s, d), max(s, d)) for s, d in rows}

    def contradicting(self, vis: Visibility) -> list[tuple[int, int]]:
        pred_s, params = predicate(vis, "s")
        pred_d, _ = predicate(vis, "d")
        rows = self._fetch(
            vis.tenant,
            f"SELECT e.src, e.dst FROM {E} e JOIN {M} s ON s.tenant = e.tenant AND s.n = e.src "  # noqa: S608 - engine table names and predicates, values bound
            f"JOIN {M} d ON d.tenant = e.tenant AND d.n = e.dst WHERE e.tenant = %(v_tenant)s "
            f"AND e.type = 'contradicts' AND s.owner = d.owner AND {pred_s} AND {pred_d} ORDER BY e.src, e.dst",
            params,
        )
        return [(int(s), int(d)) for s, d in rows]
