"""Recall's two candidate channels answered by the server, for a tenant this process does not cache.

A process serving many tenants of a PostgreSQL store holds the caches of those it uses, within a
byte budget (`engramdb.retrieval.tenant_caches`). Two cases are left where a recall must not wait
for a cache: a tenant larger than the whole budget (holding it would push the process past the
memory it was given), and a tenant whose cache another thread is loading right now (already for a
10,000-memory tenant, a wait a recall should not share). Then the recall is answered from the server,
**exactly**: `ServerLexical` and `ServerVectors` have the methods of `LexicalChannel` and
`VectorChannel` that a recall calls, and answer each from one statement of
`engramdb.storage.ports.ServerIndex` over the tenant's rows (its index, the visibility predicate
inside), never from an approximate index filtered after the fact.

The rankings are the cache's. The server returns what BM25 is made of (how many memories the
reader sees, their total length, each matching memory's length and the query stems it holds), and
BM25 — its float32 weights, its float64 sums, the credit a memory gets from the one written just
before it (``bm25_prev``) — is computed here with the very operations `LexicalChannel.search` uses;
coverage and cue overlap as `LexicalChannel.columns` computes them; cosines with the kernel the
exact vector index scores with, over the vectors the server's exact scan found nearest (a few more
than asked, so float rounding between pgvector's sum and numpy's cannot change which are kept).
Two things can differ, and only at exact ties: which of several memories tied at the 50th
candidate is kept (the cache's partial sort picks any; here the lower key), and "the memory
written just before" after a forget (a cache keeps the forgotten memory's place until it is
reloaded; the server reads the rows there are).

A pair is made per recall and holds nothing between recalls (`nbytes` 0), so a tenant served this
way costs the process no memory; each recall pays its scans instead (measured in
`benchmarks/bench_tenants.py`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from engramdb.memories.model import Visibility
from engramdb.retrieval.lexical_channel import K1, B, FieldColumns, indexed_terms
from engramdb.retrieval.vector_channel import best_and_ties
from engramdb.storage.ports import IndexRow, ServerIndex

if TYPE_CHECKING:
    from engramdb.embeddings.base import Embedder
    from engramdb.storage.ports import AccessUpdate, Backend

#: vectors asked of the server beyond the k a search wants, so that a memory pgvector's float sum
#: puts just past the k-th, and numpy's just inside, is still among them
NEAREST_MARGIN = 8


class ServerLexical:
    """`LexicalChannel`'s recall methods for one tenant, answered by `index` (module docstring)."""

    def __init__(self, index: ServerIndex, tenant: str) -> None:
        self.index, self.tenant = index, tenant
        #: (vis, types) → (shown count, {stem: document frequency}) of this recall's search
        self._df: dict[tuple[Visibility, frozenset[str] | None], tuple[int, dict[str, int]]] = {}
        #: the rows `columns` read, by key (`holding` asks about them again)
        self._rows: dict[int, IndexRow] = {}
        self._vis: Visibility | None = None

    # -- what a cache does that there is nothing to do for -----------------------------------------

    def refresh(self, store: Backend, latest: int | None = None) -> None:
        """Nothing to catch up with: every read goes to the rows."""

    def accessed(self, change: int, updates: Sequence[AccessUpdate]) -> None:
        """Nothing held to update."""

    def nbytes(self) -> int:
        return 0

    # -- reads ---------------------------------------------------------------------------------

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
        """`LexicalChannel.search`, from the server's rows."""
        distinct = list(dict.fromkeys(stems))
        if not distinct:
            return {}
        expand = prev_weight > 0 and window > 0
        visible, total, matches = self.index.lexical(vis, types, distinct, successors=expand)
        dfs = {s: 0 for s in distinct}
        for m in matches:
            for s in m[3]:
                dfs[s] += 1
        self._df[(vis, types)] = (visible, dfs)
        if visible == 0 or not matches:
            return {}
        # as the cache: float32 lengths (max(n_tokens, 1)), their float32 dot with the mask
        avglen = float(np.float32(total)) / visible
        matches.sort(key=lambda m: m[0])
        keys = np.fromiter((m[0] for m in matches), dtype=np.int64, count=len(matches))
        lengths = np.fromiter((max(float(m[1] or 1), 1.0) for m in matches), dtype=np.float32, count=len(matches))
        per_term: list[npt.NDArray[np.int64]] = []
        idfs: list[float] = []
        for s in distinct:
            ids = np.fromiter((i for i, m in enumerate(matches) if s in m[3]), dtype=np.int64)
            if len(ids):
                per_term.append(ids)
                idfs.append(float(np.log1p((visible - len(ids) + 0.5) / (len(ids) + 0.5))))
        all_ids = np.concatenate(per_term)
        length = lengths[all_ids]
        weight = np.repeat(np.asarray(idfs, dtype=np.float32), [len(k) for k in per_term])
        weight *= (k1 + 1.0) / (1.0 + k1 * (1.0 - b + b * length / avglen))
        if len(per_term) == 1:
            local, score = all_ids, weight
        else:
            sums = np.bincount(all_ids, weights=weight, minlength=len(matches))
            local = np.flatnonzero(sums)
            score = sums[local].astype(np.float32)
        cand = keys[local]
        if expand:
            cand, score = _with_preceding(cand, score, [matches[i] for i in local.tolist()], prev_weight, window)
        order = np.lexsort((cand, -score))[:limit]
        return dict(zip(cand[order].tolist(), score[order].tolist(), strict=True))

    def _counts(self, vis: Visibility, types: frozenset[str] | None, stems: list[str]) -> tuple[int, dict[str, int]]:
        memo = self._df.get((vis, types))
        if memo is not None and all(s in memo[1] for s in stems):
            return memo
        return self.index.term_counts(vis, types, stems)

    def columns(
        self,
        keys: Sequence[int],
        vis: Visibility,
        stems: Iterable[str],
        *,
        types: frozenset[str] | None = None,
        entities: Sequence[str] = (),
    ) -> FieldColumns:
        """`LexicalChannel.columns`, from the server's rows."""
        self._vis = vis
        got = {r[0]: r for r in self.index.fields(vis, types, list(dict.fromkeys(keys)))}
        self._rows.update(got)
        rows = [got[k] for k in keys if k in got]
        if not rows:
            return FieldColumns.empty()
        tokens = [frozenset(indexed_terms(r[8], r[16]).split()) for r in rows]
        distinct = list(dict.fromkeys(stems))
        n_seen, dfs = self._counts(vis, types, distinct) if distinct else (0, {})
        hits = np.zeros(len(rows), dtype=np.int64)
        covered = np.zeros(len(rows), dtype=np.float64)
        total = 0.0
        for s in distinct:
            df = dfs.get(s, 0)
            idf = math.log1p((n_seen - df + 0.5) / (df + 0.5))
            total += idf
            held = np.fromiter((s in t for t in tokens), dtype=np.bool_, count=len(rows))
            hits += held
            covered += idf * held
        cue = hits / len(distinct) if distinct else np.zeros(len(rows))
        coverage = covered / total if total > 0 else np.zeros(len(rows))
        named = np.fromiter((any(e in t for e in entities) for t in tokens), dtype=np.bool_, count=len(rows))
        return FieldColumns(
            keys=np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows)),
            type=np.zeros(len(rows), dtype=np.int64),  # (type codes are the cache's own; recall reads none)
            importance=np.fromiter((r[10] for r in rows), dtype=np.float64, count=len(rows)),
            rings=[r[11] for r in rows],
            old_count=np.fromiter((r[12] or 0 for r in rows), dtype=np.int64, count=len(rows)),
            old_newest=np.fromiter((np.nan if r[13] is None else r[13] for r in rows), dtype=np.float64),
            old_oldest=np.fromiter((np.nan if r[14] is None else r[14] for r in rows), dtype=np.float64),
            cue=np.asarray(cue, dtype=np.float64),
            created=np.fromiter((r[15] for r in rows), dtype=np.float64, count=len(rows)),
            entity=np.where(named, 1.0, 0.0),
            coverage=np.asarray(coverage, dtype=np.float64),
        )

    def holding(self, keys: Sequence[int], entities: Sequence[str]) -> set[int]:
        """`LexicalChannel.holding`: those of `keys` (read by `columns`) holding one of `entities`."""
        missing = [k for k in keys if k not in self._rows]
        if missing and self._vis is not None:
            self._rows.update((r[0], r) for r in self.index.fields(self._vis, None, missing))
        wanted = set(entities)
        out = set()
        for k in keys:
            r = self._rows.get(k)
            if r is not None and not wanted.isdisjoint(indexed_terms(r[8], r[16]).split()):
                out.add(k)
        return out

    def created_of(
        self, keys: Sequence[int], vis: Visibility, *, types: frozenset[str] | None = None
    ) -> dict[int, float]:
        got = self.index.created(vis, types, list(dict.fromkeys(keys)))
        return {k: got[k] for k in keys if k in got}

    def beside(self, keys: Sequence[int]) -> dict[int, tuple[int | None, int | None]]:
        return self.index.beside(self.tenant, list(dict.fromkeys(keys)))


