"""Recall's second stage: a `Reranker` re-scores the most relevant candidates before ACT-R.

On both backends (`make_engine`). The rerankers here are deterministic and in process: one that
scores by a table of marked words and records what it was sent, one that fails, one that
answers nonsense. `HttpReranker` against a server is tested in tests/unit/test_http_reranker.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from engramdb import Confidentiality, ConfigError, DynamicMemoryEngine, RerankerError, ScoringConfig
from engramdb.embeddings.rerank import HttpReranker

FACTS = [
    "Dana owns the grammar spec and reviews every grammar change.",
    "The grammar release slipped because the grammar tests were flaky.",
    "Omar asked whether the grammar doc covers unicode identifiers.",
    "Lunch on Friday is at the Italian place near the office.",
    "The parser team moved its stand-up to nine thirty.",
    "Grammar questions go to the #lang channel first.",
]


class Marked:
    """Scores a text by the first marked word it holds (else `rest`); records every call."""

    name = "marked"

    def __init__(self, marks: dict[str, float], rest: float = 0.05) -> None:
        self.marks, self.rest = marks, rest
        self.calls: list[tuple[str, list[str]]] = []

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        self.calls.append((query, list(texts)))
        out = []
        for t in texts:
            out.append(next((v for w, v in self.marks.items() if w in t), self.rest))
        return out


class Failing:
    name = "failing"

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        raise RerankerError("the rerank endpoint is down", "test://rerank")


class Nonsense:
    name = "nonsense"

    def __init__(self, answer: Callable[[int], Any]) -> None:
        self.answer = answer

    def score(self, query: str, texts: Sequence[str]) -> Any:
        return self.answer(len(texts))


def stored(engine: DynamicMemoryEngine, **kw: Any) -> list[str]:
    ada = engine.agent("ada")
    return [ada.remember(text, **kw).id for text in FACTS]


def test_the_reranker_decides_the_order_of_what_it_scored(make_engine: Callable[..., DynamicMemoryEngine]) -> None:
    plain = make_engine("plain")
    ids = stored(plain)
    first = plain.agent("ada").recall("who owns the grammar?", k=6)
    reranker = Marked({"unicode": 0.97, "#lang": 0.9, "Dana": 0.2})
    engine = make_engine("plain", reranker=reranker)
    r = engine.agent("ada").recall("who owns the grammar?", k=6)
    (query, texts), *_ = reranker.calls
    assert query == "who owns the grammar?"
    assert set(texts) <= set(FACTS) and len(texts) == len(first.hits)  # every candidate, fewer than rerank_top
    by_id = {h.memory.id: h for h in r.hits}
    assert r.hits[0].memory.id == ids[2] and r.hits[1].memory.id == ids[5]  # 0.97, then 0.9
    assert by_id[ids[2]].components.rerank == pytest.approx(0.97)
    assert by_id[ids[2]].relevance == pytest.approx(0.97)  # rerank_weight 1: the reranker's judgement
    assert [h.memory.id for h in first.hits][:1] != [r.hits[0].memory.id]  # it did change the order
    explained = engine.agent("ada").explain(r)
    assert explained.weights["rerank_top"] == 30.0 and explained.weights["rerank_weight"] == 1.0
    assert [e.components.rerank for e in explained.hits] == [h.components.rerank for h in r.hits]
    assert "rerank_top" not in plain.agent("ada").explain(first).weights


def test_rerank_top_bounds_what_is_sent_most_relevant_first(make_engine: Callable[..., DynamicMemoryEngine]) -> None:
    engine = make_engine()
    stored(engine)
    first = engine.agent("ada").recall("grammar release tests flaky", k=6, channel="searched")
    best_two = {first.hits[0].memory.content, first.hits[1].memory.content}
    reranker = Marked({}, rest=0.5)
    engine2 = make_engine(reranker=reranker, scoring=ScoringConfig(rerank_top=2))
    r = engine2.agent("ada").recall("grammar release tests flaky", k=6)
    (_, texts), *_ = reranker.calls
    assert len(texts) == 2
    # the two it scored are the first stage's two most relevant (relevance, not recency or importance)
    assert set(texts) <= {h.memory.content for h in first.hits}
    scored = [h for h in r.hits if h.components.rerank > 0]
    assert {h.memory.content for h in scored} == set(texts)
    # relevance dominates: with rerank_weight 1 an unscored candidate has relevance 0 and ranks below them
    assert [h.components.rerank > 0 for h in r.hits] == sorted((h.components.rerank > 0 for h in r.hits), reverse=True)
    assert all(h.relevance == 0.0 for h in r.hits if h.components.rerank == 0)
    assert best_two  # (the first stage's order, for the reader)


def test_weight_zero_keeps_the_first_stage_ranking(make_engine: Callable[..., DynamicMemoryEngine]) -> None:
    plain = make_engine("a")
    stored(plain)
    base = plain.agent("ada").recall("grammar spec owner", k=6, channel="searched")
    reranker = Marked({"Lunch": 1.0, "unicode": 0.9})
    engine = make_engine("a", reranker=reranker, scoring=ScoringConfig(rerank_weight=0.0))
    r = engine.agent("ada").recall("grammar spec owner", k=6, channel="searched")
    assert [(h.memory.id, h.score, h.relevance) for h in r.hits] == [
        (h.memory.id, h.score, h.relevance) for h in base.hits
    ]
    assert any(h.components.rerank > 0 for h in r.hits)  # scored, and shown, but given no share


def test_min_relevance_cuts_on_the_reranked_relevance(make_engine: Callable[..., DynamicMemoryEngine]) -> None:
    engine = make_engine(reranker=Marked({"Dana": 0.95, "#lang": 0.6}))
    ids = stored(engine)
    r = engine.agent("ada").recall("who owns the grammar?", k=6, min_relevance=0.5)
    assert [h.memory.id for h in r.hits] == [ids[0], ids[5]]
    assert r.note is not None and "min_relevance" in r.note


def test_memories_above_rerank_cap_are_never_sent(make_engine: Callable[..., DynamicMemoryEngine]) -> None:
    reranker = Marked({}, rest=0.4)
    engine = make_engine(reranker=reranker, rerank_cap=Confidentiality.INTERNAL)
    ada = engine.agent("ada")
    secret = ada.remember(
        "The grammar signing key rotates on the first of the month.", confidentiality=Confidentiality.RESTRICTED
    )
    stored(engine)
    r = ada.recall("grammar signing key", k=7)
    sent = [t for _, texts in reranker.calls for t in texts]
    assert secret.content not in sent and sent
    hit = next(h for h in r.hits if h.memory.id == secret.id)
    assert hit.components.rerank == 0.0 and hit.relevance > 0.4  # kept its own relevance: the best match
    assert r.hits[0].memory.id == secret.id


def test_a_failing_reranker_fails_the_recall_and_logs_nothing(make_engine: Callable[..., DynamicMemoryEngine]) -> None:
    engine = make_engine("x")
    ids = stored(engine)
    ada = engine.agent("ada")
    before = [len(ada.accesses(i)) for i in ids]
    failing = make_engine("x", reranker=Failing()).agent("ada")
    with pytest.raises(RerankerError, match="down"):
        failing.recall("who owns the grammar?")
    for answer, match in (
        (lambda n: [0.5] * (n - 1), "returned"),
        (lambda n: [1.5] * n, "in \\[0, 1\\]"),
        (lambda n: [True] * n, "in \\[0, 1\\]"),
        (lambda n: ["0.5"] * n, "in \\[0, 1\\]"),
    ):
        bad = make_engine("x", reranker=Nonsense(answer)).agent("ada")
        with pytest.raises(RerankerError, match=match):
            bad.recall("who owns the grammar?")
    assert [len(ada.accesses(i)) for i in ids] == before


def test_bad_options_are_config_errors(tmp_path: Any) -> None:
    with pytest.raises(ConfigError, match="reranker must be a Reranker"):
        DynamicMemoryEngine(tmp_path / "a.db", reranker=object())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="rerank_cap must be a Confidentiality"):
        DynamicMemoryEngine(tmp_path / "a.db", rerank_cap="secret")  # type: ignore[arg-type]
    for kw in ({"rerank_top": 0}, {"rerank_weight": 1.5}, {"rerank_weight": -0.1}):
        with pytest.raises(ConfigError, match="rerank_top must be >= 1 and rerank_weight in \\[0, 1\\]"):
            ScoringConfig(**kw)
    assert not (tmp_path / "a.db").exists()
    DynamicMemoryEngine(tmp_path / "b.db", reranker=HttpReranker("http://127.0.0.1:9/v1", "m")).close()
