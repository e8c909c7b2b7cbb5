"""The vector half of candidate generation: an in-memory index of memory vectors with the
visibility attributes beside it, so the visible set is masked *before* the top-k is taken.

The stored vectors are the truth; this is a cache refreshed incrementally by the memories'
write sequence (``changed``), which every process's writes advance, so a recall always sees
what other threads and processes have committed.

**Surviving a restart.** Given the `database` file and an `AnnIndex`, the channel saves the index
beside the database (see `vector_file`) after every refresh that (re)built the IVF, and in
`save_if_changed` (the engine's `close`) when more than a tenth of the cached rows changed since the
last save. The first refresh of a new process then adopts that file instead of reading every
vector and training the IVF again, when it fits this database: same embedder and dimension, same
``instance_id``, a counter not ahead of the database, equal index settings, and the newest saved
vectors equal to the stored ones (a restored backup that has diverged since is refused). It then
reads only the visibility columns of every memory (no vector blobs) and each memory's
``changed``: a row the file holds at the same ``changed`` is trusted, any other memory at or
below the saved counter is read again from the database, memories the file holds but the
database does not stay hidden, and the usual incremental refresh goes on from the saved counter.
Whatever is wrong with the file, it is ignored (logged at debug level) and everything is loaded
as before.
"""

from __future__ import annotations

import logging
import stat
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from engramdb.embeddings.base import Embedder
from engramdb.memories.model import Visibility
from engramdb.retrieval.columns import VisibilityColumns
from engramdb.retrieval.vector_file import read_side_file, side_file_for, write_side_file
from engramdb.storage.ports import Backend, VectorRow
from engramdb.vectors.ann import AnnIndex
from engramdb.vectors.base import VectorIndex
from engramdb.vectors.exact import ExactIndex

log = logging.getLogger(__name__)

#: saved vectors compared with the stored ones when a side file is adopted
_TIP_ROWS = 32
#: `save_if_changed` saves when more than this share of the cached rows changed since the last save
_CLOSE_SAVE_SHARE = 0.1
#: `best_matches` computes its similarities in blocks of rows of about this many bytes
SIMS_BYTES = 64 << 20
#: nearest memories `near_duplicates` takes per item before it filters them (see there); at 1M
#: memories 16 left 4-5 of 851 items to a filtered search, 32 none or one
NEAR_K = 32
#: passing candidates re-scored exactly, and how far an approximate score may be below a cosine
_RESCORE = 4
_APPROX_MARGIN = 0.02


