"""The recall pipeline: candidates → features → normalise and weigh → spread → top k → log.

::

    query ─► candidates  BM25 ∪ vector kNN, each restricted to visible memories before ranking
          ─► features    cos, cue overlap, base-level recency, importance, made inside a date named,
                         holds an entity the query names
          ─► normalise   min-max over the candidates; temporal context from the candidates' rel;
                         S_base = a_rel·rel + a_rec·rec + a_imp·imp + a_when·when + a_ent·ent + a_ctx·ctx
          ─► spread      from the top seeds over typed edges; only visible nodes receive or relay
          ─► top k       S = S_base + γ·spread
          ─► log         one access per hit (deliberate channels reinforce), one recall record
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from engramdb.errors import RerankerError, ValidationError
from engramdb.memories import scoring
from engramdb.memories.access import log_accesses
from engramdb.memories.model import (
    DEFAULT_LIMITS,
    Channel,
    Components,
    Confidentiality,
    EdgeType,
    Limits,
    Memory,
    MemoryType,
    Visibility,
    check_text,
)
from engramdb.memories.text import id_tokens
from engramdb.observability import otel
from engramdb.retrieval.columns import KeySet
from engramdb.retrieval.keywords import TIME_WORDS, asks_when, keywords, query_entity_tokens, query_names, stem
from engramdb.retrieval.lexical_channel import FieldColumns
from engramdb.retrieval.results import Explained, Explanation, Hit, Recall, Source
from engramdb.retrieval.sequence import sequence_neighbours
from engramdb.retrieval.server_channels import ServerPair
from engramdb.retrieval.when import TimeWindow, When, resolve_when
from engramdb.storage.ports import RecallRecord, Touch

if TYPE_CHECKING:
    from engramdb.embeddings.base import Embedder, Reranker
    from engramdb.retrieval.lexical_channel import LexicalChannel
    from engramdb.retrieval.tenant_caches import CachePair, TenantCaches, WholeStore
    from engramdb.retrieval.vector_channel import VectorChannel
    from engramdb.storage.ports import Backend

NEAR_MISSES = 5
#: how many recent filters' admitted keys a recaller keeps (`Recaller._admitted`)
ADMITTED_FILTERS = 16
#: the tenant an engine's agents are in unless they name one
DEFAULT_TENANT = "default"


@dataclass(slots=True)
class _Cand:
    """A hit or a near miss: its fields out of the candidates' columns (`_Pool.cands`)."""

    n: int
    cos: float
    cue: float
    bm25: float
    when: float
    entity: float
    ctx: float
    dated: float
    lexical: bool
    vector: bool
    spread: float
    rel: float
    rec: float
    imp: float
    score: float
    relevance: float
    rerank: float
    memory: Memory | None = None
    name: tuple[str, str] | None = None  # (id, title) of a near miss, which is not read in full
    comps: Components | None = None  # made once: the hit, its explanation and its access row share it

    @property
    def source(self) -> Source:
        if self.lexical and self.vector:
            return "both"
        if self.lexical:
            return "lexical"
        if self.vector:
            return "vector"
        return "spread"

    def components(self) -> Components:
        if self.comps is not None:
            return self.comps
        self.comps = Components(
            self.rel,
            self.rec,
            self.imp,
            self.spread,
            self.cos,
            self.cue,
            self.bm25,
            self.when,
            self.entity,
            self.ctx,
            self.dated,
            self.rerank,
        )
        return self.comps


