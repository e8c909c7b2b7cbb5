"""Exact cosine search with numpy over a growable in-memory matrix.

A query's cost grows with the rows (384-d, single-threaded einsum; measured at 10k, 100k and 1M by
benchmarks/bench_vector_index.py, benchmarks/results/vector_index.json); past ~100k an ANN index
behind `VectorIndex` is the better trade.

Keys map to rows through `KeyRows`, an int32 array indexed by key (memory keys are small dense
integers): 4 bytes per key instead of the ~100 bytes a Python dict entry with two int objects
costs (about 100 MB at a million keys), and a whole batch is looked up in one numpy operation.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

#: `nearest` compares its queries with the matrix in blocks of about this many bytes of scores
NEAREST_BYTES = 64 << 20

#: keys at or above this (or negative) go to a dict instead of the dense array
DENSE_LIMIT = 1 << 28


class KeyRows:
    """key -> row for non-negative integer keys: a dense int32 array (-1: absent), with a dict for
    the rare key that is negative or huge (so a sparse key cannot make the array explode)."""

    def __init__(self, capacity: int = 1024) -> None:
        self._dense = np.full(max(1, capacity), -1, dtype=np.int32)
        self._far: dict[int, int] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def get(self, key: int) -> int | None:
        if 0 <= key < len(self._dense):
            row = int(self._dense[key])
            return None if row < 0 else row
        return self._far.get(key)

    def lookup(self, keys: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The rows of `keys` (-1 for unknown keys), in one pass."""
        keys = np.asarray(keys, dtype=np.int64).reshape(-1)
        out = np.full(len(keys), -1, dtype=np.int64)
        inside = (keys >= 0) & (keys < len(self._dense))
        out[inside] = self._dense[keys[inside]]
        if self._far and not inside.all():
            for i in np.flatnonzero(~inside).tolist():
                out[i] = self._far.get(int(keys[i]), -1)
        return out

    def set_many(self, keys: npt.NDArray[np.int64], rows: npt.NDArray[np.int64]) -> None:
        """Map each of `keys` (distinct) to its row; the caller counts only new keys via `added`."""
        keys = np.asarray(keys, dtype=np.int64).reshape(-1)
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if not len(keys):
            return
        dense = (keys >= 0) & (keys < DENSE_LIMIT)
        if dense.any():
            top = int(keys[dense].max())
            if top >= len(self._dense):
                grown = np.full(max(top + 1, 2 * len(self._dense)), -1, dtype=np.int32)
                grown[: len(self._dense)] = self._dense
                self._dense = grown
            k, r = keys[dense], rows[dense]
            self._count += int(np.count_nonzero(self._dense[k] < 0))
            self._dense[k] = r
        if not dense.all():
            for key, row in zip(keys[~dense].tolist(), rows[~dense].tolist(), strict=True):
                if key not in self._far:
                    self._count += 1
                self._far[key] = row

    @classmethod
    def of(cls, keys: npt.NDArray[np.int64]) -> KeyRows:
        """The map of `keys` to their positions (keys must be distinct: ValueError otherwise)."""
        keys = np.asarray(keys, dtype=np.int64).reshape(-1)
        out = cls(int(keys.max()) + 1 if len(keys) and 0 <= keys.max() < DENSE_LIMIT else 1024)
        positions = np.arange(len(keys), dtype=np.int64)
        out.set_many(keys, positions)
        # A repeated key maps to its last position only, so an earlier one reads back another row.
        if not np.array_equal(out.lookup(keys), positions):
            raise ValueError("repeated keys")
        return out


