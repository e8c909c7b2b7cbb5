"""Fit the recall scorer's constants on LoCoMo conversations 0-6 and report them on 7-9.

The recall pipeline runs once per question and candidate count with a large k and no spreading
(``agent.explain(question, k=1000, hops=0)``), which keeps every candidate with its raw features
(cosine, cue overlap, BM25, which channel found it); the cosine and cue overlap of every other turn,
which spreading can reach, come from the same embedder and the same keyword functions. Then the
scorer — normalisation, the weighted sum, spreading over the ``precedes`` edges between consecutive
turns, the top k — is replayed offline in numpy for each candidate setting, so a coordinate search
over a grid costs seconds, not an engine run per point. The replay is checked against the engine:
the rankings it predicts for the starting and the fitted constants are compared with real runs.

Fitted: λ (cos vs cue), μ (share of BM25 in rel), whether cosines are min-max scaled, d (decay),
w_when (the lift of turns said on a date the question names), w_entity (of turns whose speaker,
their entity, the question names), w_ctx and ctx_tau (temporal context: the lift by the best
candidate said close in time, and how fast it fades), w_rec and w_imp (w_rel = 1: only ratios
matter), γ, the per-hop decay, how spread contributions combine (sum / max), the candidates per
channel, and hops (0-2; `recall(hops=…)` is a call argument, default 1, not a ScoringConfig
constant that recall reads) — except what ``--hold`` keeps
(by default w_imp, the candidates and w_rec = 0.1; HOLD_REASONS says why). The objective, over the
questions of categories 1-4 of the training conversations, is by default the mean of the five
columns the issue wants engramdb first in — recall@1, @5, @10, @20 and session recall@5 — since
fitting recall@10 alone buys +0.01 of it with spreading strong enough to push the best hit's
neighbours above it (recall@1 −0.05, session recall@5 −0.04); ``--objective r@10`` fits that alone.
The issue also wants engramdb first in every column, so the mean counts only where every column
beats the best cheap baseline (grep, FTS5, FTS5 + Porter) on the same conversations by
FLOOR_MARGIN (``--margin``; ``--no-floors`` drops the condition); a fit replaces the defaults only
if it also wins on the held-out conversations by the same rule (first in every column there, then
the higher mean).

Usage (from the repository root)::

    .venv/bin/python benchmarks/tune_scorer.py [--data locomo10.json] [--train 0-6] [--test 7-9]

It prints defaults against fitted constants (train and held-out R@10, from real engine runs) and
writes benchmarks/results/tuning.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import pickle
import sys
import tempfile
import time
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo
import provenance
from bench_locomo import QUERY_DELAY, Haystack, K, build_engramdb, rank_engramdb, run_fts5, run_grep
from engramdb import DynamicMemoryEngine
from engramdb.memories.scoring import ScoringConfig, temporal_context
from engramdb.memories.scoring import top_weight as top_weight_of
from engramdb.retrieval.keywords import cue_terms, entity_token, keywords, query_entity_tokens, stem
from engramdb.retrieval.when import windows_in
from engramdb.testing import FixedClock

OUT = provenance.OUT / "tuning.json"
#: spec 001's constants (nooa-memory's), the starting point of this work
SPEC_DEFAULTS = ScoringConfig(
    lam=0.7,
    mu=0.0,
    cos_minmax=False,
    decay=0.5,
    w_rel=1.0,
    w_rec=0.5,
    w_imp=0.5,
    w_when=0.0,  # spec 001 reads no dates from the query
    w_entity=0.0,  # nor entities
    w_ctx=0.0,  # nor temporal context
    hop_decay=0.6,
    gamma=0.5,
    candidates=50,
    spread_combine="sum",
)
#: a constant moves only for at least this much gain of the train objective (about one question in
#: a thousand), so what the data is indifferent to stays at its default
MIN_GAIN = 0.001
#: The search requires every column to beat the best baseline by this much on the training
#: conversations (about five of their 1,100 questions): a setting first by one question there is as
#: likely as not to be second on the held-out ones (measured: session recall@5 sits within 0.002 of
#: FTS5 + Porter's for every setting near the optimum).
FLOOR_MARGIN = 0.005
#: constants LoCoMo cannot fit, and why
HOLD_REASONS = {
    "w_imp": "every LoCoMo turn has the same importance: the data cannot say what its weight should be",
    "candidates": "haystacks of ~600 turns cannot say how many candidates a store of 100,000 memories needs",
    "w_rec": "the questions ask about a past spread evenly over months, so LoCoMo measures what recency "
    "costs (its fit is 0) but never what it buys an agent; 0.1 keeps recency and reinforcement as a "
    "tie-breaker for the price of 0.003-0.01 R@10 here",
}
DEFAULT_HOLD = "w_imp,candidates,w_rec=0.1"
#: what the search maximises: the mean of these per-question metrics over categories 1-4
OBJECTIVES = {"mean": ("r@1", "r@5", "r@10", "r@20", "session_r@5"), "r@10": ("r@10",)}
GRID: dict[str, Sequence[Any]] = {
    "lam": [round(0.1 * i, 1) for i in range(11)],
    "mu": [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6],
    "cos_minmax": [False, True],
    "decay": [0.1, 0.3, 0.5, 0.7, 0.9],
    "w_rec": [0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0],
    "w_imp": [0.0, 0.25, 0.5, 1.0],
    "w_when": [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0],
    "w_entity": [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0],
    "w_ctx": [0.0, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5],
    "ctx_tau": [60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 86400.0],
    "gamma": [0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0],
    "hop_decay": [0.2, 0.4, 0.6, 0.8, 1.0],
    "spread_combine": ["sum", "max"],
    "candidates": [30, 50, 100],
    "hops": [0, 1, 2],
}


@dataclass
class Query:
    """One question's replay inputs over its universe U: the candidates and what spreading can reach."""

    question: locomo.Question
    pos: np.ndarray  # turn position of each node of U
    cos: np.ndarray
    cue: np.ndarray
    bm25: np.ndarray  # the lexical channel's score (0 where it did not find the turn)
    #: candidates per channel -> (found by the lexical channel, found by the vector channel) over U
    found: dict[int, tuple[np.ndarray, np.ndarray]]
    prev: np.ndarray  # index in U of the previous turn of the same session, or -1
    next: np.ndarray
    age: np.ndarray  # seconds since the memory's only access (its creation)
    when: np.ndarray  # 1 where the turn was said inside a date the question names (retrieval/when.py)
    named: bool  # the question names a date at all (then w_when counts in the activation's scale)
    entity: np.ndarray  # 1 where the question names the turn's entity (its speaker)
    ts: np.ndarray  # when the turn was said (its memory's created_at), for the temporal context