class _Pool:
    """The candidates as columns, one float64 array per feature in one order: scoring runs over
    arrays with the same IEEE operations, in the same order, as it ran per candidate (so the
    same values), without a Python object per candidate (~100 per recall)."""

    __slots__ = (
        "base",
        "bm25",
        "cos",
        "coverage",
        "created",
        "ctx",
        "cue",
        "dated",
        "entity",
        "imp",
        "importance",
        "keys",
        "lexical",
        "n",
        "old_count",
        "old_newest",
        "old_oldest",
        "raw_rec",
        "rec",
        "rel",
        "relevance",
        "rerank",
        "rings",
        "score",
        "spread",
        "vector",
        "when",
    )  # fmt: skip

    def __init__(self, f: FieldColumns) -> None:
        self.n = f.keys
        self.keys: list[int] = f.keys.tolist()
        self.rings = f.rings
        self.old_count, self.old_newest, self.old_oldest = f.old_count, f.old_newest, f.old_oldest
        self.importance, self.cue, self.created = f.importance, f.cue, f.created
        self.entity, self.coverage = f.entity.copy(), f.coverage
        zeros = np.zeros(len(self.keys), dtype=np.float64)
        self.bm25 = self.cos = self.when = self.dated = self.raw_rec = self.relevance = zeros
        self.rel = self.rec = self.imp = self.ctx = self.base = self.spread = self.score = self.rerank = zeros
        self.lexical = self.vector = np.zeros(len(self.keys), dtype=np.bool_)

    def __len__(self) -> int:
        return len(self.keys)

    def extend(self, other: _Pool) -> None:
        """Append `other`'s candidates (spreading's newcomers) after these."""
        for name in self.__slots__:
            mine, theirs = getattr(self, name), getattr(other, name)
            setattr(self, name, mine + theirs if isinstance(mine, list) else np.concatenate([mine, theirs]))

    def cands(self, rows: npt.NDArray[np.intp]) -> list[_Cand]:
        """The candidates at `rows` (positions in these columns), as `_Cand`s: one gather per column."""
        cols = (
            self.cos, self.cue, self.bm25, self.when, self.entity, self.ctx, self.dated, self.lexical, self.vector, self.spread,
            self.rel, self.rec, self.imp, self.score, self.relevance, self.rerank,
        )  # fmt: skip
        keys = self.keys
        return [
            _Cand(keys[i], *fields) for i, *fields in zip(rows.tolist(), *(c[rows].tolist() for c in cols), strict=True)
        ]


