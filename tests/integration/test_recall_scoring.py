"""Recall scoring end to end: BM25 inside rel, min-max scaled cosines, the constants on record."""

from __future__ import annotations

from pathlib import Path

import pytest

from engramdb import DynamicMemoryEngine
from engramdb.memories.scoring import ScoringConfig
from engramdb.testing import FixedClock, fake_embedder


@pytest.mark.parametrize(("mu", "winner"), [(0.0, "long"), (0.5, "short")])
def test_bm25_in_rel_prefers_the_tighter_match(tmp_path: Path, clock: FixedClock, mu: float, winner: str) -> None:
    # No embedder (cos = 0) and both memories hold every query keyword: cue overlap ties, and so
    # does everything else, so without BM25 the older memory wins the tie. BM25 favours the short
    # memory, whose every word is a query word.
    e = DynamicMemoryEngine(tmp_path / "m.db", clock=clock, memory_embedder=None, scoring=ScoringConfig(mu=mu))
    a = e.agent("alice")
    ids = {
        "long": a.remember("alpha beta " + " ".join(f"filler{i}" for i in range(30))).id,
        "short": a.remember("alpha beta").id,
    }
    ex = a.explain("alpha beta", k=2, hops=0)
    assert ex.hits[0].memory_id == ids[winner]
    assert all(h.components.bm25 > 0 and h.components.cue == 1.0 for h in ex.hits)
    assert ex.weights["mu"] == mu
    e.close()


def test_min_max_cosines_span_the_candidates(tmp_path: Path, clock: FixedClock) -> None:
    cfg = ScoringConfig(lam=1.0, mu=0.0, cos_minmax=True, w_rec=0.0, w_imp=0.0)
    e = DynamicMemoryEngine(tmp_path / "m.db", clock=clock, memory_embedder=fake_embedder(), scoring=cfg)
    a = e.agent("alice")
    for text in ("deploy keys rotate on monday", "the deploy went fine", "lunch at noon", "keys are in the drawer"):
        a.remember(text)
    ex = a.explain("when do deploy keys rotate", k=10, hops=0)
    cos = [h.components.cos for h in ex.hits]
    lo, hi = min(cos), max(cos)
    assert hi > lo
    for h in ex.hits:  # rel is the cosine scaled to [0, 1] over the candidates
        assert h.components.rel == pytest.approx((h.components.cos - lo) / (hi - lo))
    assert ex.hits[0].components.rel == 1.0 and ex.hits[-1].components.rel == 0.0
    e.close()
