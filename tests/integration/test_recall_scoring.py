"""Recall scoring end to end: BM25 inside rel, min-max scaled cosines, the constants on record."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from typing import Any

import pytest

from engramdb import DynamicMemoryEngine, MemoryQuery, ValidationError
from engramdb.memories.scoring import ScoringConfig
from engramdb.testing import FixedClock, fake_embedder

MakeEngine = Callable[..., DynamicMemoryEngine]


@pytest.mark.parametrize(("mu", "winner"), [(0.0, "long"), (0.5, "short")])
def test_bm25_in_rel_prefers_the_tighter_match(
    make_engine: MakeEngine, clock: FixedClock, mu: float, winner: str
) -> None:
    # No embedder (cos = 0) and both memories hold every query keyword: cue overlap ties, and so
    # does everything else, so without BM25 the older memory wins the tie. BM25 favours the short
    # memory, whose every word is a query word.
    e = make_engine(memory_embedder=None, scoring=ScoringConfig(mu=mu))
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


def test_min_max_cosines_span_the_candidates(make_engine: MakeEngine, clock: FixedClock) -> None:
    cfg = ScoringConfig(lam=1.0, mu=0.0, cos_minmax=True, w_rec=0.0, w_imp=0.0)
    e = make_engine(memory_embedder=fake_embedder(), scoring=cfg)
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


def _two_days(make_engine: MakeEngine, clock: FixedClock, **cfg: Any) -> tuple[DynamicMemoryEngine, dict[str, str]]:
    """Two equally relevant memories, one made on 2023-03-13 and one on 2023-03-20, the older
    one written second so that the tie goes its way only through the date."""
    e = make_engine(memory_embedder=None, scoring=ScoringConfig(**cfg))
    a = e.agent("alice")
    clock.set(dt.datetime(2023, 9, 1, tzinfo=dt.UTC).timestamp())
    ids = {
        "20th": a.remember(
            "Jolene asked Deb for help", created_at=dt.datetime(2023, 3, 20, 9, tzinfo=dt.UTC).timestamp()
        ).id,
        "13th": a.remember(  # the same text on purpose: not merged
            "Jolene asked Deb for help", created_at=dt.datetime(2023, 3, 13, 9, tzinfo=dt.UTC).timestamp(), dedup=False
        ).id,
    }
    return e, ids


def test_a_date_the_query_names_lifts_that_days_memories(make_engine: MakeEngine, clock: FixedClock) -> None:
    e, ids = _two_days(make_engine, clock)
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


def test_w_when_zero_turns_dates_off(make_engine: MakeEngine, clock: FixedClock) -> None:
    e, ids = _two_days(make_engine, clock, w_when=0.0)
    hits = e.agent("alice").explain("What did Jolene ask Deb on 13 March, 2023?", k=2, hops=0).hits
    assert hits[0].memory_id == ids["20th"] and all(h.components.when == 0.0 for h in hits)
    e.close()


def test_bad_when_changes_nothing(make_engine: MakeEngine, clock: FixedClock) -> None:
    e, _ = _two_days(make_engine, clock)
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


def test_an_entity_the_query_names_lifts_its_memories(make_engine: MakeEngine, clock: FixedClock) -> None:
    # Same words, same time: only the entity the query names tells the two memories apart.
    e = make_engine(memory_embedder=None)
    a = e.agent("alice")
    mel = a.remember("went on a camping trip with the kids", entities=["Melanie"]).id
    car = a.remember("went on a camping trip with the kids", entities=["Caroline"]).id
    plain = a.explain("Who went camping with the kids?", k=2, hops=0)
    assert plain.hits[0].memory_id == mel and all(h.components.entity == 0.0 for h in plain.hits)
    for query in ("When did Caroline go camping?", "when did CAROLINE'S kids go camping"):
        named = a.explain(query, k=2, hops=0)
        assert [h.memory_id for h in named.hits] == [car, mel]
        assert [h.components.entity for h in named.hits] == [1.0, 0.0]
        assert named.hits[0].score - named.hits[1].score == pytest.approx(ScoringConfig().w_entity)
    # the entity is a lift, not a search term: the name alone finds neither memory's words
    with_name = [h.components.bm25 for h in a.explain("Caroline camping", k=2, hops=0).hits]
    assert with_name == [h.components.bm25 for h in a.explain("camping", k=2, hops=0).hits]
    assert a.explain("Caroline", k=2, hops=0).hits == ()
    # a logged recall replays with the component
    r = a.recall("When did Caroline go camping?", k=2, hops=0)
    assert a.explain(r).hits[0].components.entity == 1.0
    e.close()


def test_entities_match_whole_words_and_every_word_of_a_name(make_engine: MakeEngine, clock: FixedClock) -> None:
    e = make_engine(memory_embedder=None)
    a = e.agent("alice")
    ny = a.remember("flights booked for the conference", entities=["New York", "ACME Corp."]).id

    def entity(query: str) -> float:
        hits = a.explain(query, k=1, hops=0).hits
        assert hits[0].memory_id == ny
        return hits[0].components.entity

    assert entity("conference flights to new york") == 1.0
    assert entity("conference flights for acme corp") == 1.0
    assert entity("conference flights to york") == 0.0  # one word of a two-word name
    assert entity("conference flights for newyork acme") == 0.0
    e.close()


def test_entity_weight_zero_and_other_readers(make_engine: MakeEngine, clock: FixedClock) -> None:
    e = make_engine(memory_embedder=None, scoring=ScoringConfig(w_entity=0.0))
    a = e.agent("alice")
    a.remember("the quarterly report is late", entities=["Dana"])
    hits = a.explain("Is Dana's quarterly report late?", k=1, hops=0).hits
    assert hits[0].components.entity == 0.0
    assert hits[0].score == pytest.approx(e.agent("alice").explain("quarterly report late", k=1, hops=0).hits[0].score)
    # bob's private memory names Dana too; alice's recall neither sees it nor feels its entity
    e.agent("bob").remember("the quarterly report is late", entities=["Dana"], shared=False)
    assert len(a.explain("Is Dana's quarterly report late?", k=5, hops=0).hits) == 1
    e.close()


def _episode(make_engine: MakeEngine, clock: FixedClock, **cfg: Any) -> tuple[DynamicMemoryEngine, dict[str, str]]:
    """A strong match; a weak one made a minute after it; the same weak text made three days later."""
    e = make_engine(memory_embedder=None, scoring=ScoringConfig(**cfg))
    a = e.agent("alice")
    t0 = dt.datetime(2023, 3, 13, 9, tzinfo=dt.UTC).timestamp()
    clock.set(t0 + 30 * 86400)
    ids = {
        "later": a.remember("the keys were slow", created_at=t0 + 3 * 86400).id,
        "match": a.remember("rotate the deploy keys on monday", created_at=t0).id,
        "near": a.remember("the keys were slow", created_at=t0 + 60, dedup=False).id,  # the same text on purpose
    }
    return e, ids


def test_temporal_context_lifts_what_was_made_beside_a_strong_match(make_engine: MakeEngine, clock: FixedClock) -> None:
    # Without document expansion: "near" is written right after the match, so with it its BM25
    # would also hold the match's (see test_document_expansion_credits_the_next_memory).
    e, ids = _episode(make_engine, clock, bm25_prev=0.0)
    cfg = ScoringConfig(bm25_prev=0.0)
    ex = e.agent("alice").explain("rotate deploy keys", k=3, hops=0)
    by = {h.memory_id: h for h in ex.hits}
    assert [h.memory_id for h in ex.hits] == [ids["match"], ids["near"], ids["later"]]
    match, near, later = by[ids["match"]].components, by[ids["near"]].components, by[ids["later"]].components
    assert near.rel == later.rel  # same words: only the time apart differs
    assert match.ctx == match.rel == 1.0  # a candidate is its own anchor
    assert near.ctx == pytest.approx(match.rel * math.exp(-60 / cfg.ctx_tau))
    assert later.ctx == pytest.approx(later.rel)  # three days from the match: its own rel is more
    assert by[ids["near"]].score - by[ids["later"]].score == pytest.approx(cfg.w_ctx * (near.ctx - later.ctx))
    assert ex.weights["w_ctx"] == cfg.w_ctx and ex.weights["ctx_tau"] == cfg.ctx_tau
    e.close()


def test_document_expansion_credits_the_next_memory(make_engine: MakeEngine, clock: FixedClock) -> None:
    # bm25_prev: the memory written right after a match, in the same sitting, holds that share of
    # the match's BM25 (a reply is found by the words of the question it answers); one made days
    # later, or one of the same instant (a batch: no order), holds none.
    e, ids = _episode(make_engine, clock, w_ctx=0.0)
    a = e.agent("alice")
    by = {h.memory_id: h.components for h in a.explain("rotate deploy keys", k=3, hops=0).hits}
    assert by[ids["near"]].bm25 == pytest.approx(by[ids["later"]].bm25 + 0.3 * by[ids["match"]].bm25, rel=1e-5)
    assert by[ids["near"]].bm25 > by[ids["later"]].bm25
    e.close()
    e = make_engine(memory_embedder=None, scoring=ScoringConfig(w_ctx=0.0))
    b = e.agent("bob")
    b.remember_many([{"content": "rotate the deploy keys on monday"}, {"content": "nobody writes it down"}])
    assert len(b.explain("rotate deploy keys", k=3, hops=0).hits) == 1  # the batch mate is not found
    e.close()


def test_a_when_question_lifts_the_memories_that_say_when(make_engine: MakeEngine, clock: FixedClock) -> None:
    # w_dated: a query asking when lifts the candidates that hold a time expression (TIME_WORDS);
    # both memories hold the query's words and are as long, so only that lift tells them apart
    e = make_engine(memory_embedder=None, scoring=ScoringConfig(w_ctx=0.0, bm25_prev=0.0))
    a = e.agent("alice")
    t0 = clock()
    plain = a.remember("the ops team rotated the keys", created_at=t0, dedup=False).id
    dated = a.remember("last friday we rotated the keys", created_at=t0 + 86_400, dedup=False).id
    ex = a.explain("When were the keys rotated?", k=2, hops=0)
    assert [h.memory_id for h in ex.hits] == [dated, plain]
    assert [h.components.dated for h in ex.hits] == [1.0, 0.0]
    assert ex.weights["w_dated"] == ScoringConfig().w_dated
    assert all(h.components.dated == 0.0 for h in a.explain("Who rotated the keys?", k=2, hops=0).hits)
    e.close()


def test_w_ctx_zero_turns_temporal_context_off(make_engine: MakeEngine, clock: FixedClock) -> None:
    e, ids = _episode(make_engine, clock, w_ctx=0.0, bm25_prev=0.0)  # no document expansion: see above
    hits = e.agent("alice").explain("rotate deploy keys", k=3, hops=0).hits
    assert all(h.components.ctx == 0.0 for h in hits)
    assert hits[0].memory_id == ids["match"]
    assert {hits[1].memory_id, hits[2].memory_id} == {ids["near"], ids["later"]}
    assert hits[1].score == pytest.approx(hits[2].score)  # near and later tie without it
    e.close()


def test_one_batch_is_not_an_episode(make_engine: MakeEngine, clock: FixedClock) -> None:
    # remember_many without event times stamps every item with the same instant: no order, no context.
    e = make_engine(memory_embedder=None, scoring=ScoringConfig(bm25_prev=0.0))  # ctx alone, no expansion
    a = e.agent("alice")
    match, _ = a.remember_many([{"content": "rotate the deploy keys on monday"}, {"content": "the keys were slow"}])
    clock.advance(60)
    after = a.remember("the keys were slow", dedup=False).id  # a minute later: contiguous with the match
    by = {h.memory_id: h.components for h in a.explain("rotate deploy keys", k=3, hops=0).hits}
    batch_mate = next(mid for mid in by if mid not in (match.id, after))
    assert by[batch_mate].ctx == pytest.approx(by[batch_mate].rel)
    assert by[after].ctx == pytest.approx(by[match.id].rel * math.exp(-60 / ScoringConfig().ctx_tau))
    e.close()


# -- absolute relevance -----------------------------------------------------------------------------


def _notes(make_engine: MakeEngine) -> DynamicMemoryEngine:
    e = make_engine(memory_embedder=fake_embedder())
    a = e.agent("alice")
    for text in (
        "INC-42 took checkout down for 20 minutes",
        "The cause of INC-42 was an expired TLS certificate",
        "Bob prefers aisle seats on long flights",
        "Lunch is at noon on Fridays",
    ):
        a.remember(text)
    return e


def test_relevance_is_absolute_and_min_relevance_returns_fewer_than_k(make_engine: MakeEngine) -> None:
    a = _notes(make_engine).agent("alice")
    full = a.recall("what took checkout down?", k=4)
    assert len(full) == 4  # recall still fills k by default
    assert full[0].memory.content.startswith("INC-42 took") and full[0].relevance == 1.0
    assert all(0.0 <= h.relevance <= 1.0 for h in full)
    cut = a.recall("what took checkout down?", k=4, min_relevance=0.3)
    assert [h.memory.id for h in cut] == [full[0].memory.id]
    # a query nothing answers returns nothing above a threshold, whatever k asks for
    assert a.recall("quantum chromodynamics lattice", k=4, min_relevance=0.3).hits == ()
    assert len(a.recall("quantum chromodynamics lattice", k=4)) == 4
    # the same memory has the same relevance whatever else the recall found (not min-max)
    alone = a.recall("checkout down", k=1)[0]
    assert alone.memory.id == full[0].memory.id and alone.relevance == 1.0


def test_relevance_is_in_explain_and_bad_thresholds_are_refused(make_engine: MakeEngine) -> None:
    a = _notes(make_engine).agent("alice")
    r = a.recall("aisle seats", k=2)
    ex = a.explain(r.recall_id or "")
    assert ex.hits[0].relevance == r[0].relevance > 0
    for bad in (-0.1, 1.5, "high", True):
        with pytest.raises(ValidationError, match="min_relevance"):
            a.recall("aisle seats", min_relevance=bad)  # type: ignore[arg-type]


def test_absolute_relevance_counts_cosine_only_above_the_unrelated_level() -> None:
    from engramdb.memories.scoring import absolute_relevance

    assert absolute_relevance(0.0, 0.76, 0.76) == 0.0
    assert absolute_relevance(0.0, 0.88, 0.76) == pytest.approx(0.5)
    assert absolute_relevance(0.25, 0.80, 0.76) == 0.25
    assert absolute_relevance(1.0, 0.1, 0.0) == 1.0


def test_a_name_the_query_writes_lifts_memories_holding_it(make_engine: MakeEngine, clock: FixedClock) -> None:
    # No entities anywhere. The query writes "Melanie" capitalised, so the memory whose own words
    # hold it gets the entity lift (explain shows it), though both match the other words.
    e = make_engine(memory_embedder=None)
    a = e.agent("alice")
    mel = a.remember("we went camping with Melanie and the kids").id
    a.remember("we went camping with the kids and loved it")
    ex = a.explain("When did Melanie go camping with the kids?", k=2, hops=0)
    assert ex.hits[0].memory_id == mel
    assert [h.components.entity for h in ex.hits] == [1.0, 0.0]
    assert ex.weights["name_focus"] == 1.0
    off = make_engine(memory_embedder=None, scoring=ScoringConfig(name_focus=False)).agent("alice")
    off.remember("we went camping with Melanie and the kids")
    assert all(h.components.entity == 0.0 for h in off.explain("When did Melanie go camping?", k=2).hits)
    e.close()


def test_given_entities_take_precedence_over_names_in_the_text(make_engine: MakeEngine, clock: FixedClock) -> None:
    # Once a candidate holds an entity the query names, names in other memories' text lift nothing.
    e = make_engine(memory_embedder=None)
    a = e.agent("alice")
    own = a.remember("went camping with the kids", entities=["Melanie"]).id
    a.remember("went camping with Melanie and the kids")
    ex = a.explain("When did Melanie go camping with the kids?", k=2, hops=0)
    assert {h.memory_id == own: h.components.entity for h in ex.hits} == {True: 1.0, False: 0.0}
    e.close()


def test_a_speaker_prefix_becomes_the_memorys_entity(make_engine: MakeEngine, clock: FixedClock) -> None:
    e = make_engine(memory_embedder=None)
    a = e.agent("alice")
    mel = a.remember("Melanie: we went camping with the kids")
    car = a.remember("Caroline: Melanie, we went camping with the kids too")
    assert mel.entities == ("Melanie",) and car.entities == ("Caroline",)
    # an explicit list (even empty) is the caller's word; a label is no speaker
    assert a.remember("Melanie: something else entirely", entities=[]).entities == ()
    assert a.remember("Note: buy milk").entities == ()
    ex = a.explain("What did Melanie say about camping with the kids?", k=2, hops=0)
    assert ex.hits[0].memory_id == mel.id
    assert [h.components.entity for h in ex.hits] == [1.0, 0.0]  # the speaker, not whoever says the name
    e.close()


def test_memories_written_in_a_row_spread_to_each_other(make_engine: MakeEngine, clock: FixedClock) -> None:
    # No links: the memory written right after a strong match, minutes later, is reached by
    # spreading (ScoringConfig.sequence_window); one written a day later is not. Document
    # expansion (bm25_prev) would make it a lexical candidate itself: off, to see spreading alone.
    e = make_engine(memory_embedder=None, scoring=ScoringConfig(w_ctx=0.0, bm25_prev=0.0))
    a = e.agent("alice")
    t0 = clock()
    match = a.remember("the deploy keys rotate every monday", created_at=t0).id
    nxt = a.remember("yes, and nobody writes it down", created_at=t0 + 60).id
    a.remember("lunch was late", created_at=t0 + 86_400)
    ex = a.explain("when do the deploy keys rotate", k=3, hops=1)
    assert [h.memory_id for h in ex.hits][:2] == [match, nxt]
    assert ex.hits[1].source == "spread" and ex.hits[1].components.spread > 0
    assert len(ex.hits) == 2  # the memory of the next day is no neighbour
    no_context = ScoringConfig(w_ctx=0.0, sequence_window=0.0, bm25_prev=0.0)
    off = make_engine(memory_embedder=None, scoring=no_context).agent("bob")
    off.remember("the deploy keys rotate every monday", created_at=t0)
    off.remember("yes, and nobody writes it down", created_at=t0 + 60)
    assert len(off.explain("when do the deploy keys rotate", k=3, hops=1).hits) == 1
    e.close()


def test_rank_fusion_puts_rel_on_a_scale_no_query_changes(make_engine: MakeEngine, clock: FixedClock) -> None:
    cfg = ScoringConfig(fusion="rank", rank_k=10.0, lam=0.0, mu=0.0, w_rec=0.0, w_imp=0.0, w_ctx=0.0)
    e = make_engine(memory_embedder=None, scoring=cfg)
    a = e.agent("alice")
    for text in ("alpha beta gamma", "alpha beta", "alpha", "delta"):
        a.remember(text)
    ex = a.explain("alpha beta gamma", k=10, hops=0)
    # rel = r(cue): the best cue overlap ranks first (1.0), the next ones (k0 + 1) / (k0 + rank);
    # min-max would have put the last candidate at 0
    assert [round(h.components.rel, 4) for h in ex.hits] == [1.0, round(11 / 12, 4), round(11 / 13, 4)]
    assert ex.weights["rank_fusion"] == 1.0
    e.close()


def test_memories_of_one_instant_are_no_episode(make_engine: MakeEngine, clock: FixedClock) -> None:
    # One batch without event times: the memories share an instant and carry no order.
    e = make_engine(memory_embedder=None, scoring=ScoringConfig(w_ctx=0.0))
    a = e.agent("alice")
    a.remember_many([{"content": "the deploy keys rotate every monday"}, {"content": "nobody writes it down"}])
    assert len(a.explain("when do the deploy keys rotate", k=3, hops=1).hits) == 1
    e.close()


def test_a_recall_with_fewer_hits_than_k_says_why(make_engine: MakeEngine) -> None:
    e = _notes(make_engine)
    a = e.agent("alice")
    total = len(a.recall("anything at all", k=50))
    assert total < 50
    full = a.recall("what took checkout down?", k=total)
    assert full.note is None  # k came back
    short = a.recall("what took checkout down?", k=50)
    assert len(short) == total and short.note is not None
    assert short.note.startswith(f"{total} of the 50 asked for: {total} memories were candidates")
    cut = a.recall("what took checkout down?", k=50, min_relevance=0.3)
    assert cut.note is not None and f"min_relevance=0.3 left out {total - len(cut)}" in cut.note
    # the recall tool tells the model too, in its text and its structured result
    from engramdb.tools import MemoryToolbox

    args = {"query": "what took checkout down?", "k": 20, "min_relevance": 0.3}
    reply = MemoryToolbox(a).call_result("recall", args)
    assert not reply.error and "Fewer than asked" in reply.text
    assert reply.data["note"] == cut.note.replace("of the 50", "of the 20")