class Recaller:
    """Runs recalls for the engine; stateless apart from the shared caches it is given."""

    def __init__(
        self,
        store: Backend,
        clock: Callable[[], float],
        config: scoring.ScoringConfig,
        embedder: Embedder | None,
        caches: TenantCaches | WholeStore,
    ) -> None:
        self.store, self.clock, self.config = store, clock, config
        #: the candidate caches: one pair for the store (SQLite), or one per tenant (PostgreSQL)
        self.embedder, self.caches = embedder, caches
        #: adds read-time fields (retention, prune time) to each memory shown, in place: the hits
        #: are read for this recall alone (`MemoryRows.many` makes new objects); set by the engine
        self.annotate: Callable[[Memory, float], Memory] = lambda m, _now: m
        #: the largest query taken; set by the engine
        self.limits: Limits = DEFAULT_LIMITS
        #: the second stage (`engramdb.embeddings.rerank.Reranker`), and the most confidential
        #: memory whose text it is sent; set by the engine
        self.reranker: Reranker | None = None
        self.rerank_cap: Confidentiality = Confidentiality.RESTRICTED
        # Made once per config, not per recall: `replace` re-validates every field (a cost on every recall).
        self._made_for: scoring.ScoringConfig | None = None
        self._weights: dict[str, float] = {}
        self._hop_configs: dict[int, scoring.ScoringConfig] = {}
        #: the keys each recent filter admits, kept up to date from the change feed (`_admitted`)
        self._admits: OrderedDict[Visibility, tuple[int, set[int], KeySet]] = OrderedDict()
        self._admits_lock = threading.Lock()

    @property
    def lexical(self) -> LexicalChannel:
        """The lexical cache of the default tenant (of the store, when it keeps one for all)."""
        return self.caches.of(DEFAULT_TENANT).lexical

    @property
    def channel(self) -> VectorChannel | None:
        """The vector cache of the default tenant (of the store, when it keeps one for all)."""
        return self.caches.of(DEFAULT_TENANT).vectors

    def _constants(self) -> None:
        if self._made_for is not self.config:
            self._made_for, self._weights, self._hop_configs = self.config, _weights(self.config), {}

    def _weights_now(self) -> dict[str, float]:
        self._constants()
        weights = dict(self._weights)  # a copy: the caller's Explanation may be changed
        if self.reranker is not None:
            weights.update(rerank_top=float(self.config.rerank_top), rerank_weight=self.config.rerank_weight)
        return weights

    def _with_hops(self, hops: int) -> scoring.ScoringConfig:
        """The scoring config with `hops` (the recall's own; the config's is not read by recall)."""
        self._constants()
        cfg = self._hop_configs.get(hops)
        if cfg is None:
            cfg = self._hop_configs[hops] = replace(self.config, hops=hops)
        return cfg

    # -- candidates ---------------------------------------------------------------------------

    def _candidates(
        self,
        pair: CachePair | ServerPair,
        ns: Sequence[int],
        vis: Visibility,
        types: frozenset[str] | None,
        qstems: Sequence[str],
        qents: Sequence[str],
    ) -> _Pool:
        """The scoring fields of the visible memories among `ns` (from the lexical channel's cache
        of them, refreshed at the start of the recall), with their cue overlap with the query and
        whether they hold an entity the query names."""
        return _Pool(pair.lexical.columns(ns, vis, qstems, types=types, entities=qents))

    def _contradictions(self, ns: list[int], vis: Visibility) -> dict[int, tuple[str, ...]]:
        """'contradicted by …' notes for hits with a visible `contradicts` edge, either way round."""
        found = self.store.edges.contradictions(vis, ns)
        return {n: tuple(f"contradicted by {other}: {preview}" for other, preview in v) for n, v in found.items()}

    def _neighbours(
        self, pair: CachePair | ServerPair, vis: Visibility, types: frozenset[str] | None = None
    ) -> scoring.Neighbours[int]:
        edges, lexical, window = self.store.edges, pair.lexical, self.config.sequence_window

        def neighbours(nodes: Sequence[int]) -> dict[int, list[tuple[int, bool, float]]]:
            # Edges spread both ways; the far end must be visible to be reached at all.
            out = {
                a: [(b, EdgeType(etype).causal, weight) for b, etype, weight in near]
                for a, near in edges.neighbours(vis, nodes).items()
            }
            for a, near in sequence_neighbours(lexical, nodes, vis, window, types).items():
                out.setdefault(a, []).extend(near)  # implicit episodes (retrieval/sequence.py)
            return out

        return neighbours

    def _admitted(self, vis: Visibility, latest: int) -> KeySet:
        """The keys `vis` (its `where` with it) admits as of change `latest`, validity aside (the
        masks test it): read whole the first time a filter is asked for, then kept up to date by
        the rows changed since (`MemoryRows.admitted`: a chat loop that writes between recalls
        re-reads its few new rows, not the tenant's). The 16 most recent filters are kept."""
        base = dataclasses.replace(vis, as_of=None, only=None)
        with self._admits_lock:
            held = self._admits.get(base)
            if held is not None:
                self._admits.move_to_end(base)
        if held is not None and held[0] == latest:
            return held[2]
        if held is None:
            keys = set(self.store.memories.visible_keys(base))
        else:
            keys = set(held[1])  # a copy: another thread may be reading the held one
            for n, ok in self.store.memories.admitted(base, held[0]):
                if ok:
                    keys.add(n)
                else:
                    keys.discard(n)
        found = KeySet(keys)
        with self._admits_lock:
            now_held = self._admits.get(base)
            if now_held is None or now_held[0] <= latest:
                self._admits[base] = (latest, keys, found)
                self._admits.move_to_end(base)
                while len(self._admits) > ADMITTED_FILTERS:
                    self._admits.popitem(last=False)
        return found

    # -- the pipeline -------------------------------------------------------------------------

    def run(
        self,
        query: str,
        *,
        vis: Visibility,
        k: int,
        hops: int,
        types: frozenset[MemoryType] | None,
        channel: Channel,
        trace_ref: str | None,
        dry_run: bool,
        when: When = "auto",
        min_relevance: float | None = None,
    ) -> tuple[Recall, Explanation]:
        """One recall; `when` names the time windows it anchors on (`retrieval.when.resolve_when`).
        A query that is not text, is blank, or is longer than `limits.query_chars` is a
        `ValidationError` before anything is read or logged."""
        check_text("query", query, self.limits.query_chars, empty=False)
        with otel.span(
            "engramdb.recall", tenant=vis.tenant, agent=vis.reader, k=k, hops=hops, channel=channel.value,
            dry_run=dry_run, query=query if otel.capture_text() else None,
        ) as span:  # fmt: skip
            t0 = time.perf_counter()
            recall, explanation = self._run(
                query, vis=vis, k=k, hops=hops, types=types, channel=channel, trace_ref=trace_ref, dry_run=dry_run,
                when=when, min_relevance=check_min_relevance(min_relevance),
            )  # fmt: skip
            if span.is_recording():
                top = recall.hits[0] if recall.hits else None
                parts = dataclasses.asdict(top.components) if top is not None else {}
                otel.set_attributes(
                    span, hits=len(recall.hits), duration_ms=round((time.perf_counter() - t0) * 1000, 3),
                    recall_id=recall.recall_id, near_misses=len(explanation.near_misses),
                    **{"top.score": top.score if top else None, "top.source": top.source if top else None},
                    **{f"top.{name}": value for name, value in parts.items()},
                )  # fmt: skip
            return recall, explanation

    def _run(
        self,
        query: str,
        *,
        vis: Visibility,
        k: int,
        hops: int,
        types: frozenset[MemoryType] | None,
        channel: Channel,
        trace_ref: str | None,
        dry_run: bool,
        when: When = "auto",
        min_relevance: float | None = None,
    ) -> tuple[Recall, Explanation]:
        cfg = self.config
        now = self.clock()
        windows = resolve_when(when, query, now) if cfg.w_when else ()
        if vis.as_of is None:
            vis = dataclasses.replace(vis, as_of=now)
        kws = keywords(query)
        type_names = frozenset(t.value for t in types) if types else None
        store = self.store
        qstems = list(dict.fromkeys(stem(w) for w in kws))
        qents = query_entity_tokens(query) if cfg.w_entity else []
        # A tenant's caches, or the server's exact answer for a tenant too large for the budget
        # or being loaded by another thread (`TenantCaches.for_recall`): the same ranking.
        pair = self.caches.for_recall(vis.tenant)
        vchannel = pair.vectors
        latest = store.changes.current(vis.tenant)  # once for both caches (a read inside a recall is not free)
        if vis.where is not None and vis.only is None and not isinstance(pair, ServerPair):
            # The caches' masks hold no metadata: the keys the filter admits, by a query of the
            # store under the same rule, restrict them before anything is ranked (the server's
            # own channels compile the filter into their queries).
            vis = dataclasses.replace(vis, only=self._admitted(vis, latest))
        if vchannel is not None and self.embedder is not None:
            vchannel.prefetch(store, latest)  # a cold cache reads its files beside the lexical cache's
        pair.lexical.refresh(store, latest)
        lexical = pair.lexical.search(
            qstems, cfg.candidates, vis, types=type_names, k1=cfg.bm25_k1, b=cfg.bm25_b,
            prev_weight=cfg.bm25_prev, window=cfg.sequence_window,
        )  # fmt: skip
        vector: dict[int, float] = {}
        qvec = None
        if vchannel is not None and self.embedder is not None:
            vchannel.refresh(store, latest)
            qvec = self.embedder.embed([query])[0]
            vector = vchannel.search(qvec, cfg.candidates, vis, types=type_names)
        self.caches.settle(vis.tenant)  # within the budget of tenant caches, this one loaded
        cands = self._candidates(pair, list(dict.fromkeys([*lexical, *vector])), vis, type_names, qstems, qents)
        if cfg.w_entity and cfg.name_focus and not cands.entity.any():
            # No candidate holds an entity the query names (none given at remember time): the names
            # the query writes, found in the memories' own words, stand in (keywords.query_names).
            qents = query_names(query)
            held = pair.lexical.holding(cands.keys, qents) if qents else set()
            if held:
                cands.entity[np.fromiter((n in held for n in cands.keys), dtype=np.bool_, count=len(cands))] = 1.0
        cands.bm25 = np.fromiter((lexical.get(n, 0.0) for n in cands.keys), dtype=np.float64, count=len(cands))
        cands.lexical = np.fromiter((n in lexical for n in cands.keys), dtype=np.bool_, count=len(cands))
        cands.vector = np.fromiter((n in vector for n in cands.keys), dtype=np.bool_, count=len(cands))
        dated = bool(cfg.w_dated) and asks_when(query)
        if dated:  # a question asking when: the memories that say when (keywords.TIME_WORDS) rise
            self._dated(pair, cands)
        self._features(pair, cands, qvec, vector, now, windows)
        bounds = self._normalise(cands)
        if self.reranker is not None:
            self._rerank(self.reranker, query, cands, vis)
        # The candidates, by their rel, are the anchors of the temporal context (themselves included).
        anchors = (cands.n, cands.created, cands.rel)
        self._weigh(cands, anchors)
        # Spread from the best seeds; activation is the base score scaled to [0, 1] by the highest
        # base this query allows.
        top_weight = scoring.top_weight(cfg, windows=bool(windows), entity=bool(cands.entity.any()), dated=dated)
        seeds = np.lexsort((cands.n, -cands.base))[: max(k, 1)].tolist()
        spread = scoring.spread(
            {cands.keys[i]: float(cands.base[i]) / top_weight for i in seeds},
            self._neighbours(pair, vis, type_names),
            self._with_hops(hops),
        )
        known = set(cands.keys)
        newcomers = [n for n in spread if n not in known]
        if newcomers:
            fresh = self._candidates(pair, newcomers, vis, type_names, qstems, qents)
            if dated:
                self._dated(pair, fresh)
            self._features(pair, fresh, qvec, {}, now, windows)
            self._normalise(fresh, bounds)
            if self.reranker is not None:  # not among those it scored: 0 for its share
                fresh.rel = fresh.rel * (1.0 - cfg.rerank_weight)
                fresh.relevance = fresh.relevance * (1.0 - cfg.rerank_weight)
            self._weigh(fresh, anchors)
            cands.extend(fresh)
        cands.spread = np.fromiter((spread.get(n, 0.0) for n in cands.keys), dtype=np.float64, count=len(cands))
        cands.score = cands.base + cfg.gamma * cands.spread
        # Relevance dominates (`ScoringConfig.relevant_share`): the relevant-enough hits first, each
        # tier by score, so no other term lifts a hit of relevance 0 above one that answers the query.
        rel = cands.relevance
        best = float(rel.max()) if len(rel) else 0.0
        enough = (rel > 0.0) & (rel >= cfg.relevant_share * best)
        order = np.lexsort((cands.n, -cands.score, ~enough))
        pooled = len(order)
        if min_relevance is not None:
            # Fewer than k when fewer answer the query well enough: the cut is absolute, so
            # "nothing relevant" can be the answer.
            order = order[cands.relevance[order] >= min_relevance]
        shown = cands.cands(order[: k + NEAR_MISSES])  # one gather per column for hits and near misses
        top, near = shown[:k], shown[k:]
        # Only the memories shown are read in full; explain names the near misses by id and title.
        full = store.memories.many(vis, [c.n for c in top])
        # The caches were read at `latest`; a memory forgotten or archived since (another process's
        # forget, a merge, a prune) is no longer visible: it is left out, not a KeyError.
        top = [c for c in top if c.n in full]
        for c in top:
            c.memory = full[c.n]
        names = store.memories.names([c.n for c in near])
        near = [c for c in near if c.n in names]
        for c in near:
            c.name = names[c.n]
        recall_id = None if dry_run else "rc_" + id_tokens(now, 1)[0]
        notes = self._contradictions([c.n for c in top], vis)
        hits = tuple(
            Hit(
                self.annotate(_memory(c), now),
                c.score,
                i + 1,
                c.components(),
                c.source,
                notes.get(c.n, ()),
                c.relevance,
            )
            for i, c in enumerate(top)
        )
        explanation = Explanation(
            recall_id=recall_id,
            query=query,
            reader=vis.reader,
            ts=now,
            k=k,
            hops=hops,
            hits=tuple(_explained(c, i + 1, True) for i, c in enumerate(top)),
            near_misses=tuple(_explained(c, k + i + 1, False) for i, c in enumerate(near)),
            weights=self._weights_now(),
        )
        if not dry_run:
            self._log(pair, explanation, top, vis, channel, trace_ref, now, types)
        note = _shortfall(k, len(hits), pooled, len(order), min_relevance, cfg)
        return Recall(query, hits, recall_id, now, note), explanation

    def _rerank(self, reranker: Reranker, query: str, cands: _Pool, vis: Visibility) -> None:
        """The second stage: the reranker scores the `rerank_top` candidates of the highest rel
        (ties by key), and relevance — rel, which ranks, and the absolute `relevance` — becomes
        ``(1 - w) * its own + w * the score`` (0 for a candidate not scored). A memory above
        `rerank_cap` is not sent: its own rel and relevance stand in for the score."""
        cfg = self.config
        if not len(cands):
            return
        top = np.lexsort((cands.n, -cands.rel))[: cfg.rerank_top]
        keys = [cands.keys[i] for i in top.tolist()]
        full = self.store.memories.many(vis, keys)
        sent: list[int] = []
        texts: list[str] = []
        kept: list[int] = []
        for i, n in zip(top.tolist(), keys, strict=True):
            m = full.get(n)
            if m is not None and m.confidentiality <= self.rerank_cap:
                sent.append(i)
                texts.append(m.content)
            else:
                kept.append(i)
        scored = np.zeros(len(cands), dtype=np.float64)
        if sent:
            got = list(reranker.score(query, texts))
            if len(got) != len(sent) or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and 0.0 <= x <= 1.0 for x in got
            ):
                raise RerankerError(
                    f"the reranker {reranker.name!r} returned {len(got)} scores for {len(sent)} texts, or a score "
                    "that is not a number in [0, 1] (a Reranker returns one score in [0, 1] per text, in order)",
                    reranker.name,
                )
            scored[np.asarray(sent, dtype=np.intp)] = np.asarray(got, dtype=np.float64)
        cands.rerank = scored.copy()
        w = cfg.rerank_weight
        for_rel, for_relevance = scored, scored.copy()
        if kept:
            at = np.asarray(kept, dtype=np.intp)
            for_rel[at], for_relevance[at] = cands.rel[at], cands.relevance[at]
        cands.rel = (1.0 - w) * cands.rel + w * for_rel
        cands.relevance = (1.0 - w) * cands.relevance + w * for_relevance

    def _features(
        self,
        pair: CachePair | ServerPair,
        cands: _Pool,
        qvec: Any,
        vector: dict[int, float],
        now: float,
        windows: Sequence[TimeWindow],
    ) -> None:
        cfg = self.config
        cosines: dict[int, float] = {}
        if qvec is not None and pair.vectors is not None:
            missing = [n for n in cands.keys if n not in vector]
            cosines = {**pair.vectors.cosines(qvec, missing), **vector}
        cos = np.fromiter((cosines.get(n, 0.0) for n in cands.keys), dtype=np.float64, count=len(cands))
        cands.cos = np.where(cos < 0.0, 0.0, cos)  # max(cos, 0.0); c.cue comes with the candidate
        inside = np.zeros(len(cands), dtype=np.bool_)
        for w in windows:
            inside |= (w.start <= cands.created) & (cands.created < w.end)
        cands.when = np.where(inside, 1.0, 0.0)
        cands.raw_rec = np.asarray(
            scoring.recency_columns(
                cands.rings, cands.old_count, cands.old_newest, cands.old_oldest, now, cfg.decay, cfg.min_age
            ),
            dtype=np.float64,
        )
        floor = float(getattr(self.embedder, "unrelated_cosine", 0.0) or 0.0)
        cands.relevance = _absolute_relevance(cands.coverage, cands.cos, floor)

    def _normalise(
        self, cands: _Pool, bounds: dict[str, tuple[float, float]] | None = None
    ) -> dict[str, tuple[float, float]]:
        """Min-max over the candidates (first the cosines, with ``cos_minmax``, and BM25 over the
        best candidate's, when μ > 0); spread-only nodes reuse the candidates' bounds, clipped."""
        cfg = self.config
        if bounds is None:
            bounds = {
                "cos": _span(cands.cos),
                "bm25": (0.0, float(cands.bm25.max()) if len(cands) else 0.0),
            }
        cos = _scaled(cands.cos, *bounds["cos"]) if cfg.cos_minmax else cands.cos
        bm25 = _scaled(cands.bm25, *bounds["bm25"]) if cfg.mu else np.zeros(len(cands))
        cue = cands.cue
        if cfg.fusion == "rank":  # ranks among the candidates; a node spreading reached ranks nowhere
            first = "rel" not in bounds
            cos, cue, bm25 = (
                np.asarray(scoring.rank_scores(v.tolist(), cfg.rank_k) if first else np.zeros(len(v)), dtype=np.float64)
                for v in (cos, cue, bm25)
            )
        raw = {
            # relevance and importance_score are arithmetic only: over arrays, element by element
            "rel": np.asarray(scoring.relevance(cos, cue, cfg.lam, bm25, cfg.mu), dtype=np.float64),  # type: ignore[arg-type]
            "rec": cands.raw_rec,
            "imp": np.asarray(scoring.importance_score(cands.importance), dtype=np.float64),  # type: ignore[arg-type]
        }
        if "rel" not in bounds:
            bounds.update({key: _span(v) for key, v in raw.items()})
            if cfg.fusion == "rank":  # rel is on the rank scale already: [0, 1], the same for every query
                bounds["rel"] = (0.0, 1.0)
        cands.rel, cands.rec, cands.imp = (_scaled(raw[key], *bounds[key]) for key in ("rel", "rec", "imp"))
        return bounds

    def _weigh(
        self,
        cands: _Pool,
        anchors: tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.float64]],
    ) -> None:
        """Temporal context from the anchors (keys, creation times, rel), then each base score."""
        cfg = self.config
        if cfg.w_ctx:
            ctx = scoring.temporal_context(cands.n, cands.created, *anchors, cfg.ctx_tau)  # type: ignore[arg-type]
            cands.ctx = np.asarray(ctx, dtype=np.float64)
        # base_score is arithmetic only: over the arrays, element by element
        cands.base = np.asarray(
            scoring.base_score(cands.rel, cands.rec, cands.imp, cfg, cands.when, cands.entity, cands.ctx, cands.dated),  # type: ignore[arg-type]
            dtype=np.float64,
        )

    def _dated(self, pair: CachePair | ServerPair, cands: _Pool) -> None:
        """`dated` = 1 for the candidates whose text holds a time expression (`keywords.TIME_WORDS`)."""
        held = pair.lexical.holding(cands.keys, TIME_WORDS)
        cands.dated = np.fromiter((n in held for n in cands.keys), dtype=np.float64, count=len(cands))

    def _log(
        self,
        pair: CachePair | ServerPair,
        ex: Explanation,
        top: list[_Cand],
        vis: Visibility,
        channel: Channel,
        trace_ref: str | None,
        now: float,
        types: frozenset[MemoryType] | None,
    ) -> None:
        params = {
            "k": ex.k,
            "hops": ex.hops,
            "types": sorted(t.value for t in types) if types else None,
            "as_of": vis.as_of,
            "cap": int(vis.cap),
            "where": None if vis.where is None else vis.where.to_json(),
            "channel": channel.value,
            "weights": ex.weights,
            "components": COMPONENT_NAMES,
            "hits": [_explained_json(e) for e in ex.hits],
        }
        with self.store.atomic():
            written = log_accesses(
                self.store,
                [Touch(c.n, channel, c.score, i + 1, c.components()) for i, c in enumerate(top)],
                now=now,
                tenant=vis.tenant,
                reader=vis.reader,
                ring_size=self.config.ring_size,
                query=ex.query,
                trace_ref=trace_ref,
                recall_id=ex.recall_id,
            )
            assert ex.recall_id is not None
            self.store.recalls.add(
                RecallRecord(
                    ex.recall_id, now, vis.tenant, vis.reader, ex.query, params,
                    [_explained_json(e) for e in ex.near_misses],
                )
            )  # fmt: skip
        if written is not None and not self.store.in_transaction():
            # Committed (not a savepoint of the caller's transaction): the caches take this write
            # as it was made instead of reading the hits' rows back at the next recall's refresh.
            change, updates = written
            pair.lexical.accessed(change, updates)
            if pair.vectors is not None:
                pair.vectors.passed(change)


