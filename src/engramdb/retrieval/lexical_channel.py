"""The lexical half of candidate generation: BM25 over the stems stored with every memory, from an
in-memory inverted index, with the visible set masked *before* anything is ranked.

Why not FTS5: an FTS5 ``MATCH 'a OR b OR …' ORDER BY bm25() LIMIT k`` scores every row that holds
any query term — there is no top-k pruning — so its cost grows with the corpus (measured on the
benchmark corpus: 15.5 ms p50 per query at 100k memories, linear beyond). Here a query term costs
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
  merged into the main postings when it grows past a fraction of them.

    idf(t)  = ln(1 + (N − df + 0.5) / (df + 0.5))
    bm25    = Σ_t idf(t) · (k1 + 1) / (1 + k1 · (1 − b + b · len / avglen))
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

from engramdb.memories.model import Visibility
from engramdb.retrieval.columns import VisibilityColumns
from engramdb.retrieval.keywords import entity_terms
from engramdb.storage.ports import Backend, IndexRow

K1 = 1.2
B = 0.75
#: merge the delta into the main postings once it holds this many postings (or a tenth of main)
MERGE_AT = 50_000
#: a refresh with more changed rows than this is indexed straight into the main postings
BULK = 20_000

_EMPTY = np.zeros(0, dtype=np.int32)


class LexicalChannel:
    """BM25 over every memory's stems, for any reader, from memory."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        #: (mask key, visible count, {term: document frequency}) of the last `search`
        self._last_df: tuple[tuple[object, ...], int, dict[int, int]] | None = None
        self._seen = -1
        self.cols = VisibilityColumns()
        self._size = 0  # 1 + the largest key seen
        self._length = np.ones(len(self.cols), dtype=np.float32)
        # The scoring fields recall needs of a candidate besides its text (see `fields`).
        self._importance = np.zeros(len(self.cols), dtype=np.float64)
        self._created = np.zeros(len(self.cols), dtype=np.float64)
        self._old_count = np.zeros(len(self.cols), dtype=np.int64)
        self._old_newest = np.full(len(self.cols), np.nan)
        self._old_oldest = np.full(len(self.cols), np.nan)
        self._ring: list[bytes | None] = [None] * len(self.cols)
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

    def refresh(self, store: Backend) -> None:
        """Load whatever changed since the last refresh (cheap when nothing did)."""
        with self._lock:
            latest = store.changes.current()
            if latest == self._seen:
                return
            rows = store.memories.index_rows(self._seen)
            if rows:
                self._ensure(1 + max(r[0] for r in rows))
                self._apply(rows)
                self._last_df = None  # postings changed: document frequencies with them
            self._seen = latest

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
        self._ring.extend([None] * (new - cap))
        self._sig = grown(self._sig, 0)  # type: ignore[assignment]
        self._stale = grown(self._stale, 0)  # type: ignore[assignment]

    def _term_ids(self, terms: str) -> list[int]:
        vocab = self._vocab
        return [vocab.setdefault(t, len(vocab)) for t in terms.split()]

    def _apply(self, rows: Sequence[IndexRow]) -> None:
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
        texts = [_indexed(r[8], r[16]) for r in rows]
        sigs = np.fromiter((hash(t) for t in texts), dtype=np.int64, count=len(rows))
        moved = np.flatnonzero(sigs != self._sig[keys])  # an access or a score changed, not the text
        if not len(moved):
            return
        self._sig[keys[moved]] = sigs[moved]
        if len(moved) > BULK:
            self._bulk(keys[moved], [texts[i] for i in moved.tolist()])
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

    def _bulk(self, keys: npt.NDArray[np.int64], texts: list[str]) -> None:
        """Index many rows straight into the main postings (a first load, a large import)."""
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
        self._merge(terms, np.repeat(keys.astype(np.int32), counts))

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
        main_terms = np.repeat(np.arange(len(counts), dtype=np.int32), counts)
        live = ~self._stale[self._ids]
        d_terms = [t for t, keys in self._delta.items() for _ in keys]
        d_keys = [k for keys in self._delta.values() for k in keys]
        terms = np.concatenate([main_terms[live], np.asarray(d_terms, dtype=np.int32), extra_terms])
        keys = np.concatenate([self._ids[live], np.asarray(d_keys, dtype=np.int32), extra_keys])
        order = np.lexsort((keys, terms))  # by term, then key: `_holds` bisects a term's keys
        self._ids = np.ascontiguousarray(keys[order], dtype=np.int32)
        self._indptr = np.zeros(len(self._vocab) + 1, dtype=np.int64)
        np.cumsum(np.bincount(terms, minlength=len(self._vocab)), out=self._indptr[1:])
        self._stale[:] = False
        self._n_stale = 0
        self._delta.clear()
        self._delta_docs.clear()
        self._delta_count = 0

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
        memory, not from the rows. Coverage is the IDF-weighted share of `stems` the memory holds,
        IDF over what `vis` shows: a word every memory has counts little, one none has counts
        most, so a query about something the store never heard of covers little of anything."""
        with self._lock:
            n = self._size
            ks = np.asarray([k for k in keys if 0 <= k < n], dtype=np.int64)
            if not len(ks):
                return []
            seen = self.cols.visible(vis, n, types)
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
            names = self.cols.types.names()
            out = []
            for i, k in enumerate(ks.tolist()):
                newest, oldest = self._old_newest[k], self._old_oldest[k]
                out.append(
                    (
                        k,
                        names[self.cols.type[k]],
                        float(self._importance[k]),
                        self._ring[k],
                        (
                            int(self._old_count[k]),
                            None if np.isnan(newest) else float(newest),
                            None if np.isnan(oldest) else float(oldest),
                        ),
                        float(cue[i]),
                        float(self._created[k]),
                        1.0 if named[i] else 0.0,
                        float(coverage[i]),
                    )
                )
            return out

    def search(
        self, stems: Iterable[str], limit: int, vis: Visibility, *, types: frozenset[str] | None = None
    ) -> dict[int, float]:
        """The `limit` visible memories (of `types`, when given) with the highest BM25 for the
        query's stems, {key: score}, best first."""
        with self._lock:
            n = self._size
            terms = [self._vocab.get(s) for s in dict.fromkeys(stems)]
            known = [t for t in terms if t is not None]
            if not known or n == 0:
                return {}
            mask = self.cols.visible(vis, n, types)
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
            weight *= (K1 + 1.0) / (1.0 + K1 * (1.0 - B + B * length / avglen))
            if len(keys) == 1:
                cand, score = all_keys, weight
            elif len(all_keys) * 32 > n:
                # Many postings: one pass over a dense array beats sorting them.
                dense = np.bincount(all_keys, weights=weight, minlength=n)
                cand = np.flatnonzero(dense).astype(np.int32)
                score = dense[cand].astype(np.float32)
            else:
                cand, inverse = np.unique(all_keys, return_inverse=True)
                score = np.bincount(inverse, weights=weight, minlength=len(cand)).astype(np.float32)
            if len(cand) > limit:
                top = np.argpartition(-score, limit - 1)[:limit]
                cand, score = cand[top], score[top]
            order = np.lexsort((cand, -score))
            return dict(zip(cand[order].tolist(), score[order].tolist(), strict=True))


def _indexed(terms: str, entities: str | None) -> str:
    """What the index holds of a row: its stems, and its entities as marked tokens."""
    if not entities or entities == "[]":
        return terms
    marked = entity_terms(json.loads(entities))
    return f"{terms} {marked}" if terms and marked else terms or marked