@dataclass
class Recorded:
    conv: locomo.Conversation
    queries: list[Query]


def record(hay: Haystack, sizes: Sequence[int]) -> Recorded:
    """Every candidate's raw features from the engine (one dry run per candidate count in `sizes`:
    which memories a channel keeps at its cut is the engine's to say, ties included), and the
    features of the turns spreading can reach, from the same embedder and keyword functions."""
    conv = hay.conv
    now = conv.last_ts + QUERY_DELAY
    found: dict[int, list[tuple[dict[int, tuple[float, float, float]], set[int], set[int]]]] = {}
    embedder = None
    for size in sizes:
        engine = DynamicMemoryEngine(hay.path, clock=FixedClock(now), scoring=ScoringConfig(candidates=size))
        me = engine.agent("bench")
        embedder = engine.memory_embedder
        runs = []
        for q in conv.questions:
            hits = me.explain(q.question, k=1000, hops=0).hits
            feats = {
                hay.position[h.memory_id]: (h.components.cos, h.components.cue, h.components.bm25, h.components.entity)
                for h in hits
            }
            lex = {hay.position[h.memory_id] for h in hits if h.source in ("lexical", "both")}
            vec = {hay.position[h.memory_id] for h in hits if h.source in ("vector", "both")}
            runs.append((feats, lex, vec))
        found[size] = runs
        engine.close()
    assert embedder is not None, "the memory extra (numpy) is needed"
    turns = conv.turns
    n = len(turns)
    docs = embedder.embed([t.content for t in turns])
    terms = [frozenset(cue_terms(t.content).split()) for t in turns]
    speaker_token = [entity_token(t.speaker) for t in turns]
    prev_all = [i - 1 if i and turns[i - 1].session == t.session else -1 for i, t in enumerate(turns)]
    next_all = [i + 1 if i + 1 < n and turns[i + 1].session == t.session else -1 for i, t in enumerate(turns)]
    # the one access of each memory is its creation, at the clock of remember_many: the session's date
    age = np.maximum(now - np.array([conv.session_times[t.session] for t in turns]), 1.0)
    out = []
    for qi, q in enumerate(conv.questions):
        feats = {p: f for size in sizes for p, f in found[size][qi][0].items()}
        reach = set(feats)
        for _ in range(2):  # spreading reaches at most two hops from a candidate
            reach |= {x for p in list(reach) for x in (prev_all[p], next_all[p]) if x >= 0}
        pos = np.array(sorted(reach), dtype=np.int64)
        where = {p: i for i, p in enumerate(pos.tolist())}
        qvec = embedder.embed([q.question])[0]
        windows = windows_in(q.question, now)
        when = np.array([any(turns[p].ts in w for w in windows) for p in pos.tolist()], dtype=np.float64)
        qstems = frozenset(stem(w) for w in keywords(q.question))
        qents = frozenset(query_entity_tokens(q.question))
        entity = np.array([1.0 if speaker_token[p] in qents else 0.0 for p in pos.tolist()])
        cos = np.maximum(docs[pos] @ qvec, 0.0).astype(np.float64)
        cue = np.array([len(qstems & terms[p]) / len(qstems) if qstems else 0.0 for p in pos.tolist()])
        bm25 = np.zeros(len(pos))
        for p, (c, u, b, e) in feats.items():  # the replay must see what the engine saw
            assert abs(cos[where[p]] - c) < 1e-4 and abs(cue[where[p]] - u) < 1e-9, q.question
            assert entity[where[p]] == e, q.question
            cos[where[p]], bm25[where[p]] = c, b
        masks = {}
        for size in sizes:
            _, lex, vec = found[size][qi]
            masks[size] = (np.isin(pos, sorted(lex)), np.isin(pos, sorted(vec)))
        prev = np.array([where.get(prev_all[p], -1) for p in pos.tolist()])
        nxt = np.array([where.get(next_all[p], -1) for p in pos.tolist()])
        ts = np.array([turns[p].ts for p in pos.tolist()])
        out.append(Query(q, pos, cos, cue, bm25, masks, prev, nxt, age[pos], when, bool(windows), entity, ts))
    return Recorded(conv, out)