def _shortfall(
    k: int, hits: int, pooled: int, kept: int, min_relevance: float | None, cfg: scoring.ScoringConfig
) -> str | None:
    """Why a recall returns fewer than `k` hits (None when it returns `k`)."""
    if hits >= k:
        return None
    parts = [
        f"{hits} of the {k} asked for: {pooled} memor{'y was a candidate' if pooled == 1 else 'ies were candidates'} "
        f"(those that share a word with the query or are among the {cfg.candidates} nearest by meaning, "
        "and what they link to)"
    ]
    if min_relevance is not None and kept < pooled:
        parts.append(f"min_relevance={min_relevance:g} left out {pooled - kept}")
    if hits < min(kept, k):
        parts.append(f"{min(kept, k) - hits} changed or were forgotten while the recall ran")
    return "; ".join(parts)


def _span(values: npt.NDArray[np.float64]) -> tuple[float, float]:
    return (float(values.min()), float(values.max())) if len(values) else (0.0, 0.0)


def _scaled(values: npt.NDArray[np.float64], lo: float, hi: float) -> npt.NDArray[np.float64]:
    """Min-max to [0, 1] by (lo, hi), clipped; a zero-width span maps to 1 where positive, else 0."""
    if hi - lo < 1e-12:
        return np.where(values > 0, 1.0, 0.0)
    scaled: npt.NDArray[np.float64] = np.clip((np.asarray(values, dtype=np.float64) - lo) / (hi - lo), 0.0, 1.0)
    return scaled


