"""The text rule behind dedup on write and reflection's merge, on the labelled pair suite
(tests/dedup_pairs.py): no pair of different statements is the same statement, in either order;
every surface restatement is."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engramdb.memories.text import same_statement, statement_tokens
from tests.dedup_pairs import DIFFERENT, PARAPHRASE, RESTATEMENT, pairs

PAIRS = pairs()


def test_the_suite_is_large_and_covers_every_kind() -> None:
    labels = [label for label, *_ in PAIRS]
    assert len(PAIRS) >= 200
    assert labels.count(DIFFERENT) >= 150 and labels.count(RESTATEMENT) >= 50 and labels.count(PARAPHRASE) >= 10
    kinds = {kind for label, kind, *_ in PAIRS if label == DIFFERENT}
    assert {"negation", "direction", "before-after", "number", "date-version-time", "roles-order"} <= kinds


@pytest.mark.parametrize(("kind", "a", "b"), [(k, a, b) for label, k, a, b in PAIRS if label == DIFFERENT])
def test_different_statements_are_never_the_same(kind: str, a: str, b: str) -> None:
    assert not same_statement(a, b)
    assert not same_statement(b, a)


@pytest.mark.parametrize(("a", "b"), [(a, b) for label, _, a, b in PAIRS if label == RESTATEMENT])
def test_restatements_are_the_same_statement(a: str, b: str) -> None:
    assert same_statement(a, b)
    assert same_statement(b, a)


def test_a_text_without_tokens_is_never_the_same_statement() -> None:
    assert not same_statement("...", "!!!")
    assert statement_tokens("The") == ()


@given(st.text(max_size=80))
def test_the_rule_is_symmetric_reflexive_for_texts_with_tokens_and_ignores_case(text: str) -> None:
    same = same_statement(text, text)
    assert same == bool(statement_tokens(text))
    other = text.swapcase()
    assert same_statement(text, other) == same_statement(other, text)