class ExactIndex:
    """A `VectorIndex` that scans every vector. Keys map to rows; rows never move."""

    def __init__(self, dim: int, capacity: int = 1024) -> None:
        self._dim = dim
        self._vecs: npt.NDArray[np.float32] = np.zeros((capacity, dim), dtype=np.float32)
        self._keys: npt.NDArray[np.int64] = np.zeros(capacity, dtype=np.int64)
        self._rows = KeyRows()
        self._n = 0

    @property
    def dim(self) -> int:
        return self._dim

    def nbytes(self) -> int:
        """About how many bytes the index holds (its arrays, with their room to grow)."""
        rows = self._rows
        return self._vecs.nbytes + self._keys.nbytes + rows._dense.nbytes + 100 * len(rows._far)

    def __len__(self) -> int:
        return self._n

    def _grow(self, need: int) -> None:
        cap = len(self._keys)
        if need <= cap:
            return
        new = max(need, cap * 2)
        vecs = np.zeros((new, self._dim), dtype=np.float32)
        vecs[: self._n] = self._vecs[: self._n]
        keys = np.zeros(new, dtype=np.int64)
        keys[: self._n] = self._keys[: self._n]
        self._vecs, self._keys = vecs, keys

    def row_of(self, key: int) -> int | None:
        return self._rows.get(key)

    def rows_of(self, keys: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The rows of `keys` in `keys()` order, -1 for unknown keys."""
        return self._rows.lookup(keys)

    def upsert(self, keys: npt.NDArray[np.int64], vectors: npt.NDArray[np.float32]) -> None:
        if len(keys) != len(vectors):
            raise ValueError("keys and vectors differ in length")
        key_arr = np.asarray(keys, dtype=np.int64).reshape(-1)
        if not len(key_arr):
            return
        last: dict[int, int] = {}  # key -> index of its last vector in this call; first-seen order
        for i, key in enumerate(key_arr.tolist()):
            last[key] = i
        distinct = np.fromiter(last.keys(), dtype=np.int64, count=len(last))
        rows = self._rows.lookup(distinct)
        fresh = rows < 0
        added = int(np.count_nonzero(fresh))
        self._grow(self._n + added)
        rows[fresh] = np.arange(self._n, self._n + added, dtype=np.int64)
        self._keys[rows[fresh]] = distinct[fresh]
        self._rows.set_many(distinct[fresh], rows[fresh])
        self._vecs[rows] = np.asarray(vectors, dtype=np.float32)[
            np.fromiter(last.values(), dtype=np.int64, count=len(last))
        ]
        self._n += added

    def vectors_matrix(self) -> npt.NDArray[np.float32]:
        """The stored vectors, one row per key in `keys()` order (a view, not a copy)."""
        return self._vecs[: self._n]

    def keys(self) -> npt.NDArray[np.int64]:
        return self._keys[: self._n]

    def vectors_at(self, rows: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        """The stored vectors at `rows` (positions in `keys()` order), as float32."""
        return self._vecs[np.asarray(rows, dtype=np.int64)]

    def vectors_of(self, keys: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        rows = self._rows.lookup(keys)
        out = np.zeros((len(rows), self._dim), dtype=np.float32)
        known = rows >= 0
        out[known] = self._vecs[rows[known]]
        return out

    def same_vectors(self, keys: npt.NDArray[np.int64], vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.bool_]:
        """For each of `keys`, True when the index already holds exactly `vectors`' row for it
        (as stored: a compact index compares its compact form), so re-adding it would change nothing."""
        rows = self._rows.lookup(keys)
        same = np.zeros(len(rows), dtype=np.bool_)
        known = np.flatnonzero(rows >= 0)
        if len(known):
            same[known] = np.all(self._vecs[rows[known]] == vectors[known], axis=1)
        return same

    def similarities(self, queries: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """Cosines of each of `queries` (m x dim) with every stored vector: an m x len(self) matrix."""
        q = np.asarray(queries, dtype=np.float32)
        matrix = self._vecs[: self._n]
        # Few rows: numpy's own kernel (BLAS wakes its thread pool for each small product, see
        # `search`); a real block: BLAS, where its threads pay off.
        if len(q) <= 4:
            return (
                np.stack([np.einsum("nd,d->n", matrix, r) for r in q]) if len(q) else np.zeros((0, self._n), np.float32)
            )
        out: npt.NDArray[np.float32] = q @ matrix.T
        return out

    def search(
        self, query: npt.NDArray[np.float32], k: int, allowed: npt.NDArray[np.bool_] | None = None
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        n = self._n
        empty = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))
        if n == 0 or k <= 0:
            return empty
        # One matmul over the contiguous matrix, then mask: far cheaper than gathering the
        # allowed rows first (a copy of the whole matrix), and the top-k is still taken only
        # among allowed rows.
        # einsum runs numpy's own single-threaded kernel. BLAS (matmul) wakes its thread pool for
        # each call and, on a busy 2-core machine, was far slower at 10k vectors.
        sims = np.einsum("ij,j->i", self._vecs[:n], query)
        if allowed is not None:
            allowed = allowed[:n]
            count = int(allowed.sum())
            if count == 0:
                return empty
            sims = np.where(allowed, sims, -np.inf)
            k = min(k, count)
        k = min(k, n)
        top = np.argpartition(-sims, k - 1)[:k]
        top = top[np.argsort(-sims[top], kind="stable")]
        return self._keys[top].copy(), sims[top].astype(np.float32)

    def nearest(
        self, queries: npt.NDArray[np.float32], k: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """The `k` most similar rows of each query, unfiltered: (rows, cosines), each of shape
        ``(len(queries), k)``, best first; rows are -1 (cosine -inf) past the index's size.
        For a caller that filters them itself and can tell when the filtered answer must lie
        beyond them (`engramdb.retrieval.vector_channel.VectorChannel.near_duplicates`)."""
        q = np.ascontiguousarray(queries, dtype=np.float32).reshape(-1, self._dim)
        return self._nearest_exact(q, k)

    def _nearest_exact(
        self, q: npt.NDArray[np.float32], k: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        n = self._n
        rows = np.full((len(q), k), -1, dtype=np.int64)
        sims = np.full((len(q), k), -np.inf, dtype=np.float32)
        if n == 0 or k <= 0:
            return rows, sims
        matrix = self.vectors_matrix()  # float32 (dequantised once an AnnIndex is compact)
        take = min(k, n)
        block = max(1, NEAREST_BYTES // (4 * n))
        for start in range(0, len(q), block):
            part = q[start : start + block]
            # A few queries: numpy's own kernel (BLAS wakes its thread pool per small product).
            s = np.stack([np.einsum("nd,d->n", matrix, r) for r in part]) if len(part) <= 4 else part @ matrix.T
            top = np.argpartition(-s, take - 1, axis=1)[:, :take] if take < n else np.tile(np.arange(n), (len(s), 1))
            vals = np.take_along_axis(s, top, axis=1)
            order = np.lexsort((top, -vals), axis=1)  # best first, ties by row
            rows[start : start + len(part), :take] = np.take_along_axis(top, order, axis=1)
            sims[start : start + len(part), :take] = np.take_along_axis(vals, order, axis=1)
        return rows, sims