def _with_preceding(
    cand: npt.NDArray[np.int64],
    score: npt.NDArray[np.float32],
    matches: Sequence[tuple[Any, ...]],
    weight: float,
    window: float,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
    """`LexicalChannel._with_preceding` over every scored memory (no pruning: the server has
    sent each one's successor already): each memory's next one, when shown and made
    0 < Δt ≤ `window` after it, credited `weight` × its score, in float32 as there."""
    nxt = np.fromiter((-1 if m[4] is None else m[4] for m in matches), dtype=np.int64, count=len(matches))
    gap = np.fromiter(
        ((m[5] - m[2]) if m[4] is not None and m[5] is not None else 0.0 for m in matches),
        dtype=np.float64,
        count=len(matches),
    )
    shown = np.fromiter((bool(m[6]) for m in matches), dtype=np.bool_, count=len(matches))
    ok = (nxt >= 0) & (gap > 0) & (gap <= window) & shown
    if not ok.any():
        return cand, score
    tgt, add = nxt[ok], weight * score[ok]
    at = np.searchsorted(cand, tgt)  # cand is in key order
    held = at < len(cand)
    held[held] = cand[at[held]] == tgt[held]
    total = score.copy()
    total[at[held]] += add[held]
    fresh = ~held
    return np.concatenate([cand, tgt[fresh]]), np.concatenate([total, add[fresh].astype(np.float32)])


class ServerVectors:
    """`VectorChannel`'s recall methods for one tenant, answered by `index` (module docstring)."""

    def __init__(self, index: ServerIndex, tenant: str, embedder: Embedder) -> None:
        self.index, self.tenant, self.embedder = index, tenant, embedder

    def prefetch(self, store: Backend, latest: int) -> None:
        """Nothing to read ahead."""

    def refresh(self, store: Backend, latest: int | None = None) -> None:
        """Nothing to catch up with."""

    def passed(self, change: int) -> None:
        """Nothing held."""

    def nbytes(self) -> int:
        return 0

    def search(
        self, query_vec: npt.NDArray[np.float32], k: int, vis: Visibility, *, types: frozenset[str] | None = None
    ) -> dict[int, float]:
        """`VectorChannel.search`: the `k` visible memories (of `types`) nearest `query_vec`."""
        q = np.asarray(query_vec, dtype=np.float32)
        found = self.index.nearest(vis, types or None, self.embedder.name, q.tobytes(), k + NEAREST_MARGIN)
        return _rescored(found, q, k)

    def cosines(self, query_vec: npt.NDArray[np.float32], keys: list[int]) -> dict[int, float]:
        """Cosine of the query with each of `keys` (0 for memories without a vector)."""
        if not keys:
            return {}
        q = np.asarray(query_vec, dtype=np.float32)
        got = self.index.vectors(self.tenant, self.embedder.name, keys)
        vecs = np.zeros((len(keys), len(q)), dtype=np.float32)
        for i, k in enumerate(keys):
            raw = got.get(k)
            if raw:
                vecs[i] = np.frombuffer(raw, dtype=np.float32)
        sims = np.einsum("ij,j->i", vecs, q)
        return dict(zip(keys, sims.tolist(), strict=True))

    # -- dedup on write (`engramdb.memories.writing`) --

    def stored_form(self, vecs: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """`VectorChannel.stored_form`: the server keeps vectors as written (float32)."""
        return np.asarray(vecs, dtype=np.float32)

    def near_matches(
        self,
        vecs: npt.NDArray[np.float32],
        vis: Visibility,
        filters: Sequence[tuple[str, str, int]],
        min_cos: float,
        limit: int,
    ) -> list[list[tuple[int, float]]]:
        """`VectorChannel.near_matches`: for each row of `vecs`, the most similar visible memory of
        its (type, owner) at or above its level at cosine ≥ `min_cos`, and those tied with it, at
        most `limit` — one exact scan per row with the whole filter inside the statement."""
        q = np.ascontiguousarray(vecs, dtype=np.float32).reshape(len(filters), -1)
        out: list[list[tuple[int, float]]] = []
        for i, (mtype, owner, level) in enumerate(filters):
            found = self.index.nearest(
                vis, frozenset({mtype}), self.embedder.name, q[i].tobytes(), limit + NEAREST_MARGIN,
                owner=owner, min_level=level,
            )  # fmt: skip
            out.append(best_and_ties(_rescored(found, q[i], limit), min_cos))
        return out


def _rescored(found: list[tuple[int, bytes]], q: npt.NDArray[np.float32], k: int) -> dict[int, float]:
    """The `k` of `found` ((key, float32 vector) the server's exact scan returned, a few more than
    k) nearest `q` by the exact index's kernel (`ExactIndex.search`), best first, ties by key."""
    if not found:
        return {}
    keys = np.fromiter((n for n, _ in found), dtype=np.int64, count=len(found))
    vecs = np.frombuffer(b"".join(v for _, v in found), dtype=np.float32).reshape(len(found), -1)
    sims = np.einsum("ij,j->i", vecs, q)
    order = np.lexsort((keys, -sims))[:k]
    return dict(zip(keys[order].tolist(), sims[order].tolist(), strict=True))


@dataclass(eq=False)
class ServerPair:
    """The server-answered stand-in for a tenant's `CachePair`, made for one recall."""

    lexical: ServerLexical
    vectors: ServerVectors | None

    def nbytes(self) -> int:
        return 0


def server_pair(index: ServerIndex, tenant: str, embedder: Embedder | None) -> ServerPair:
    """A `ServerPair` of `tenant` (vectors only with an embedder)."""
    return ServerPair(
        ServerLexical(index, tenant), ServerVectors(index, tenant, embedder) if embedder is not None else None
    )


__all__ = ["NEAREST_MARGIN", "ServerLexical", "ServerPair", "ServerVectors", "server_pair"]