# -- the replay ----------------------------------------------------------------------------------


def _scaled(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    if hi - lo < 1e-12:
        return (x > 0).astype(np.float64)
    return np.clip((x - lo) / (hi - lo), 0.0, 1.0)


def replay(q: Query, cfg: ScoringConfig, hops: int, k: int = K) -> list[int]:
    """The engine's ranking (turn positions) under `cfg`, as recall.py computes it."""
    lex, vec = q.found[cfg.candidates]
    cand = lex | vec
    if not cand.any():
        return []
    bm25 = np.where(lex, q.bm25, 0.0)
    cos = _scaled(q.cos, q.cos[cand].min(), q.cos[cand].max()) if cfg.cos_minmax else q.cos
    bm = _scaled(bm25, 0.0, bm25[cand].max()) if cfg.mu else np.zeros_like(bm25)
    rel_raw = (1 - cfg.mu) * (cfg.lam * cos + (1 - cfg.lam) * q.cue) + cfg.mu * bm
    with np.errstate(divide="ignore"):
        rec_raw = 1.0 / (1.0 + np.exp(cfg.decay * np.log(q.age)))  # σ(ln age^−d), one access
    rel = _scaled(rel_raw, rel_raw[cand].min(), rel_raw[cand].max())
    rec = _scaled(rec_raw, rec_raw[cand].min(), rec_raw[cand].max())
    cidx = np.flatnonzero(cand)
    ctx = np.zeros(len(q.pos))
    if cfg.w_ctx:  # anchors: the candidates by their rel, each its own too
        ctx = np.asarray(temporal_context(q.pos, q.ts, q.pos[cidx], q.ts[cidx], rel[cidx], cfg.ctx_tau))
    # every turn has importance 5: imp^ = 1
    base = cfg.w_rel * rel + cfg.w_rec * rec + cfg.w_imp * 1.0 + cfg.w_when * q.when
    base += cfg.w_entity * q.entity + cfg.w_ctx * ctx
    seeds = cidx[np.lexsort((q.pos[cidx], -base[cidx]))][: max(k, 1)]
    spread = np.zeros(len(q.pos))
    top_weight = top_weight_of(cfg, windows=q.named, entity=bool(q.entity[cand].any()))
    act = np.zeros(len(q.pos))
    act[seeds] = base[seeds] / top_weight
    frontier = seeds[act[seeds] > 0]
    per_edge = cfg.other_factor * cfg.hop_decay  # precedes: not causal, weight 1
    for _ in range(hops):
        if not len(frontier):
            break
        got = np.zeros(len(q.pos))
        for nb in (q.prev, q.next):
            src = frontier[nb[frontier] >= 0]
            contrib = act[src] * per_edge
            keep = contrib >= cfg.floor
            if cfg.spread_combine == "max":
                np.maximum.at(got, nb[src[keep]], contrib[keep])
            else:
                np.add.at(got, nb[src[keep]], contrib[keep])
        spread += got
        frontier = np.flatnonzero(got)
        act = got
    shown = cand | (spread > 0)
    idx = np.flatnonzero(shown)
    score = base[idx] + cfg.gamma * spread[idx]
    return q.pos[idx[np.lexsort((q.pos[idx], -score))][:k]].tolist()


@dataclass(frozen=True)
class Objective:
    """What the search maximises: the mean of `columns` over categories 1-4, less 1 wherever a
    column of the floors falls below its floor — the best baseline's value on the same training
    conversations — so that a setting that is first in every column beats any that is not, and
    among those the mean decides."""

    name: str
    floors: tuple[tuple[str, float], ...] = ()

    def __call__(self, summary: dict[str, float]) -> float:
        mean = float(np.mean([summary[key] for key in OBJECTIVES[self.name]]))
        return mean - 1.0 if any(summary[key] < floor for key, floor in self.floors) else mean

    def __str__(self) -> str:
        return self.name


def metric_value(summary: dict[str, float], metric: str | Objective) -> float:
    """The objective from a summary of categories 1-4 (`locomo.summarise(...)["cat1-4"]`)."""
    return (metric if isinstance(metric, Objective) else Objective(metric))(summary)


def baseline_floors(conversations: Sequence[locomo.Conversation], workdir: Path) -> tuple[tuple[str, float], ...]:
    """The best of grep and FTS5 (with and without Porter) in each column on `conversations`."""
    outcomes = [run_grep(conversations, workdir), run_fts5(conversations, False), run_fts5(conversations, True)]
    summaries = [locomo.summarise(o.rows)["cat1-4"] for o in outcomes]
    return tuple((key, max(float(s[key]) for s in summaries)) for key in OBJECTIVES["mean"])


def _first(summary: dict[str, float], floors: Sequence[tuple[str, float]]) -> str:
    """'yes' when every column reaches its floor, else the columns that fall short."""
    if not floors:
        return "-"
    short = [key for key, floor in floors if summary[key] < floor]
    return "yes" if not short else "no: " + ", ".join(short)


def objective(recs: Sequence[Recorded], cfg: ScoringConfig, hops: int, metric: str | Objective = "mean") -> float:
    rows = [
        (q.question.category, locomo.score_question(replay(q, cfg, hops), q.question, r.conv.turns))
        for r in recs
        for q in r.queries
        if q.question.category != 5
    ]
    return metric_value(locomo.summarise(rows)["cat1-4"], metric) if rows else math.nan


def coordinate_search(
    recs: Sequence[Recorded],
    start: ScoringConfig,
    hops: int,
    hops_values: Sequence[int],
    grid: dict[str, Sequence[Any]] = GRID,
    metric: str | Objective = "mean",
) -> tuple[ScoringConfig, int, float]:
    """Try every grid value of one constant at a time, keep any that raises the objective by more
    than MIN_GAIN; repeat until nothing does."""
    cfg, best = start, objective(recs, start, hops, metric)
    for _ in range(8):
        changed = False
        for name, values in grid.items():
            for v in hops_values if name == "hops" else values:
                trial_cfg, trial_hops = (cfg, v) if name == "hops" else (replace(cfg, **{name: v}), hops)
                if (trial_cfg, trial_hops) == (cfg, hops):
                    continue
                score = objective(recs, trial_cfg, trial_hops, metric)
                if score > best + MIN_GAIN:
                    cfg, hops, best, changed = trial_cfg, trial_hops, score, True
        if not changed:
            break
    return cfg, hops, best


def fit(
    recs: Sequence[Recorded],
    starts: Sequence[tuple[ScoringConfig, int]],
    hops_values: Sequence[int],
    grid: dict[str, Sequence[Any]] = GRID,
    metric: str | Objective = "mean",
) -> tuple[ScoringConfig, int, float]:
    """The best coordinate search from each start (a search ends in the local optimum nearest its start)."""
    best: tuple[ScoringConfig, int, float] | None = None
    for cfg0, hops0 in starts:
        got = coordinate_search(
            recs, cfg0, hops0 if hops0 in hops_values else hops_values[0], hops_values, grid, metric
        )
        print(
            f"  from {_diff(cfg0) or 'spec 001'}: train {metric} {got[2]:.4f}, hops={got[1]} {_diff(got[0])}",
            flush=True,
        )
        if best is None or got[2] > best[2] + 1e-9:
            best = got
    assert best is not None
    return best


def simplify(
    recs: Sequence[Recorded],
    cfg: ScoringConfig,
    hops: int,
    reference: ScoringConfig,
    metric: str | Objective = "mean",
    keep: Collection[str] = (),
) -> ScoringConfig:
    """Put back the reference value of every constant whose fitted value is worth less than MIN_GAIN
    (e.g. the decay d once w_rec is 0): what the data cannot tell apart stays as it was."""
    best = objective(recs, cfg, hops, metric)
    for f in fields(cfg):
        if f.name in keep or getattr(cfg, f.name) == getattr(reference, f.name):
            continue
        trial = replace(cfg, **{f.name: getattr(reference, f.name)})
        score = objective(recs, trial, hops, metric)
        if score >= best - MIN_GAIN:
            cfg, best = trial, max(best, score)
    return cfg


def parse_hold(spec: str, current: ScoringConfig) -> dict[str, Any]:
    """``"w_imp,w_rec=0.1"`` -> {"w_imp": <current default>, "w_rec": 0.1}."""
    out: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, value = part.partition("=")
        default = getattr(current, name)  # AttributeError names an unknown constant
        if not value:
            out[name] = default
        elif isinstance(default, bool):
            out[name] = value.lower() in ("1", "true", "yes")
        else:
            out[name] = type(default)(value)
    return out


def _diff(cfg: ScoringConfig, ref: ScoringConfig = SPEC_DEFAULTS) -> dict[str, Any]:
    return {f.name: getattr(cfg, f.name) for f in fields(cfg) if getattr(cfg, f.name) != getattr(ref, f.name)}


# -- real runs -----------------------------------------------------------------------------------


def engine_metrics(hays: Sequence[Haystack], cfg: ScoringConfig, hops: int) -> tuple[dict[str, Any], list[list[int]]]:
    rows, rankings = [], []
    for hay in hays:
        ranked = rank_engramdb(hay, cfg, hops, True, [q.question for q in hay.conv.questions])
        rankings += ranked
        rows += [
            (q.category, locomo.score_question(r, q, hay.conv.turns))
            for q, r in zip(hay.conv.questions, ranked, strict=True)
        ]
    return locomo.summarise(rows), rankings


def agreement(recs: Sequence[Recorded], rankings: list[list[int]], cfg: ScoringConfig, hops: int) -> float:
    replayed = [replay(q, cfg, hops) for r in recs for q in r.queries]
    return sum(a == b for a, b in zip(replayed, rankings, strict=True)) / max(len(rankings), 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=locomo.DEFAULT_DATA)
    parser.add_argument("--train", default="0-6")
    parser.add_argument("--test", default="7-9")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--objective", choices=sorted(OBJECTIVES), default="mean", help="what the search maximises")
    parser.add_argument(
        "--hold",
        default=DEFAULT_HOLD,
        help="constants not fitted: name (kept at the current default) or name=value, comma-separated "
        f"(default {DEFAULT_HOLD!r}; see HOLD_REASONS in this file)",
    )
    parser.add_argument(
        "--no-floors",
        action="store_true",
        help="maximise the mean alone, without requiring every column to reach the best baseline's (grep, FTS5)",
    )
    parser.add_argument(
        "--margin",
        type=float,
        default=FLOOR_MARGIN,
        help=f"how far above the best baseline every column must stay on the training conversations (default {FLOOR_MARGIN})",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        help="keep the stores and recordings here and reuse them next time (delete it once the engine changes)",
    )
    args = parser.parse_args(argv)
    if not args.data.exists():
        print(locomo.missing_data_message(args.data), file=sys.stderr)
        return 2
    started = time.perf_counter()
    conversations = locomo.load_locomo(args.data)
    train_c, test_c = locomo.select(conversations, args.train), locomo.select(conversations, args.test)
    current = ScoringConfig()
    hold = parse_hold(args.hold, current)
    held = list(hold)
    grid = {k: v for k, v in GRID.items() if k not in hold}
    with contextlib.ExitStack() as stack:
        workdir = args.workdir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tune-")))
        workdir.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        sizes = sorted(set(GRID["candidates"]) | {current.candidates, SPEC_DEFAULTS.candidates})
        cache = workdir / "recordings.pickle"
        if cache.exists():  # a --workdir from an earlier run: same data, same stores
            train_h, test_h, train_r, test_r = pickle.loads(cache.read_bytes())
        else:
            train_h = [build_engramdb(c, workdir / f"{c.sample_id}.db") for c in train_c]
            test_h = [build_engramdb(c, workdir / f"{c.sample_id}.db") for c in test_c]
            train_r = [record(h, sizes) for h in train_h]
            test_r = [record(h, sizes) for h in test_h]
            if args.workdir:
                cache.write_bytes(pickle.dumps((train_h, test_h, train_r, test_r)))
        print(f"built and recorded {len(train_h) + len(test_h)} conversations in {time.perf_counter() - t:.1f} s")
        if held:
            print(f"held: {', '.join(f'{k}={v}' for k, v in hold.items())}")
        floored = not args.no_floors and args.objective == "mean"
        floors = baseline_floors(train_c, workdir) if floored else ()
        test_floors = baseline_floors(test_c, workdir) if floored else ()
        search = Objective(args.objective, tuple((key, floor + args.margin) for key, floor in floors))
        if floors:
            print(
                f"floors (best of grep, FTS5, FTS5 + Porter on the training conversations; the search wants + {args.margin}): "
                + ", ".join(f"{k} {v:.4f}" for k, v in floors)
            )

        t = time.perf_counter()
        # One start per setting of the two switches: flipping one alone rarely pays until λ, μ or γ
        # move with it, so a search from one start would never try the other side.
        switches = [
            {"cos_minmax": m, "spread_combine": c}
            for m in GRID["cos_minmax"]
            for c in GRID["spread_combine"]
            if "cos_minmax" not in held and "spread_combine" not in held
        ] or [{}]
        spec = replace(SPEC_DEFAULTS, **hold)
        starts = list(dict.fromkeys([(replace(current, **hold), 1), *((replace(spec, **sw), 1) for sw in switches)]))
        print("fitting with hops = 1 (recall's default):")
        fit1, _, _ = fit(train_r, starts, [1], grid, search)
        fit1 = simplify(train_r, fit1, 1, current, search, keep=hold)
        print(f"fitting with hops in {list(GRID['hops'])}:")
        fitted, fitted_hops, _ = fit(train_r, [(fit1, 1)], list(GRID["hops"]), grid, search)
        fitted = simplify(train_r, fitted, fitted_hops, current, search, keep=hold)
        search_s = time.perf_counter() - t
        print(f"search took {search_s:.1f} s")

        rows: dict[str, dict[str, Any]] = {}
        compared = [("spec 001 defaults", SPEC_DEFAULTS, 1), ("current defaults", current, 1), ("fitted", fit1, 1)]
        if (fitted, fitted_hops) != (fit1, 1):
            compared.append((f"fitted, hops={fitted_hops}", fitted, fitted_hops))
        for label, cfg, hops in compared:
            if label == "current defaults" and current == SPEC_DEFAULTS:
                continue
            train_m, train_rank = engine_metrics(train_h, cfg, hops)
            test_m, test_rank = engine_metrics(test_h, cfg, hops)
            rows[label] = {
                "constants": asdict(cfg),
                "hops": hops,
                "train": train_m,
                "held_out": test_m,
                "replay_train_objective": objective(train_r, cfg, hops, search),
                "replay_held_out_objective": objective(test_r, cfg, hops, args.objective),
                "replay_agreement": agreement(train_r + test_r, train_rank + test_rank, cfg, hops),
            }
    base_label = "current defaults" if "current defaults" in rows else "spec 001 defaults"

    def held_out(label: str, key: str | None = None) -> float:
        """The held-out objective, with the baselines' held-out floors (or one column)."""
        summary = rows[label]["held_out"]["cat1-4"]
        return Objective(args.objective, test_floors)(summary) if key is None else float(summary[key])

    beats = held_out("fitted") > held_out(base_label)
    header = (
        f"{'constants':<20}{'hops':>5}{'train obj.':>11}{'held-out obj.':>14}{'train R@10':>11}{'held-out R@10':>14}"
        f"{'R@1':>7}{'R@5':>7}{'R@20':>7}{'sess. R@5':>10}{'replay = engine':>16}{'first: train / held-out':>25}"
    )
    print(
        "\nLoCoMo evidence recall, categories 1-4 (engine runs; train = conversations "
        f"{args.train}, held-out = {args.test}; objective = {args.objective}: mean of "
        f"{', '.join(OBJECTIVES[args.objective])}; R@1 … session R@5 held-out)"
    )
    print(header + "\n" + "-" * len(header))
    for label, r in rows.items():
        tr, ho = r["train"]["cat1-4"], r["held_out"]["cat1-4"]
        print(
            f"{label:<20}{r['hops']:>5}{metric_value(tr, args.objective):>11.4f}{metric_value(ho, args.objective):>14.4f}"
            f"{tr['r@10']:>11.4f}{ho['r@10']:>14.4f}{ho['r@1']:>7.3f}{ho['r@5']:>7.3f}{ho['r@20']:>7.3f}"
            f"{ho['session_r@5']:>10.3f}{r['replay_agreement']:>15.1%}"
            f"{_first(tr, floors):>14} / {_first(ho, test_floors)}"
        )
    print(f"\nfitted (hops = 1), differences from spec 001: {_diff(fit1)}")
    if (fitted, fitted_hops) != (fit1, 1):
        print(f"fitted with hops free: hops={fitted_hops} {_diff(fitted)}")
    if fit1 == current:
        print("the fit reproduces the current defaults")
    else:
        print(
            f"fitted {'beat' if beats else 'did not beat'} the {base_label} on the held-out conversations"
            + (" — ship them as ScoringConfig's defaults." if beats else " — keep the defaults.")
        )
    report = {
        "benchmark": "LoCoMo evidence recall, categories 1-4",
        "train": args.train,
        "held_out": args.test,
        "floors": dict(floors),
        "floor_margin": args.margin,
        "held_out_floors": dict(test_floors),
        "objective": f"{args.objective}: mean of {', '.join(OBJECTIVES[args.objective])} over the train "
        "questions of categories 1-4 (offline replay)",
        "grid": {k: list(v) for k, v in grid.items()},
        "held": hold,
        "hold_reasons": {k: HOLD_REASONS.get(k, "") for k in hold},
        "rows": rows,
        "fitted_beats_defaults_on_held_out": beats,
        "fit_reproduces_current_defaults": fit1 == current,
        "fitted_beats_spec_001_on_held_out": held_out("fitted") > held_out("spec 001 defaults"),
        "compared_with": base_label,
        "search_s": search_s,
        "wall_s": time.perf_counter() - started,
        "command": "python benchmarks/tune_scorer.py" + ("" if argv is None else " " + " ".join(argv)),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(provenance.stamp(report), indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out} ({report['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
