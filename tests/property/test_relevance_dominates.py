"""Relevance dominates (`ScoringConfig.relevant_share`): whatever the importance, recency, edges
and episodes of a store, a recall never ranks a hit whose relevance is 0 above one whose relevance
is above 0, and no hit below the relevant share of the best above one at or above it; within each
tier the order is the score's."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engramdb import DynamicMemoryEngine, EdgeType, ScoringConfig
from engramdb.testing import FixedClock

WORDS = ["grammar", "spec", "release", "customer", "dana", "owns", "kiwi", "ports", "rotating", "keys", "the"]

sentence = st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join)
memory = st.tuples(sentence, st.floats(0.0, 1.0), st.floats(0, 30 * 86400))
op = st.one_of(
    st.tuples(st.just("recall"), sentence),  # raises the activation of what it returns
    st.tuples(st.just("link"), st.integers(0, 30), st.integers(0, 30)),
    st.tuples(st.just("wait"), st.floats(1, 86400)),
)


def _tiers_hold(hits: list[tuple[float, float]], share: float) -> None:
    """`hits` (relevance, score) in rank order keep the tiers, each in score order."""
    best = max((rel for rel, _ in hits), default=0.0)
    enough = [rel > 0 and rel >= share * best for rel, _ in hits]
    assert enough == sorted(enough, reverse=True), hits  # no lower-tier hit above an upper-tier one
    for tier in (True, False):
        scores = [score for (_, score), e in zip(hits, enough, strict=True) if e is tier]
        assert scores == sorted(scores, reverse=True), hits


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    memories=st.lists(memory, min_size=1, max_size=30),
    ops=st.lists(op, max_size=12),
    query=sentence,
    share=st.sampled_from([0.0, 0.25, 0.5, 1.0]),
    k=st.integers(1, 12),
)
def test_no_hit_of_a_lower_relevance_tier_outranks_a_higher_one(
    memories: list[tuple[str, float, float]], ops: list[tuple[object, ...]], query: str, share: float, k: int
) -> None:
    clock = FixedClock()
    start = clock.now
    with (
        tempfile.TemporaryDirectory() as tmp,
        contextlib.closing(
            DynamicMemoryEngine(str(Path(tmp) / "m.db"), clock=clock, scoring=ScoringConfig(relevant_share=share))
        ) as eng,
    ):
        agent = eng.agent("ann")
        made = [
            agent.remember(text, importance=imp, created_at=start - age, dedup=False, force=True).id
            for text, imp, age in memories
        ]
        for o in ops:
            if o[0] == "recall":
                agent.recall(str(o[1]), k=3)
            elif o[0] == "link":
                a, b = made[int(o[1]) % len(made)], made[int(o[2]) % len(made)]  # type: ignore[call-overload]
                if a != b:
                    agent.link(a, b, EdgeType.RELATED)
            else:
                clock.advance(float(o[1]))  # type: ignore[arg-type]
        explanation = agent.explain(query, k=k)
        ranked = [(e.relevance, e.score) for e in (*explanation.hits, *explanation.near_misses)]
        _tiers_hold(ranked, share)
        hits = agent.recall(query, k=k).hits
        _tiers_hold([(h.relevance, h.score) for h in hits], share)


def test_a_relevant_hit_ranks_above_an_important_recent_linked_one_with_no_relevance() -> None:
    """The new user's case (issue 31: "who owns the grammar?" once ranked an important, recent
    memory of relevance 0 above the answer), with reinforcement and an edge on the loud one."""
    clock = FixedClock()
    with (
        tempfile.TemporaryDirectory() as tmp,
        contextlib.closing(DynamicMemoryEngine(str(Path(tmp) / "m.db"), clock=clock)) as eng,
    ):
        agent = eng.agent("ann")
        answer = agent.remember("Dana owns the grammar spec", importance=0.1, created_at=clock.now - 20 * 86400)
        loud = agent.remember("The customer wants the release next week", importance=1.0)
        for _ in range(5):
            agent.recall("the customer wants the release", k=1)
        agent.link(loud.id, answer.id, EdgeType.RELATED)
        hits = agent.recall("who owns the grammar?", k=2).hits
        assert hits[0].memory.id == answer.id
        assert all(h.relevance > 0 for h in hits[:1])
        assert [h.memory.id for h in hits if h.relevance == 0] in ([], [loud.id])