class VectorChannel:
    """Vectors of every memory with an embedding from `embedder`, and their visibility attributes.

    Args:
        embedder: the memories' embedder (its name selects the stored vectors).
        index: the `VectorIndex` to fill (default: `ExactIndex`).
        database: the database file, beside which the index is kept across processes (see the
            module docstring); used only with an `AnnIndex`. None: never saved.
    """

    def __init__(self, embedder: Embedder, index: VectorIndex | None = None, *, database: Path | None = None) -> None:
        self.embedder = embedder
        self.index: VectorIndex = index if index is not None else ExactIndex(embedder.dim)
        # Re-entrant: search() and best_matches() hold it while they read arrays that refresh() grows.
        self._lock = threading.RLock()
        self._seen = -1
        self.cols = VisibilityColumns()
        self._database = database
        #: where the index is kept between processes (None: it is not)
        self.side_file = (
            side_file_for(database, embedder.name)
            if database is not None and isinstance(self.index, AnnIndex)
            else None
        )
        # Per index row, the `changed` its vector was read at (~changed once the memory lost it):
        # saved with the index so a new process can tell which rows are still current.
        self._changed = np.zeros(1024 if self.side_file else 0, dtype=np.int64)
        self._instance: str | None = None
        self._dirty = 0  # rows loaded or hidden since the last save or adoption
        self._saved_generation = 0
        # A refresh inside an open transaction may cache rows that are then rolled back: such a
        # cache is never saved for other processes.
        self._unsafe = False
        self._restored = False

    @property
    def approximate(self) -> bool:
        """True when searches go through a trained IVF rather than a scan of every vector."""
        return isinstance(self.index, AnnIndex) and self.index.trained

    @property
    def restored(self) -> bool:
        """True when this channel's index came from the side file rather than from every stored vector."""
        return self._restored

    def refresh(self, store: Backend) -> None:
        """Load whatever changed since the last refresh (cheap when nothing did)."""
        with self._lock:
            latest = store.changes.current()
            if latest == self._seen:
                return
            if store.in_transaction():
                self._unsafe = True
            if self._seen == -1 and self.side_file is not None:
                self._restore(store, latest)
            self._apply(store.vectors.cache_rows(self.embedder.name, self._seen))
            self._seen = latest
            index = self.index
            if isinstance(index, AnnIndex) and index.generation != self._saved_generation:
                self._save()

    def save_if_changed(self, store: Backend | None = None) -> None:
        """Save the side file when more than a tenth of the cached rows were loaded or hidden since
        the last save (or since the file was adopted); called by `DynamicMemoryEngine.close`.
        With `store`, catch up with it first: a cache behind the database may still hold a vector
        forgotten since, and must not write it out."""
        with self._lock:
            if store is not None and self._seen >= 0:
                self.refresh(store)
            if self._dirty > _CLOSE_SAVE_SHARE * len(self.index):
                self._save()

    # -- loading ----------------------------------------------------------------------------------

    def _apply(self, rows: Sequence[VectorRow]) -> None:
        """Cache `rows` (`engramdb.storage.ports.VectorRow`): upsert their vectors, or purge the ones that have none.

        A changed row without a vector (forgotten, or written without an embedder) must not keep a
        stale cached vector visible, nor anywhere at all once forgotten: it is marked archived in
        the cache and its vector is overwritten with zeros, in the matrix and in the IVF, so no
        later save of the side file carries it.
        """
        track = self.side_file is not None
        purged = []
        for r in rows:
            if r[9] is None:
                row = self.index.row_of(r[0])
                if row is not None:
                    self.cols.hide(row)
                    purged.append(r[0])
                    if track:
                        self._changed[row] = ~int(r[1])
                    self._dirty += 1
        if purged:
            keys = np.asarray(purged, dtype=np.int64)
            gone = np.flatnonzero(np.any(self.index.vectors_of(keys) != 0, axis=1))
            if len(gone):
                self.index.upsert(keys[gone], np.zeros((len(gone), self.index.dim), dtype=np.float32))
        rows = [r for r in rows if r[9] is not None]
        if not rows:
            return
        keys = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        vecs = np.frombuffer(b"".join(r[9] for r in rows if r[9] is not None), dtype=np.float32).reshape(
            len(rows), self.index.dim
        )
        # Most changed rows are changed by an access (ring, strength), not a new vector: re-adding an
        # unchanged vector to the IVF cost ~14 ms per recall at 1M memories (the hits of the last one).
        fresh = np.ones(len(rows), dtype=np.bool_)
        known = np.flatnonzero([self.index.row_of(r[0]) is not None for r in rows])
        if len(known):
            fresh[known[np.all(self.index.vectors_of(keys[known]) == vecs[known], axis=1)]] = False
        if fresh.all():
            self.index.upsert(keys, vecs)
        elif fresh.any():
            self.index.upsert(keys[fresh], vecs[fresh])
        n = len(self.index)
        self.cols.grow(n)
        rows_of = np.fromiter((self.index.row_of(r[0]) for r in rows), dtype=np.int64, count=len(rows))
        self.cols.set_many(rows_of, [r[2:9] for r in rows])
        if track:
            if len(self._changed) < n:
                grown = np.zeros(max(n, 2 * len(self._changed)), dtype=np.int64)
                grown[: len(self._changed)] = self._changed
                self._changed = grown
            self._changed[rows_of] = np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows))
        self._dirty += int(np.count_nonzero(fresh))

    def _restore(self, store: Backend, latest: int) -> None:
        """Adopt the side file when it fits this database (see the module docstring); else nothing."""
        assert self.side_file is not None and isinstance(self.index, AnnIndex)
        self._instance = store.instance_id()
        if self._instance is None:
            return
        try:
            saved = read_side_file(
                self.side_file,
                model=self.embedder.name,
                dim=self.embedder.dim,
                instance_id=self._instance,
                latest=latest,
                settings=self.index.settings,
            )
        except FileNotFoundError:
            return
        except Exception as exc:  # a cache: whatever is wrong with it, load from the database
            log.debug("ignoring the vector side file %s: %s: %s", self.side_file, type(exc).__name__, exc)
            return
        index, changed, change = saved.index, saved.changed, saved.change
        # The newest saved vectors must be the stored ones: a backup restored after the save and
        # written to since reuses change numbers for other contents.
        matrix = index.vectors_matrix()
        for n, n_changed, vec in store.vectors.tip(self.embedder.name, change, _TIP_ROWS):
            row = index.row_of(n)
            if row is not None and changed[row] == n_changed and matrix[row].tobytes() != vec:
                log.debug("ignoring the vector side file %s: its vectors differ from the database's", self.side_file)
                return
        # Both reads in one snapshot, so each memory's attributes and `changed` belong together.
        with store.snapshot():
            attrs = store.memories.visibility_rows()
            pairs = store.memories.changed_upto(change)
        cols = VisibilityColumns(max(1024, len(index)))  # rows never set stay archived: hidden
        mem = np.fromiter((p[0] for p in pairs), dtype=np.int64, count=len(pairs))
        at = np.fromiter((p[1] for p in pairs), dtype=np.int64, count=len(pairs))
        keys = index.keys()
        trusted = np.zeros(len(mem), dtype=np.bool_)
        rows = np.zeros(len(mem), dtype=np.int64)
        if len(keys) and len(mem):
            order = np.argsort(keys, kind="stable")
            pos = np.minimum(np.searchsorted(keys[order], mem), len(keys) - 1)
            rows = order[pos]
            held = keys[rows] == mem
            current = held & (changed[rows] == at)
            trusted = current | (held & (changed[rows] == ~at))
            attr_n = np.fromiter((a[0] for a in attrs), dtype=np.int64, count=len(attrs))
            where = np.searchsorted(attr_n, mem[current])
            cols.set_many(rows[current], [attrs[i][1:] for i in where.tolist()])
        self.index, self.cols, self._changed = index, cols, changed
        self._seen, self._dirty, self._restored = change, 0, True
        # Memories at or below the saved counter that the file does not hold as they are now.
        stale = mem[~trusted].tolist()
        if stale:
            self._apply(store.vectors.cache_rows_for(self.embedder.name, stale))
        if stale:
            log.debug("vector side file %s: %d memories read again", self.side_file, len(stale))

    # -- saving -----------------------------------------------------------------------------------

    def _save(self) -> None:
        """Write the side file (only a trained `AnnIndex` of committed rows is worth keeping)."""
        index = self.index
        if not isinstance(index, AnnIndex):
            return
        self._saved_generation = index.generation
        if self.side_file is None or self._instance is None or self._unsafe or self._seen < 0 or not index.trained:
            return
        assert self._database is not None
        try:
            mode = stat.S_IMODE(self._database.stat().st_mode) & 0o666
            write_side_file(
                self.side_file,
                index,
                self._changed[: len(index)],
                model=self.embedder.name,
                dim=self.embedder.dim,
                instance_id=self._instance,
                change=self._seen,
                mode=mode,
            )
        except OSError as exc:
            log.warning("could not save the vector cache to %s: %s", self.side_file, exc)
        self._dirty = 0

    def mask(self, vis: Visibility) -> npt.NDArray[np.bool_]:
        """The `Visibility` rule over the cached attributes (a fresh array)."""
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
        above the level, as (n, cosine) — a matrix product per block of rows, each block's product
        held to about `SIMS_BYTES` (a batch of 1,000 against 1M memories was a 4 GB matrix)."""
        with self._lock:
            n = len(self.index)
            if n == 0 or len(vecs) == 0:
                return [None] * len(vecs)
            base = self.mask(vis)
            q = np.asarray(vecs, dtype=np.float32)
            matrix = self.index.vectors_matrix()
            block = max(1, SIMS_BYTES // (4 * n))
            sims = np.empty((0, n), dtype=np.float32)
            out: list[tuple[int, float] | None] = []
            masks: dict[tuple[str, str, int], npt.NDArray[np.bool_]] = {}
            keys = self.index.keys()
            for i, f in enumerate(filters):
                if i % block == 0:
                    rows = q[i : i + block]
                    # Few rows: numpy's own kernel (BLAS wakes its thread pool for each small
                    # product, see ExactIndex.search); a real block: BLAS, where its threads pay off.
                    sims = (
                        np.stack([np.einsum("nd,d->n", matrix, r) for r in rows]) if len(rows) <= 4 else rows @ matrix.T
                    )
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
                row = np.where(m, sims[i % block], -np.inf)
                j = int(np.argmax(row))
                out.append((int(keys[j]), float(row[j])))
            return out

    def near_duplicates(
        self,
        vecs: npt.NDArray[np.float32],
        vis: Visibility,
        filters: Sequence[tuple[str, str, int]],
        min_cos: float,
    ) -> list[tuple[int, float] | None]:
        """`best_matches` kept only where the cosine is at least `min_cos` (else None): for each
        row of `vecs`, the most similar visible memory of the same (type, owner) at or above the
        level — what dedup on write asks, for a whole batch at once.

        Without a trained IVF this is `best_matches` (every vector is scanned anyway). With one,
        one unfiltered IVF search for the whole batch (the index's ``nearest``, over a few lists)
        gives each row its `NEAR_K` nearest memories by approximate score. The first of them that
        passes the row's filter is the answer (re-scored exactly, with the next few that pass, as
        the approximate order can swap near-equal scores), because any better memory that passes
        would have ranked above it; when none passes but the last is below `min_cos`, nothing
        beyond them can reach it: None. Only when all `NEAR_K` are near enough and none passes
        can the answer lie beyond them, and that row gets a filtered search (`search`, visibility
        inside it). So the filter never cuts a top-k short, and at 1M memories the batch costs one
        IVF search instead of a visibility mask over every row and a filtered search per item
        (~10 ms each).
        """
        q = np.ascontiguousarray(vecs, dtype=np.float32).reshape(len(filters), -1)
        with self._lock:
            n = len(self.index)
            nearest = getattr(self.index, "nearest", None)
            if n == 0 or not len(q) or nearest is None or not self.approximate:
                # No IVF (yet), or an exact index: exact scans with the filter inside. A few items
                # one filtered search each (it scores only the allowed rows), a batch one masked
                # matrix product per block of rows (`best_matches`).
                if len(q) <= 4:
                    found = [
                        next(iter(self.search(q[i], 1, vis, types=frozenset({t}), owner=o, min_level=lv).items()), None)
                        for i, (t, o, lv) in enumerate(filters)
                    ]
                else:
                    found = self.best_matches(q, vis, list(filters))
                return [b if b is not None and b[1] >= min_cos else None for b in found]
            # Approximate scores for the candidates (re-scored below for the few that matter).
            rows, approx = nearest(q, NEAR_K, exact=False)
            held = rows >= 0
            at = np.where(held, rows, 0)
            cols = self.cols
            ok = held.copy()
            ok[held] = cols.mask_at(vis, rows[held])
            want_type = np.array([[cols.types.find(t)] for t, _, _ in filters], dtype=np.int64)
            want_owner = np.array([[cols.codes.find(o)] for _, o, _ in filters], dtype=np.int64)
            want_level = np.array([[lv] for _, _, lv in filters], dtype=np.int64)
            ok &= (cols.type[at] == want_type) & (cols.owner[at] == want_owner) & (cols.level[at] >= want_level)
            keys, matrix = self.index.keys(), self.index.vectors_matrix()
            out: list[tuple[int, float] | None] = []
            for i, f in enumerate(filters):
                passing = np.flatnonzero(ok[i])
                if len(passing):
                    # The approximate order can swap near-equal scores: the best of the first few
                    # passing candidates by exact cosine (ties: the lower row).
                    top = rows[i, passing[:_RESCORE]]
                    exact = np.einsum("kd,d->k", matrix[top], q[i])
                    j = int(np.lexsort((top, -exact))[0])
                    cos = float(exact[j])
                    out.append((int(keys[top[j]]), cos) if cos >= min_cos else None)
                elif float(approx[i, -1]) < min_cos - _APPROX_MARGIN:
                    out.append(None)  # all k were more similar than anything beyond, and none passed
                else:
                    mtype, owner, level = f
                    hit = self.search(q[i], 1, vis, types=frozenset({mtype}), owner=owner, min_level=level)
                    best = next(iter(hit.items()), None)
                    out.append(best if best is not None and best[1] >= min_cos else None)
            return out

    def cosines(self, query_vec: npt.NDArray[np.float32], keys: list[int]) -> dict[int, float]:
        """Cosine of the query with each of `keys` (0 for memories without a vector)."""
        with self._lock:
            if not keys:
                return {}
            vecs = self.index.vectors_of(np.asarray(keys, dtype=np.int64))
            return dict(zip(keys, np.einsum("ij,j->i", vecs, query_vec).tolist(), strict=True))