def _absolute_relevance(
    coverage: npt.NDArray[np.float64], cos: npt.NDArray[np.float64], unrelated_cosine: float
) -> npt.NDArray[np.float64]:
    """`scoring.absolute_relevance` of each candidate, over the arrays with the same operations
    (``max``/``min`` written as the comparisons Python's make, so ties and zeros come out alike)."""
    b = min(max(unrelated_cosine, 0.0), 0.99)
    with np.errstate(invalid="ignore", divide="ignore"):
        semantic = np.where(cos > b, (cos - b) / (1.0 - b), 0.0)
    best = np.where(semantic > coverage, semantic, coverage)
    best = np.where(best < 0.0, 0.0, best)
    out: npt.NDArray[np.float64] = np.where(best > 1.0, 1.0, best)
    return out


def _memory(c: _Cand) -> Memory:
    assert c.memory is not None
    return c.memory


def check_min_relevance(value: object) -> float | None:
    """None, or a number in [0, 1] (`Hit.relevance` is on that scale)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise ValidationError(f"min_relevance must be None or a number from 0 to 1, got {value!r}")
    return float(value)


def _explained(c: _Cand, rank: int, selected: bool) -> Explained:
    mid, title = (c.memory.id, c.memory.title) if c.memory is not None else c.name or ("", "")
    return Explained(mid, title, rank, c.score, c.components(), c.source, selected, c.relevance)


#: The components of an explained entry in the order the recall log stores them: each entry is
#: a list (id, title, rank, score, [components], source, selected, relevance), not an object with
#: its keys written out again (those made up a third of every record: ~2.4 of ~7 KB a recall of
#: 10 hits and 5 near misses). The record keeps the names (`params["components"]`), so an entry
#: reads back by name whatever this order becomes.
COMPONENT_NAMES = tuple(f.name for f in dataclasses.fields(Components))


def _explained_json(e: Explained) -> list[Any]:
    c = e.components
    return [
        e.memory_id, e.title, e.rank, e.score, [getattr(c, name) for name in COMPONENT_NAMES], e.source, e.selected,
        e.relevance,
    ]  # fmt: skip


def explained_from_json(d: dict[str, Any] | list[Any], names: Sequence[str] | None = None) -> Explained:
    """An entry of the recall log: a list with the component `names` of its record, or an object
    (recalls logged before the lists, each entry with its keys)."""
    if isinstance(d, list):
        memory_id, title, rank, score, parts, source, selected, relevance = d
        return Explained(
            memory_id, title, int(rank), float(score),
            Components(**dict(zip(names or COMPONENT_NAMES, parts, strict=True))), source, bool(selected),
            float(relevance),
        )  # fmt: skip
    return Explained(
        d["memory_id"],
        d["title"],
        int(d["rank"]),
        float(d["score"]),
        Components(**d["components"]),
        d["source"],
        bool(d["selected"]),
        float(d.get("relevance", 0.0)),  # recalls logged before relevance existed have none
    )


def _weights(cfg: scoring.ScoringConfig) -> dict[str, float]:
    return {
        "lam": cfg.lam,
        "mu": cfg.mu,
        "cos_minmax": float(cfg.cos_minmax),
        "decay": cfg.decay,
        "w_rel": cfg.w_rel,
        "w_rec": cfg.w_rec,
        "w_imp": cfg.w_imp,
        "w_when": cfg.w_when,
        "w_entity": cfg.w_entity,
        "name_focus": float(cfg.name_focus),
        "w_ctx": cfg.w_ctx,
        "w_dated": cfg.w_dated,
        "bm25_k1": cfg.bm25_k1,
        "bm25_b": cfg.bm25_b,
        "bm25_prev": cfg.bm25_prev,
        "ctx_tau": cfg.ctx_tau,
        "gamma": cfg.gamma,
        "hop_decay": cfg.hop_decay,
        "spread_max": float(cfg.spread_combine == "max"),
        "sequence_window": cfg.sequence_window,
        "rank_fusion": float(cfg.fusion == "rank"),
    }
