"""Recall scores its candidates as columns (retrieval/recall.py `_Pool`): the array forms must give
the very floats the per-candidate scoring functions in memories/scoring.py give, so that a change
to one of those functions that the arrays do not follow fails here rather than changing answers."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from engramdb.memories import scoring
from engramdb.memories.scoring import ScoringConfig
from engramdb.retrieval import recall
from engramdb.retrieval.lexical_channel import _Rings

unit = st.floats(min_value=-0.5, max_value=1.5, allow_nan=False)
# Values that meet at the edges: zeros, the clip bounds, equal pairs.
edges = st.sampled_from([0.0, -0.0, 1.0, 0.5, 0.25, 1e-12, -1e-12, 0.99, 1.0000001])


@given(
    st.lists(st.tuples(st.one_of(unit, edges), st.one_of(unit, edges)), min_size=1, max_size=40),
    st.one_of(st.floats(min_value=-0.2, max_value=1.2, allow_nan=False), edges),
)
def test_absolute_relevance_over_arrays_is_the_scalar_one_bit_for_bit(
    pairs: list[tuple[float, float]], floor: float
) -> None:
    coverage = np.asarray([c for c, _ in pairs], dtype=np.float64)
    cos = np.asarray([c for _, c in pairs], dtype=np.float64)
    got = recall._absolute_relevance(coverage, cos, floor).tolist()
    want = [scoring.absolute_relevance(c, s, floor) for c, s in pairs]
    assert [v.hex() for v in got] == [v.hex() for v in want]


@given(
    st.lists(st.tuples(unit, unit, unit, unit, unit, unit), min_size=1, max_size=40),
    st.floats(min_value=0, max_value=1),
    st.floats(min_value=0, max_value=1),
)
def test_relevance_and_base_score_over_arrays_are_the_scalar_ones_bit_for_bit(
    rows: list[tuple[float, ...]], lam: float, mu: float
) -> None:
    cfg = ScoringConfig(lam=lam, mu=mu)
    cols = [np.asarray(c, dtype=np.float64) for c in zip(*rows, strict=True)]
    rel = scoring.relevance(cols[0], cols[1], cfg.lam, cols[2], cfg.mu)  # type: ignore[arg-type]
    assert [float(v).hex() for v in np.asarray(rel)] == [
        scoring.relevance(a, b, cfg.lam, c, cfg.mu).hex() for a, b, c, *_ in rows
    ]
    base = scoring.base_score(cols[0], cols[1], cols[2], cfg, cols[3], cols[4], cols[5])  # type: ignore[arg-type]
    assert [float(v).hex() for v in np.asarray(base)] == [
        scoring.base_score(a, b, c, cfg, d, e, f).hex() for a, b, c, d, e, f in rows
    ]


@given(st.lists(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), min_size=1, max_size=40))
def test_min_max_scaling_over_arrays_matches_the_rule(values: list[float]) -> None:
    a = np.asarray(values, dtype=np.float64)
    lo, hi = recall._span(a)
    assert (lo, hi) == (min(values), max(values))
    got = recall._scaled(a, lo, hi).tolist()
    if hi - lo < 1e-12:
        assert got == [1.0 if v > 0 else 0.0 for v in values]
    else:
        assert got == [min(max((v - lo) / (hi - lo), 0.0), 1.0) for v in values]


@given(
    st.lists(st.one_of(st.none(), st.binary(max_size=24)), max_size=30),
    st.dictionaries(st.integers(min_value=0, max_value=40), st.one_of(st.none(), st.binary(max_size=16)), max_size=8),
    st.lists(st.integers(min_value=0, max_value=45), max_size=40),
)
def test_rings_read_in_bulk_are_the_rings_read_one_by_one(
    stored: list[bytes | None], changed: dict[int, bytes | None], keys: list[int]
) -> None:
    # As a side file leaves them (one blob with offsets), then changed since (the overrides).
    lengths = [len(r or b"") for r in stored]
    rings = _Rings.from_arrays(
        {
            "ring_off": np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64),
            "ring_blob": np.frombuffer(b"".join(r or b"" for r in stored), dtype=np.uint8),
            "ring_has": np.asarray([r is not None for r in stored], dtype=np.bool_),
        }
    )
    for k, v in changed.items():
        rings[k] = v
    ks = np.asarray(keys, dtype=np.int64)
    assert rings.many(ks) == [rings[k] for k in keys]
