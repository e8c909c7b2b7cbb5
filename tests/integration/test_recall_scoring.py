"""Recall scoring end to end: BM25 inside rel, min-max scaled cosines, the constants on record."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from engramdb import DynamicMemoryEngine, MemoryQuery, ValidationError
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


def _two_days(tmp_path: Path, clock: FixedClock, **cfg: float) -> tuple[DynamicMemoryEngine, dict[str, str]]:
    """Two equally relevant memories, one made on 2023-03-13 and one on 2023-03-20, the older
    one written second so that the tie goes its way only through the date."""
    e = DynamicMemoryEngine(tmp_path / "m.db", clock=clock, memory_embedder=None, scoring=ScoringConfig(**cfg))
    a = e.agent("alice")
    clock.set(dt.datetime(2023, 9, 1, tzinfo=dt.UTC).timestamp())
    ids = {
        "20th": a.remember(
            "Jolene asked Deb for help", created_at=dt.datetime(2023, 3, 20, 9, tzinfo=dt.UTC).timestamp()
        ).id,
        "13th": a.remember(
            "Jolene asked Deb for help", created_at=dt.datetime(2023, 3, 13, 9, tzinfo=dt.UTC).timestamp()
        ).id,
    }
    return e, ids


def test_a_date_the_query_names_lifts_that_days_memories(tmp_path: Path, clock: FixedClock) -> None:
    e, ids = _two_days(tmp_path, clock)
    a = e.agent("alice")
    plain = a.explain("What did Jolene ask Deb?", k=2, hops=0)
    assert plain.hits[0].memory_id == ids["20th"]  # tie on everything: the lower key (written first)
    assert all(h.components.when == 0.0 for h in plain.hits)
    dated = a.explain("What did Jolene ask Deb on 13 March, 2023?", k=2, hops=0)
    assert [h.memory_id for h in dated.hits] == [ids["13th"], ids["20th"]]
    assert [h.components.when for h in dated.hits] == [1.0, 0.0]
    assert dated.hits[0].score - dated.hits[1].score == pytest.approx(ScoringConfig().w_when)
    assert dated.weights["w_when"] == ScoringConfig().w_when
    # when=None reads no date; an explicit window anchors wherever the caller says
    assert (
        a.explain("What did Jolene ask Deb on 13 March, 2023?", k=2, hops=0, when=None).hits[0].memory_id == ids["20th"]
    )
    explicit = a.recall("What did Jolene ask Deb?", k=2, hops=0, when=(dt.date(2023, 3, 13), dt.date(2023, 3, 13)))
    assert explicit[0].memory.id == ids["13th"] and explicit[0].components.when == 1.0
    # the logged recall replays with its time component
    assert a.explain(explicit).hits[0].components.when == 1.0
    e.close()


def test_w_when_zero_turns_dates_off(tmp_path: Path, clock: FixedClock) -> None:
    e, ids = _two_days(tmp_path, clock, w_when=0.0)
    hits = e.agent("alice").explain("What did Jolene ask Deb on 13 March, 2023?", k=2, hops=0).hits
    assert hits[0].memory_id == ids["20th"] and all(h.components.when == 0.0 for h in hits)
    e.close()


def test_bad_when_changes_nothing(tmp_path: Path, clock: FixedClock) -> None:
    e, _ = _two_days(tmp_path, clock)
    a = e.agent("alice")
    before = a.stats()
    with pytest.raises(ValidationError, match="end after it starts"):
        a.recall("Jolene", when=(dt.date(2023, 3, 14), dt.date(2023, 3, 13)))
    with pytest.raises(ValidationError, match='"auto", None'):
        a.recall("Jolene", when="last week")
    with pytest.raises(ValidationError, match="end after it starts"):
        MemoryQuery("Jolene", when=(20.0, 10.0))
    assert a.stats() == before  # nothing was logged or reinforced
    e.close()
