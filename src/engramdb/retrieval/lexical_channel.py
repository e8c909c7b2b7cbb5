"""The lexical half of candidate generation: BM25 over the stems stored with every memory, from an
in-memory inverted index, with the visible set masked *before* anything is ranked.

Why not FTS5: an FTS5 ``MATCH 'a OR b OR …' ORDER BY bm25() LIMIT k`` scores every row that holds
any query term — there is no top-k pruning — so its cost grows linearly with the corpus (measured
on the benchmark corpus at 100k memories and beyond: the FTS5 baseline of benchmarks/bench_scale.py,
benchmarks/results/scale.json). Here a query term costs
one array slice and a few vector operations over its postings, with the same BM25 formula.

- Terms are the ``terms`` column (distinct stems of title, content and tags but stopwords, written
  with each memory), so term frequency is binary — memories are short — and a document's length is
  its ``n_tokens``. A memory's ``entities`` go into the same postings as marked tokens
  (``keywords.entity_token``: "=new+york"), which no query stem can equal, so they never count
  for BM25 or cue overlap; recall asks `fields` which candidates hold one the query names.
- N and each term's document frequency count only what the reader can see, so BM25's statistics
  carry nothing from other tenants or other agents' private memories; the average length is over
  the same visible set.
- The stored rows are the truth; this is a cache refreshed incrementally by the memories' write
  sequence (``changed``), like the vector channel. New and changed memories go into a small
  delta beside the main postings (compressed sparse rows, one array per term); the delta is
  merged into the main postings when it grows past a fraction of them. A first load reads the rows
  in batches and sorts every posting once (as one int64 per (term, key) pair), so no Python
  object per posting or per row outlives its batch.
- Given the `database` file, the index is saved as a side file (`engramdb.retrieval.side_files`:
  ``lexical.npz``) after a first load of at least `SAVE_MIN` memories and at `save_if_changed`
  (the engine's `close`) when more than a tenth of the rows changed since; a new process adopts
  it when its stamp fits the database and reads only the rows changed since, as any refresh does.

    idf(t)  = ln(1 + (N − df + 0.5) / (df + 0.5))
    bm25    = Σ_t idf(t) · (k1 + 1) / (1 + k1 · (1 − b + b · len / avglen))
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from engramdb.memories.model import Visibility
from engramdb.retrieval import side_files
from engramdb.retrieval.columns import VisibilityColumns, restrict
from engramdb.retrieval.keywords import entity_terms
from engramdb.retrieval.slots import Keys, TenantSlots
from engramdb.storage.ports import AccessUpdate, Backend, IndexRow

K1 = 1.2
B = 0.75
#: merge the delta into the main postings once it holds this many postings (or a tenth of main)
MERGE_AT = 50_000
#: a refresh with more changed rows than this is indexed straight into the main postings
BULK = 20_000

#: rows per batch of a first load
LOAD_BATCH = 50_000
#: fewer memories than this are loaded from the database faster than a side file pays off
SAVE_MIN = 20_000
#: `save_if_changed` saves when more than this share of the rows changed since the last save
_CLOSE_SAVE_SHARE = 0.1
KIND = "lexical"

_EMPTY = np.zeros(0, dtype=np.int32)
log = logging.getLogger(__name__)


class _Rings:
    """Each memory's access ring (bytes or None), compactly: one blob with offsets as loaded or
    saved, and a dict of the rows changed since (a million Python bytes objects cost ~60 MB)."""

    def __init__(self) -> None:
        self._off = np.zeros(1, dtype=np.int64)
        self._blob = b""
        self._has = np.zeros(0, dtype=np.bool_)
        self._over: dict[int, bytes | None] = {}

    def __getitem__(self, key: int) -> bytes | None:
        if key in self._over:
            return self._over[key]
        if key < len(self._has) and self._has[key]:
            return self._blob[int(self._off[key]) : int(self._off[key + 1])]
        return None

    def many(self, keys: npt.NDArray[np.int64]) -> list[bytes | None]:
        """``[self[k] for k in keys]`` with the offsets read as one array each (a recall asks
        for a hundred: numpy scalar reads per key were most of the cost)."""
        kl = keys.tolist()
        m = len(self._has)
        if not m:
            return [self._over.get(k) for k in kl]
        at = np.minimum(keys, m - 1)
        starts, ends = self._off[at].tolist(), self._off[at + 1].tolist()
        has = (self._has[at] & (keys < m)).tolist()
        over, blob = self._over, self._blob
        return [
            over[k] if k in over else blob[a:b] if h else None for k, a, b, h in zip(kl, starts, ends, has, strict=True)
        ]

    def __setitem__(self, key: int, value: bytes | None) -> None:
        if key in self._over or self[key] != value:
            self._over[key] = value

    def to_arrays(self, n: int) -> dict[str, npt.NDArray[Any]]:
        """Rows [0, n) as ``ring_off``, ``ring_blob`` and ``ring_has``."""
        has = np.zeros(n, dtype=np.bool_)
        lengths = np.zeros(n, dtype=np.int64)
        m = min(n, len(self._has))
        has[:m] = self._has[:m]
        lengths[:m] = np.diff(self._off)[:m]
        parts: list[bytes] = []
        last = 0
        for key in sorted(k for k in self._over if k < n):
            value = self._over[key]
            parts.append(
                self._blob[int(self._off[min(last, len(self._has))]) : int(self._off[min(key, len(self._has))])]
            )
            parts.append(value or b"")
            has[key], lengths[key] = value is not None, len(value or b"")
            last = key + 1
        parts.append(self._blob[int(self._off[min(last, len(self._has))]) : int(self._off[m])])
        off = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=off[1:])
        blob = b"".join(parts)
        if len(blob) != int(off[-1]):
            raise AssertionError("ring offsets do not add up")
        return {"ring_off": off, "ring_blob": np.frombuffer(blob, dtype=np.uint8), "ring_has": has}

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, npt.NDArray[Any]]) -> _Rings:
        out = cls()
        out._off = np.asarray(arrays["ring_off"], dtype=np.int64)
        out._has = np.asarray(arrays["ring_has"], dtype=np.bool_)
        out._blob = np.asarray(arrays["ring_blob"], dtype=np.uint8).tobytes()
        if len(out._off) != len(out._has) + 1 or int(out._off[-1]) != len(out._blob) or np.any(np.diff(out._off) < 0):
            raise ValueError("ring offsets do not fit the blob")
        return out


@dataclass(frozen=True, slots=True)
class FieldColumns:
    """Recall's scoring fields of some memories, one array per field in the same order (see
    `LexicalChannel.columns`); `rings` are the packed access times (``pack_times``) or None,
    `old_newest` and `old_oldest` NaN where there is no older access."""

    keys: npt.NDArray[np.int64]
    type: npt.NDArray[Any]  # codes of `VisibilityColumns.types`
    importance: npt.NDArray[np.float64]
    rings: list[bytes | None]
    old_count: npt.NDArray[np.int64]
    old_newest: npt.NDArray[np.float64]
    old_oldest: npt.NDArray[np.float64]
    cue: npt.NDArray[np.float64]
    created: npt.NDArray[np.float64]
    entity: npt.NDArray[np.float64]  # 1.0 where it holds an entity the query names
    coverage: npt.NDArray[np.float64]

    @classmethod
    def empty(cls) -> FieldColumns:
        f, i = np.zeros(0, dtype=np.float64), np.zeros(0, dtype=np.int64)
        return cls(i, i, f, [], i, f, f, f, f, f, f)


class LexicalChannel:
    """BM25 over every memory's stems, for any reader, from memory.

    Args:
        database: the database file, beside which the index is kept across processes (None: never saved).
        tenant: hold this tenant's memories alone, following its change sequence (a server of
            many tenants: `engramdb.retrieval.tenant_caches`), at slots of its own
            (`engramdb.retrieval.slots.TenantSlots`, shared with its vector cache when given as
            `slots`); None: every memory of the store, at its key.
    """

    def __init__(self, *, database: Path | None = None, tenant: str | None = None, slots: Keys | None = None) -> None:
        self._lock = threading.RLock()
        self._database = database
        self.tenant = tenant
        self.slots: Keys = slots if slots is not None else TenantSlots() if tenant is not None else Keys()
        self._capacity = 1024 if tenant is None else 64
        #: where the index is kept between processes (None: it is not)
        self.side_file = side_files.side_dir_for(database) / "lexical.npz" if database is not None else None
        self._empty()

    def _empty(self) -> None:
        """Every cached thing as a new channel has it: nothing read yet."""
        # A refresh inside an open transaction read rows that may yet be rolled back, and a rolled
        # back change number and key are used again by the next writer: the first refresh outside
        # a transaction after one starts over (`_tainted`).
        self._tainted = False
        self._instance: str | None = None
        self._dirty = 0  # rows loaded since the last save or adoption
        self._unsafe = False  # a refresh inside an open transaction: never saved
        self._restored = False
        #: (mask key, visible count, {term: document frequency}) of the last `search`
        self._last_df: tuple[tuple[object, ...], int, dict[int, int]] | None = None
        self._seen = -1
        self.cols = VisibilityColumns(self._capacity)
        self._size = 0  # 1 + the largest slot seen
        self._length = np.ones(len(self.cols), dtype=np.float32)
        # The scoring fields recall needs of a candidate besides its text (see `fields`).
        self._importance = np.zeros(len(self.cols), dtype=np.float64)
        self._created = np.zeros(len(self.cols), dtype=np.float64)
        self._old_count = np.zeros(len(self.cols), dtype=np.int64)
        self._old_newest = np.full(len(self.cols), np.nan)
        self._old_oldest = np.full(len(self.cols), np.nan)
        self._ring = _Rings()
        self._sig = np.zeros(len(self.cols), dtype=np.int64)  # hash of each row's terms text
        self._vocab: dict[str, int] = {}
        # main postings: the keys holding term t are _ids[_indptr[t]:_indptr[t + 1]], for t < len(_indptr) - 1
        self._indptr = np.zeros(1, dtype=np.int64)
        self._ids = _EMPTY
        self._stale = np.zeros(len(self.cols), dtype=np.bool_)  # main postings of these keys are out of date
        self._n_stale = 0
        # delta postings: term -> keys, and key -> its terms (so a second change can take them out)
        self._delta: dict[int, set[int]] = {}
        self._delta_docs: dict[int, list[int]] = {}
        self._delta_count = 0

    # -- keeping up with the store ---------------------------------------------------------------

    @property
    def restored(self) -> bool:
        """True when this index came from the side file rather than from every stored row."""
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
                self._empty()  # what was read inside a transaction may have been rolled back
            latest = store.changes.current(self.tenant) if latest is None else latest
            if latest == self._seen:
                return
            if in_transaction:
                self._unsafe = self._tainted = True
            first = self._seen == -1
            if first and self.side_file is not None:
                self._restore(store, latest)
                first = self._seen == -1
            if first:
                pending: list[tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]]] = []
                for rows in store.memories.index_row_batches(-1, LOAD_BATCH, self.tenant):
                    if not rows:
                        continue
                    rows = self.slots.rows(rows)
                    self._ensure(1 + max(r[0] for r in rows))
                    self._apply(rows, pending)
                if pending:
                    self._merge(np.concatenate([t for t, _ in pending]), np.concatenate([k for _, k in pending]))
                self._last_df = None
            else:
                rows = self.slots.rows(store.memories.index_rows(self._seen, self.tenant))
                if rows:
                    self._ensure(1 + max(r[0] for r in rows))
                    self._apply(rows)
                    self._last_df = None  # postings changed: document frequencies with them
            self._seen = latest
            if first and self._size >= SAVE_MIN:
                self._save(store)

    def accessed(self, change: int, updates: Sequence[AccessUpdate]) -> None:
        """Take this process's own committed access write `change` (the access state `updates`, as
        `engramdb.memories.access.log_accesses` wrote them) without reading it back — only when the
        cache is at the sequence just before it: the write held the store's write lock, so nothing
        else changed in between. Otherwise the next `refresh` reads it, as any other change."""
        with self._lock:
            if self._seen < 0 or self._seen != change - 1:
                return
            if self.slots.translated:
                at = self.slots.find(np.fromiter((u[6] for u in updates), dtype=np.int64, count=len(updates)))
                updates = [(*u[:6], s) for u, s in zip(updates, at.tolist(), strict=True)]
            if any(not 0 <= u[6] < self._size for u in updates):
                return
            for ring, old_count, old_newest, old_oldest, _last, _bump, key in updates:
                self._ring[key] = ring
                self._old_count[key] = old_count
                self._old_newest[key] = np.nan if old_newest is None else old_newest
                self._old_oldest[key] = np.nan if old_oldest is None else old_oldest
            self._dirty += len(updates)
            self._seen = change

    def save_if_changed(self, store: Backend) -> None:
        """Save the side file when more than a tenth of the rows changed since the last save (or
        adoption), or when it is gone (a forget drops it), after catching up with `store`; called
        by `DynamicMemoryEngine.close`."""
        with self._lock:
            if self._seen < 0 or self._tainted:  # (tainted: reloading only to save is left to the next process)
                return
            self.refresh(store)
            dropped = self.side_file is not None and not self.side_file.exists()  # by a forget
            if self._size >= SAVE_MIN and (dropped or self._dirty > _CLOSE_SAVE_SHARE * self._size):
                self._save(store)

    def _ensure(self, size: int) -> None:
        self._size = max(self._size, size)
        cap = len(self.cols)
        if size <= cap:
            return
        self.cols.grow(size)
        new = len(self.cols)

        def grown(a: npt.NDArray[np.generic], fill: float) -> npt.NDArray[np.generic]:
            out = np.full(new, fill, dtype=a.dtype)
            out[:cap] = a
            return out

        self._length = grown(self._length, 1.0)  # type: ignore[assignment]
        self._importance = grown(self._importance, 0.0)  # type: ignore[assignment]
        self._created = grown(self._created, 0.0)  # type: ignore[assignment]
        self._old_count = grown(self._old_count, 0)  # type: ignore[assignment]
        self._old_newest = grown(self._old_newest, np.nan)
        self._old_oldest = grown(self._old_oldest, np.nan)
        self._sig = grown(self._sig, 0)  # type: ignore[assignment]
        self._stale = grown(self._stale, 0)  # type: ignore[assignment]

    def _term_ids(self, terms: str) -> list[int]:
        vocab = self._vocab
        return [vocab.setdefault(t, len(vocab)) for t in terms.split()]

    def _apply(
        self, rows: Sequence[IndexRow], pending: list[tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]]] | None = None
    ) -> None:
        """Index `rows`; with `pending` (a first load), stage their postings there for one merge."""
        self._dirty += len(rows)
        keys = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        self.cols.set_many(keys, [r[1:8] for r in rows])
        self._length[keys] = [max(float(r[9] or 1), 1.0) for r in rows]
        self._importance[keys] = [r[10] for r in rows]
        self._created[keys] = [r[15] for r in rows]
        self._old_count[keys] = [r[12] or 0 for r in rows]
        self._old_newest[keys] = [np.nan if r[13] is None else r[13] for r in rows]
        self._old_oldest[keys] = [np.nan if r[14] is None else r[14] for r in rows]
        ring = self._ring
        for r in rows:
            ring[r[0]] = r[11]
        texts = [indexed_terms(r[8], r[16]) for r in rows]
        sigs = np.fromiter((hash(t) for t in texts), dtype=np.int64, count=len(rows))
        moved = np.flatnonzero(sigs != self._sig[keys])  # an access or a score changed, not the text
        if not len(moved):
            return
        self._sig[keys[moved]] = sigs[moved]
        if len(moved) > BULK or pending is not None:
            self._bulk(keys[moved], [texts[i] for i in moved.tolist()], pending)
            return
        for i in moved.tolist():
            key = int(keys[i])
            self._retire(key)
            ids = self._term_ids(texts[i])
            self._delta_docs[key] = ids
            for t in ids:
                self._delta.setdefault(t, set()).add(key)
            self._delta_count += len(ids)
        if self._delta_count > max(MERGE_AT, len(self._ids) // 10):
            self._merge(_EMPTY, _EMPTY)

    def _bulk(
        self,
        keys: npt.NDArray[np.int64],
        texts: list[str],
        pending: list[tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]]] | None = None,
    ) -> None:
        """Index many rows straight into the main postings (a first load, a large import); with
        `pending`, only stage their (term, key) pairs there for the caller's one merge."""
        for key in self._delta_docs.keys() & set(keys.tolist()):
            self._retire(key)
        self._stale[keys] = True
        self._n_stale = int(np.count_nonzero(self._stale))
        vocab = self._vocab
        flat = " ".join(texts).split()
        counts = [t.count(" ") + 1 if t else 0 for t in texts]
        for t in sorted(set(flat).difference(vocab)):
            vocab[t] = len(vocab)
        terms = np.fromiter(map(vocab.__getitem__, flat), dtype=np.int32, count=len(flat))
        del flat
        owners = np.repeat(keys.astype(np.int32), counts)
        if pending is None:
            self._merge(terms, owners)
        else:
            pending.append((terms, owners))

    def _retire(self, key: int) -> None:
        """Take `key`'s current postings out of use (main: marked stale; delta: removed)."""
        if not self._stale[key]:
            self._stale[key] = True
            self._n_stale += 1
        old = self._delta_docs.pop(key, None)
        if old is not None:
            for t in old:
                self._delta[t].discard(key)
            self._delta_count -= len(old)

    def _merge(self, extra_terms: npt.NDArray[np.int32], extra_keys: npt.NDArray[np.int32]) -> None:
        """Rebuild the main postings from the live main postings, the delta and `extra` pairs."""
        counts = np.diff(self._indptr)
        live = ~self._stale[self._ids]
        d_terms = [t for t, keys in self._delta.items() for _ in keys]
        d_keys = [k for keys in self._delta.values() for k in keys]
        # One int64 per posting, term in the high half and key in the low: one sort orders them by
        # term, then key (`_holds` bisects a term's keys), in less memory and time than a lexsort.
        pair = np.concatenate(
            [
                (np.repeat(np.arange(len(counts), dtype=np.int64), counts)[live] << 32) | self._ids[live],
                (np.asarray(d_terms, dtype=np.int64) << 32) | np.asarray(d_keys, dtype=np.int64),
                (np.asarray(extra_terms, dtype=np.int64) << 32) | np.asarray(extra_keys, dtype=np.int64),
            ]
        )
        pair.sort()
        self._ids = (pair & 0xFFFFFFFF).astype(np.int32)
        pair >>= 32
        self._indptr = np.zeros(len(self._vocab) + 1, dtype=np.int64)
        np.cumsum(np.bincount(pair, minlength=len(self._vocab)), out=self._indptr[1:])
        del pair
        self._stale[:] = False
        self._n_stale = 0
        self._delta.clear()
        self._delta_docs.clear()
        self._delta_count = 0

    # -- the side file --------------------------------------------------------------------------

    _PER_ROW = (
        ("_length", np.float32, 1.0),
        ("_importance", np.float64, 0.0),
        ("_created", np.float64, 0.0),
        ("_old_count", np.int64, 0),
        ("_old_newest", np.float64, np.nan),
        ("_old_oldest", np.float64, np.nan),
        ("_sig", np.int64, 0),
        ("_stale", np.bool_, 0),
    )

    def _tip(self, store: Backend, upto: int) -> list[tuple[int, int, str]]:
        return [
            (int(n), int(c), side_files.digest(f"{terms}\x00{entities}".encode("utf-8", "surrogatepass")))
            for n, c, terms, entities in store.memories.term_tip(upto, side_files.TIP_ROWS)
        ]

    def _save(self, store: Backend) -> None:
        """Write the side file (a cache of committed rows only; failures are logged, not raised)."""
        if self.side_file is None or self._unsafe or self._seen < 0 or self._database is None:
            return
        if self._instance is None:
            self._instance = store.instance_id()
            if self._instance is None:
                return
        n = self._size
        arrays: dict[str, npt.NDArray[Any]] = {
            name.lstrip("_"): getattr(self, name)[:n] for name, _, _ in self._PER_ROW
        }
        arrays.update(self.cols.to_arrays(n))
        arrays.update(self._ring.to_arrays(n))
        pairs = [(t, k) for k, ts in self._delta_docs.items() for t in ts]
        arrays["indptr"], arrays["ids"] = self._indptr, self._ids
        arrays["delta_terms"] = np.asarray([t for t, _ in pairs], dtype=np.int32)
        arrays["delta_keys"] = np.asarray([k for _, k in pairs], dtype=np.int32)
        arrays["vocab"] = np.frombuffer("\n".join(self._saved_words()).encode("utf-8", "surrogatepass"), dtype=np.uint8)
        stamp = {
            "kind": KIND,
            "instance_id": self._instance,
            "change": self._seen,
            "tip": self._tip(store, self._seen),
            "size": n,
            "vocab": len(self._vocab),
            "columns": self.cols.codes_state(),
        }
        try:
            side_files.write_side_file(self.side_file, arrays, stamp, database=self._database)
            if store.memories.retired_since(self._seen):
                # Another engine forgot a memory after this cache's snapshot, and may have dropped
                # the side files before this one was written: this file may hold what it forgot.
                side_files.remove_side_files(self._database)
                return
        except OSError as exc:
            log.warning("could not save the lexical index to %s: %s", self.side_file, exc)
        self._dirty = 0

    def _saved_words(self) -> list[str]:
        """The vocabulary as the side file keeps it: a term no live memory holds any more (the
        words of a forgotten or rewritten text) is written as a placeholder of its id, ``\x01<id>``,
        which no stem or entity token can be. The in-memory vocabulary never drops a term (the
        postings refer to terms by position), so a save after a forget wrote the forgotten words
        back to disk."""
        words = list(self._vocab)
        live = np.zeros(len(words), dtype=np.int64)
        counts = np.diff(self._indptr)
        live[: len(counts)] = counts
        if self._n_stale:
            # Only the stale postings are located (few): their terms by bisecting the offsets.
            at = np.flatnonzero(self._stale[self._ids])
            if len(at):
                terms = np.searchsorted(self._indptr, at, side="right") - 1
                live[: len(counts)] -= np.bincount(terms, minlength=len(counts))
        for t, keys in self._delta.items():
            live[t] += len(keys)
        return [w if live[t] > 0 else f"\x01{t}" for t, w in enumerate(words)]

    def _restore(self, store: Backend, latest: int) -> None:
        """Adopt the side file when it fits this database; else leave the index empty."""
        assert self.side_file is not None
        side_files.prefetch(self.side_file.parent)
        self._instance = store.instance_id()
        if self._instance is None:
            return
        try:
            self._adopt(store, latest)
        except FileNotFoundError:
            return
        except Exception as exc:  # a cache: whatever is wrong with it, load from the database
            log.debug("ignoring the lexical side file %s: %s: %s", self.side_file, type(exc).__name__, exc)

    def _adopt(self, store: Backend, latest: int) -> None:
        assert self.side_file is not None and self._instance is not None
        meta, arrays = side_files.read_side_file(
            self.side_file, kind=KIND, instance_id=self._instance, latest=latest, rows=SAVE_MIN
        )
        change, n = int(meta["change"]), int(meta["size"])
        if not side_files.tip_fits(meta.get("tip", []), self._tip(store, change)):
            raise ValueError("its rows differ from the database's (a restored backup written to since?)")
        words = bytes(arrays["vocab"]).decode("utf-8", "surrogatepass").split("\n") if meta["vocab"] else []
        if len(words) != int(meta["vocab"]) or len(set(words)) != len(words):
            raise ValueError("the vocabulary does not fit its count")
        indptr, ids = np.asarray(arrays["indptr"], dtype=np.int64), np.asarray(arrays["ids"], dtype=np.int32)
        # Terms first seen since the last merge live only in the delta: the main postings may cover fewer.
        if not 1 <= len(indptr) <= len(words) + 1 or int(indptr[-1]) != len(ids) or (len(ids) and int(ids.max()) >= n):
            raise ValueError("the postings do not fit the vocabulary")
        cols = VisibilityColumns.from_arrays(arrays, meta["columns"], n)
        cap = len(cols)
        per_row = {}
        for name, dtype, fill in self._PER_ROW:
            a = np.asarray(arrays[name.lstrip("_")])
            if a.dtype != dtype or a.shape != (n,):
                raise ValueError(f"{name} is {a.dtype} x {a.shape}, not {n} rows")
            room = side_files.with_room(a, fill) if n >= 1024 and a.flags.writeable else a
            if len(room) == cap:
                per_row[name] = room  # the buffer just read from the file: adopted, not copied
            else:
                full = np.full(cap, fill, dtype=dtype)
                full[:n] = a
                per_row[name] = full
        ring = _Rings.from_arrays(arrays)
        if len(ring._has) != n:
            raise ValueError("the rings do not fit the rows")
        d_terms, d_keys = arrays["delta_terms"].tolist(), arrays["delta_keys"].tolist()
        if len(d_terms) != len(d_keys) or any(not 0 <= t < len(words) for t in d_terms) or any(k >= n for k in d_keys):
            raise ValueError("the delta postings do not fit the vocabulary")
        delta: dict[int, set[int]] = {}
        docs: dict[int, list[int]] = {}
        for t, k in zip(d_terms, d_keys, strict=True):
            delta.setdefault(t, set()).add(k)
            docs.setdefault(k, []).append(t)
        # Only now, every check passed: nothing is half-adopted.
        for name, full in per_row.items():
            setattr(self, name, full)
        self.cols, self._ring, self._size = cols, ring, n
        self._vocab = dict(zip(words, range(len(words)), strict=True))
        self._indptr, self._ids = indptr, ids
        self._n_stale = int(np.count_nonzero(self._stale))
        self._delta, self._delta_docs, self._delta_count = delta, docs, len(d_terms)
        self._seen, self._dirty, self._restored, self._last_df = change, 0, True, None

    # -- searching -----------------------------------------------------------------------------

    def _postings(self, t: int) -> npt.NDArray[np.int32]:
        ids = self._ids[self._indptr[t] : self._indptr[t + 1]] if t + 1 < len(self._indptr) else _EMPTY
        if self._n_stale and len(ids):
            ids = ids[~self._stale[ids]]
        extra = self._delta.get(t)
        if extra:
            ids = np.concatenate([ids, np.fromiter(extra, dtype=np.int32, count=len(extra))])
        return ids

    def _holds(self, t: int, keys: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Which of `keys` hold term `t` now."""
        main = self._ids[self._indptr[t] : self._indptr[t + 1]] if t + 1 < len(self._indptr) else _EMPTY
        held = np.zeros(len(keys), dtype=np.bool_)
        if len(main):
            at = np.minimum(np.searchsorted(main, keys), len(main) - 1)
            held = main[at] == keys
            if self._n_stale:
                held &= ~self._stale[keys]
        extra = self._delta.get(t)
        if extra:
            held |= np.fromiter((k in extra for k in keys.tolist()), dtype=np.bool_, count=len(keys))
        return held

    def fields(
        self,
        keys: Sequence[int],
        vis: Visibility,
        stems: Iterable[str],
        *,
        types: frozenset[str] | None = None,
        entities: Sequence[str] = (),
    ) -> list[tuple[int, str, float, bytes | None, tuple[int, float | None, float | None], float, float, float, float]]:
        """Recall's scoring fields of those `keys` that `vis` may see (and of `types`): (key, type,
        importance, access ring, (older count, newest, oldest), cue overlap with `stems`, created
        at, 1.0 if it holds one of the entity tokens `entities` else 0.0, coverage) — read from
        memory, not from the rows; `columns` gives the same as arrays."""
        c = self.columns(keys, vis, stems, types=types, entities=entities)
        names = self.cols.types.names()
        olds = zip(
            c.old_count.tolist(),
            [None if x != x else x for x in c.old_newest.tolist()],  # NaN is None
            [None if x != x else x for x in c.old_oldest.tolist()],
            strict=True,
        )
        return list(
            zip(
                c.keys.tolist(),
                [names[t] for t in c.type.tolist()],
                c.importance.tolist(),
                c.rings,
                olds,
                c.cue.tolist(),
                c.created.tolist(),
                c.entity.tolist(),
                c.coverage.tolist(),
                strict=True,
            )
        )

    def columns(
        self,
        keys: Sequence[int],
        vis: Visibility,
        stems: Iterable[str],
        *,
        types: frozenset[str] | None = None,
        entities: Sequence[str] = (),
    ) -> FieldColumns:
        """`fields` as one array per field, in the order of `keys` (those `vis` may see, and of
        `types`). Coverage is the IDF-weighted share of `stems` the memory holds, IDF over what
        `vis` shows: a word every memory has counts little, one none has counts most, so a query
        about something the store never heard of covers little of anything."""
        with self._lock:
            n = self._size
            ks = self._slots_of(keys)
            if not len(ks):
                return FieldColumns.empty()
            seen = restrict(self.cols.visible(vis, n, types), vis, self.slots.find, self)
            ks = ks[seen[ks]]
            distinct = list(dict.fromkeys(stems))
            hits = np.zeros(len(ks), dtype=np.int64)
            covered = np.zeros(len(ks), dtype=np.float64)
            total = 0.0
            memo = self._last_df
            if memo is not None and memo[0] == (self.cols.version, n, vis, types):
                n_seen, known_df = memo[1], memo[2]
            else:
                n_seen, known_df = int(np.count_nonzero(seen)), {}
            for s in distinct:
                t = self._vocab.get(s)
                held = self._holds(t, ks) if t is not None and len(ks) else None
                if t is None:
                    df = 0
                elif t in known_df:
                    df = known_df[t]
                else:
                    df = int(np.count_nonzero(seen[self._postings(t)]))
                idf = math.log1p((n_seen - df + 0.5) / (df + 0.5))
                total += idf
                if held is not None:
                    hits += held
                    covered += idf * held
            cue = hits / len(distinct) if distinct else np.zeros(len(ks))
            coverage = covered / total if total > 0 else np.zeros(len(ks))
            named = np.zeros(len(ks), dtype=np.bool_)
            for e in entities:
                t = self._vocab.get(e)
                if t is not None:
                    named |= self._holds(t, ks)
            ring = self._ring
            return FieldColumns(
                keys=self.slots.keys(ks),
                type=self.cols.type[ks],
                importance=self._importance[ks].astype(np.float64),
                rings=ring.many(ks),
                old_count=self._old_count[ks],
                old_newest=self._old_newest[ks],
                old_oldest=self._old_oldest[ks],
                cue=np.asarray(cue, dtype=np.float64),
                created=self._created[ks].astype(np.float64),
                entity=np.where(named, 1.0, 0.0),
                coverage=np.asarray(coverage, dtype=np.float64),
            )

    def created_of(
        self, keys: Sequence[int], vis: Visibility, *, types: frozenset[str] | None = None
    ) -> dict[int, float]:
        """{key: created_at} of those `keys` that `vis` may see (and of `types`): `columns`' keys
        and creation times alone (spreading's implicit episodes ask for nothing else)."""
        with self._lock:
            n = self._size
            ks = self._slots_of(keys)
            if not len(ks):
                return {}
            ks = ks[restrict(self.cols.visible(vis, n, types), vis, self.slots.find, self)[ks]]
            return dict(zip(self.slots.keys(ks).tolist(), self._created[ks].astype(np.float64).tolist(), strict=True))

    def _slots_of(self, keys: Sequence[int]) -> npt.NDArray[np.int64]:
        """The slots of those `keys` this cache holds (in their order)."""
        n = self._size
        if not self.slots.translated:
            return np.fromiter((k for k in keys if 0 <= k < n), dtype=np.int64)
        at = self.slots.find(np.fromiter(keys, dtype=np.int64))
        return at[(at >= 0) & (at < n)]

    def beside(self, keys: Sequence[int]) -> dict[int, tuple[int | None, int | None]]:
        """{key: (the memory held just before it, the one just after)} for those of `keys` this
        cache holds — by key, or by slot when slots are not keys (`engramdb.retrieval.slots`):
        the order they were written in. None where there is none."""
        with self._lock:
            n = self._size
            if not self.slots.translated:
                return {k: (k - 1 if k >= 1 else None, k + 1 if k + 1 < n else None) for k in keys if 0 <= k < n}
            at = self.slots.find(np.fromiter(keys, dtype=np.int64))
            held = (at >= 0) & (at < n)
            ks, at = np.asarray(keys, dtype=np.int64)[held].tolist(), at[held]
            prev = self.slots.keys(np.maximum(at - 1, 0)).tolist()
            nxt = self.slots.keys(np.minimum(at + 1, n - 1)).tolist()
            return {
                k: (p if s >= 1 else None, x if s + 1 < n else None)
                for k, s, p, x in zip(ks, at.tolist(), prev, nxt, strict=True)
            }

    def nbytes(self) -> int:
        """About how many bytes this cache holds, its slots aside (what a budget of caches counts)."""
        with self._lock:
            arrays = [getattr(self, name) for name, _, _ in self._PER_ROW]
            arrays += [getattr(self.cols, name) for name in VisibilityColumns._ARRAYS]
            arrays += [self._ids, self._indptr, self._ring._off, self._ring._has]
            total = sum(int(a.nbytes) for a in arrays) + len(self._ring._blob) + 48 * len(self._ring._over)
            # a vocabulary entry: its dict slot and a short str (~150 bytes; not summed word by
            # word, since `TenantCaches.settle` asks after every recall)
            return total + 150 * len(self._vocab) + 120 * self._delta_count

    def holding(self, keys: Sequence[int], entities: Sequence[str]) -> set[int]:
        """Those of `keys` (already known visible: `fields`' keys) that hold one of the entity
        tokens `entities` — `fields`' entity flag alone, without the rest of its fields."""
        with self._lock:
            ks = self._slots_of(keys)
            named = np.zeros(len(ks), dtype=np.bool_)
            for e in entities:
                t = self._vocab.get(e)
                if t is not None and len(ks):
                    named |= self._holds(t, ks)
            return set(self.slots.keys(ks[named]).tolist())

    def search(
        self,
        stems: Iterable[str],
        limit: int,
        vis: Visibility,
        *,
        types: frozenset[str] | None = None,
        k1: float = K1,
        b: float = B,
        prev_weight: float = 0.0,
        window: float = 0.0,
    ) -> dict[int, float]:
        """The `limit` visible memories (of `types`, when given) with the highest BM25 (`k1`,
        `b`) for the query's stems, {key: score}, best first.

        With `prev_weight` > 0 and a `window`, a memory's score also holds `prev_weight` × the BM25
        of the memory written just before it (the adjacent key), when that one is visible too and
        was made within `window` seconds before it (not at the same instant: an implicit episode,
        retrieval/sequence.py): document expansion by the preceding turn, so the reply "They were
        awestruck" is found by the words of the question it answers."""
        with self._lock:
            n = self._size
            terms = [self._vocab.get(s) for s in dict.fromkeys(stems)]
            known = [t for t in terms if t is not None]
            if not known or n == 0:
                return {}
            mask = restrict(self.cols.visible(vis, n, types), vis, self.slots.find, self)
            visible = int(np.count_nonzero(mask))
            if visible == 0:
                return {}
            avglen = float(np.dot(self._length[:n], mask)) / visible
            keys: list[npt.NDArray[np.int32]] = []
            idfs: list[float] = []
            dfs: dict[int, int] = {}
            for t in known:
                ids = self._postings(t)
                ids = ids[mask[ids]]
                dfs[t] = len(ids)
                if len(ids):
                    keys.append(ids)
                    idfs.append(float(np.log1p((visible - len(ids) + 0.5) / (len(ids) + 0.5))))
            # `fields` of the same recall needs these document frequencies again (for coverage)
            self._last_df = ((self.cols.version, n, vis, types), visible, dfs)
            if not keys:
                return {}
            all_keys = np.concatenate(keys)
            length = self._length[all_keys]
            weight = np.repeat(np.asarray(idfs, dtype=np.float32), [len(k) for k in keys])
            weight *= (k1 + 1.0) / (1.0 + k1 * (1.0 - b + b * length / avglen))
            cand: npt.NDArray[np.integer[Any]]
            if len(keys) == 1:
                cand, score = all_keys, weight
            elif len(all_keys) * 32 > n:
                # Many postings: one pass over a dense array beats sorting them.
                dense = np.bincount(all_keys, weights=weight, minlength=n)
                cand = np.flatnonzero(dense)  # int64, as the expansion takes them: no copy each way
                score = dense[cand].astype(np.float32)
            else:
                cand, inverse = np.unique(all_keys, return_inverse=True)
                score = np.bincount(inverse, weights=weight, minlength=len(cand)).astype(np.float32)
            if prev_weight > 0 and window > 0:
                ordered = len(keys) > 1  # flatnonzero and np.unique give the keys strictly increasing
                cand, score = self._with_preceding(cand, score, mask, prev_weight, window, limit, ordered=ordered)
            if len(cand) > limit:
                top = np.argpartition(-score, limit - 1)[:limit]
                cand, score = cand[top], score[top]
            order = np.lexsort((cand, -score))
            return dict(zip(self.slots.keys(cand[order]).tolist(), score[order].tolist(), strict=True))

    def _with_preceding(
        self,
        cand: npt.NDArray[np.integer[Any]],
        score: npt.NDArray[np.float32],
        mask: npt.NDArray[np.bool_],
        weight: float,
        window: float,
        limit: int,
        *,
        ordered: bool = False,
    ) -> tuple[npt.NDArray[np.integer[Any]], npt.NDArray[np.float32]]:
        """(cand, score) with each scored key's next key (visible, made 0 < Δt ≤ `window` after
        it) credited `weight` × its score; `search`'s document expansion, exact for the `limit`
        best. Only keys that can reach them are credited: with s_L the limit-th best score before
        expansion (every key of the final top has at least that), a key outside `cand` needs a
        predecessor scoring ≥ s_L / weight, and one inside it a score ≥ s_L − weight × s_max; any
        other key stays below s_L and keeps its score. A merge by binary search into the keys in
        order, no sort of the union: at 100k memories that was most of a search."""
        increasing = ordered or len(cand) < 2 or bool(np.all(cand[1:] > cand[:-1]))
        if not increasing:  # one term's postings with a delta
            order = np.argsort(cand, kind="stable")
            cand, score = cand[order], score[order]
        keys = cand.astype(np.int64, copy=False)
        src = keys
        if len(keys) > limit:
            s_l = float(np.partition(score, len(score) - limit)[len(score) - limit])
            hot = score >= s_l - weight * float(score.max())  # keys of cand that a credit may lift into the top
            pick = score >= s_l / weight  # keys whose credit may lift a key outside cand into it
            if increasing:
                # and the key just before each hot key, when it is in cand: in keys strictly
                # increasing, that is the entry before it (a binary search of each found the same)
                pick[:-1] |= hot[1:] & (keys[1:] - 1 == keys[:-1])
            else:
                before = keys[hot] - 1
                at = np.searchsorted(keys, before)
                found = at < len(keys)
                found[found] = keys[at[found]] == before[found]
                pick[at[found]] = True
            src = keys[pick]
            sc = score[pick]
        else:
            sc = score
        nxt = src + 1
        inside = nxt < self._size
        gap = np.zeros(len(src))
        gap[inside] = self._created[nxt[inside]] - self._created[src[inside]]
        ok = inside & (gap > 0) & (gap <= window)
        ok[ok] = mask[nxt[ok]]
        if not ok.any():
            return cand, score
        tgt, add = nxt[ok], weight * sc[ok]
        at = np.searchsorted(keys, tgt)
        held = at < len(keys)
        held[held] = keys[at[held]] == tgt[held]
        total = score.copy()
        total[at[held]] += add[held]  # each key follows one key: no index repeats
        fresh = ~held
        return (
            np.concatenate([cand, tgt[fresh].astype(cand.dtype)]),
            np.concatenate([total, add[fresh].astype(np.float32)]),
        )


def indexed_terms(terms: str, entities: str | None) -> str:
    """What the index holds of a row: its stems, and its entities as marked tokens."""
    if not entities or entities == "[]":
        return terms
    marked = entity_terms(json.loads(entities))
    return f"{terms} {marked}" if terms and marked else terms or marked
