"""The token budget is never exceeded, for any items, budget and counter."""

from __future__ import annotations

import math
from collections.abc import Callable

from hypothesis import given
from hypothesis import strategies as st

from engramdb import EvidenceItem, approx_tokens, render_evidence
from engramdb.retrieval.budget import pack, truncate_to

COUNTERS: list[Callable[[str], int]] = [
    approx_tokens,
    lambda s: len(s.split()),
    lambda s: math.ceil(len(s.encode()) / 3) + s.count("\n"),  # not additive across joins
]

texts = st.text(min_size=0, max_size=300)


@given(st.lists(texts, max_size=20), st.integers(min_value=-5, max_value=400), st.sampled_from(range(len(COUNTERS))))
def test_pack_never_exceeds_budget(items: list[str], budget: int, which: int) -> None:
    count = COUNTERS[which]
    text, used = pack(items, budget, count, header="HEAD", footer="FOOT")
    assert count(text) <= max(budget, 0)
    assert (text == "") == (used == 0)


@given(
    st.lists(st.tuples(texts, texts), max_size=15),
    st.integers(min_value=1, max_value=300),
    st.sampled_from(range(len(COUNTERS))),
)
def test_evidence_never_exceeds_budget(rows: list[tuple[str, str]], budget: int, which: int) -> None:
    count = COUNTERS[which]
    items = [EvidenceItem(label, body) for label, body in rows]
    assert count(render_evidence(items, budget, count)) <= budget


@given(texts, st.integers(min_value=0, max_value=100))
def test_truncate_is_a_prefix_within_budget(text: str, budget: int) -> None:
    cut = truncate_to(text, budget, approx_tokens)
    assert approx_tokens(cut) <= budget
    assert text.startswith(cut.removesuffix("…").rstrip()) or cut == text


@given(
    st.lists(st.text(alphabet="abc \n", max_size=40), min_size=1, max_size=10), st.integers(min_value=1, max_value=200)
)
def test_pack_keeps_order(items: list[str], budget: int) -> None:
    tagged = [f"<{i}>{t}" for i, t in enumerate(items)]
    text, used = pack(tagged, budget, sep="|")
    order = [i for i in range(len(tagged)) if f"<{i}>" in text]
    assert len(order) == used or (used == 1 and not order)  # a truncated first item may lose its tag
    assert order == sorted(order)
