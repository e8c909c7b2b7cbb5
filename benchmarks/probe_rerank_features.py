"""Probe two candidate ranking features on LoCoMo's train and validation splits, before building either.

Each question is asked through the plain API's ranking (``explain(question, k=50)`` on the plain-API
stores that ``sweep_locomo.py`` builds and caches in ``--workdir``), and the top 50 are re-sorted as
``score + w · f`` with ``f`` min-maxed over those 50 (``soft``) or taken as it is (``session``):

- ``soft``: soft term matching with the shipped static embedder's word vectors. For each query
  keyword q, ``s_q = clip((max_t cos(v_q, v_t) − θ) / (1 − θ), 0, 1)`` over the memory's keywords t,
  and ``f = Σ idf_q · s_q / Σ idf_q`` (``soft_only`` counts only the keywords the memory does not
  hold itself): a paraphrase-level cue overlap ("European countries" → "Spain").
- ``session``: BM25 of the question against each session's text as one document, over the best
  session's (``scaled``) or 1 for the top three sessions (``rank``): a lift of the sitting that is
  about the question.
- ``session spread``: the opposite, a greedy re-rank in which each pick's score loses ``w`` per
  memory already picked from its session (maximal marginal relevance over sittings), for questions
  whose evidence lies in several sessions.

It refuses the test split (read once, by bench_locomo.py, for the report). Prints a table; writes
``rerank-features.json`` (with the provenance block) to benchmarks/out/ or ``--out``.

    .venv/bin/python benchmarks/probe_rerank_features.py
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np

import locomo
import provenance
from bench_locomo import QUERY_DELAY, QUERY_GAP, build_plain
from engramdb import DynamicMemoryEngine
from engramdb.embeddings.static import default_embedder
from engramdb.retrieval.keywords import keywords, stem
from engramdb.testing import FixedClock
from locomo import Conversation, Question
from sweep_locomo import _positions

SPLITS = ("train", "validation")
POOL = 50


@dataclass
class Asked:
    conv: Conversation
    question: Question
    pool: list[tuple[int, float]]  # (turn position, engramdb's score), best first


def ask(convs: Sequence[Conversation], workdir: Path) -> list[Asked]:
    """Every category 1-4 question's top `POOL` through the plain API's ranking (dry runs)."""
    out: list[Asked] = []
    for c in convs:
        path = workdir / f"{c.sample_id}-plain.db"
        if path.exists():  # built by sweep_locomo.py or an earlier probe: the same plain-API store
            position = _positions(path, c)
        else:
            position = build_plain(c, path).position
            path.with_suffix(".positions.json").write_text(json.dumps(position), encoding="utf-8")
        clock = FixedClock(c.last_ts + QUERY_DELAY)
        engine = DynamicMemoryEngine(path, clock=clock)
        me = engine.agent("bench")
        for q in c.questions:
            if q.category in (1, 2, 3, 4):
                hits = me.explain(q.question, k=POOL).hits
                out.append(Asked(c, q, [(position[h.memory_id], h.score) for h in hits]))
            clock.advance(QUERY_GAP)
        engine.close()
    return out


class Soft:
    """Soft term matching with static word vectors (see the module docstring)."""

    def __init__(self) -> None:
        self.embedder = default_embedder()
        self.cache: dict[str, Any] = {}
        self.docs: dict[str, list[set[str]]] = {}
        self.df: dict[str, dict[str, int]] = {}

    def vectors(self, words: list[str]) -> Any:
        new = [w for w in words if w not in self.cache]
        if new:
            self.cache.update(zip(new, self.embedder.embed(new), strict=True))
        return np.stack([self.cache[w] for w in words])

    def feature(self, a: Asked, theta: float, soft_only: bool) -> Any:
        c = a.conv
        if c.sample_id not in self.docs:
            self.docs[c.sample_id] = [set(keywords(t.content, limit=10**6)) for t in c.turns]
            df: dict[str, int] = {}
            for d in self.docs[c.sample_id]:
                for w in d:
                    df[w] = df.get(w, 0) + 1
            self.df[c.sample_id] = df
        docs, df, n = self.docs[c.sample_id], self.df[c.sample_id], len(c.turns)
        qk = keywords(a.question.question)
        if not qk:
            return np.zeros(len(a.pool))
        idf = np.array([math.log(1 + (n - df.get(w, 0) + 0.5) / (df.get(w, 0) + 0.5)) for w in qk])
        q = self.vectors(qk)
        out = []
        for pos, _ in a.pool:
            words = sorted(docs[pos])
            if not words:
                out.append(0.0)
                continue
            s = np.clip(((q @ self.vectors(words).T).max(axis=1) - theta) / (1 - theta), 0, 1)
            if soft_only:
                s = np.where(np.array([w in docs[pos] for w in qk]), 0.0, s)
            out.append(float((idf * s).sum() / idf.sum()))
        return np.array(out)


class Sessions:
    """BM25 of a question against whole sessions (see the module docstring)."""

    def __init__(self) -> None:
        self.index: dict[str, Any] = {}

    def scores(self, a: Asked) -> dict[int, float]:
        c = a.conv
        if c.sample_id not in self.index:
            terms: dict[int, list[str]] = {}
            for t in c.turns:
                terms.setdefault(t.session, []).extend(stem(w) for w in keywords(t.content, limit=10**6))
            tf = {s: {w: ws.count(w) for w in set(ws)} for s, ws in terms.items()}
            df: dict[str, int] = {}
            for d in tf.values():
                for w in d:
                    df[w] = df.get(w, 0) + 1
            lengths = {s: len(ws) for s, ws in terms.items()}
            self.index[c.sample_id] = (tf, df, lengths, sum(lengths.values()) / len(lengths))
        tf, df, lengths, avg = self.index[c.sample_id]
        n, k1, b = len(tf), 1.2, 0.75
        out = {}
        for s, d in tf.items():
            score = 0.0
            for w in (stem(x) for x in keywords(a.question.question)):
                f = d.get(w, 0)
                if f:
                    idf = math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))
                    score += idf * f * (k1 + 1) / (f + k1 * (1 - b + b * lengths[s] / avg))
            out[s] = score
        return out

    def feature(self, a: Asked, mode: str) -> Any:
        scores = self.scores(a)
        sessions = [a.conv.turns[p].session for p, _ in a.pool]
        if mode == "rank":
            top = set(sorted(scores, key=lambda s: -scores[s])[:3])
            return np.array([1.0 if s in top else 0.0 for s in sessions])
        best = max(scores.values()) or 1.0
        return np.array([scores[s] / best for s in sessions])


def recall_at_10(asked: Sequence[Asked], lift: Any = None, w: float = 0.0) -> dict[str, float]:
    rows = []
    for a in asked:
        score = np.array([s for _, s in a.pool])
        if w and callable(lift):
            score = score + w * lift(a)
        if lift == "diverse":  # greedy: each pick's score less w per earlier pick from its session
            ranked = _diverse(a, score, w)
        else:
            ranked = [a.pool[i][0] for i in np.argsort(-score, kind="stable")]
        rows.append((a.question.category, locomo.score_question(ranked, a.question, a.conv.turns)))
    m = locomo.summarise(rows)
    return {"cat1-4": m["cat1-4"]["r@10"], **{f"cat{k}": m[f"cat{k}"]["r@10"] for k in (1, 2, 3, 4)}}


def _diverse(a: Asked, score: Any, w: float) -> list[int]:
    """The pool re-ranked greedily: the next pick is the best score less `w` per memory already
    picked from the same session (a spread across sittings, for questions whose evidence is spread)."""
    sessions = [a.conv.turns[p].session for p, _ in a.pool]
    left, taken, out = list(range(len(a.pool))), dict.fromkeys(sessions, 0), []
    while left:
        best = max(left, key=lambda i: (score[i] - w * taken[sessions[i]], -i))
        left.remove(best)
        taken[sessions[best]] += 1
        out.append(a.pool[best][0])
    return out


def _minmax(f: Any) -> Any:
    lo, hi = float(f.min()), float(f.max())
    return (f - lo) / (hi - lo) if hi > lo else np.zeros_like(f)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=locomo.DEFAULT_DATA)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/engramdb-sweep"))
    parser.add_argument("--out", type=Path, help="results file or folder (default benchmarks/out/rerank-features.json)")
    args = parser.parse_args(argv)
    convs = locomo.load_locomo(args.data)
    args.workdir.mkdir(parents=True, exist_ok=True)
    soft, sessions = Soft(), Sessions()
    settings: list[tuple[str, Any, float]] = [("defaults", None, 0.0)]
    for theta, w, only in itertools.product((0.3, 0.5, 0.7), (0.1, 0.25, 0.5), (False, True)):
        name = f"soft{'_only' if only else ''} θ={theta} w={w}"
        settings.append((name, lambda a, t=theta, o=only: _minmax(soft.feature(a, t, o)), w))
    for w, mode in itertools.product((0.1, 0.2, 0.4), ("scaled", "rank")):
        settings.append((f"session {mode} w={w}", lambda a, m=mode: sessions.feature(a, m), w))
    for w in (0.05, 0.1, 0.2, 0.4):
        settings.append((f"session spread w={w}", "diverse", w))
    asked = {s: ask(locomo.split(convs, s), args.workdir) for s in SPLITS}
    results = []
    print(f"{'setting':<28} {'train R@10':>10} {'valid R@10':>10}   categories 1-4 (validation)")
    for name, lift, w in settings:
        row = {s: recall_at_10(asked[s], lift, w) for s in SPLITS}
        v = row["validation"]
        cats = " ".join(f"{v[f'cat{k}']:.3f}" for k in (1, 2, 3, 4))
        print(f"{name:<28} {row['train']['cat1-4']:>10.3f} {v['cat1-4']:>10.3f}   {cats}", flush=True)
        results.append({"setting": name, **row})
    path = provenance.write_json(
        provenance.out_path("rerank-features.json", args.out), {"results": results}, provenance.RUN
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
