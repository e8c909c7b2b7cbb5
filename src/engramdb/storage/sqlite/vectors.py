"""Stored vectors on SQLite: memory embeddings (``engram_vectors``) and the retriever's row
embeddings (``engram_row_vectors``), both as float32 BLOBs (the truth; search indexes are caches)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence

from engramdb.memories.model import Visibility
from engramdb.storage.ports import ScopeVector, VectorRow
from engramdb.storage.sqlite.connection import SqliteStore, translate, translated
from engramdb.storage.sqlite.visibility import predicate

# Every memory row as the vector cache needs it: the visibility attributes in
# `VisibilityColumns.set_many` order at [2:9], the vector (or None) last.
_CACHE_ROWS = (
    "SELECT m.n, m.changed, m.tenant, m.owner, m.confidentiality, m.archived, m.valid_from, m.valid_to, m.type, "
    "v.vec FROM engram_memories m LEFT JOIN engram_vectors v ON v.n = m.n AND v.model = ? "
)
_CHUNK = 500


class SqliteMemoryVectors:
    """`engramdb.storage.ports.MemoryVectors` over ``engram_vectors``."""

    def __init__(self, store: SqliteStore) -> None:
        self._store = store

    def _db(self) -> sqlite3.Connection:
        return self._store.connection("engine").raw

    @translated
    def put(self, rows: Sequence[tuple[int, str, bytes]], *, replace: bool = False) -> None:
        verb = "INSERT OR REPLACE" if replace else "INSERT"
        self._db().executemany(f"{verb} INTO engram_vectors VALUES (?, ?, ?)", rows)

    @translated
    def delete(self, key: int) -> None:
        self._db().execute("DELETE FROM engram_vectors WHERE n = ?", (key,))

    def in_scope(self, vis: Visibility, model: str) -> Iterator[list[ScopeVector]]:
        pred, params = predicate(vis)
        conn = self._store.connection("engine")
        with translate(conn):
            cur = conn.raw.execute(
                "SELECT m.n, m.owner, m.type, m.confidentiality, v.vec FROM engram_memories m JOIN engram_vectors v ON v.n = m.n "  # noqa: S608
                f"WHERE {pred} AND v.model = :r_model ORDER BY m.owner, m.created_at, m.n",
                dict(params, r_model=model),
            )
        while True:
            with translate(conn):
                rows = cur.fetchmany(4096)
            if not rows:
                return
            yield rows

    @translated
    def cache_rows(self, model: str, since: int, tenant: str | None = None) -> list[VectorRow]:
        if tenant is None:
            return self._db().execute(_CACHE_ROWS + "WHERE m.changed > ?", (model, since)).fetchall()
        return (
            self._db().execute(_CACHE_ROWS + "WHERE m.changed > ? AND m.tenant = ?", (model, since, tenant)).fetchall()
        )

    def cache_row_batches(
        self, model: str, since: int, size: int, tenant: str | None = None
    ) -> Iterator[list[VectorRow]]:
        # One statement read in pieces: SQLite keeps its snapshot until the cursor is exhausted.
        conn = self._store.connection("engine")
        with translate(conn):
            cur = (
                conn.raw.execute(_CACHE_ROWS + "WHERE m.changed > ?", (model, since))
                if tenant is None
                else conn.raw.execute(_CACHE_ROWS + "WHERE m.changed > ? AND m.tenant = ?", (model, since, tenant))
            )
        while True:
            with translate(conn):
                rows = cur.fetchmany(size)
            if not rows:
                return
            yield rows

    @translated
    def cache_rows_for(self, model: str, keys: Sequence[int]) -> list[VectorRow]:
        out: list[VectorRow] = []
        db = self._db()
        for i in range(0, len(keys), _CHUNK):
            chunk = list(keys[i : i + _CHUNK])
            marks = ", ".join("?" * len(chunk))
            out += db.execute(_CACHE_ROWS + f"WHERE m.n IN ({marks})", (model, *chunk)).fetchall()
        return out

    @translated
    def tip(self, model: str, upto: int, limit: int) -> list[tuple[int, int, bytes]]:
        return (
            self._db()
            .execute(
                "SELECT m.n, m.changed, v.vec FROM engram_memories m JOIN engram_vectors v ON v.n = m.n AND v.model = ? "
                "WHERE m.changed <= ? ORDER BY m.changed DESC, m.n DESC LIMIT ?",
                (model, upto, limit),
            )
            .fetchall()
        )


class SqliteRowVectors:
    """`engramdb.storage.ports.RowVectorStore` over ``engram_row_vectors``."""

    def __init__(self, store: SqliteStore) -> None:
        self._store = store

    def _db(self) -> sqlite3.Connection:
        return self._store.connection("engine").raw

    @translated
    def digests(self, table: str, column: str, model: str) -> dict[int, bytes]:
        rows = self._db().execute(
            "SELECT row_id, digest FROM engram_row_vectors WHERE tbl = ? AND col = ? AND model = ?",
            (table, column, model),
        )
        return {int(r[0]): bytes(r[1]) for r in rows}

    def apply(
        self, table: str, column: str, model: str, gone: Sequence[int], new: Sequence[tuple[int, bytes, bytes]]
    ) -> None:
        conn = self._store.connection("engine")
        with self._store.atomic(conn), translate(conn):
            conn.raw.executemany(
                "DELETE FROM engram_row_vectors WHERE tbl = ? AND col = ? AND row_id = ?",
                [(table, column, rid) for rid in gone],
            )
            conn.raw.executemany(
                "INSERT OR REPLACE INTO engram_row_vectors VALUES (?, ?, ?, ?, ?, ?)",
                [(table, column, rid, digest, model, vec) for rid, digest, vec in new],
            )

    @translated
    def load(self, table: str, column: str, model: str) -> list[tuple[int, bytes]]:
        rows = self._db().execute(
            "SELECT row_id, vec FROM engram_row_vectors WHERE tbl = ? AND col = ? AND model = ? ORDER BY row_id",
            (table, column, model),
        )
        return [(int(r[0]), bytes(r[1])) for r in rows]

    @translated
    def version(self) -> int:
        raw = self._db()
        # data_version moves when another connection commits; total_changes when this one writes.
        return int(raw.execute("PRAGMA data_version").fetchone()[0]) * 1_000_003 + raw.total_changes
