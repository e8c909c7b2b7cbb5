"""The vector half of candidate generation: an in-memory index of memory vectors with the
visibility attributes beside it, so the visible set is masked *before* the top-k is taken.

The stored vectors are the truth; this is a cache refreshed incrementally by the memories'
write sequence (``changed``), which every process's writes advance, so a recall always sees
what other threads and processes have committed. A first load reads the rows in batches
(`engramdb.storage.ports.MemoryVectors.cache_row_batches`) into an `AnnIndex` that defers its IVF
build to the end, so no copy of every vector is ever held as Python objects or float32 at once.

**Surviving a restart.** Given the `database` file and an `AnnIndex`, the channel saves the index
(matrix, keys, visibility columns, and the IVF in faiss's own file) as a side file
(`engramdb.retrieval.side_files`) after every refresh that (re)built the IVF, and in
`save_if_changed` (the engine's `close`) when more than a tenth of the cached rows changed since the
last save. The first refresh of a new process adopts that file when its stamp fits this database
(format and version, embedder and dimension, ``instance_id``, a change not ahead of the database,
the tip of recently changed rows, the sums of every array, equal index settings) and then reads
only the rows changed since the saved change, like any later refresh. Whatever is wrong with the
file, it is ignored (logged at debug level) and everything is loaded from the database.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from engramdb.embeddings.base import Embedder
from engramdb.memories.model import Visibility
from engramdb.retrieval import side_files
from engramdb.retrieval.columns import VisibilityColumns, restrict
from engramdb.retrieval.slots import Keys, TenantSlots
from engramdb.storage.ports import Backend, VectorRow
from engramdb.vectors import ann
from engramdb.vectors.ann import AnnIndex, read_ivf
from engramdb.vectors.base import VectorIndex
from engramdb.vectors.exact import ExactIndex

log = logging.getLogger(__name__)

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
#: cosines this close are ties: the same vector, up to float32 rounding in different kernels
_TIE = 1e-5

#: rows per batch of a first load
LOAD_BATCH = 20_000
KIND = "vectors"


class VectorChannel:
    """Vectors of every memory with an embedding from `embedder`, and their visibility attributes.

    Args:
        embedder: the memories' embedder (its name selects the stored vectors).
        index: the `VectorIndex` to fill (default: `ExactIndex`).
        database: the database file, beside which the index is kept across processes (see the
            module docstring); used only with an `AnnIndex`. None: never saved.
        tenant: hold this tenant's memories alone, following its change sequence, at slots of its
            own (`engramdb.retrieval.slots.TenantSlots`; `slots` shares them with the tenant's
            lexical cache); None: every memory of the store, at its key.
    """

    def __init__(
        self,
        embedder: Embedder,
        index: VectorIndex | None = None,
        *,
        database: Path | None = None,
        tenant: str | None = None,
        slots: Keys | None = None,
    ) -> None:
        self.embedder = embedder
        self.tenant = tenant
        self.slots: Keys = slots if slots is not None else TenantSlots() if tenant is not None else Keys()
        self.index: VectorIndex = (
            index if index is not None else ExactIndex(embedder.dim, capacity=1024 if tenant is None else 16)
        )
        # Re-entrant: search() and best_matches() hold it while they read arrays that refresh() grows.
        self._lock = threading.RLock()
        self._seen = -1
        # A refresh inside an open transaction read rows that may yet be rolled back, and a rolled
        # back change number and key are used again by the next writer: the first refresh outside
        # a transaction after one starts over from an empty index (`_start_over`).
        self._tainted = False
        self.cols = VisibilityColumns(1024 if tenant is None else 16)
        self._database = database
        #: where the index is kept between processes (None: it is not)
        self.side_file = (
            side_files.side_dir_for(database) / f"vectors-{side_files.safe_name(embedder.name)}.npz"
            if database is not None and isinstance(self.index, AnnIndex)
            else None
        )
        self._instance: str | None = None
        self._dirty = 0  # rows loaded or hidden since the last save or adoption
        self._saved_generation = 0
        # A refresh inside an open transaction may cache rows that are then rolled back: such a
        # cache is never saved for other processes.
        self._unsafe = False
        self._restored = False
        self._early: _Background | None = None  # the side file's read `prefetch` started

    @property
    def approximate(self) -> bool:
        """True when searches go through a trained IVF rather than a scan of every vector."""
        return isinstance(self.index, AnnIndex) and self.index.trained

    @property
    def restored(self) -> bool:
        """True when this channel's index came from the side file rather than from every stored vector."""
        return self._restored

    @property
    def loaded(self) -> bool:
        """True once a first refresh has read the store (this cache can answer)."""
        return self._seen >= 0

    @property
    def lock(self) -> threading.RLock:
        """The lock a refresh holds while it reads (held by a first load the whole time)."""
        return self._lock

    def refresh(self, store: Backend, latest: int | None = None) -> None:
        """Load whatever changed since the last refresh (cheap when nothing did). `latest` is the
        store's change sequence when the caller has just read it (`ChangeSequence.current`; a
        recall reads it once for both of its caches), else it is read here."""
        with self._lock:
            in_transaction = store.in_transaction()
            if self._tainted and not in_transaction:
                self._start_over()
            latest = store.changes.current(self.tenant) if latest is None else latest
            if latest == self._seen:
                return
            if in_transaction:
                self._unsafe = self._tainted = True
            if self._seen == -1 and self.side_file is not None:
                self._restore(store, latest)
            if self._seen == -1:
                self._load_all(store)
            else:
                self._apply(store.vectors.cache_rows(self.embedder.name, self._seen, self.tenant))
            self._seen = latest
            index = self.index
            if isinstance(index, AnnIndex) and index.generation != self._saved_generation:
                self._save(store)

    def passed(self, change: int) -> None:
        """The committed write `change` changed nothing this cache holds (a recall's access state:
        rings and strength, no vector or visibility attribute): a cache at the sequence just before
        it moves past it without reading (the write held the store's write lock, so nothing else
        changed in between); otherwise the next `refresh` reads it, as any other change — also when
        another thread holds the cache (a load: the writer does not wait for it)."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            if self._seen >= 0 and self._seen == change - 1:
                self._seen = change
        finally:
            self._lock.release()

    def _start_over(self) -> None:
        """Drop everything cached (an empty index of the same kind and settings): the next refresh
        loads again, from the side file when it fits. Only after a refresh inside a transaction."""
        index = self.index
        if isinstance(index, AnnIndex):
            self.index = AnnIndex(**index.settings)
            self.cols = VisibilityColumns()
        elif type(index) is ExactIndex:
            self.index = ExactIndex(index.dim)
            self.cols = VisibilityColumns()
        else:
            # An index of the caller's, which cannot be made anew here: every row it holds is hidden
            # and zeroed, and the load that follows sets again those the database still has.
            keys = np.asarray(index.keys()[: len(index)], dtype=np.int64)
            if len(keys):
                index.upsert(keys, np.zeros((len(keys), index.dim), dtype=np.float32))
                self.cols.archived[: len(keys)] = True
                self.cols.version += 1
        self._seen = -1
        self._tainted = self._unsafe = self._restored = False
        self._dirty = 0
        self._saved_generation = 0
        self._early = None

    def written(self, store: Backend, change: int, rows: Sequence[VectorRow]) -> None:
        """The committed write `change` stored `rows` (`engramdb.storage.ports.VectorRow`, as
        `cache_rows` would read them back) and changed nothing else: a cache at the sequence just
        before it takes them as written, without reading them back (the write held the store's
        write lock, so nothing else changed in between); otherwise the next `refresh` reads them.
        A single `remember` with dedup refreshed this cache from the database first thing in the
        next call, a measurable share of a write at 1M memories. While another thread holds the cache
        (its first load, a refresh, a search), the rows are left to the next `refresh` too: a
        write of a tenant whose cache is loading does not wait out the load (its dedup lookup went
        to the server, `Runtime.dedup_vectors`)."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            if self._seen < 0 or self._seen != change - 1:
                return
            self._apply(rows)
            self._seen = change
            index = self.index
            if isinstance(index, AnnIndex) and index.generation != self._saved_generation:
                self._save(store)
        finally:
            self._lock.release()

    def save_if_changed(self, store: Backend | None = None) -> None:
        """Save the side file when more than a tenth of the cached rows were loaded or hidden since
        the last save (or since the file was adopted), or when it is gone (a forget drops it);
        called by `DynamicMemoryEngine.close`.
        With `store`, catch up with it first: a cache behind the database may still hold a vector
        forgotten since, and must not write it out."""
        with self._lock:
            if self._tainted:  # read inside a transaction: reloading only to save is left to the next process
                return
            if store is not None and self._seen >= 0:
                self.refresh(store)
            # A file a forget dropped is written again too (the forgotten vector is purged by the
            # refresh above): else every later process rebuilt the index from every stored vector
            # (a long wait at 1M memories) until a tenth of the rows had changed.
            dropped = self.side_file is not None and self._seen >= 0 and not self.side_file.exists()
            if dropped or self._dirty > _CLOSE_SAVE_SHARE * len(self.index):
                self._save(store)

    # -- loading ----------------------------------------------------------------------------------

    def _load_all(self, store: Backend) -> None:
        """A first load, in batches; an `AnnIndex` builds its IVF once, at the end."""
        bulk = self.index.bulk() if isinstance(self.index, AnnIndex) else contextlib.nullcontext()
        with bulk:
            for rows in store.vectors.cache_row_batches(self.embedder.name, -1, LOAD_BATCH, self.tenant):
                self._apply(rows)

    def _apply(self, rows: Sequence[VectorRow]) -> None:
        """Cache `rows` (`engramdb.storage.ports.VectorRow`): upsert their vectors, or purge the ones that have none.

        A changed row without a vector (forgotten, or written without an embedder) must not keep a
        stale cached vector visible, nor anywhere at all once forgotten: it is marked archived in
        the cache and its vector is overwritten with zeros, in the matrix and in the IVF, so no
        later save of the side file carries it.
        """
        if self.slots.translated:
            rows = self.slots.rows(list(rows))
        purged = []
        for r in rows:
            if r[9] is None:
                row = self.index.row_of(r[0])
                if row is not None:
                    self.cols.hide(row)
                    purged.append(r[0])
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
        # unchanged vector to the IVF was a large part of each recall at 1M memories (the hits of the last one).
        fresh = ~_same_vectors(self.index, keys, vecs)
        if fresh.all():
            self.index.upsert(keys, vecs)
        elif fresh.any():
            self.index.upsert(keys[fresh], vecs[fresh])
        n = len(self.index)
        self.cols.grow(n)
        self.cols.set_many(_rows_of(self.index, keys), [r[2:9] for r in rows])
        self._dirty += int(np.count_nonzero(fresh))

    def _tip(self, store: Backend, upto: int) -> list[tuple[int, int, str]]:
        return [
            (int(n), int(c), side_files.digest(bytes(vec)))
            for n, c, vec in store.vectors.tip(self.embedder.name, upto, side_files.TIP_ROWS)
        ]

    def _restore(self, store: Backend, latest: int) -> None:
        """Adopt the side file when it fits this database (see the module docstring); else nothing."""
        assert self.side_file is not None and isinstance(self.index, AnnIndex)
        side_files.prefetch(self.side_file.parent)
        self._instance = store.instance_id()
        if self._instance is None:
            return
        try:
            for attempt in (1, 2):
                try:
                    index, cols, change = self._read(store, latest)
                    break
                except FileNotFoundError:
                    # The IVF named by the stamp may have been replaced by another process's save
                    # between our two opens: read the new pair once more.
                    if attempt == 2 or not self.side_file.exists():
                        raise
        except FileNotFoundError:
            return
        except Exception as exc:  # a cache: whatever is wrong with it, load from the database
            log.debug("ignoring the vector side file %s: %s: %s", self.side_file, type(exc).__name__, exc)
            return
        self.index, self.cols = index, cols
        self._seen, self._dirty, self._restored = change, 0, True

    def prefetch(self, store: Backend, latest: int) -> None:
        """A cache that has read nothing yet starts reading its side file's files on a thread of
        its own, so that a first recall reads them while it reads the lexical side file (at 1M
        memories ~0.8 GB against ~0.2 GB); the `refresh` that follows takes what it read."""
        with self._lock:
            if self._seen != -1 or self.side_file is None or self._early is not None:
                return
            if not isinstance(self.index, AnnIndex) or not self.side_file.exists():
                return
            instance = store.instance_id()
            if instance is None:
                return
            self._instance = instance
            self._early = _Background(_read_files, self.side_file, instance, latest)

    def _read(self, store: Backend, latest: int) -> tuple[AnnIndex, VisibilityColumns, int]:
        assert self.side_file is not None and self._instance is not None and isinstance(self.index, AnnIndex)
        early, self._early = self._early, None
        if early is not None:
            meta, arrays, ivf_file, loaded = early.result()  # raises what the read raised
        else:
            meta, arrays, ivf_file, loaded = _read_files(self.side_file, self._instance, latest)
        if meta.get("model") != self.embedder.name or meta.get("dim") != self.embedder.dim:
            raise ValueError(f"made for embedder {meta.get('model')!r} ({meta.get('dim')}-d)")
        change = int(meta["change"])
        if not side_files.tip_fits(meta.get("tip", []), self._tip(store, change)):
            raise ValueError("its rows differ from the database's (a restored backup written to since?)")
        index = AnnIndex.from_arrays(arrays, copy=False, ivf_file=ivf_file, ivf=loaded)
        if index.settings != self.index.settings:
            raise ValueError(f"made by an index with settings {index.settings}, this one has {self.index.settings}")
        cols = VisibilityColumns.from_arrays(arrays, meta["columns"], len(index))
        return index, cols, change

    # -- saving -----------------------------------------------------------------------------------

    def _save(self, store: Backend | None) -> None:
        """Write the side file (only a trained `AnnIndex` of committed rows is worth keeping)."""
        index = self.index
        if not isinstance(index, AnnIndex):
            return
        self._saved_generation = index.generation
        if self.side_file is None or self._unsafe or self._seen < 0 or not index.trained or store is None:
            return
        assert self._database is not None
        if self._instance is None:
            self._instance = store.instance_id()
            if self._instance is None:
                return
        folder = self.side_file.parent
        stem = self.side_file.name.removesuffix(".npz")
        ivf_name = f"{stem}.{secrets.token_hex(6)}.faiss"
        try:
            mode, dmode = side_files.folder_mode(self._database)
            folder.mkdir(mode=dmode, exist_ok=True)
            tmp = folder / f".{ivf_name}.tmp"
            try:
                index.write_ivf(tmp)
                os.chmod(tmp, mode)
                ivf_sum = side_files.file_sum(tmp)
                os.replace(tmp, folder / ivf_name)
            finally:
                tmp.unlink(missing_ok=True)
            arrays = {**index.to_arrays(ivf=False), **self.cols.to_arrays(len(index))}
            stamp = {
                "kind": KIND,
                "model": self.embedder.name,
                "dim": self.embedder.dim,
                "instance_id": self._instance,
                "change": self._seen,
                "tip": self._tip(store, self._seen),
                "ivf_file": ivf_name,
                "ivf_sum": ivf_sum,
                "columns": self.cols.codes_state(),
            }
            side_files.write_side_file(self.side_file, arrays, stamp, database=self._database)
            if store.memories.retired_since(self._seen):
                # Another engine forgot a memory after this cache's snapshot, and may have dropped
                # the side files before this one was written: this file may hold what it forgot.
                side_files.remove_side_files(self._database)
                return
            # Older IVF files of this embedder are no one's any more (a reader of the old stamp
            # that loses this race reads the new pair again, or loads from the database).
            for old in folder.glob(f"{stem}.*.faiss"):
                if old.name != ivf_name:
                    with contextlib.suppress(OSError):
                        old.unlink()
            legacy = self._database.with_name(
                f"{self._database.name}.vectors-{side_files.safe_name(self.embedder.name)}.npz"
            )
            with contextlib.suppress(OSError):
                legacy.unlink()  # the single-file format of earlier pre-releases
        except OSError as exc:
            log.warning("could not save the vector cache to %s: %s", self.side_file, exc)
        self._dirty = 0

    def nbytes(self) -> int:
        """About how many bytes this cache holds, its slots aside (what a budget of caches counts)."""
        with self._lock:
            index = self.index
            own = getattr(index, "nbytes", None)
            held = int(own()) if callable(own) else 4 * len(index) * index.dim
            return held + sum(int(getattr(self.cols, name).nbytes) for name in VisibilityColumns._ARRAYS)

    def mask(self, vis: Visibility) -> npt.NDArray[np.bool_]:
        """The `Visibility` rule over the cached attributes (a fresh array)."""
        return self.cols.visible(vis, len(self.index))

    def _rows_for(self, keys: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The index rows of memory `keys` (−1 for a key this cache holds no vector of)."""
        slots = self.slots.find(keys)
        slots = slots[slots >= 0]
        own = getattr(self.index, "rows_of", None)
        if own is not None:
            return np.asarray(own(slots), dtype=np.int64)
        found = (self.index.row_of(k) for k in slots.tolist())
        return np.fromiter((-1 if r is None else r for r in found), dtype=np.int64, count=len(slots))

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
            mask = restrict(self.cols.visible(vis, n, types or None), vis, self._rows_for, self)
            if owner is not None:
                mask &= self.cols.owner[:n] == self.cols.codes.find(owner)
            if min_level is not None:
                mask &= self.cols.level[:n] >= min_level
            keys, sims = self.index.search(query_vec, k, mask)
            return dict(zip(self.slots.keys(keys).tolist(), sims.tolist(), strict=True))

    def best_matches(
        self, vecs: npt.NDArray[np.float32], vis: Visibility, filters: list[tuple[str, str, int]]
    ) -> list[tuple[int, float] | None]:
        """For each row of `vecs`, the most similar visible memory of the same (type, owner) at or
        above the level, as (n, cosine) — a matrix product per block of rows, each block's product
        held to about `SIMS_BYTES` (a batch of 1,000 against 1M memories was a 4 GB matrix)."""
        return [m[0] if m else None for m in self._best(vecs, vis, filters, 1, -np.inf)]

    def _best(
        self,
        vecs: npt.NDArray[np.float32],
        vis: Visibility,
        filters: Sequence[tuple[str, str, int]],
        limit: int,
        min_cos: float,
    ) -> list[list[tuple[int, float]]]:
        """`best_matches` at cosine ≥ `min_cos`, then the memories tied with it (within `_TIE`) in
        row order, at most `limit` in all."""
        with self._lock:
            n = len(self.index)
            if n == 0 or len(vecs) == 0:
                return [[] for _ in range(len(vecs))]
            base = self.mask(vis)
            q = np.asarray(vecs, dtype=np.float32)
            block = max(1, SIMS_BYTES // (4 * n))
            sims = np.empty((0, n), dtype=np.float32)
            out: list[list[tuple[int, float]]] = []
            masks: dict[tuple[str, str, int], npt.NDArray[np.bool_]] = {}
            keys = self.slots.keys(self.index.keys())
            for i, f in enumerate(filters):
                if i % block == 0:
                    sims = _similarities(self.index, q[i : i + block])
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
                    out.append([])
                    continue
                row = np.where(m, sims[i % block], -np.inf)
                j = int(np.argmax(row))
                top = [j, *[t for t in np.flatnonzero(row >= row[j] - _TIE).tolist() if t != j][: limit - 1]]
                out.append([(int(keys[t]), float(row[t])) for t in top if m[t] and row[t] >= min_cos])
            return out

    def stored_form(self, vecs: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """`vecs` as the index gives stored vectors back (int8, dequantised, once an `AnnIndex` is
        compact): cosines with them compare with the cosines of stored memories (dedup compares a
        batch's items with each other so)."""
        own = getattr(self.index, "stored_form", None)
        out: npt.NDArray[np.float32] = np.asarray(vecs, dtype=np.float32) if own is None else own(vecs)
        return out

    def near_duplicates(
        self,
        vecs: npt.NDArray[np.float32],
        vis: Visibility,
        filters: Sequence[tuple[str, str, int]],
        min_cos: float,
    ) -> list[tuple[int, float] | None]:
        """`best_matches` kept only where the cosine is at least `min_cos` (else None): the first
        of `near_matches`."""
        return [m[0] if m else None for m in self.near_matches(vecs, vis, filters, min_cos, 1)]

    def near_matches(
        self,
        vecs: npt.NDArray[np.float32],
        vis: Visibility,
        filters: Sequence[tuple[str, str, int]],
        min_cos: float,
        limit: int = _RESCORE,
    ) -> list[list[tuple[int, float]]]:
        """For each row of `vecs`, the most similar visible memory of the same (type, owner) at or
        above the level at cosine ≥ `min_cos` (`best_matches`) and the memories tied with it (the
        same vector: within `_TIE`), at most `limit` — what dedup on write asks, for a whole batch
        at once. The first is the most similar, as `near_duplicates` gives it; the order of the
        ties after it is not defined (dedup orders them by age itself).

        Without a trained IVF this is `best_matches` (every vector is scanned anyway). With one,
        one unfiltered IVF search for the whole batch (the index's ``nearest``, over a few lists)
        gives each row its `NEAR_K` nearest memories by approximate score. The first of them that
        passes the row's filter is the answer (re-scored exactly, with the next few that pass, as
        the approximate order can swap near-equal scores), because any better memory that passes
        would have ranked above it; when none passes but the last is below `min_cos`, nothing
        beyond them can reach it: no match. Only when all `NEAR_K` are near enough and none passes
        can the answer lie beyond them, and that row gets a filtered search (`search`, visibility
        inside it). So the filter never cuts a top-k short, and at 1M memories the batch costs one
        IVF search instead of a visibility mask over every row and a filtered search per item.

        That filtered search is a timing signal: it runs only when 32 memories near the text
        fail the writer's filter, so a slower call tells the writer that many memories it cannot
        see (other agents', other tenants' in one file) are near-copies of its text — not what
        they say, whose they are, or how many beyond 32. Kept because the alternatives measured
        at 1M memories (300 items of the benchmark's corpus) cost far more than the lookup with
        the 32 nearest: every candidate above the threshold (~1,100 per item) in the same lists,
        or scanning those lists exactly with the filter inside; and dropping the follow-up search would let invisible memories cut the top-k short. Tenants
        that must not share even that keep separate files (`engramdb.TenantFiles`).
        """
        q = np.ascontiguousarray(vecs, dtype=np.float32).reshape(len(filters), -1)
        with self._lock:
            n = len(self.index)
            nearest = getattr(self.index, "nearest", None)
            if n == 0 or not len(q) or nearest is None or not self.approximate:
                # No IVF (yet), or an exact index: exact scans with the filter inside. A few items
                # one filtered search each (it scores only the allowed rows), a batch one masked
                # matrix product per block of rows (`best_matches`).
                if len(q) > 4:
                    return self._best(q, vis, filters, limit, min_cos)
                return [
                    best_and_ties(self.search(q[i], limit, vis, types=frozenset({t}), owner=o, min_level=lv), min_cos)
                    for i, (t, o, lv) in enumerate(filters)
                ]
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
            # Only the few rows re-scored are read (a compact index would dequantise the whole
            # matrix for `vectors_matrix`: 1.5 GB at 1M memories).
            keys, at_rows = self.slots.keys(self.index.keys()), getattr(self.index, "vectors_at", None)
            matrix = None if at_rows is not None else self.index.vectors_matrix()
            out: list[list[tuple[int, float]]] = []
            for i, f in enumerate(filters):
                passing = np.flatnonzero(ok[i])
                if len(passing):
                    # The approximate order can swap near-equal scores: the first few passing
                    # candidates by exact cosine (ties: the lower row); more of them when the last
                    # is tied with the best (memories of the very same vector, asked for by `limit`).
                    top = rows[i, passing[:_RESCORE]]
                    cand = at_rows(top) if at_rows is not None else matrix[top]  # type: ignore[index]
                    exact = np.einsum("kd,d->k", cand, q[i])
                    if limit > _RESCORE and len(passing) > _RESCORE and exact.min() >= exact.max() - _TIE:
                        top = rows[i, passing[:limit]]
                        cand = at_rows(top) if at_rows is not None else matrix[top]  # type: ignore[index]
                        exact = np.einsum("kd,d->k", cand, q[i])
                    order = np.lexsort((top, -exact))[:limit]
                    out.append(best_and_ties({int(keys[top[j]]): float(exact[j]) for j in order}, min_cos))
                elif float(approx[i, -1]) < min_cos - _APPROX_MARGIN:
                    out.append([])  # all k were more similar than anything beyond, and none passed
                else:
                    mtype, owner, level = f
                    hit = self.search(q[i], limit, vis, types=frozenset({mtype}), owner=owner, min_level=level)
                    out.append(best_and_ties(hit, min_cos))
            return out

    def cosines(self, query_vec: npt.NDArray[np.float32], keys: list[int]) -> dict[int, float]:
        """Cosine of the query with each of `keys` (0 for memories without a vector)."""
        with self._lock:
            if not keys:
                return {}
            wanted = self.slots.find(np.asarray(keys, dtype=np.int64))
            index = self.index
            # The search just before (recall's) scored every row for this query: its values, not a
            # second product over rows gathered from a 15 MB matrix (AnnIndex.scores_of).
            sims = index.scores_of(query_vec, wanted) if isinstance(index, AnnIndex) else None
            if sims is None:
                vecs = index.vectors_of(wanted)
                # the kernel the index's search scores with, so a memory's cosine is the same either way
                sims = (
                    ann.dot(vecs, query_vec) if isinstance(index, AnnIndex) else np.einsum("ij,j->i", vecs, query_vec)
                )
            return dict(zip(keys, sims.tolist(), strict=True))


def near_matches_among(
    rows: Sequence[VectorRow],
    vecs: npt.NDArray[np.float32],
    vis: Visibility,
    filters: Sequence[tuple[str, str, int]],
    min_cos: float,
    limit: int = _RESCORE,
) -> list[list[tuple[int, float]]]:
    """`VectorChannel.near_matches` among `rows` only (`engramdb.storage.ports.VectorRow`, as
    `MemoryVectors.cache_rows` reads them: the memories changed since a lookup), exactly, with
    the cache's own visibility rule (`VisibilityColumns`) over their attributes: for a write
    that looked up its near-duplicates before taking the write lock and must see what other
    writers committed in between. No cache is needed (the rows are given), so it serves a
    tenant the server answers too. Rows without a vector (forgotten) never match."""
    rows = [r for r in rows if r[9] is not None]
    if not rows or not len(filters):
        return [[] for _ in range(len(filters))]
    cols = VisibilityColumns(len(rows))
    cols.set_many(np.arange(len(rows), dtype=np.int64), [r[2:9] for r in rows])
    seen = cols.mask(vis, len(rows))
    matrix = np.frombuffer(b"".join(r[9] for r in rows if r[9] is not None), dtype=np.float32)
    matrix = matrix.reshape(len(rows), -1)
    q = np.ascontiguousarray(vecs, dtype=np.float32).reshape(len(filters), -1)
    sims = q @ matrix.T
    keys = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    out: list[list[tuple[int, float]]] = []
    for i, (mtype, owner, level) in enumerate(filters):
        ok = seen & (cols.type[: len(rows)] == cols.types.find(mtype))
        ok &= (cols.owner[: len(rows)] == cols.codes.find(owner)) & (cols.level[: len(rows)] >= level)
        ok &= sims[i] >= min_cos
        cand = np.flatnonzero(ok)
        best = cand[np.lexsort((keys[cand], -sims[i, cand]))[:limit]]  # the most similar, then the oldest
        out.append(best_and_ties({int(keys[j]): float(sims[i, j]) for j in best}, min_cos))
    return out


def best_and_ties(found: dict[int, float], min_cos: float) -> list[tuple[int, float]]:
    """`found` ({key: cosine}, best first) cut to its first and those tied with it, at or above
    `min_cos`."""
    if len(found) <= 1:
        return [(key, cos) for key, cos in found.items() if cos >= min_cos]
    top = next(iter(found.values()))
    return [(key, cos) for key, cos in found.items() if cos >= min_cos and cos >= top - _TIE]


def _similarities(index: VectorIndex, rows: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Cosines of `rows` with every indexed vector (the index's own blocked product when it has one:
    a compact index never makes a float32 copy of its matrix)."""
    own = getattr(index, "similarities", None)
    if own is not None:
        out: npt.NDArray[np.float32] = own(rows)
        return out
    matrix = index.vectors_matrix()
    # Few rows: numpy's own kernel (BLAS wakes its thread pool for each small product, see
    # ExactIndex.search); a real block: BLAS, where its threads pay off.
    return np.stack([np.einsum("nd,d->n", matrix, r) for r in rows]) if len(rows) <= 4 else rows @ matrix.T


class _Background:
    """`fn(*args)` run on a daemon thread of its own; `result` waits for it and returns what it
    returned, or raises what it raised."""

    def __init__(self, fn: Any, *args: Any, name: str = "engramdb-side-file-read") -> None:
        self._out: Any = None
        self._error: BaseException | None = None

        def run() -> None:
            try:
                self._out = fn(*args)
            except BaseException as exc:  # handed to the waiting thread by `result`
                self._error = exc

        self._thread = threading.Thread(target=run, name=name, daemon=True)
        self._thread.start()

    def wait(self) -> None:
        self._thread.join()

    def result(self) -> Any:
        self.wait()
        if self._error is not None:
            raise self._error
        return self._out


def _read_ivf(path: Path, want: object) -> Any:
    if side_files.file_sum(path) != want:
        raise ValueError(f"{path.name} is damaged (its sum differs)")
    return read_ivf(path)


def _read_files(side_file: Path, instance: str, latest: int) -> tuple[dict[str, Any], dict[str, Any], Path | None, Any]:
    """The side file's stamp and arrays, and the IVF file it names (path, faiss index) when it
    names one. The IVF file is checked and read on a thread of its own while the arrays are
    read: at 1M memories each is ~0.4 GB, and a first recall spent most of its time having the
    kernel fault in the fresh memory they land in, one after the other."""
    ivf: _Background | None = None
    ivf_file: Path | None = None

    def start(meta: dict[str, Any]) -> None:
        nonlocal ivf, ivf_file
        if meta.get("ivf_file"):
            ivf_file = side_file.with_name(str(meta["ivf_file"]))
            ivf = _Background(_read_ivf, ivf_file, meta.get("ivf_sum"), name="engramdb-ivf-read")

    try:
        meta, arrays = side_files.read_side_file(
            side_file, kind=KIND, instance_id=instance, latest=latest, rows=1024, on_stamp=start
        )
    except BaseException:
        if ivf is not None:
            ivf.wait()  # no thread outlives the read; the arrays' error is the one raised
        raise
    return meta, arrays, ivf_file, None if ivf is None else ivf.result()


def _same_vectors(
    index: VectorIndex, keys: npt.NDArray[np.int64], vecs: npt.NDArray[np.float32]
) -> npt.NDArray[np.bool_]:
    """Which of `keys` the index already holds with exactly `vecs` (as it stores them)."""
    own = getattr(index, "same_vectors", None)
    if own is not None:
        same: npt.NDArray[np.bool_] = own(keys, vecs)
        return same
    out = np.zeros(len(keys), dtype=np.bool_)
    known = np.flatnonzero([index.row_of(k) is not None for k in keys.tolist()])
    if len(known):
        out[known] = np.all(index.vectors_of(keys[known]) == vecs[known], axis=1)
    return out


def _rows_of(index: VectorIndex, keys: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    own = getattr(index, "rows_of", None)
    if own is not None:
        rows: npt.NDArray[np.int64] = own(keys)
        return rows
    return np.fromiter((index.row_of(k) for k in keys.tolist()), dtype=np.int64, count=len(keys))
