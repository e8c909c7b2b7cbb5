"""The vector half of candidate generation: an in-memory index of memory vectors with the
visibility attributes beside it, so the visible set is masked *before* the top-k is taken.

The stored vectors are the truth; this is a cache refreshed incrementally by the memories'
write sequence (``changed``), which every process's writes advance, so a recall always sees
what other threads and processes have committed.
"""

from __future__ import annotations

import sqlite3
import threading

import numpy as np
import numpy.typing as npt

from engramdb.embeddings.base import Embedder
from engramdb.memories.store import Visibility, current_change
from engramdb.retrieval.columns import VisibilityColumns
from engramdb.vectors.base import VectorIndex
from engramdb.vectors.exact import ExactIndex


class VectorChannel:
    """Vectors of every memory with an embedding from `embedder`, and their visibility attributes."""

    def __init__(self, embedder: Embedder, index: VectorIndex | None = None) -> None:
        self.embedder = embedder
        self.index: VectorIndex = index if index is not None else ExactIndex(embedder.dim)
        # Re-entrant: search() and best_matches() hold it while they read arrays that refresh() grows.
        self._lock = threading.RLock()
        self._seen = -1
        self.cols = VisibilityColumns()

    def refresh(self, db: sqlite3.Connection) -> None:
        """Load whatever changed since the last refresh (cheap when nothing did)."""
        with self._lock:
            latest = current_change(db)
            if latest == self._seen:
                return
            rows = db.execute(
                "SELECT m.n, m.tenant, m.owner, m.confidentiality, m.archived, m.valid_from, m.valid_to, v.vec, m.type "
                "FROM engram_memories m LEFT JOIN engram_vectors v ON v.n = m.n AND v.model = ? "
                "WHERE m.changed > ?",
                (self.embedder.name, self._seen),
            ).fetchall()
            # A changed row without a vector (forgotten, or written without an embedder) must not
            # keep a stale cached vector visible: it is marked archived in the cache.
            gone = [r[0] for r in rows if r[7] is None]
            rows = [r for r in rows if r[7] is not None]
            for n in gone:
                row = self.index.row_of(n)
                if row is not None:
                    self.cols.hide(row)
            if rows:
                keys = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
                vecs = np.frombuffer(b"".join(r[7] for r in rows), dtype=np.float32).reshape(len(rows), self.index.dim)
                self.index.upsert(keys, vecs)
                self.cols.grow(len(self.index))
                rows_of = np.fromiter((self.index.row_of(r[0]) for r in rows), dtype=np.int64, count=len(rows))
                self.cols.set_many(rows_of, [(*r[1:7], r[8]) for r in rows])
            self._seen = latest

    def mask(self, vis: Visibility) -> npt.NDArray[np.bool_]:
        """The same predicate as `Visibility.sql`, over the cached attributes (a fresh array)."""
        return self.cols.visible(vis, len(self.index))

    def search(
        self,
        query_vec: npt.NDArray[np.float32],
        k: int,
        vis: Visibility,
        *,
        types: frozenset[str] | None = None,
        owner: str | None = None,
        min_level: int | None = None,
    ) -> dict[int, float]:
        """The `k` most similar visible memories, {n: cosine}, optionally of `types`, of exactly
        `owner`, and at or above `min_level` — every filter applied before the top-k."""
        with self._lock:
            n = len(self.index)
            mask = self.cols.visible(vis, n, types or None)
            if owner is not None:
                mask &= self.cols.owner[:n] == self.cols.codes.find(owner)
            if min_level is not None:
                mask &= self.cols.level[:n] >= min_level
            keys, sims = self.index.search(query_vec, k, mask)
            return dict(zip(keys.tolist(), sims.tolist(), strict=True))

    def best_matches(
        self, vecs: npt.NDArray[np.float32], vis: Visibility, filters: list[tuple[str, str, int]]
    ) -> list[tuple[int, float] | None]:
        """For each row of `vecs`, the most similar visible memory of the same (type, owner) at or
        above the level, as (n, cosine) — one matrix product for the whole batch."""
        with self._lock:
            n = len(self.index)
            if n == 0 or len(vecs) == 0:
                return [None] * len(vecs)
            base = self.mask(vis)
            q = np.asarray(vecs, dtype=np.float32)
            matrix = self.index.vectors_matrix()
            # Few rows: numpy's own kernel (BLAS wakes its thread pool for each small product, see
            # ExactIndex.search); a real batch: BLAS, where its threads pay off.
            sims = np.stack([np.einsum("nd,d->n", matrix, row) for row in q]) if len(q) <= 4 else q @ matrix.T
            out: list[tuple[int, float] | None] = []
            masks: dict[tuple[str, str, int], npt.NDArray[np.bool_]] = {}
            keys = self.index.keys()
            for i, f in enumerate(filters):
                m = masks.get(f)
                if m is None:
                    mtype, owner, level = f
                    m = masks[f] = (
                        base
                        & (self.cols.type[:n] == self.cols.types.find(mtype))
                        & (self.cols.owner[:n] == self.cols.codes.find(owner))
                        & (self.cols.level[:n] >= level)
                    )
                if not m.any():
                    out.append(None)
                    continue
                row = np.where(m, sims[i], -np.inf)
                j = int(np.argmax(row))
                out.append((int(keys[j]), float(row[j])))
            return out

    def cosines(self, query_vec: npt.NDArray[np.float32], keys: list[int]) -> dict[int, float]:
        """Cosine of the query with each of `keys` (0 for memories without a vector)."""
        with self._lock:
            if not keys:
                return {}
            vecs = self.index.vectors_of(np.asarray(keys, dtype=np.int64))
            return dict(zip(keys, np.einsum("ij,j->i", vecs, query_vec).tolist(), strict=True))
