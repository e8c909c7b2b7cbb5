"""Approximate cosine search with a faiss inverted-file index (IVF, int8 codes, exact re-rank).

`AnnIndex` implements the `VectorIndex` protocol like `ExactIndex` does, and keeps a matrix of
every vector (rows never move; `keys()` order is row order). Beside it, once the index holds
`train_at` vectors, it keeps a faiss ``IndexIVFScalarQuantizer``: the vectors are clustered into
``nlist`` lists by spherical k-means, each stored as 8-bit codes. A query scans the ``nprobe``
lists whose centroids are closest, takes ``rerank * k`` candidates by their approximate scores,
and re-scores those from the matrix.

**Compact storage.** Below ``train_at`` the matrix is float32 and every cosine exact. From the
first IVF build on (``compact=True``, the default) the matrix is int8 with one float32 scale per
vector (``x ≈ code * scale``, ``scale = max|x| / 127``): 388 bytes per 384-d vector instead of
1,536, so a million vectors take 0.39 GB instead of 1.5 GB next to the IVF's own 0.39 GB. A
re-scored cosine is then off by about 1e-3 at most (measured on the shipped embeddings; recall@10 of
the benchmark unchanged within 0.01), and `vectors_of` returns the dequantised vectors. The stored
vectors stay the truth; this only changes what the cache holds.

Visibility filtering happens inside the scan: the `allowed` mask becomes a faiss bitmap selector
over row ids, so disallowed vectors are never scored and the top-k is taken among allowed vectors
only. A filtered scan scores only the allowed vectors of each list it probes, so it can afford
more lists: the probe count grows as the filter narrows (``nprobe / fraction_allowed ** 0.25``,
which kept recall@10 at 0.99 for 0.2%-3% of a million rows allowed). A filter that allows at most
``exact_rows`` rows (1,000 by default) or no more than the candidates wanted is answered by exact
search over the allowed rows, and so is any query whose probed lists held fewer than ``k`` allowed
vectors. A search therefore always returns ``min(k, #allowed)`` keys. The threshold is a row count,
not a fraction: scoring a few thousand scattered rows of a large matrix exactly costs more than an
IVF probe (measured at 1M rows with 1% allowed: benchmarks/bench_vector_index.py,
benchmarks/results/vector_index.json).

Below ``train_at`` vectors (20,000 by default) there is no IVF at all and every search is exact:
at that size a numpy scan is as fast as any approximate index (the 10k rows of
benchmarks/results/vector_index.json). The IVF is trained when the index first reaches ``train_at`` vectors and rebuilt
(re-clustered over every vector) whenever it has grown ``rebuild_growth`` times (4x) since, so the
build cost stays amortised; `rebuild` does it on demand. Replacing a key's vector updates its row
and its IVF entry.

Why IVF and not HNSW: measured on this project's embeddings (see docs/vector-index.md and
benchmarks/results/vector_index.json), faiss HNSW builds slower, cannot delete a vector, and loses
recall badly under selective filters (its graph walk must pass through disallowed nodes), while an
IVF scan gets cheaper as the filter narrows. A small HNSW graph does serve one purpose: over the
IVF's centroids (never the vectors), it picks the lists for `nearest`'s calls of a few queries —
dedup on a single write.

The index is a cache: `save` / `load` write and read one side file (numpy ``.npz`` holding the
keys, the float32 matrix and the serialised faiss index) that can always be rebuilt from the
stored vectors. `to_arrays` / `from_arrays` are the same state as named arrays, for callers that
keep more beside it in one file (see `engramdb.vectors.npz`). Searches may run
concurrently with each other; `upsert`, `rebuild` and `load` must not run concurrently with
anything else on the same instance (callers already serialise writes, as with `ExactIndex`).

Needs the ``ann`` extra (``faiss-cpu``); constructing an `AnnIndex` without it raises
`engramdb.errors.MissingExtra`.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import math
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from engramdb.errors import MissingExtra
from engramdb.vectors.exact import ExactIndex, KeyRows
from engramdb.vectors.npz import StoredArrays, with_room, write_arrays

try:
    import numpy as np
    import numpy.typing as npt
except ImportError as exc:  # numpy comes with the "ann" (and "memory") extra, not with the core package
    raise MissingExtra("engramdb.vectors.ann", "ann") from exc

__all__ = ["AnnIndex", "faiss_available"]

_log = logging.getLogger(__name__)

_FEATURE = "engramdb.vectors.ann"
_EXTRA = "ann"
_FORMAT = 1
#: faiss warns below 39 training points per centroid; sample 40 per list (and never fewer lists).
_POINTS_PER_LIST = 40
_KMEANS_ITERATIONS = 10
#: A filtered query probes ``nprobe * fraction_allowed ** -_FILTER_PROBE_EXPONENT`` lists.
_FILTER_PROBE_EXPONENT = 0.25
#: Lists an unfiltered `AnnIndex.nearest` probes: it looks for near-duplicates (cosine >= 0.92
#: for dedup on write), which sit in the query's own list or the next few. Measured at 1M
#: memories on 851 new items: the same dedup decision as the filtered per-item search for
#: 850 at 4 lists (and at 8 and 16), in less time than at 16.
NEAREST_NPROBE = 4
#: faiss calls on at most this many vectors run on the calling thread only: waking the OpenMP
#: pool costs more than the work (adding one vector at 100k on a busy 2-core machine took far
#: longer with 2 threads than with one).
_SMALL_CALL = 64

#: Vectors upserted into a trained index wait in a pending list, scored exactly by every search,
#: until this many gather and go into the IVF in one call: adding one vector at a time was a large
#: share of a single `remember` at 1M memories (the 6 MB of centroids are out of the CPU caches
#: between two `remember` calls).
_PENDING_ROWS = 256
#: vectors whose IVF list `nearest` found, kept for their add (see `AnnIndex._flush`): a batch
#: of 1,000 and the pending rows; ~1.6 KB each (the vector's bytes are the key)
_LISTS_KEPT = 2048

#: A `AnnIndex.nearest` call of at most this many queries finds the lists to probe through a small
#: HNSW graph over the IVF's centroids instead of scoring every centroid: one query against 4,096
#: centroids reads their 6 MB, which a `remember` call finds out of the CPU caches (the coarse
#: search was a large share of a `remember` at 1M memories). A batch scores them all at once
#: through BLAS, which is cheaper per query than the graph (measured on 1,000 queries).
_GRAPH_QUERIES = 16
#: ... and only when the IVF has at least this many lists (about 250k memories and up): at 1,024
#: lists (100k memories) the graph saved nothing measurable in a call.
_GRAPH_LISTS = 2048
#: A flush finds the list of at most this many vectors `nearest` was not asked about through the
#: graph (cheap per vector) rather than the BLAS search (which wakes its thread pool at every call).
_GRAPH_ASSIGN = 64
#: The graph: M links per centroid, efConstruction 40; each search explores at least
#: `_GRAPH_EF` candidates. Measured on the 4,096 centroids of 1M memories (queries near stored
#: vectors): a query on one thread is faster than the exact search with warm caches, and finds the
#: exact nearest list first for 99.6% of queries and 99.7% of the exact 4 lists. Exploring 32
#: instead of 64 (600 new items of the benchmark corpus, each asked alone as a `remember` asks):
#: the nearest list first for 99.67% against 99.83%, 99.75% of the 4 lists against 99.92%, the
#: same dedup match as the exact filtered scan for 579 of 600 against 580 (the others a different
#: memory above the threshold, none missed), and a faster lookup (p50).
_GRAPH_M = 32
_GRAPH_EF = 32

#: rows per block when scoring or dequantising a compact matrix (~25 MB of float32 at 384-d)
_BLOCK = 1 << 14

_faiss_module: ModuleType | None = None


def _faiss() -> ModuleType:
    """The faiss module, imported on first use; `MissingExtra` names the extra when it is absent."""
    global _faiss_module
    if _faiss_module is None:
        try:
            _faiss_module = importlib.import_module("faiss")
        except ImportError as exc:
            raise MissingExtra(_FEATURE, _EXTRA) from exc
    return _faiss_module


def faiss_available() -> bool:
    """True when faiss imports, i.e. `AnnIndex` can be constructed."""
    try:
        _faiss()
    except MissingExtra:
        return False
    return True


def auto_nlist(n: int) -> int:
    """The number of IVF lists for `n` vectors: about ``4 * sqrt(n)`` rounded to a power of two,
    at most one list per 40 vectors, between 1 and 65,536 (20k -> 512, 100k -> 1,024, 1M -> 4,096)."""
    if n <= 0:
        return 1
    target = 1 << max(0, round(math.log2(4 * math.sqrt(n))))
    cap = max(1, n // _POINTS_PER_LIST)
    nlist = min(target, 65536)
    while nlist > cap:
        nlist //= 2
    return max(1, nlist)


def auto_nprobe(nlist: int) -> int:
    """Lists probed per unfiltered query: ``4 * sqrt(nlist)`` (1,024 lists -> 128, 4,096 -> 256).
    Chosen for recall@10 of about 0.95 on the shipped static embeddings (docs/vector-index.md)."""
    return max(1, min(nlist, math.ceil(4 * math.sqrt(nlist))))


class _Pending:
    """The rows whose current vector is not in the IVF yet, with that vector, in one float32 block
    in the order they came: a single write's dedup lookup scores all of them against its query,
    and gathering them from the matrix (dequantised once compact) at each call was a measurable
    share of a `remember` at 1M memories."""

    __slots__ = ("_n", "_rows", "_slot", "_vecs")

    def __init__(self, dim: int) -> None:
        self._slot: dict[int, int] = {}  # row: its place in the block
        self._rows = np.zeros(0, dtype=np.int64)
        self._vecs = np.zeros((0, dim), dtype=np.float32)
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def __contains__(self, row: int) -> bool:
        return row in self._slot

    def put(self, rows: list[int], vecs: npt.NDArray[np.float32]) -> None:
        """Hold `vecs` as the vectors of `rows` (a row held already gets its new vector)."""
        need = self._n + len(rows)
        if need > len(self._rows):
            cap = max(need, 2 * len(self._rows), _PENDING_ROWS)
            grown = np.zeros((cap, self._vecs.shape[1]), dtype=np.float32)
            grown[: self._n] = self._vecs[: self._n]
            self._vecs = grown
            self._rows = np.concatenate([self._rows[: self._n], np.zeros(cap - self._n, dtype=np.int64)])
        slot, vectors, held = self._slot, self._vecs, self._rows
        for row, vec in zip(rows, vecs, strict=True):
            at = slot.get(row)
            if at is None:
                at = slot[row] = self._n
                held[at] = row
                self._n += 1
            vectors[at] = vec

    def rows(self) -> npt.NDArray[np.int64]:
        """The rows held, in the order they came (a copy)."""
        return self._rows[: self._n].copy()

    def vectors(self) -> npt.NDArray[np.float32]:
        """Their vectors, in the same order (a view: read it before the next `put` or `clear`)."""
        return self._vecs[: self._n]

    def clear(self) -> None:
        self._slot.clear()
        self._n = 0
        if len(self._rows) > 4 * _PENDING_ROWS:  # after a large batch: give its block back
            self._rows = np.zeros(0, dtype=np.int64)
            self._vecs = np.zeros((0, self._vecs.shape[1]), dtype=np.float32)


class AnnIndex(ExactIndex):
    """A `VectorIndex` that answers large searches from a faiss IVF index (see the module docstring).

    Args:
        dim: vector dimension.
        nlist: IVF lists; ``None`` picks `auto_nlist` of the size at each (re)build.
        nprobe: lists probed by an unfiltered query; ``None`` picks `auto_nprobe` of ``nlist``.
            Filtered queries probe ``nprobe / fraction_allowed ** 0.25`` lists (at most ``nlist``).
        rerank: candidates taken per wanted result and re-scored exactly (``rerank * k``).
        train_at: vectors needed before the IVF is built; below that every search is exact.
        rebuild_growth: rebuild the IVF when the index has grown this many times since the last
            build (``0`` disables automatic rebuilds; `rebuild` still works).
        exact_rows: a filter allowing at most this many rows is answered by exact search.
        seed: seeds the k-means sample and initialisation, so equal data builds an equal index.
        capacity: initial rows of the matrix (it grows by doubling).
        compact: hold the vectors as int8 with a per-vector scale once the IVF is built (see the
            module docstring); False keeps float32 and exact cosines at four times the memory.

    Raises:
        MissingExtra: faiss is not installed (the ``ann`` extra).
        ValueError: a tunable is out of range.
    """

    #: (query bytes, scores of every row) of the last exact scan of the whole float32 matrix, so
    #: that a caller asking cosines of some keys for the same query (recall's candidates from the
    #: lexical channel) reads the very values the scan made instead of scoring those rows again
    #: (`scores_of`); dropped by any write to the matrix
    _memo: tuple[bytes, npt.NDArray[np.float32]] | None = None

    def __init__(
        self,
        dim: int,
        *,
        nlist: int | None = None,
        nprobe: int | None = None,
        rerank: int = 4,
        train_at: int = 20_000,
        rebuild_growth: float = 4.0,
        exact_rows: int = 1000,
        seed: int = 0,
        capacity: int = 1024,
        compact: bool = True,
    ) -> None:
        self._faiss = _faiss()
        if dim <= 0:
            raise ValueError(f"dim must be positive, got {dim}")
        if nlist is not None and nlist < 1:
            raise ValueError(f"nlist must be at least 1, got {nlist}")
        if nprobe is not None and nprobe < 1:
            raise ValueError(f"nprobe must be at least 1, got {nprobe}")
        if rerank < 1:
            raise ValueError(f"rerank must be at least 1, got {rerank}")
        if train_at < 1:
            raise ValueError(f"train_at must be at least 1, got {train_at}")
        if rebuild_growth != 0 and rebuild_growth <= 1:
            raise ValueError(f"rebuild_growth must be 0 (off) or greater than 1, got {rebuild_growth}")
        if exact_rows < 0:
            raise ValueError(f"exact_rows must not be negative, got {exact_rows}")
        super().__init__(dim, max(1, capacity))
        self._nlist_setting = nlist
        self._nprobe_setting = nprobe
        self._rerank = rerank
        self._train_at = train_at
        self._rebuild_growth = rebuild_growth
        self._exact_rows = exact_rows
        self._seed = seed
        self._compact = compact
        # Once compact: the matrix as int8 codes and one scale per row (`_vecs` is then empty).
        self._codes: npt.NDArray[np.int8] | None = None
        self._scale: npt.NDArray[np.float32] = np.zeros(0, dtype=np.float32)
        self._bulk = 0  # open `bulk()` blocks: IVF builds wait for the last one to close
        self._ivf: Any = None  # faiss.IndexIVFScalarQuantizer once trained; ids are rows
        self._built_at = 0  # rows when the IVF was last built
        self._nlist = 0
        self._generation = 0  # IVF builds by this instance
        # Rows whose current vector is not in the IVF yet, with that vector (see `_PENDING_ROWS`).
        self._pending = _Pending(dim)
        # The IVF list of vectors `nearest` was asked about (by their bytes): dedup asks about
        # every new memory's vector just before it is stored, so its add needs no second coarse
        # search (at 1M memories that scores a batch's 1,000 vectors against all 4,096 centroids again).
        self._lists: dict[bytes, int] = {}
        # The HNSW graph over the IVF's centroids for `nearest`'s few-query calls (`_centroid_graph`),
        # made on first use after each build or load.
        self._graph: Any = None

    def nbytes(self) -> int:
        """About how many bytes the index holds: the matrix (or its codes), the pending rows and
        the IVF (a code and an id per vector)."""
        held = super().nbytes() + self._scale.nbytes + len(self._pending) * (self._dim * 4 + 100)
        if self._codes is not None:
            held += self._codes.nbytes
        if self._ivf is not None:
            held += int(self._ivf.ntotal) * (self._dim + 8)
        return held

    # ----------------------------------------------------------------------------------------
    # The VectorIndex protocol (storage, keys, row_of, vectors_of, vectors_matrix: from ExactIndex)
    # ----------------------------------------------------------------------------------------

    def upsert(self, keys: npt.NDArray[np.int64], vectors: npt.NDArray[np.float32]) -> None:
        """Add or replace the vectors of `keys` (a key repeated in one call keeps its last vector).

        New keys take new rows at the end, in order of first appearance. May (re)build the IVF:
        when the index first reaches ``train_at`` vectors, and when it has grown ``rebuild_growth``
        times since the last build.
        """
        key_list = np.asarray(keys, dtype=np.int64).reshape(-1).tolist()
        vecs = np.asarray(vectors, dtype=np.float32)
        if vecs.ndim != 2 or vecs.shape[0] != len(key_list):
            raise ValueError("keys and vectors differ in length")
        if vecs.shape[1] != self._dim:
            raise ValueError(f"vectors have dimension {vecs.shape[1]}, the index {self._dim}")
        if not key_list:
            return
        last: dict[int, int] = {}  # key -> index of its last vector in this call; first-seen order
        for i, key in enumerate(key_list):
            last[key] = i
        rows = np.empty(len(last), dtype=np.int64)
        n = self._n
        new_keys = np.fromiter(last.keys(), dtype=np.int64, count=len(last))
        old_rows = self._rows.lookup(new_keys)
        fresh = old_rows < 0
        added = int(np.count_nonzero(fresh))
        rows[:] = old_rows
        rows[fresh] = np.arange(n, n + added, dtype=np.int64)
        replaced = old_rows[~fresh].tolist()
        self._grow(n + added)
        # Without repeated keys the batch is used as is (no temporary copy of a large batch), and
        # a batch of only new keys fills a contiguous block of rows.
        batch = (
            vecs if len(last) == len(key_list) else vecs[np.fromiter(last.values(), dtype=np.int64, count=len(last))]
        )
        if added == len(last):
            self._put(slice(n, n + added), batch)
            self._keys[n : n + added] = new_keys
        else:
            self._put(rows, batch)
            self._keys[rows] = new_keys
        self._rows.set_many(new_keys[fresh], rows[fresh])
        self._n = n + added
        if self._compact and self._codes is None and self._n >= self._train_at:
            self._to_compact()

        if self._ivf is not None and not self._due():
            pending = self._pending
            in_ivf = [r for r in replaced if r not in pending]
            if in_ivf:
                self._ivf.remove_ids(self._faiss.IDSelectorArray(np.asarray(in_ivf, dtype=np.int64)))
            pending.put(rows.tolist(), np.asarray(batch, dtype=np.float32))
            if len(pending) >= _PENDING_ROWS:
                self._flush()
        elif self._bulk == 0 and self._due():
            self.rebuild()

    def _flush(self) -> None:
        """Add the pending vectors to the IVF, in one call on one thread (as `nearest`: adding
        1,000 vectors was faster on one thread than on two on a busy 2-core machine)."""
        if not self._pending or self._ivf is None:
            self._pending.clear()
            return
        rows = self._pending.rows()
        vecs = np.ascontiguousarray(self._pending.vectors(), dtype=np.float32)
        lists = self._lists
        assign = np.fromiter((lists.pop(v.tobytes(), -1) for v in vecs), dtype=np.int64, count=len(vecs))
        with self._threads(0):
            missing = np.flatnonzero(assign < 0)
            if len(missing):
                # Written without a dedup lookup (todos, intents, dedup off): a few of them find their
                # list through the centroid graph, as `nearest` does for a single write (a BLAS search
                # of ~40 vectors woke its thread pool, a cost in every flush of 256 single writes at 1M).
                few = len(missing) <= _GRAPH_ASSIGN and self._nlist >= _GRAPH_LISTS
                _, found = (self._centroid_graph() if few else self._ivf.quantizer).search(vecs[missing], 1)
                assign[missing] = found[:, 0]
            faiss = self._faiss
            self._ivf.add_core(len(vecs), faiss.swig_ptr(vecs), faiss.swig_ptr(rows), faiss.swig_ptr(assign))
        self._pending.clear()

    def _pending_rows(self) -> npt.NDArray[np.int64]:
        return self._pending.rows()

    @contextlib.contextmanager
    def bulk(self) -> Iterator[None]:
        """Defer IVF (re)builds while many upserts load the index (a first load of a million
        vectors in batches would otherwise train at 20k, 80k, 320k…): one build when the block ends."""
        self._bulk += 1
        try:
            yield
        finally:
            self._bulk -= 1
            if self._bulk == 0 and self._due():
                self.rebuild()

    def _due(self) -> bool:
        """True when the IVF should be (re)built now (first reaching ``train_at``, or grown enough)."""
        if self._ivf is None:
            return self._n >= self._train_at
        return bool(self._rebuild_growth) and self._n >= self._rebuild_growth * self._built_at

    def nearest(
        self, queries: npt.NDArray[np.float32], k: int, *, nprobe: int | None = None, exact: bool = True
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """`ExactIndex.nearest` (unfiltered top-`k` rows per query, best first), answered once
        trained by one IVF search for the whole batch over ``nprobe`` lists (`NEAREST_NPROBE` by
        default). With `exact` the `k` candidates are re-scored from the stored vectors (float32, or int8 once compact) (which rows
        are considered is approximate, their cosines are not); without, the scores and their order
        are the IVF's 8-bit approximations (within ~0.01 of the cosine), for a caller that
        re-scores the few rows it keeps: gathering 32 rows per query of a batch of 1,000 moves
        ~50 MB, more than the search itself. A call of at most `_GRAPH_QUERIES` queries on an IVF
        of `_GRAPH_LISTS` lists or more finds the lists to probe through an HNSW graph over the
        centroids (`_centroid_graph`) rather than by scoring every centroid."""
        q = np.ascontiguousarray(queries, dtype=np.float32).reshape(-1, self._dim)
        if self._ivf is None or len(q) == 0 or k <= 0:
            return self._nearest_exact(q, k)
        params = self._faiss.SearchParametersIVF()
        params.nprobe = min(self._nlist, NEAREST_NPROBE if nprobe is None else max(1, nprobe))
        wanted = min(self._n, k)
        graph = len(q) <= _GRAPH_QUERIES and self._nlist >= _GRAPH_LISTS
        with self._threads(0):  # one thread even for a large batch: see `_threads`
            # The IVF's own search in its two steps, to keep each query's nearest list.
            if graph:
                walk = self._faiss.SearchParametersHNSW()
                walk.efSearch = max(_GRAPH_EF, params.nprobe)
                coarse_scores, coarse = self._centroid_graph().search(q, params.nprobe, params=walk)
            else:
                coarse_scores, coarse = self._ivf.quantizer.search(q, params.nprobe)
            scores = np.empty((len(q), wanted), dtype=np.float32)
            ids = np.empty((len(q), wanted), dtype=np.int64)
            ptr = self._faiss.swig_ptr  # (the Python wrapper of search_preassigned refuses params)
            self._ivf.search_preassigned_c(
                len(q), ptr(q), wanted, ptr(coarse), ptr(coarse_scores), ptr(scores), ptr(ids), False, params
            )
        # Each query's first list, for its add (`_flush`). The graph's is the nearest centroid's for
        # 99.6% of queries (measured at 4,096 lists) and a near one's otherwise, as an IVF with an
        # HNSW coarse quantizer assigns; scoring every centroid again for the add instead cost a
        # flush of 256 single writes at 1M more than the graph saved them.
        if len(self._lists) + len(q) > _LISTS_KEPT:
            self._lists.clear()
        self._lists.update(zip((v.tobytes() for v in q), coarse[:, 0].tolist(), strict=True))
        ids = np.asarray(ids, dtype=np.int64)
        if self._pending:
            # The pending rows, scored exactly, compete with the IVF's candidates for the top-k.
            extra = self._pending_rows()
            ids = np.concatenate([ids, np.broadcast_to(extra, (len(q), len(extra)))], axis=1)
            vecs = self._pending.vectors()  # as written (float32), not dequantised from the matrix
            # A few queries: numpy's own kernel, not BLAS (see `_dot`); a batch: BLAS.
            exact_scores = np.einsum("qd,pd->qp", q, vecs) if len(q) <= 4 else q @ vecs.T
            scores = np.concatenate([np.where(ids[:, :wanted] >= 0, scores, -np.inf), exact_scores], axis=1)
            best_first = np.argsort(-scores, axis=1, kind="stable")[:, :wanted]
            ids = np.take_along_axis(ids, best_first, axis=1)
            scores = np.take_along_axis(scores, best_first, axis=1)
        found = ids >= 0
        if exact:
            cand = np.where(found, ids, 0)
            sims = np.einsum("bkd,bd->bk", self._get(cand.reshape(-1)).reshape(*cand.shape, self._dim), q)
            sims[~found] = -np.inf
            order = np.lexsort((cand, -sims), axis=1)  # best first, ties by row
            rows = np.take_along_axis(np.where(found, ids, -1), order, axis=1)
            best = np.take_along_axis(sims, order, axis=1).astype(np.float32)
        else:
            rows = np.where(found, ids, -1)
            best = np.where(found, scores, -np.inf).astype(np.float32)
        if rows.shape[1] < k:
            pad = k - rows.shape[1]
            rows = np.pad(rows, ((0, 0), (0, pad)), constant_values=-1)
            best = np.pad(best, ((0, 0), (0, pad)), constant_values=-np.inf)
        return rows, best

    def _centroid_graph(self) -> Any:
        """The HNSW graph over the IVF's centroids (see `_GRAPH_QUERIES`), built on one thread, so
        equal centroids give an equal graph."""
        if self._graph is None:
            faiss = self._faiss
            centroids = np.ascontiguousarray(self._ivf.quantizer.reconstruct_n(0, self._nlist), dtype=np.float32)
            graph = faiss.IndexHNSWFlat(self._dim, _GRAPH_M, faiss.METRIC_INNER_PRODUCT)
            graph.hnsw.efConstruction = 40
            with self._threads(0):
                graph.add(centroids)
            self._graph = graph
        return self._graph

    @contextlib.contextmanager
    def _threads(self, work: int) -> Iterator[None]:
        """faiss on the calling thread only for a small call (see `_SMALL_CALL`); OpenMP's thread
        count is per calling thread, so other threads' calls keep theirs. (`nearest` asks for it
        whatever the batch: its 1,000 queries against 4,096 centroids were faster on one thread
        than on two on a busy 2-core machine.)"""
        if work > _SMALL_CALL:
            yield
            return
        faiss = self._faiss
        before = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(1)
        try:
            yield
        finally:
            faiss.omp_set_num_threads(before)

    def search(
        self, query: npt.NDArray[np.float32], k: int, allowed: npt.NDArray[np.bool_] | None = None
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """The `k` best allowed keys, best first, and their exact cosines.

        `allowed` is a boolean mask over `keys()` order (entries past ``len(self)`` are ignored);
        the result holds ``min(k, #allowed)`` keys, never a disallowed one.
        """
        n = self._n
        empty = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))
        if n == 0 or k <= 0:
            return empty
        q = np.ascontiguousarray(query, dtype=np.float32).reshape(-1)
        if q.shape[0] != self._dim:
            raise ValueError(f"query has dimension {q.shape[0]}, the index {self._dim}")
        mask: npt.NDArray[np.bool_] | None = None
        count = n
        if allowed is not None:
            if len(allowed) < n:
                raise ValueError(f"allowed has {len(allowed)} entries, the index {n} keys")
            mask = np.asarray(allowed[:n], dtype=np.bool_)
            count = int(np.count_nonzero(mask))
            if count == 0:
                return empty
            if count == n:
                mask = None
        k = min(k, count)
        wanted = k * self._rerank
        if self._ivf is None or wanted >= count or count <= self._exact_rows:
            return self._exact(q, k, mask, count)
        rows = self._candidates(q, wanted, mask, count)
        if self._pending:  # not in the IVF yet: every allowed one is a candidate
            extra = self._pending_rows()
            rows = np.concatenate([rows, extra if mask is None else extra[mask[extra]]])
        if len(rows) < k:  # the probed lists held too few allowed vectors: stay correct, go exact
            return self._exact(q, k, mask, count)
        sims = _dot(self._get(rows), q)
        top = _top(sims, k)
        return self._keys[rows[top]].copy(), sims[top].astype(np.float32)

    # -- the matrix, float32 or compact --------------------------------------------------------

    @property
    def compact(self) -> bool:
        """True once the vectors are held as int8 codes with a per-vector scale."""
        return self._codes is not None

    def _grow(self, need: int) -> None:
        self._memo = None
        if self._codes is None:
            super()._grow(need)
            return
        cap = len(self._keys)
        if need <= cap:
            return
        new = max(need, cap * 2)
        codes = np.zeros((new, self._dim), dtype=np.int8)
        codes[: self._n] = self._codes[: self._n]
        scale = np.zeros(new, dtype=np.float32)
        scale[: self._n] = self._scale[: self._n]
        keys = np.zeros(new, dtype=np.int64)
        keys[: self._n] = self._keys[: self._n]
        self._codes, self._scale, self._keys = codes, scale, keys

    def _to_compact(self) -> None:
        """Quantise the float32 matrix into codes and scales, block by block, and drop it."""
        self._memo = None
        cap = len(self._keys)
        codes = np.zeros((cap, self._dim), dtype=np.int8)
        scale = np.zeros(cap, dtype=np.float32)
        for start in range(0, self._n, _BLOCK):
            stop = min(start + _BLOCK, self._n)
            codes[start:stop], scale[start:stop] = _quantise(self._vecs[start:stop])
        self._codes, self._scale = codes, scale
        self._vecs = np.zeros((0, self._dim), dtype=np.float32)

    def _put(self, rows: slice | npt.NDArray[np.int64], vecs: npt.NDArray[np.float32]) -> None:
        self._memo = None
        if self._codes is None:
            self._vecs[rows] = vecs
        else:
            self._codes[rows], self._scale[rows] = _quantise(vecs)

    def _get(self, rows: slice | npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        """The vectors of `rows` as float32 (dequantised when compact): a new array when compact."""
        if self._codes is None:
            return self._vecs[rows]
        out: npt.NDArray[np.float32] = self._codes[rows].astype(np.float32)
        out *= self._scale[rows][:, None]
        return out

    def _scores(self, q: npt.NDArray[np.float32], rows: npt.NDArray[np.int64] | None = None) -> npt.NDArray[np.float32]:
        """Dot products of `q` with `rows` (every row when None), in blocks when compact so no
        float32 copy of a large matrix is ever made."""
        if self._codes is None:
            return _dot(self._vecs[: self._n] if rows is None else self._vecs[rows], q)
        total = self._n if rows is None else len(rows)
        out = np.empty(total, dtype=np.float32)
        for start in range(0, total, _BLOCK):
            stop = min(start + _BLOCK, total)
            sel: slice | npt.NDArray[np.int64] = slice(start, stop) if rows is None else rows[start:stop]
            out[start:stop] = _dot(self._codes[sel].astype(np.float32), q) * self._scale[sel]
        return out

    def stored_form(self, vecs: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """`vecs` as this index would give them back once stored (`vectors_at`): dequantised int8
        rows once compact, else as they are. A cosine with them equals one with the stored row."""
        v = np.asarray(vecs, dtype=np.float32)
        if self._codes is None:
            return v
        codes, scale = _quantise(v)
        out: npt.NDArray[np.float32] = codes.astype(np.float32)
        out *= scale[:, None]
        return out

    def vectors_matrix(self) -> npt.NDArray[np.float32]:
        """Every vector in `keys()` order: a view when float32, a dequantised copy when compact
        (a large array: prefer `similarities` or `vectors_of`)."""
        return self._get(slice(0, self._n))

    def vectors_at(self, rows: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        """The stored vectors at `rows`, float32 (dequantised from int8 once compact)."""
        return self._get(np.asarray(rows, dtype=np.int64))

    def vectors_of(self, keys: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        rows = self._rows.lookup(keys)
        out = np.zeros((len(rows), self._dim), dtype=np.float32)
        known = rows >= 0
        if known.any():
            out[known] = self._get(rows[known])
        return out

    def same_vectors(self, keys: npt.NDArray[np.int64], vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.bool_]:
        if self._codes is None:
            return super().same_vectors(keys, vectors)
        rows = self._rows.lookup(keys)
        same = np.zeros(len(rows), dtype=np.bool_)
        known = np.flatnonzero(rows >= 0)
        if len(known):
            codes, scale = _quantise(np.asarray(vectors, dtype=np.float32)[known])
            at = rows[known]
            same[known] = np.all(self._codes[at] == codes, axis=1) & (self._scale[at] == scale)
        return same

    def similarities(self, queries: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        if self._codes is None:
            return super().similarities(queries)
        q = np.asarray(queries, dtype=np.float32)
        out = np.empty((len(q), self._n), dtype=np.float32)
        for start in range(0, self._n, _BLOCK):
            stop = min(start + _BLOCK, self._n)
            block = self._codes[start:stop].astype(np.float32)
            if len(q) <= 4:
                for i, r in enumerate(q):
                    out[i, start:stop] = np.einsum("nd,d->n", block, r)
            else:
                out[:, start:stop] = q @ block.T
            out[:, start:stop] *= self._scale[start:stop]
        return out

    # ----------------------------------------------------------------------------------------
    # Tunables, state and persistence
    # ----------------------------------------------------------------------------------------

    @property
    def trained(self) -> bool:
        """True once the IVF is built (the index held ``train_at`` vectors)."""
        return self._ivf is not None

    @property
    def nlist(self) -> int:
        """IVF lists of the current build (0 before the first)."""
        return self._nlist

    @property
    def built_at(self) -> int:
        """Vectors the IVF held when it was last built (0 before the first build)."""
        return self._built_at

    @property
    def generation(self) -> int:
        """IVF builds this instance has made (0 when new or loaded): it changes exactly when an
        `upsert` or `rebuild` (re)built the IVF, so a caller can tell that a saved copy is stale."""
        return self._generation

    @property
    def settings(self) -> dict[str, Any]:
        """The constructor's tunables as given (``None`` for automatic ones): two indexes with equal
        settings build and search alike, so a saved index may stand in for a configured one."""
        return {
            "dim": self._dim,
            "nlist": self._nlist_setting,
            "nprobe": self._nprobe_setting,
            "rerank": self._rerank,
            "train_at": self._train_at,
            "rebuild_growth": self._rebuild_growth,
            "exact_rows": self._exact_rows,
            "seed": self._seed,
            "compact": self._compact,
        }

    @property
    def nprobe(self) -> int:
        """Lists probed by an unfiltered query (0 before the first build)."""
        if self._ivf is None:
            return 0
        if self._nprobe_setting is not None:
            return min(self._nprobe_setting, self._nlist)
        return auto_nprobe(self._nlist)

    @nprobe.setter
    def nprobe(self, value: int | None) -> None:
        """Set the probe count (``None``: automatic); takes effect on the next search."""
        if value is not None and value < 1:
            raise ValueError(f"nprobe must be at least 1, got {value}")
        self._nprobe_setting = value

    def rebuild(self) -> None:
        """Re-cluster every vector and rebuild the IVF (slow at a million vectors on 2 cores).

        Does nothing on an empty index. Called by `upsert` when the index reaches ``train_at``
        vectors and when it has grown ``rebuild_growth`` times since the last build. Its cost shows in
        the ``build_s`` of benchmarks/results/vector_index.json (benchmarks/bench_vector_index.py).
        """
        n = self._n
        if n == 0:
            return
        if self._compact and self._codes is None:
            self._to_compact()
        faiss = self._faiss
        nlist = min(self._nlist_setting, n) if self._nlist_setting is not None else auto_nlist(n)
        sample_size = min(n, max(nlist * _POINTS_PER_LIST, 1))
        rng = np.random.default_rng(self._seed)
        picked = np.arange(n) if sample_size == n else np.sort(rng.choice(n, sample_size, replace=False))
        sample = np.ascontiguousarray(self._get(picked))
        quantizer = faiss.IndexFlatIP(self._dim)
        index = faiss.IndexIVFScalarQuantizer(
            quantizer, self._dim, nlist, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT, True
        )
        index.cp.niter = _KMEANS_ITERATIONS
        index.cp.spherical = True
        index.cp.seed = self._seed
        index.cp.max_points_per_centroid = max(_POINTS_PER_LIST, sample_size // nlist + 1)
        index.cp.min_points_per_centroid = 1
        index.train(sample)
        del sample
        index.set_direct_map_type(faiss.DirectMap.Hashtable)  # O(1) removal of a replaced row
        for start in range(0, n, _BLOCK):  # in blocks: no float32 copy of a compact matrix
            stop = min(start + _BLOCK, n)
            index.add_with_ids(
                np.ascontiguousarray(self._get(slice(start, stop))), np.arange(start, stop, dtype=np.int64)
            )
        self._ivf, self._nlist, self._built_at = index, nlist, n
        self._pending.clear()
        self._lists.clear()  # lists of the old clustering
        self._graph = None
        self._generation += 1

    def to_arrays(self, *, ivf: bool = True) -> dict[str, npt.NDArray[Any]]:
        """The whole index as named arrays (``meta``, ``keys``, ``vectors`` or, when compact,
        ``codes`` and ``scales``, and ``ivf``), for `save` or a caller's own file
        (`engramdb.vectors.npz.write_arrays`). With ``ivf=False`` the IVF is left out (an empty
        ``ivf``): the caller writes it with `write_ivf` and hands the file to `from_arrays`, which
        saves holding a serialised copy of a large IVF in memory.

        The arrays are views of the live index: write them out before the next `upsert`.
        """
        self._flush()  # the IVF written out holds every row
        n = self._n
        meta = {
            "format": _FORMAT,
            "dim": self._dim,
            "nlist_setting": self._nlist_setting,
            "nprobe_setting": self._nprobe_setting,
            "rerank": self._rerank,
            "train_at": self._train_at,
            "rebuild_growth": self._rebuild_growth,
            "exact_rows": self._exact_rows,
            "seed": self._seed,
            "built_at": self._built_at,
            "nlist": self._nlist,
            "compact_setting": self._compact,
            "compact": self._codes is not None,
            "ivf_external": bool(self._ivf is not None and not ivf),
        }
        blob = np.zeros(0, dtype=np.uint8)  # empty: not built (or written apart)
        if self._ivf is not None and ivf:
            blob = np.asarray(self._faiss.serialize_index(self._ivf), dtype=np.uint8)
        # The centroid graph goes with it when the IVF is large enough to use one: made here if
        # no `nearest` made it yet, so the process that adopts the file does not build it on its
        # first write (at 1M memories that showed in the mean write time over a run of 500).
        graph = np.zeros(0, dtype=np.uint8)
        if self._ivf is not None and self._nlist >= _GRAPH_LISTS:
            graph = np.asarray(self._faiss.serialize_index(self._centroid_graph()), dtype=np.uint8)
        out: dict[str, npt.NDArray[Any]] = {
            "meta": np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8),
            "keys": self._keys[:n],
            "ivf": blob,
            "graph": graph,
        }
        if self._codes is None:
            out["vectors"] = self._vecs[:n]
        else:
            out["codes"], out["scales"] = self._codes[:n], self._scale[:n]
        return out

    def write_ivf(self, path: str | os.PathLike[str]) -> None:
        """Write the IVF alone to `path` (faiss's own format; see `to_arrays`).

        Raises:
            ValueError: the index is untrained.
            OSError: the file could not be written (a full disk, no permission).
        """
        if self._ivf is None:
            raise ValueError("the index has no IVF to write (it is below train_at)")
        self._flush()
        try:
            self._faiss.write_index(self._ivf, os.fspath(path))
        except RuntimeError as exc:
            # faiss reports every failed write (ENOSPC included) as a bare RuntimeError; callers
            # treat a side file they cannot write as any other I/O failure.
            raise OSError(f"faiss could not write {os.fspath(path)}: {exc}") from exc

    @classmethod
    def from_arrays(
        cls,
        arrays: Mapping[str, npt.NDArray[Any]],
        *,
        copy: bool = True,
        ivf_file: str | os.PathLike[str] | None = None,
        ivf: Any = None,
    ) -> AnnIndex:
        """An index from the arrays of `to_arrays` (other entries of `arrays` are ignored), and
        the IVF from `ivf_file` when it was written apart (`write_ivf`); `ivf` is that file as
        `read_ivf` read it already, when the caller read it beforehand (on another thread).

        With ``copy=False`` the ``vectors`` array becomes the index's matrix when it is a writable
        C-contiguous float32 array (arrays just read from a file: no second copy of a large matrix);
        the caller must not use it afterwards.

        Raises:
            MissingExtra: faiss is not installed.
            ValueError: an unknown format or inconsistent arrays (rebuild from the stored vectors).
            KeyError: an array is missing.
        """
        faiss = _faiss()
        meta = json.loads(bytes(np.asarray(arrays["meta"], dtype=np.uint8)).decode("utf-8"))
        fmt = meta.get("format") if isinstance(meta, dict) else None
        if fmt != _FORMAT:
            raise ValueError(f"unsupported AnnIndex file format {fmt!r}")
        keys = np.array(arrays["keys"], dtype=np.int64).reshape(-1)
        dim = int(meta["dim"])
        n = len(keys)
        compact = bool(meta.get("compact", False))
        if compact:
            codes, scales = np.asarray(arrays["codes"]), np.asarray(arrays["scales"])
            if codes.dtype != np.int8 or codes.shape != (n, dim) or scales.dtype != np.float32 or scales.shape != (n,):
                raise ValueError(f"codes of {codes.dtype} {codes.shape} do not match {n} keys x dim {dim}")
            vectors = codes
        else:
            vectors = np.asarray(arrays["vectors"])
            if vectors.dtype != np.float32 or vectors.shape != (n, dim):
                raise ValueError(f"vectors of {vectors.dtype} {vectors.shape} do not match {n} keys x dim {dim}")
        index = cls(
            dim,
            nlist=meta["nlist_setting"],
            nprobe=meta["nprobe_setting"],
            rerank=int(meta["rerank"]),
            train_at=int(meta["train_at"]),
            rebuild_growth=float(meta["rebuild_growth"]),
            exact_rows=int(meta["exact_rows"]),
            seed=int(meta["seed"]),
            capacity=1,
            compact=bool(meta.get("compact_setting", False)),
        )
        if n:
            adopt = not copy and vectors.flags.c_contiguous and vectors.flags.writeable
            if compact:
                # Adopted with any room read behind it (`with_room`): new rows need no copy of a large matrix.
                codes = with_room(vectors) if adopt else np.array(vectors, dtype=np.int8, order="C")
                index._codes = codes
                index._scale = np.zeros(len(codes), dtype=np.float32)
                index._scale[:n] = scales
                index._vecs = np.zeros((0, dim), dtype=np.float32)
                keys = np.concatenate([keys, np.zeros(len(codes) - n, dtype=np.int64)])
            else:
                index._vecs = vectors if adopt else np.array(vectors, dtype=np.float32, order="C")
            index._keys = keys
        elif compact:
            index._codes = np.zeros((1, dim), dtype=np.int8)
            index._scale = np.zeros(1, dtype=np.float32)
        try:
            index._rows = KeyRows.of(keys[:n])
        except ValueError:
            raise ValueError("the file repeats a key") from None
        index._n = n
        ivf_bytes = np.asarray(arrays["ivf"], dtype=np.uint8)
        external = bool(meta.get("ivf_external", False))
        if external and ivf_file is None:
            raise ValueError("the IVF was written apart and no ivf_file was given")
        if len(ivf_bytes) or external:
            if external and ivf is None and ivf_file is not None:
                ivf = read_ivf(ivf_file)
            elif not external:
                ivf = None
            if ivf is None:
                ivf = faiss.deserialize_index(ivf_bytes)
            if not isinstance(ivf, faiss.IndexIVFScalarQuantizer):
                raise ValueError(f"the IVF is a {type(ivf).__name__}, not an IndexIVFScalarQuantizer")
            if int(ivf.ntotal) != n or int(ivf.d) != dim or int(ivf.nlist) != int(meta["nlist"]):
                raise ValueError(f"the IVF holds {int(ivf.ntotal)} vectors of dim {int(ivf.d)}, the file {n} x {dim}")
            if ivf.direct_map.type != faiss.DirectMap.Hashtable:
                ivf.set_direct_map_type(faiss.DirectMap.Hashtable)
            index._ivf = ivf
            index._nlist = int(meta["nlist"])
            index._built_at = int(meta["built_at"])
            index._graph = _adopt_graph(faiss, arrays, ivf)
        return index

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the whole index (keys, vectors, IVF) to one ``.npz`` side file, atomically."""
        write_arrays(path, self.to_arrays())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> AnnIndex:
        """Read an index written by `save`.

        Raises:
            MissingExtra: faiss is not installed.
            ValueError: the file is of an unknown format or inconsistent (rebuild it from the vectors).
        """
        with Path(path).open("rb") as fh:
            try:
                return cls.from_arrays(StoredArrays(fh), copy=False)
            except KeyError as exc:
                raise ValueError(f"{path} is not an AnnIndex file ({exc.args[0]!r} is missing)") from None

    # ----------------------------------------------------------------------------------------
    # Internals
    # ----------------------------------------------------------------------------------------

    def _candidates(
        self, q: npt.NDArray[np.float32], wanted: int, mask: npt.NDArray[np.bool_] | None, count: int
    ) -> npt.NDArray[np.int64]:
        """Rows of up to `wanted` allowed candidates from the IVF, by approximate score."""
        faiss = self._faiss
        n = self._n
        nprobe = self.nprobe
        if mask is not None:
            nprobe = math.ceil(nprobe * (count / n) ** -_FILTER_PROBE_EXPONENT)
        params = faiss.SearchParametersIVF()
        params.nprobe = min(self._nlist, nprobe)
        bits = None
        if mask is not None:
            bits = np.packbits(mask, bitorder="little")  # kept alive until the search returns
            params.sel = faiss.IDSelectorBitmap(n, faiss.swig_ptr(bits))
        _, ids = self._ivf.search(q[None, :], wanted, params=params)
        found: npt.NDArray[np.int64] = np.asarray(ids[0], dtype=np.int64)
        del bits
        return found[found >= 0]

    def _exact(
        self, q: npt.NDArray[np.float32], k: int, mask: npt.NDArray[np.bool_] | None, count: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """Exact top-`k` among the allowed rows (all rows when `mask` is None)."""
        n = self._n
        if mask is None:
            sims = self._remember(q, self._scores(q))
            top = _top(sims, k)
            return self._keys[top].copy(), sims[top].astype(np.float32)
        if count * 4 < n:  # few allowed rows: score only those
            rows = np.flatnonzero(mask)
            sims = self._scores(q, rows)
            top = _top(sims, k)
            return self._keys[rows[top]].copy(), sims[top].astype(np.float32)
        sims = np.where(mask, self._remember(q, self._scores(q)), np.float32(-np.inf))
        top = _top(sims, k)
        return self._keys[top].copy(), sims[top].astype(np.float32)

    def _remember(self, q: npt.NDArray[np.float32], sims: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """Keep `sims`, every row's score for `q`, for `scores_of` (float32 only: a compact
        index scales after the product, its `vectors_of` before)."""
        self._memo = (q.tobytes(), sims) if self._codes is None else None
        return sims

    def scores_of(self, query: npt.NDArray[np.float32], keys: npt.NDArray[np.int64]) -> npt.NDArray[np.float32] | None:
        """`dot(vectors_of(keys), query)` from the last exact scan when it was of this very query
        over the whole float32 matrix and nothing was written since: the same kernel on the same
        rows, so the same values (each row's sum is its own). None when that scan cannot say
        (another query, a write since, a key without a vector): compute them."""
        memo = self._memo
        if memo is None or self._codes is not None:
            return None
        q = np.ascontiguousarray(query, dtype=np.float32).reshape(-1)
        if q.tobytes() != memo[0]:
            return None
        rows = self._rows.lookup(np.asarray(keys, dtype=np.int64))
        if len(rows) and int(rows.min()) < 0:
            return None
        out: npt.NDArray[np.float32] = memo[1][rows]
        return out


def _adopt_graph(faiss: ModuleType, arrays: Mapping[str, npt.NDArray[Any]], ivf: Any) -> Any:
    """The saved centroid graph (`AnnIndex._centroid_graph`) when the arrays hold one that is over
    this very IVF's centroids (the same vectors, in list order), else None (made on first use):
    a file written before graphs were saved has none, and a damaged or mismatched one is ignored
    (only the graph: the rest of the file was checked, and reloading the whole index from the rows
    costs far more at 1M memories than making the graph again)."""
    blob = np.asarray(arrays["graph"], dtype=np.uint8) if "graph" in arrays else np.zeros(0, dtype=np.uint8)
    if not len(blob):
        return None
    try:
        graph = faiss.deserialize_index(blob)
        nlist = int(ivf.nlist)
        if not isinstance(graph, faiss.IndexHNSWFlat) or int(graph.ntotal) != nlist or int(graph.d) != int(ivf.d):
            raise ValueError(f"a {type(graph).__name__} of {int(graph.ntotal)}, the IVF has {nlist} lists")
        if not np.array_equal(graph.reconstruct_n(0, nlist), ivf.quantizer.reconstruct_n(0, nlist)):
            raise ValueError("over other centroids than the IVF's")
    except (RuntimeError, ValueError) as exc:
        _log.debug("ignoring the saved centroid graph: %s", exc)
        return None
    return graph


def read_ivf(path: str | os.PathLike[str]) -> Any:
    """The faiss index of an IVF file `AnnIndex.write_ivf` wrote (see `AnnIndex.from_arrays`)."""
    return _faiss().read_index(os.fspath(path))


def _dot(matrix: npt.NDArray[np.float32], q: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """matrix @ q on the calling thread: faiss's inner-product kernel (``fvec_inner_products_ny``,
    serial SIMD), faster than einsum at 10k x 384 here; BLAS (matmul) is faster still on one
    thread but wakes its thread pool for each call, which made it far slower at 10k rows on a busy
    2-core machine. Its sums run in another order than einsum's, so a cosine can differ from
    einsum's in the last float32 bits (<= 1.1e-6 here)."""
    m = np.ascontiguousarray(matrix, dtype=np.float32)
    out = np.empty(len(m), dtype=np.float32)
    if len(m) and m.shape[1]:
        faiss = _faiss()
        v = np.ascontiguousarray(q, dtype=np.float32)
        faiss.fvec_inner_products_ny(faiss.swig_ptr(out), faiss.swig_ptr(v), faiss.swig_ptr(m), m.shape[1], len(m))
    elif len(m):
        out[:] = 0.0
    return out


def dot(matrix: npt.NDArray[np.float32], q: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Dot products of each row of `matrix` with `q`, as `AnnIndex.search` scores them (so a
    caller scoring a few vectors itself gets the very values a search gives)."""
    return _dot(matrix, q)


def _top(sims: npt.NDArray[np.float32], k: int) -> npt.NDArray[np.intp]:
    """Positions of the `k` largest values, largest first (ties in a stable order)."""
    if k >= len(sims):
        return np.argsort(-sims, kind="stable")
    top = np.argpartition(-sims, k - 1)[:k]
    return top[np.argsort(-sims[top], kind="stable")]


def _quantise(vecs: npt.NDArray[np.float32]) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float32]]:
    """int8 codes and per-row scales of `vecs` (``code * scale`` within ``scale / 2`` of each value)."""
    v = np.asarray(vecs, dtype=np.float32)
    if v.ndim == 1:
        v = v[None, :]
    peak = np.abs(v).max(axis=1) if v.shape[1] else np.zeros(len(v), dtype=np.float32)
    scale = (peak / np.float32(127)).astype(np.float32)
    inv = np.divide(np.float32(1), scale, out=np.zeros_like(scale), where=scale > 0)
    codes = np.clip(np.rint(v * inv[:, None]), -127, 127).astype(np.int8)
    return codes, scale
