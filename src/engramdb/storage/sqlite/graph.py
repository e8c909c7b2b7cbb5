"""`Edges` on SQLite: the ``engram_edges`` table, joined with ``engram_memories`` for visibility."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from engramdb.memories.model import Edge, EdgeType, Visibility
from engramdb.storage.sqlite.connection import SqliteStore, translated
from engramdb.storage.sqlite.visibility import predicate


class SqliteEdges:
    """`engramdb.storage.ports.Edges` over ``engram_edges``."""

    def __init__(self, store: SqliteStore) -> None:
        self._store = store

    def _db(self) -> sqlite3.Connection:
        return self._store.connection("engine").raw

    @staticmethod
    def _empty(db: sqlite3.Connection) -> bool:
        # A store in which nothing was ever linked (no `link`, no reflection yet) answers a recall's
        # edge questions from one probe of the table, far cheaper than each pair of joins.
        return db.execute("SELECT 1 FROM engram_edges LIMIT 1").fetchone() is None

    @translated
    def put(
        self, tenant: str, edges: Sequence[tuple[int, int, str, float]], *, now: float, by: str, replace: bool
    ) -> int:
        db = self._db()
        before = db.total_changes
        sql = (
            "INSERT OR REPLACE INTO engram_edges (src, dst, type, weight, tenant, created_at, created_by) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)"
            if replace
            else "INSERT INTO engram_edges (src, dst, type, weight, tenant, created_at, created_by) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (src, dst, type) DO NOTHING"
        )
        db.executemany(sql, [(s, d, t, w, tenant, now, by) for s, d, t, w in edges])
        return db.total_changes - before

    @translated
    def delete_touching(self, key: int) -> None:
        self._db().execute("DELETE FROM engram_edges WHERE src = ? OR dst = ?", (key, key))

    @translated
    def move(self, dup: int, keep: int) -> None:
        # The duplicate's edges move over (they stay on the archived record too, for provenance);
        # an edge the survivor already has keeps the higher weight.
        self._db().execute(
            "INSERT INTO engram_edges (src, dst, type, weight, tenant, created_at, created_by) "
            "SELECT CASE WHEN src = :dup THEN :keep ELSE src END, CASE WHEN dst = :dup THEN :keep ELSE dst END, "
            "type, weight, tenant, created_at, created_by FROM engram_edges "
            "WHERE (src = :dup OR dst = :dup) AND src <> :keep AND dst <> :keep "
            "ON CONFLICT (src, dst, type) DO UPDATE SET weight = max(weight, excluded.weight)",
            {"dup": dup, "keep": keep},
        )

    @translated
    def neighbours(self, vis: Visibility, nodes: Sequence[int]) -> dict[int, list[tuple[int, str, float]]]:
        db = self._db()
        if not nodes or self._empty(db):
            return {}
        pred, params = predicate(vis)
        marks = ",".join(f":s{i}" for i in range(len(nodes)))
        named = dict(params, **{f"s{i}": n for i, n in enumerate(nodes)})
        adjacency: dict[int, list[tuple[int, str, float]]] = {}
        # Edges spread both ways; the far end must be visible to be reached at all.
        for near, far in (("src", "dst"), ("dst", "src")):
            sql = (
                f"SELECT e.{near}, e.{far}, e.type, e.weight FROM engram_edges e "  # noqa: S608
                f"CROSS JOIN engram_memories m INDEXED BY engram_memories_cover ON m.n = e.{far} "
                f"WHERE e.{near} IN ({marks}) AND {pred}"
            )
            for a, b, etype, weight in db.execute(sql, named):
                adjacency.setdefault(int(a), []).append((int(b), str(etype), float(weight)))
        return adjacency

    @translated
    def contradictions(self, vis: Visibility, keys: Sequence[int]) -> dict[int, list[tuple[str, str]]]:
        if not keys:
            return {}
        db = self._db()
        if self._empty(db):
            return {}
        pred, params = predicate(vis)
        marks = ",".join(f":h{i}" for i in range(len(keys)))
        named = dict(params, **{f"h{i}": n for i, n in enumerate(keys)})
        notes: dict[int, list[tuple[str, str]]] = {}
        for near, far in (("src", "dst"), ("dst", "src")):
            sql = (
                f"SELECT e.{near}, m.id, substr(m.content, 1, 120) FROM engram_edges e "  # noqa: S608 - engine-built fragments, values bound
                # CROSS JOIN: start from the hits' edges; the planner otherwise walked every visible
                # memory first (measured at 10k memories: a large part of each recall, now negligible).
                f"CROSS JOIN engram_memories m ON m.n = e.{far} WHERE e.type = 'contradicts' AND e.{near} IN ({marks}) AND {pred}"
            )
            for n, other, preview in db.execute(sql, named):
                notes.setdefault(int(n), []).append((str(other), str(preview)))
        return notes

    @translated
    def touching(self, vis: Visibility, key: int) -> list[Edge]:
        pred, params = predicate(vis, "o")
        rows = self._db().execute(
            "SELECT s.id, d.id, e.type, e.weight, e.created_at FROM engram_edges e "  # noqa: S608
            "JOIN engram_memories s ON s.n = e.src JOIN engram_memories d ON d.n = e.dst "
            "JOIN engram_memories o ON o.n = CASE WHEN e.src = :n THEN e.dst ELSE e.src END "
            f"WHERE (e.src = :n OR e.dst = :n) AND {pred} ORDER BY e.created_at",
            dict(params, n=key),
        )
        return [Edge(s, d, EdgeType(t), w, c) for s, d, t, w, c in rows]

    @translated
    def pairs(self, tenant: str) -> set[tuple[int, int]]:
        rows = self._db().execute("SELECT src, dst FROM engram_edges WHERE tenant = ?", (tenant,))
        return {(min(s, d), max(s, d)) for s, d in rows}

    @translated
    def contradicting(self, vis: Visibility) -> list[tuple[int, int]]:
        pred_s, params = predicate(vis, "s")
        pred_d, _ = predicate(vis, "d")
        rows = self._db().execute(
            "SELECT e.src, e.dst FROM engram_edges e JOIN engram_memories s ON s.n = e.src "  # noqa: S608 - engine-built fragments, values bound
            f"JOIN engram_memories d ON d.n = e.dst WHERE e.type = 'contradicts' AND s.owner = d.owner AND {pred_s} AND {pred_d}",
            params,
        )
        return [(int(s), int(d)) for s, d in rows]
