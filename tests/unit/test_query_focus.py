"""Query analysis for recall's name focus, and the rank scale of reciprocal-rank fusion (pure)."""

from __future__ import annotations

import pytest

from engramdb.errors import ConfigError
from engramdb.memories.scoring import ScoringConfig, rank_scores
from engramdb.retrieval.keywords import query_names


@pytest.mark.parametrize(
    ("query", "names"),
    [
        ("What did Caroline's sister say in Paris?", ["carolin", "pari"]),
        ("When did Melanie paint a sunrise?", ["melani"]),
        # each sentence's first word is capitalised anyway; months, weekdays and "I" are not names
        ("Caroline went where?", []),
        ("What did I do in May 2023 and on Monday?", []),
        ("How did I feel about New York? Was Jon there?", ["new", "york", "jon"]),
        ("Describe Gina's store.", ["gina"]),
        ("what is LGBTQ for Jolene", ["lgbtq", "jolen"]),
        ("no capitals here at all", []),
    ],
)
def test_query_names(query: str, names: list[str]) -> None:
    assert query_names(query) == names


def test_rank_scores_are_reciprocal_ranks_on_a_fixed_scale() -> None:
    got = rank_scores([0.2, 0.9, 0.5, 0.0], 10.0)
    assert got == pytest.approx([11 / 13, 1.0, 11 / 12, 0.0])  # 0: the channel has nothing for it
    # ties share the better rank; the values' spread does not matter, only their order
    assert rank_scores([3.0, 3.0, 1.0], 10.0) == pytest.approx([1.0, 1.0, 11 / 13])
    assert rank_scores([0.91, 0.9, 0.89], 60.0) == rank_scores([100.0, 50.0, 1.0], 60.0)
    assert rank_scores([], 60.0) == []


def test_fusion_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="fusion"):
        ScoringConfig(fusion="rrf")
    with pytest.raises(ConfigError, match="rank_k"):
        ScoringConfig(rank_k=0.0)
    with pytest.raises(ConfigError, match="name_focus"):
        ScoringConfig(name_focus=1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("content", "speaker"),
    [
        ("Caroline: I went to the support group", "Caroline"),
        ("Mary Ann Lee: hey", "Mary Ann Lee"),
        ("Dr. Smith: take two", "Dr. Smith"),
        ("User: hello", "User"),
        ("TODO: rotate the keys", None),  # all capitals: a label
        ("Note: buy milk", None),
        ("Summary: it went well", None),
        ("caroline: lower case", None),
        ("Caroline:no space", None),
        ("The plan: ship it", None),  # "The" is capitalised, "plan" is not: not a name
        ("no prefix here", None),
    ],
)
def test_speaker_of(content: str, speaker: str | None) -> None:
    from engramdb.memories.text import speaker_of

    assert speaker_of(content) == speaker


def test_asks_when_reads_questions_about_a_time() -> None:
    from engramdb.retrieval.keywords import TIME_WORDS, asks_when, stem

    for q in ("When did Calvin have a car incident?", "How long has John been surfing?", "In what year did it open?"):
        assert asks_when(q), q
    for q in ("Which city was John in?", "What is Dave's main passion?", "Did they take long walks?"):
        assert not asks_when(q), q
    assert {stem("yesterday"), stem("weekend"), stem("friday")} <= set(TIME_WORDS)
    assert stem("may") not in TIME_WORDS  # mostly the modal verb
