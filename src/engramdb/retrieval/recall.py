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
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from engramdb.errors import ValidationError
from engramdb.memories import scoring
from engramdb.memories.access import log_accesses
from engramdb.memories.model import (
    DEFAULT_LIMITS,
    Channel,
    Components,
    EdgeType,
    Limits,
    Memory,
    MemoryType,
    Visibility,
    check_text,
)
from engramdb.observability import otel
from engramdb.retrieval.keywords import TIME_WORDS, asks_when, keywords, query_entity_tokens, query_names, stem
from engramdb.retrieval.results import Explained, Explanation, Hit, Recall, Source
from engramdb.retrieval.sequence import sequence_neighbours
from engramdb.retrieval.when import TimeWindow, When, resolve_when
from engramdb.storage.ports import RecallRecord, Touch

if TYPE_CHECKING:
    from engramdb.embeddings.base import Embedder
    from engramdb.retrieval.lexical_channel import LexicalChannel
    from engramdb.retrieval.vector_channel import VectorChannel
    from engramdb.storage.ports import Backend

NEAR_MISSES = 5


@dataclass(slots=True)
class _Cand:
    n: int
    mtype: str
    importance: float
    ring: bytes | None  # packed access times (`pack_times`)
    old: tuple[int, float | None, float | None]
    cos: float = 0.0
    cue: float = 0.0
    created: float = 0.0
    bm25: float = 0.0
    when: float = 0.0
    entity: float = 0.0
    ctx: float = 0.0
    dated: float = 0.0
    lexical: bool = False
    vector: bool = False
    spread: float = 0.0
    rel: float = 0.0
    rec: float = 0.0
    imp: float = 0.0
    base: float = 0.0
    score: float = 0.0
    raw_rec: float = 0.0
    coverage: float = 0.0  # IDF-weighted share of the query's words held (absolute)
    relevance: float = 0.0
    memory: Memory | None = None
    name: tuple[str, str] | None = None  # (id, title) of a near miss, which is not read in full

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
        return Components(
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
        )


