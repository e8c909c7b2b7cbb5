"""Exact cosine search with numpy over a growable in-memory matrix.

About 0.6 ms per query at 10k vectors and a few ms at 100k (384-d, 2 cores, single-threaded
einsum); past ~100k an ANN index behind `VectorIndex` is the better trade.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


class ExactIndex:
    """A `VectorIndex` that scans every vector. Keys map to rows; rows never move."""

    def __init__(self, dim: int, capacity: int = 1024) -> None:
        self._dim = dim
        self._vecs: npt.NDArray[np.float32] = np.zeros((capacity, dim), dtype=np.float32)
        self._keys: npt.NDArray[np.int64] = np.zeros(capacity, dtype=np.int64)
        self._rows: dict[int, int] = {}
        self._n = 0

    @property
    def dim(self) -> int:
        return self._dim

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

    def upsert(self, keys: npt.NDArray[np.int64], vectors: npt.NDArray[np.float32]) -> None:
        if len(keys) != len(vectors):
            raise ValueError("keys and vectors differ in length")
        self._grow(self._n + sum(1 for key in keys.tolist() if key not in self._rows))
        for key, vec in zip(keys.tolist(), vectors, strict=True):
            row = self._rows.get(key)
            if row is None:
                row = self._n
                self._rows[key] = row
                self._keys[row] = key
                self._n += 1
            self._vecs[row] = vec

    def vectors_matrix(self) -> npt.NDArray[np.float32]:
        """The stored vectors, one row per key in `keys()` order (a view, not a copy)."""
        return self._vecs[: self._n]

    def keys(self) -> npt.NDArray[np.int64]:
        return self._keys[: self._n]

    def vectors_of(self, keys: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        out = np.zeros((len(keys), self._dim), dtype=np.float32)
        for i, key in enumerate(keys.tolist()):
            row = self._rows.get(key)
            if row is not None:
                out[i] = self._vecs[row]
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
        # each call and, on a busy 2-core machine, took 14.6 ms at 10k vectors against 0.63 ms.
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
