"""Stored vectors on PostgreSQL with pgvector: memory embeddings (``engram.engram_vectors``) and the
retriever's row embeddings (``engram.engram_row_vectors``, per tenant).

The ports speak float32 bytes; the columns are pgvector ``vector`` (no typmod: the dimension is the
embedder's), sent and read in binary through pgvector's psycopg adapter (numpy arrays). The stored
vectors are the truth; the in-process search matrices are caches loaded through `cache_rows`.
`knn` is the server-side candidate path (exact ``<=>`` with the visibility predicate inside).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import psycopg

from engramdb.memories.model import Visibility
from engramdb.storage.ports import ScopeVector, VectorRow
from engramdb.storage.postgres.connection import ALL_TENANTS, KEYS, PgStore, execute_rows, translated
from engramdb.storage.postgres.visibility import predicate

M = "engram.engram_memories"
V = "engram.engram_vectors"
# Every memory row as the vector cache needs it: the visibility attributes in
# `VisibilityColumns.set_many` order at [2:9], the vector (or None) last.
_CACHE_ROWS = (
    "SELECT m.n, m.changed, m.tenant, m.owner, m.confidentiality, m.archived, m.valid_from, m.valid_to, m.type, "  # noqa: S608 - engine table names and predicates, values bound
    f"v.vec FROM {M} m LEFT JOIN {V} v ON v.tenant = m.tenant AND v.n = m.n AND v.model = %s "
)


def _vec(raw: bytes) -> np.ndarray[Any, np.dtype[np.float32]]:
    return np.frombuffer(raw, dtype=np.float32)


def _raw(value: Any) -> bytes | None:
    if value is None:
        return None
    if hasattr(value, "to_numpy"):  # pgvector.Vector
        value = value.to_numpy()
    return np.asarray(value, dtype=np.float32).tobytes()


class PgMemoryVectors:
    """`engramdb.storage.ports.MemoryVectors` over ``engram.engram_vectors``."""

    def __init__(self, store: PgStore) -> None:
        self._store = store

    def _fetch(self, tenant: str, query: str, params: Any) -> list[tuple[Any, ...]]:
        def go(db: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            # Binary results: a vector arrives as float32s, not as text to parse.
            return list(db.execute(query, params, binary=True).fetchall())

        return self._store.run(tenant, go)

    def put(self, rows: Sequence[tuple[int, str, bytes]], *, replace: bool = False) -> None:
        if not rows:
            return
        # The tenant comes from the memory row: the port names memories by key alone.
        conflict = (
            " ON CONFLICT (tenant, n) DO UPDATE SET model = excluded.model, vec = excluded.vec" if replace else ""
        )
        query = (
            f"INSERT INTO {V} (tenant, n, model, vec) SELECT t.tenant, t.n, %s, %s FROM {M} t WHERE t.n = %s{conflict}"  # noqa: S608 - engine table names and predicates, values bound
        )
        params = [(model, _vec(vec), key) for key, model, vec in rows]

        def go(db: psycopg.Connection[Any]) -> None:
            with db.cursor() as cur:
                execute_rows(cur, query, params)

        self._store.run(KEYS, go)

    def delete(self, key: int) -> None:
        self._fetch(
            KEYS,
            f"DELETE FROM {V} WHERE tenant = (SELECT t.tenant FROM {M} t WHERE t.n = %(k)s) AND n = %(k)s RETURNING 1",  # noqa: S608 - engine table names and predicates, values bound
            {"k": key},
        )

    def in_scope(self, vis: Visibility, model: str) -> Iterator[list[ScopeVector]]:
        pred, params = predicate(vis)
        rows = self._fetch(
            vis.tenant,
            f"SELECT m.n, m.owner, m.type, m.confidentiality, v.vec FROM {M} m JOIN {V} v "  # noqa: S608 - engine table names and predicates, values bound
            f"ON v.tenant = m.tenant AND v.n = m.n WHERE {pred} AND v.model = %(r_model)s "
            "ORDER BY m.owner, m.created_at, m.n",
            dict(params, r_model=model),
        )
        for start in range(0, len(rows), 4096):
            yield [
                (int(n), str(owner), str(t), int(c), _raw(vec) or b"")
                for n, owner, t, c, vec in rows[start : start + 4096]
            ]

    def _cache(self, rows: list[tuple[Any, ...]]) -> list[VectorRow]:
        return [(*r[:9], _raw(r[9])) for r in rows]

    def cache_rows(self, model: str, since: int, tenant: str | None = None) -> list[VectorRow]:
        if tenant is None:
            raise ValueError("PostgreSQL keeps one change sequence per tenant: name the tenant")
        return self._cache(
            self._fetch(tenant, _CACHE_ROWS + "WHERE m.tenant = %s AND m.changed > %s", (model, tenant, since))
        )

    def cache_row_batches(
        self, model: str, since: int, size: int, tenant: str | None = None
    ) -> Iterator[list[VectorRow]]:
        # PostgreSQL keeps no side files, and its caches hold one tenant each: one batch.
        rows = self.cache_rows(model, since, tenant)
        if rows:
            yield rows

    def cache_rows_for(self, model: str, keys: Sequence[int]) -> list[VectorRow]:
        if not keys:
            return []
        return self._cache(self._fetch(ALL_TENANTS, _CACHE_ROWS + "WHERE m.n = ANY(%s)", (model, list(keys))))

    def tip(self, model: str, upto: int, limit: int) -> list[tuple[int, int, bytes]]:
        rows = self._fetch(
            ALL_TENANTS,
            f"SELECT m.n, m.changed, v.vec FROM {M} m JOIN {V} v ON v.tenant = m.tenant AND v.n = m.n "  # noqa: S608 - engine table names and predicates, values bound
            "AND v.model = %s WHERE m.changed <= %s ORDER BY m.changed DESC, m.n DESC LIMIT %s",
            (model, upto, limit),
        )
        return [(int(n), int(c), _raw(vec) or b"") for n, c, vec in rows]

    def knn(self, vis: Visibility, model: str, query: bytes, k: int) -> list[tuple[int, float]]:
        """(key, cosine similarity) of the `k` nearest vectors of `model` that `vis` shows: the
        visibility predicate is inside the query, before the ordering and the limit."""
        pred, params = predicate(vis)
        rows = self._fetch(
            vis.tenant,
            f"SELECT m.n, 1 - (v.vec <=> %(q)s) FROM {M} m JOIN {V} v ON v.tenant = m.tenant AND v.n = m.n "  # noqa: S608 - engine table names and predicates, values bound
            f"WHERE {pred} AND v.model = %(r_model)s ORDER BY v.vec <=> %(q)s LIMIT %(k)s",
            dict(params, q=_vec(query), r_model=model, k=k),
        )
        return [(int(n), float(s)) for n, s in rows]


class PgRowVectors:
    """`engramdb.storage.ports.RowVectorStore` over ``engram.engram_row_vectors``, bound to one tenant
    (each tenant's raw-SQL tables are its own, so are their row vectors)."""

    def __init__(self, store: PgStore, tenant: str) -> None:
        self._store = store
        self.tenant = tenant

    def _fetch(self, query: str, params: Any) -> list[tuple[Any, ...]]:
        def go(db: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            # Binary results: a vector arrives as float32s, not as text to parse.
            return list(db.execute(query, params, binary=True).fetchall())

        return self._store.run(self.tenant, go)

    def digests(self, table: str, column: str, model: str) -> dict[int, bytes]:
        rows = self._fetch(
            "SELECT row_id, digest FROM engram.engram_row_vectors WHERE tenant = %s AND tbl = %s AND col = %s AND model = %s",
            (self.tenant, table, column, model),
        )
        return {int(r[0]): bytes(r[1]) for r in rows}

    @translated
    def apply(
        self, table: str, column: str, model: str, gone: Sequence[int], new: Sequence[tuple[int, bytes, bytes]]
    ) -> None:
        t = self.tenant
        with self._store.atomic():

            def go(db: psycopg.Connection[Any]) -> None:
                if self._store.citus:
                    # The rows go to a worker: a transaction id on the coordinator too, so that
                    # its snapshot, which `version` reads, moves when this commits.
                    db.execute("SELECT pg_current_xact_id()")
                if gone:
                    db.execute(
                        "DELETE FROM engram.engram_row_vectors WHERE tenant = %s AND tbl = %s AND col = %s "
                        "AND row_id = ANY(%s)",
                        (t, table, column, list(gone)),
                    )
                if new:
                    with db.cursor() as cur:
                        cur.executemany(
                            "INSERT INTO engram.engram_row_vectors (tenant, tbl, col, row_id, digest, model, vec) "
                            "VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (tenant, tbl, col, row_id) "
                            "DO UPDATE SET digest = excluded.digest, model = excluded.model, vec = excluded.vec",
                            [(t, table, column, rid, digest, model, _vec(vec)) for rid, digest, vec in new],
                        )

            self._store.run(t, go)

    def load(self, table: str, column: str, model: str) -> list[tuple[int, bytes]]:
        rows = self._fetch(
            "SELECT row_id, vec FROM engram.engram_row_vectors WHERE tenant = %s AND tbl = %s AND col = %s "
            "AND model = %s ORDER BY row_id",
            (self.tenant, table, column, model),
        )
        return [(int(r[0]), _raw(r[1]) or b"") for r in rows]

    def version(self) -> int:
        # The server's current snapshot changes whenever any transaction commits (its xmin or its
        # list of running ones moves), so it is a cheap "anything committed?" for this database.
        # On Citus it is the coordinator's: the scope tables are local to it (provisioning keeps
        # their schemas undistributed, and scopes may not distribute a table), and `apply` takes a
        # coordinator transaction id for the rows it sends to a worker.
        rows = self._fetch("SELECT pg_current_snapshot()::text", None)
        return int.from_bytes(hashlib.blake2b(str(rows[0][0]).encode(), digest_size=7).digest(), "big")
