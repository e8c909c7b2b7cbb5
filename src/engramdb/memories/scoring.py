"""Recall scoring as pure functions of (features, now, config). No I/O, no clock.

::

    rel(m, q) = (1 − μ)·(λ·cos^ + (1 − λ)·cue) + μ·bm25~        encoding specificity
    B(m)      = ln Σ_k max(now − t_k, 1 s)^−d                    ACT-R base-level activation
    rec(m)    = σ(B(m))
    imp(m)    = importance / 10
    when(m,q) = 1 if m was created inside a date the query names, else 0   (retrieval/when.py)
    ent(m,q)  = 1 if the query names one of m's entities, else 0 (with ``name_focus``, when no
                candidate has one: 1 if m's text holds a name the query writes)
    ctx(m,q)  = max_j rel^(j)·exp(−|t_m − t_j| / τ) over the candidates j  temporal context
    dated(m,q)= 1 if the query asks when and m's text holds a time expression, else 0
    S_base    = a_rel·rel^ + a_rec·rec^ + a_imp·imp^ + a_when·when + a_ent·ent + a_ctx·ctx
                + a_dated·dated
    S         = S_base + γ·spread                                spreading over typed edges and
                                                                 implicit episodes (retrieval/sequence.py)

(^ = min-max over the candidates.) ctx is the contiguity effect of episodic memory (Howard &
Kahana's temporal context model): what was laid down close in time to a strong match is lifted
with it — the other turns of the conversation that matched, the steps of the task that did — and
m's own rel counts (j = m), so a match that sits in a matching episode rises too.

cos^ is min-max over the candidates (with ``cos_minmax``, else the raw cosine) and bm25~ is BM25
(with ``bm25_prev`` of the preceding memory's added: document expansion) over the best candidate's, so that the channels are mixed on comparable scales: cosines of a
static embedding bunch up in a narrow band (0.75-0.95 among one query's candidates on LoCoMo), so
unscaled they barely move rel, and raw BM25 is unbounded. What a node receives from spreading in
one hop is the sum of its contributions (ACT-R) or, with ``spread_combine="max"``, the largest.

The base level uses every deliberate access: the recent ones exactly, and the older remainder
through Petrov's (2006) closed form, which treats the n − k older accesses as spread evenly
between the newest and the oldest of them:

    Σ_old ≈ (n − k)·(t_n^(1−d) − t_k^(1−d)) / ((1 − d)·(t_n − t_k))

where t_k and t_n are the ages of the newest and the oldest older access.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from engramdb.errors import ConfigError

N = TypeVar("N")


@dataclass(frozen=True, slots=True)
class ScoringConfig:
    """Every constant of recall scoring.

    Spec 001 started from nooa-memory's values (λ 0.7, a_rec 0.5, γ 0.5, summed spread, BM25 only
    choosing candidates). Each constant's comment names its source: "fit" = chosen by
    benchmarks/tune_scorer.py (issue #15: fitted on LoCoMo's train split through the plain API,
    chosen on its validation split among spec 001's values, the previous defaults and the train
    fit; the test split played no part, see benchmarks/locomo.py SPLITS), "prior" = set from what
    the constant means, not from a benchmark. See docs/locomo.md.
    """

    lam: float = 1.0  # fit (kept by the refit): λ, cosine against cue overlap in rel (spec 001: 0.7)
    mu: float = 0.1  # fit (kept): μ, share of BM25 (over the best candidate's) in rel; 0 = BM25 only picks candidates
    cos_minmax: bool = False  # fit (kept): min-max cos over the candidates before mixing
    decay: float = 0.5  # prior (ACT-R's d): power-law decay of each access
    w_rel: float = 1.0  # prior: the unit; only ratios to it matter
    #: prior: LoCoMo shows what recency costs (its fit is 0), never what it buys an agent; 0.1 keeps
    #: recency and reinforcement as a tie-breaker (spec 001: 0.5, which costs 0.065 recall@10 on LoCoMo)
    w_rec: float = 0.1
    w_imp: float = 0.5  # prior (spec 001): every LoCoMo turn has the same importance, nothing to fit
    w_when: float = 0.75  # fit (kept): a_when, lift of a memory made inside a date the query names (0 = off)
    w_entity: float = 0.75  # fit (0.5 → 0.75): a_ent, lift of a memory one of whose entities the query names
    #: prior (a switch, chosen on validation): when no candidate holds an entity the query names, the
    #: entity lift goes to memories whose text holds a word the query writes capitalised (a name:
    #: `keywords.query_names`), so it works without `entities=` at remember time
    name_focus: bool = True
    w_ctx: float = 1.5  # fit (1.0 → 1.5): a_ctx, lift by the best candidate made close in time (0 = off)
    #: prior: τ, seconds, how fast the temporal-context lift fades: the turns of one sitting are
    #: minutes apart, sittings hours or days; not fitted, since LoCoMo's turn times are the
    #: harness's invention (bench_locomo.py --spacings shows the spacing changes little)
    ctx_tau: float = 900.0
    hops: int = 1  # prior: recall's default is the call's hops=1; not read by recall
    hop_decay: float = 0.6  # prior (spec 001): activation kept per hop
    fanout: int = 5  # prior (spec 001): edges followed per node, strongest first
    causal_factor: float = 1.0  # prior (spec 001)
    other_factor: float = 0.6  # prior (spec 001)
    floor: float = 0.05  # prior (spec 001): contributions below this are dropped
    gamma: float = 0.5  # fit (0.75 → 0.5, spec 001's value): weight of spread in the final score
    ring_size: int = 64  # prior (spec 001): accesses kept exactly on the record
    min_age: float = 1.0  # prior: seconds; an access is never younger than this
    candidates: int = 50  # prior: per channel (lexical, vector); ~600-turn haystacks cannot say what 100k needs
    #: fit ("max" → "sum", spec 001's ACT-R value): how contributions reaching one node add up
    spread_combine: str = "sum"
    #: fit (kept "minmax"; "rank" lost on train from every start): how rel mixes the channels —
    #: "minmax" (the formula above, rel min-maxed over the candidates) or "rank": reciprocal-rank
    #: fusion, rel = (1 − μ)·(λ·r(cos) + (1 − λ)·r(cue)) + μ·r(bm25) with r = (k₀ + 1) / (k₀ + rank)
    #: over the candidates (1 for the best, 0 where a channel has nothing), a scale that no query's
    #: spread of scores changes
    fusion: str = "minmax"
    rank_k: float = 60.0  # prior: k₀ of the rank fusion, Cormack et al.'s (2009) constant
    #: prior: seconds; memories written one after the other (adjacent keys) within this of each
    #: other are neighbours for spreading as if linked ``precedes`` (retrieval/sequence.py; 0 = off):
    #: one sitting, an hour, lays down an episode
    sequence_window: float = 3600.0
    #: fit (kept 1.2, the usual value; 0.6 and 2.0 lost on train): BM25's k1 — terms are binary
    #: (`LexicalChannel`), so it only sets how much the length normalisation counts
    bm25_k1: float = 1.2
    bm25_b: float = 0.75  # fit (kept 0.75, the usual value; 0 … 1 lost on train): BM25's length normalisation b
    #: fit (0 → 0.3; 0.25 ties on train): document expansion — a memory's BM25 also holds this
    #: share of the BM25 of the memory written just before it in the same sitting (adjacent key,
    #: within ``sequence_window``): a reply is found by the words of the question it answers (0 = off)
    bm25_prev: float = 0.3
    #: fit (0 → 0.5): a_dated, lift of a memory holding a time expression ("last Friday", "two
    #: weeks ago": `keywords.TIME_WORDS`) when the query asks when (`keywords.asks_when`; 0 = off)
    w_dated: float = 0.5
    #: Relevance dominates: a hit is *relevant enough* when its relevance (`absolute_relevance`, 0-1)
    #: is above 0 and at least this share of the best relevance among the query's candidates; every
    #: relevant-enough hit ranks above every other, and recency, importance, the lifts and
    #: spreading reorder hits only within those two tiers. So a hit of relevance 0 never outranks
    #: one above 0, whatever the share (0 = only that). Measured on LoCoMo train/validation and
    #: LongMemEval dev (benchmarks/results/ablate_both.json).
    relevant_share: float = 0.0
    #: prior: with a reranker (`DynamicMemoryEngine(reranker=...)`), how many of the candidates,
    #: the most relevant first, it scores before ACT-R (its latency grows with this)
    rerank_top: int = 30
    #: prior: the reranker's share of relevance: each candidate's relevance (the ranking's ``rel``
    #: and the absolute `Hit.relevance`) becomes ``(1 - w) * first stage + w * reranker score``, and
    #: a candidate it did not score counts 0 for it; 1 = the reranker's judgement alone
    rerank_weight: float = 1.0

    def __post_init__(self) -> None:
        for f in fields(self):
            _check_kind(f.name, getattr(self, f.name), str(f.type))
        if not 0 <= self.lam <= 1:
            raise ConfigError(f"ScoringConfig.lam must be in [0, 1], got {self.lam!r}")
        if not 0 <= self.mu <= 1:
            raise ConfigError(f"ScoringConfig.mu must be in [0, 1], got {self.mu!r}")
        if self.spread_combine not in ("sum", "max"):
            raise ConfigError(f'ScoringConfig.spread_combine must be "sum" or "max", got {self.spread_combine!r}')
        if self.fusion not in ("minmax", "rank"):
            raise ConfigError(f'ScoringConfig.fusion must be "minmax" or "rank", got {self.fusion!r}')
        if self.sequence_window < 0:
            raise ConfigError(f"ScoringConfig.sequence_window must be >= 0 (seconds), got {self.sequence_window!r}")
        if not self.rank_k > 0:
            raise ConfigError(f"ScoringConfig.rank_k must be > 0, got {self.rank_k!r}")
        if not 0 < self.decay < 1:
            raise ConfigError(f"ScoringConfig.decay must be in (0, 1), got {self.decay!r}")
        if self.w_when < 0 or self.w_entity < 0 or self.w_ctx < 0 or self.w_dated < 0:
            raise ConfigError("ScoringConfig: w_when, w_entity, w_ctx and w_dated must be >= 0")
        if self.bm25_k1 < 0 or not 0 <= self.bm25_b <= 1 or self.bm25_prev < 0:
            raise ConfigError("ScoringConfig: bm25_k1 and bm25_prev must be >= 0 and bm25_b in [0, 1]")
        if not self.ctx_tau > 0:
            raise ConfigError(f"ScoringConfig.ctx_tau must be > 0 (seconds), got {self.ctx_tau!r}")
        if not 0 <= self.relevant_share <= 1:
            raise ConfigError(f"ScoringConfig.relevant_share must be in [0, 1], got {self.relevant_share!r}")
        if self.rerank_top < 1 or not 0 <= self.rerank_weight <= 1:
            raise ConfigError(
                f"ScoringConfig: rerank_top must be >= 1 and rerank_weight in [0, 1], got {self.rerank_top!r} "
                f"and {self.rerank_weight!r}"
            )
        if self.hops < 0 or self.fanout < 0 or self.ring_size < 1 or self.candidates < 1:
            raise ConfigError("ScoringConfig: hops, fanout must be >= 0; ring_size, candidates >= 1")


def _check_kind(name: str, value: object, kind: str) -> None:
    """One `ScoringConfig` field of its declared kind (a bool is not a number here), else `ConfigError`."""
    if kind == "bool":
        ok = isinstance(value, bool)
    elif kind == "str":
        ok = isinstance(value, str)
    elif kind == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok:
        what = {"bool": "True or False", "str": "a str", "int": "a whole number"}.get(kind, "a finite number")
        raise ConfigError(f"ScoringConfig.{name} must be {what}, got {value!r}")


def absolute_relevance(coverage: float, cos: float, unrelated_cosine: float = 0.0) -> float:
    """How well a memory answers a query on a scale shared by every query, in [0, 1]: the larger
    of `coverage` (the IDF-weighted share of the query's words the memory holds) and the cosine's
    height above what unrelated texts reach with this embedder, ``(cos − b) / (1 − b)``. Unlike
    ``rel``, nothing here is normalised over a recall's candidates, so a threshold means the same
    for every query."""
    b = min(max(unrelated_cosine, 0.0), 0.99)
    semantic = (cos - b) / (1.0 - b) if cos > b else 0.0
    return float(min(max(coverage, semantic, 0.0), 1.0))


def relevance(cos: float, cue: float, lam: float, bm25: float = 0.0, mu: float = 0.0) -> float:
    """(1 − μ)·(λ·cos + (1 − λ)·cue) + μ·bm25: a convex mix of signals each in [0, 1]."""
    return (1.0 - mu) * (lam * cos + (1.0 - lam) * cue) + mu * bm25


def rank_scores(values: Sequence[float], k0: float) -> list[float]:
    """(k₀ + 1) / (k₀ + rank) of each value among `values` (rank 1 = the largest; ties share the
    better rank), 0 for a value ≤ 0 (the channel has nothing for it): a reciprocal-rank score in
    (0, 1] that does not depend on how far apart the values are."""
    order = sorted(range(len(values)), key=lambda i: -values[i])
    out = [0.0] * len(values)
    rank, prev = 0, None
    for pos, i in enumerate(order):
        if values[i] <= 0:
            break
        if prev is None or values[i] < prev:
            rank, prev = pos + 1, values[i]
        out[i] = (k0 + 1.0) / (k0 + rank)
    return out


def sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def exact_activation_sum(times: Iterable[float], now: float, d: float, min_age: float = 1.0) -> float:
    """Σ max(now − t, min_age)^−d over every access time."""
    return sum(float(max(now - t, min_age) ** -d) for t in times)


def petrov_tail(count: int, newest: float, oldest: float, now: float, d: float, min_age: float = 1.0) -> float:
    """Petrov's closed-form estimate of Σ age^−d for `count` accesses spread between two times."""
    if count <= 0:
        return 0.0
    t_k = max(now - newest, min_age)
    t_n = max(now - oldest, min_age)
    if t_n - t_k < 1e-9:
        return float(count * t_k**-d)
    return float(count * (t_n ** (1 - d) - t_k ** (1 - d)) / ((1 - d) * (t_n - t_k)))


def base_level(
    recent: Sequence[float],
    now: float,
    d: float,
    *,
    old_count: int = 0,
    old_newest: float | None = None,
    old_oldest: float | None = None,
    min_age: float = 1.0,
) -> float:
    """ACT-R base-level activation B = ln Σ age^−d; −inf when there was never an access."""
    total = exact_activation_sum(recent, now, d, min_age)
    if old_count and old_newest is not None and old_oldest is not None:
        total += petrov_tail(old_count, old_newest, old_oldest, now, d, min_age)
    return math.log(total) if total > 0 else -math.inf


def recency(b: float) -> float:
    """σ(B); 0 for a memory never accessed."""
    return 0.0 if b == -math.inf else sigmoid(b)


def recencies(
    rings: Sequence[bytes | None],
    olds: Sequence[tuple[int, float | None, float | None]],
    now: float,
    d: float,
    min_age: float = 1.0,
) -> list[float]:
    """σ(B) of many memories at once: `recency(base_level(...))` for each, vectorised.

    `rings` are the packed float64 access times (``pack_times``; None or empty: none) and `olds`
    the (count, newest, oldest) summaries of the older accesses. σ(ln x) = x / (1 + x), so no
    logarithm is taken: a memory never accessed gets 0.
    """
    total = _ring_sums(rings, now, d, min_age)
    for i, (count, newest, oldest) in enumerate(olds):
        if count and newest is not None and oldest is not None:
            total[i] += petrov_tail(count, newest, oldest, now, d, min_age)
    return (total / (1.0 + total)).tolist()  # type: ignore[no-any-return]


def recency_columns(
    rings: Sequence[bytes | None],
    old_count: Any,
    old_newest: Any,
    old_oldest: Any,
    now: float,
    d: float,
    min_age: float = 1.0,
) -> Any:
    """`recencies` with the older-access summaries as columns (int and float64 arrays, NaN where
    there is no time) and σ(B) as a float64 array: the same floats, without a tuple per memory —
    only the few memories with older accesses (past the ring) are visited one by one."""
    import numpy as np

    total = _ring_sums(rings, now, d, min_age)
    for i in np.flatnonzero(old_count).tolist():
        newest, oldest = float(old_newest[i]), float(old_oldest[i])
        if newest == newest and oldest == oldest:  # NaN: no time, as None in `recencies`
            total[i] += petrov_tail(int(old_count[i]), newest, oldest, now, d, min_age)
    return total / (1.0 + total)


def _ring_sums(rings: Sequence[bytes | None], now: float, d: float, min_age: float) -> Any:
    """Σ max(now − t, min_age)^−d over each ring's times, as a float64 array (0 for no ring)."""
    import numpy as np

    n = len(rings)
    counts = np.fromiter((len(r) // 8 if r else 0 for r in rings), dtype=np.int64, count=n)
    total = np.zeros(n)
    if counts.any():
        times = np.frombuffer(b"".join(r for r in rings if r), dtype=np.float64)
        contrib = np.maximum(now - times, min_age) ** -d
        filled = np.flatnonzero(counts)
        starts = np.concatenate(([0], np.cumsum(counts[filled])[:-1]))
        total[filled] = np.add.reduceat(contrib, starts)
    return total


def importance_score(importance: float) -> float:
    return importance / 10.0


def minmax(values: Sequence[float]) -> list[float]:
    """Scale to [0, 1] over the values; all-equal values map to 1 (if > 0) or 0."""
    if not values:
        return []
    lo, hi = min(values), max(values)
    if hi - lo < 1e-12:
        return [1.0 if hi > 0 else 0.0 for _ in values]
    return [(v - lo) / (hi - lo) for v in values]


def base_score(
    rel: float,
    rec: float,
    imp: float,
    cfg: ScoringConfig,
    when: float = 0.0,
    entity: float = 0.0,
    ctx: float = 0.0,
    dated: float = 0.0,
) -> float:
    """a_rel·rel + a_rec·rec + a_imp·imp + a_when·when + a_ent·ent + a_ctx·ctx + a_dated·dated
    (inputs already normalised; when, entity and dated are 0 or 1, ctx is in [0, 1])."""
    return (
        cfg.w_rel * rel
        + cfg.w_rec * rec
        + cfg.w_imp * imp
        + cfg.w_when * when
        + cfg.w_entity * entity
        + cfg.w_ctx * ctx
        + cfg.w_dated * dated
    )


def temporal_context(
    keys: Sequence[int],
    times: Sequence[float],
    anchor_keys: Sequence[int],
    anchor_times: Sequence[float],
    anchor_rel: Sequence[float],
    tau: float,
) -> list[float]:
    """ctx of each memory (`keys`, made at `times`): max_j anchor_rel[j]·exp(−|t − anchor_times[j]| / τ).

    The anchors are the recall's candidates with their normalised rel; a memory among them is its
    own anchor (|Δt| = 0), so its ctx is at least its rel. Two different memories made at the very
    same instant — one `remember_many` call without event times, a bulk import — carry no order, so
    they give each other no context: a batch is not an episode.
    """
    import numpy as np

    if not len(times) or not len(anchor_times):
        return [0.0] * len(times)
    t = np.asarray(times, dtype=np.float64)
    at = np.asarray(anchor_times, dtype=np.float64)
    ar = np.asarray(anchor_rel, dtype=np.float64)
    if tau > 0 and bool(np.isfinite(ar).all()) and not bool(np.signbit(ar).any()):
        return _near_context(np.asarray(keys), t, np.asarray(anchor_keys), at, ar, tau)
    return _dense_context(np.asarray(keys), t, np.asarray(anchor_keys), at, ar, tau)


def _dense_context(keys: Any, t: Any, anchor_keys: Any, at: Any, ar: Any, tau: float) -> list[float]:
    """`temporal_context` over every (memory, anchor) pair: the reference, and the path for rels
    `_near_context` does not take (negative, −0.0, not finite) or τ ≤ 0."""
    import numpy as np

    gap = np.abs(t[:, None] - at[None, :])
    x = -gap / tau
    if tau > 0 and bool((ar >= 0.0).all()):
        # exp(x) is exactly 0.0 below x ≈ -745.13 (a double underflows), and 0.0 times a rel that
        # is >= 0 is +0.0: only the pairs made within ~8 days (at τ = 15 min) get an exp, the same
        # value elementwise.
        near = x > _UNDERFLOW
        lift = np.zeros_like(gap)
        lift[near] = ar[np.nonzero(near)[1]] * np.exp(x[near])
    else:
        lift = ar[None, :] * np.exp(x)
    same_batch = (gap == 0.0) & (keys[:, None] != anchor_keys[None, :])
    lift[same_batch] = 0.0
    return lift.max(axis=1).tolist()  # type: ignore[no-any-return]


def _near_context(keys: Any, t: Any, anchor_keys: Any, at: Any, ar: Any, tau: float) -> list[float]:
    """`_dense_context` for finite rels >= +0.0 and τ > 0, over the pairs made within ~8 days (at
    τ = 15 min) of each other alone: the anchors sorted by time, each memory's window of them by
    binary search (a recall's candidates span months: ~10% of the pairs at 10k). Every pair the
    dense form gives an exp gets the same operations, so the same float; the pairs left out are
    the +0.0 entries of its rows, and with every lift >= +0.0 a row's max does not depend on
    them (a row without a pair is +0.0, as a row of zeros)."""
    import numpy as np

    order = np.argsort(at, kind="stable")
    sorted_at = at[order]
    reach = 747.0 * tau  # wider than x > _UNDERFLOW: the exact test is made on each pair below
    lo = np.searchsorted(sorted_at, t - reach, side="left")
    counts = np.searchsorted(sorted_at, t + reach, side="right") - lo
    ends = np.cumsum(counts)
    total = int(ends[-1])
    out = np.zeros(len(t), dtype=np.float64)
    if total == 0:
        return out.tolist()
    starts = ends - counts
    rows = np.repeat(np.arange(len(t)), counts)
    pos = np.arange(total) - np.repeat(starts - lo, counts)  # each pair's anchor in time order
    gap = np.abs(t[rows] - sorted_at[pos])
    x = -gap / tau
    near = x > _UNDERFLOW
    cols = order[pos]
    if near.all():  # the window is a hair wider than the test: nearly always
        lift = ar[cols] * np.exp(x)
    else:
        lift = np.zeros(total, dtype=np.float64)
        lift[near] = ar[cols[near]] * np.exp(x[near])
    tied = np.flatnonzero(gap == 0.0)
    lift[tied[keys[rows[tied]] != anchor_keys[cols[tied]]]] = 0.0
    filled = counts > 0
    out[filled] = np.maximum.reduceat(lift, starts[filled])
    return out.tolist()


#: exp(x) of a double is exactly 0.0 below about -745.13
_UNDERFLOW = -746.0


def top_weight(cfg: ScoringConfig, *, windows: bool, entity: bool, dated: bool = False) -> float:
    """The highest base score a query allows — a_rel + a_rec + a_imp, a_ctx, a_when when it names
    a date, a_ent when it names an entity of some candidate, a_dated when it asks when — so that
    base / top_weight is a spreading activation in [0, 1]."""
    total = cfg.w_rel + cfg.w_rec + cfg.w_imp + cfg.w_ctx
    total += (cfg.w_when if windows else 0.0) + (cfg.w_entity if entity else 0.0) + (cfg.w_dated if dated else 0.0)
    return total or 1.0


#: neighbours(nodes) -> {node: [(neighbour, causal, weight), ...]}; it returns visible neighbours only.
Neighbours = Callable[[Sequence[N]], Mapping[N, Sequence[tuple[N, bool, float]]]]


def spread(seeds: Mapping[N, float], neighbours: Neighbours[N], cfg: ScoringConfig) -> dict[N, float]:
    """Activation spread from `seeds` over typed edges for `cfg.hops` hops.

    Each hop follows at most `fanout` edges per node (strongest first); a contribution is
    source activation × edge weight × (causal or other factor) × hop decay, and is dropped below
    `floor`. What one node receives in a hop is the sum of its contributions, or the largest one
    with ``spread_combine="max"`` (then two weak neighbours never outweigh one strong one); hops
    add up. Only what `neighbours` returns can receive or relay activation, so visibility is
    decided before a node enters the next frontier.
    """
    received: dict[N, float] = {}
    frontier = {n: a for n, a in seeds.items() if a > 0}
    strongest = cfg.spread_combine == "max"
    for _ in range(cfg.hops):
        if not frontier:
            break
        adjacency = neighbours(list(frontier))
        nxt: dict[N, float] = {}
        for node, activation in frontier.items():
            edges = sorted(adjacency.get(node, ()), key=lambda e: -e[2])[: cfg.fanout]
            for target, causal, weight in edges:
                contrib = activation * weight * (cfg.causal_factor if causal else cfg.other_factor) * cfg.hop_decay
                if contrib < cfg.floor:
                    continue
                held = nxt.get(target, 0.0)
                nxt[target] = max(held, contrib) if strongest else held + contrib
        for target, got in nxt.items():
            received[target] = received.get(target, 0.0) + got
        frontier = nxt
    return received