class Recaller:
    """Runs recalls for the engine; stateless apart from the shared caches it is given."""

    def __init__(
        self,
        store: Backend,
        clock: Callable[[], float],
        config: scoring.ScoringConfig,
        embedder: Embedder | None,
        channel: VectorChannel | None,
        lexical: LexicalChannel,
    ) -> None:
        self.store, self.clock, self.config = store, clock, config
        self.embedder, self.channel, self.lexical = embedder, channel, lexical
        #: adds read-time fields (retention, prune time) to each memory shown; set by the engine
        self.annotate: Callable[[Memory, float], Memory] = lambda m, _now: m
        #: the largest query taken; set by the engine
        self.limits: Limits = DEFAULT_LIMITS

    # -- candidates ---------------------------------------------------------------------------

    def _candidates(
        self,
        ns: Sequence[int],
        vis: Visibility,
        types: frozenset[str] | None,
        qstems: Sequence[str],
        qents: Sequence[str],
    ) -> dict[int, _Cand]:
        """The scoring fields of the visible memories among `ns` (from the lexical channel's cache
        of them, refreshed at the start of the recall), with their cue overlap with the query and
        whether they hold an entity the query names."""
        return {
            n: _Cand(n, mtype, importance, ring, old, cue=cue, created=created, entity=ent, coverage=cov)
            for n, mtype, importance, ring, old, cue, created, ent, cov in self.lexical.fields(
                ns, vis, qstems, types=types, entities=qents
            )
        }

    def _contradictions(self, ns: list[int], vis: Visibility) -> dict[int, tuple[str, ...]]:
        """'contradicted by …' notes for hits with a visible `contradicts` edge, either way round."""
        found = self.store.edges.contradictions(vis, ns)
        return {n: tuple(f"contradicted by {other}: {preview}" for other, preview in v) for n, v in found.items()}

    def _neighbours(self, vis: Visibility, types: frozenset[str] | None = None) -> scoring.Neighbours[int]:
        edges, lexical, window = self.store.edges, self.lexical, self.config.sequence_window

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
        self.lexical.refresh(store)
        lexical = self.lexical.search(
            qstems, cfg.candidates, vis, types=type_names, k1=cfg.bm25_k1, b=cfg.bm25_b,
            prev_weight=cfg.bm25_prev, window=cfg.sequence_window,
        )  # fmt: skip
        vector: dict[int, float] = {}
        qvec = None
        if self.channel is not None and self.embedder is not None:
            self.channel.refresh(store)
            qvec = self.embedder.embed([query])[0]
            vector = self.channel.search(qvec, cfg.candidates, vis, types=type_names)
        cands = self._candidates(list(dict.fromkeys([*lexical, *vector])), vis, type_names, qstems, qents)
        if cfg.w_entity and cfg.name_focus and not any(c.entity for c in cands.values()):
            # No candidate holds an entity the query names (none given at remember time): the names
            # the query writes, found in the memories' own words, stand in (keywords.query_names).
            qents = query_names(query)
            for n in self.lexical.holding(list(cands), qents) if qents else ():
                cands[n].entity = 1.0
        for c in cands.values():
            c.bm25, c.lexical, c.vector = lexical.get(c.n, 0.0), c.n in lexical, c.n in vector
        dated = bool(cfg.w_dated) and asks_when(query)
        if dated:  # a question asking when: the memories that say when (keywords.TIME_WORDS) rise
            for n in self.lexical.holding(list(cands), TIME_WORDS):
                cands[n].dated = 1.0
        self._features(list(cands.values()), qvec, vector, now, windows)
        bounds = self._normalise(list(cands.values()))
        # The candidates, by their rel, are the anchors of the temporal context (themselves included).
        anchors = ([c.n for c in cands.values()], [c.created for c in cands.values()], [c.rel for c in cands.values()])
        self._weigh(list(cands.values()), anchors)
        # Spread from the best seeds; activation is the base score scaled to [0, 1] by the highest
        # base this query allows.
        top_weight = scoring.top_weight(
            cfg, windows=bool(windows), entity=any(c.entity for c in cands.values()), dated=dated
        )
        seeds = sorted(cands.values(), key=lambda c: (-c.base, c.n))[: max(k, 1)]
        spread = scoring.spread(
            {c.n: c.base / top_weight for c in seeds}, self._neighbours(vis, type_names), replace(cfg, hops=hops)
        )
        newcomers = [n for n in spread if n not in cands]
        if newcomers:
            fresh = list(self._candidates(newcomers, vis, type_names, qstems, qents).values())
            if dated:
                for n in self.lexical.holding([c.n for c in fresh], TIME_WORDS):
                    next(c for c in fresh if c.n == n).dated = 1.0
            self._features(fresh, qvec, {}, now, windows)
            self._normalise(fresh, bounds)
            self._weigh(fresh, anchors)
            cands.update({c.n: c for c in fresh})
        for c in cands.values():
            c.spread = spread.get(c.n, 0.0)
            c.score = c.base + cfg.gamma * c.spread
        ranked = sorted(cands.values(), key=lambda c: (-c.score, c.n))
        if min_relevance is not None:
            # Fewer than k when fewer answer the query well enough: the cut is absolute, so
            # "nothing relevant" can be the answer.
            ranked = [c for c in ranked if c.relevance >= min_relevance]
        top, near = ranked[:k], ranked[k : k + NEAR_MISSES]
        # Only the memories shown are read in full; explain names the near misses by id and title.
        full = store.memories.many(vis, [c.n for c in top])
        for c in top:
            c.memory = full[c.n]
        names = store.memories.names([c.n for c in near])
        for c in near:
            c.name = names[c.n]
        recall_id = None if dry_run else "rc_" + secrets.token_hex(8)
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
            weights=_weights(cfg),
        )
        if not dry_run:
            self._log(explanation, top, vis, channel, trace_ref, now, types)
        return Recall(query, hits, recall_id, now), explanation

    def _features(
        self, cands: list[_Cand], qvec: Any, vector: dict[int, float], now: float, windows: Sequence[TimeWindow]
    ) -> None:
        cfg = self.config
        cosines: dict[int, float] = {}
        if qvec is not None and self.channel is not None:
            missing = [c.n for c in cands if c.n not in vector]
            cosines = {**self.channel.cosines(qvec, missing), **vector}
        recs = scoring.recencies([c.ring for c in cands], [c.old for c in cands], now, cfg.decay, cfg.min_age)
        floor = float(getattr(self.embedder, "unrelated_cosine", 0.0) or 0.0)
        for c, rec in zip(cands, recs, strict=True):
            c.cos = max(cosines.get(c.n, 0.0), 0.0)  # c.cue comes with the candidate (`_candidates`)
            c.when = 1.0 if any(c.created in w for w in windows) else 0.0
            c.raw_rec = rec
            c.relevance = scoring.absolute_relevance(c.coverage, c.cos, floor)

    def _normalise(
        self, cands: list[_Cand], bounds: dict[str, tuple[float, float]] | None = None
    ) -> dict[str, tuple[float, float]]:
        """Min-max over the candidates (first the cosines, with ``cos_minmax``, and BM25 over the
        best candidate's, when μ > 0); spread-only nodes reuse the candidates' bounds, clipped."""
        cfg = self.config
        if bounds is None:
            bounds = {
                "cos": _span([c.cos for c in cands]),
                "bm25": (0.0, max((c.bm25 for c in cands), default=0.0)),
            }
        cos = _scaled([c.cos for c in cands], *bounds["cos"]) if cfg.cos_minmax else [c.cos for c in cands]
        bm25 = _scaled([c.bm25 for c in cands], *bounds["bm25"]) if cfg.mu else [0.0] * len(cands)
        cue = [c.cue for c in cands]
        if cfg.fusion == "rank":  # ranks among the candidates; a node spreading reached ranks nowhere
            first = "rel" not in bounds
            cos, cue, bm25 = (scoring.rank_scores(v, cfg.rank_k) if first else [0.0] * len(v) for v in (cos, cue, bm25))
        raw = {
            "rel": [scoring.relevance(cs, cu, cfg.lam, bm, cfg.mu) for cs, cu, bm in zip(cos, cue, bm25, strict=True)],
            "rec": [c.raw_rec for c in cands],
            "imp": [scoring.importance_score(c.importance) for c in cands],
        }
        if "rel" not in bounds:
            bounds.update({key: _span(v) for key, v in raw.items()})
            if cfg.fusion == "rank":  # rel is on the rank scale already: [0, 1], the same for every query
                bounds["rel"] = (0.0, 1.0)
        norm = {key: _scaled(values, *bounds[key]) for key, values in raw.items()}
        for i, c in enumerate(cands):
            c.rel, c.rec, c.imp = norm["rel"][i], norm["rec"][i], norm["imp"][i]
        return bounds

    def _weigh(self, cands: list[_Cand], anchors: tuple[list[int], list[float], list[float]]) -> None:
        """Temporal context from the anchors (keys, creation times, rel), then each base score."""
        cfg = self.config
        if cfg.w_ctx:
            ctx = scoring.temporal_context([c.n for c in cands], [c.created for c in cands], *anchors, cfg.ctx_tau)
            for c, x in zip(cands, ctx, strict=True):
                c.ctx = x
        for c in cands:
            c.base = scoring.base_score(c.rel, c.rec, c.imp, cfg, c.when, c.entity, c.ctx, c.dated)

    def _log(
        self,
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
            "channel": channel.value,
            "weights": ex.weights,
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
            self.lexical.accessed(change, updates)
            if self.channel is not None:
                self.channel.passed(change)


def _span(values: Sequence[float]) -> tuple[float, float]:
    return (min(values), max(values)) if values else (0.0, 0.0)


def _scaled(values: Sequence[float], lo: float, hi: float) -> list[float]:
    """Min-max to [0, 1] by (lo, hi), clipped; a zero-width span maps to 1 where positive, else 0."""
    if hi - lo < 1e-12:
        return [1.0 if v > 0 else 0.0 for v in values]
    # One array pass (the same IEEE operations as per float, so the same values): eight of these
    # per recall over every candidate were a Python loop of min/max calls each.
    scaled: list[float] = np.clip((np.asarray(values, dtype=np.float64) - lo) / (hi - lo), 0.0, 1.0).tolist()
    return scaled


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


def _explained_json(e: Explained) -> dict[str, Any]:
    c = e.components
    return {
        "memory_id": e.memory_id,
        "title": e.title,
        "rank": e.rank,
        "score": e.score,
        "components": {
            "rel": c.rel,
            "rec": c.rec,
            "imp": c.imp,
            "spread": c.spread,
            "cos": c.cos,
            "cue": c.cue,
            "bm25": c.bm25,
            "when": c.when,
            "entity": c.entity,
            "ctx": c.ctx,
            "dated": c.dated,
        },
        "source": e.source,
        "selected": e.selected,
        "relevance": e.relevance,
    }


def explained_from_json(d: dict[str, Any]) -> Explained:
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
