"""Dedup on write and reflection's merge on the labelled pair suite (tests/dedup_pairs.py), through
the public API, on every backend: 0 pairs of different statements folded or merged, surface
restatements folded.

Two embedders: the default one (what users get), and one that gives every text the same vector,
so that every pair passes the cosine test and the text rule alone decides (the worst case for a
model that puts a fact and its correction side by side).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt
import pytest

from engramdb import DynamicMemoryEngine
from engramdb.memories.model import EdgeType
from engramdb.memories.reflection import ReflectionConfig, Reflector
from tests.dedup_pairs import DIFFERENT, PARAPHRASE, RESTATEMENT, pairs

PAIRS = pairs()


class SameVector:
    """Every text gets one vector: cosine 1.0 between any two texts."""

    name = "test-same-vector@1"
    dim = 8

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        out[:, 0] = 1.0
        return out


def _folded_on_write(eng: DynamicMemoryEngine, batched: bool) -> dict[int, bool]:
    """{pair index: the second text was folded into the first}, one agent per pair."""
    folded: dict[int, bool] = {}
    for i, (_, _, a, b) in enumerate(PAIRS):
        me = eng.agent(f"p{i}")
        if batched:
            first, second = me.remember_many([{"content": a}, {"content": b}])
        else:
            first, second = me.remember(a), me.remember(b)
        folded[i] = second.id == first.id
        if folded[i]:
            assert second.strength == 1  # reinforced, not stored
    return folded


@pytest.mark.parametrize("batched", [False, True], ids=["one-by-one", "batched"])
def test_write_dedup_folds_no_different_statement_when_every_cosine_is_one(
    make_engine: Callable[..., DynamicMemoryEngine], batched: bool
) -> None:
    eng = make_engine(memory_embedder=SameVector())
    folded = _folded_on_write(eng, batched)
    wrong = [PAIRS[i][2:] for i, f in folded.items() if f and PAIRS[i][0] == DIFFERENT]
    assert wrong == []
    missed = [PAIRS[i][2:] for i, f in folded.items() if not f and PAIRS[i][0] == RESTATEMENT]
    assert missed == []


def test_write_dedup_with_the_default_embedder_folds_no_different_statement(
    make_engine: Callable[..., DynamicMemoryEngine],
) -> None:
    eng = make_engine()
    folded = _folded_on_write(eng, batched=False)
    assert [PAIRS[i][2:] for i, f in folded.items() if f and PAIRS[i][0] == DIFFERENT] == []
    restated = [f for i, f in folded.items() if PAIRS[i][0] == RESTATEMENT]
    # The default model puts most surface restatements at cosine >= 0.92; the text rule takes them all.
    assert sum(restated) >= 0.9 * len(restated)
    assert not any(f for i, f in folded.items() if PAIRS[i][0] == PARAPHRASE)


def test_without_an_embedder_dedup_folds_no_different_statement(
    make_engine: Callable[..., DynamicMemoryEngine],
) -> None:
    """Without vectors the candidates are texts equal but for case, white space and punctuation:
    "Bob is the owner?" meets "Bob is the owner" there, and the text rule keeps them apart."""
    eng = make_engine(memory_embedder=None)
    folded = _folded_on_write(eng, batched=False)
    assert [PAIRS[i][2:] for i, f in folded.items() if f and PAIRS[i][0] == DIFFERENT] == []
    i = next(i for i, p in enumerate(PAIRS) if p[2:] == ("Bob is the owner", "Bob is the owner?"))
    assert not folded[i]


def test_reflection_merges_no_different_statement_and_links_them_instead(
    make_engine: Callable[..., DynamicMemoryEngine],
) -> None:
    eng = make_engine(memory_embedder=SameVector())
    merged: dict[int, int] = {}
    for i, (label, _, a, b) in enumerate(PAIRS):
        me = eng.agent(f"p{i}")
        first, second = me.remember_many([{"content": a}, {"content": b}], dedup=False)
        # Not centred: centring vectors that are all the same would leave nothing to compare.
        report = Reflector(me, ReflectionConfig(center=False)).reflect(steps=("merge", "link"))
        merged[i] = report.merged
        if label == DIFFERENT:
            kept = {m.id for m in me.memories()}
            assert kept == {first.id, second.id}, (a, b)
            assert [e.type for e in me.edges(first.id)] == [EdgeType.RELATED], (a, b)  # linked, not merged
    assert [PAIRS[i][2:] for i, n in merged.items() if n and PAIRS[i][0] == DIFFERENT] == []
    assert [PAIRS[i][2:] for i, n in merged.items() if not n and PAIRS[i][0] == RESTATEMENT] == []
