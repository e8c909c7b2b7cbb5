"""The scoring math: pure functions, property-tested."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engramdb.memories import scoring
from engramdb.memories.scoring import ScoringConfig


def test_petrov_tail_matches_the_exact_sum_over_10000_accesses() -> None:
    rng = random.Random(7)
    now = 10_000_000.0
    times = sorted(rng.uniform(0, now - 1) for _ in range(10_000))
    d = 0.5
    exact = scoring.exact_activation_sum(times, now, d)
    ring = 64
    recent, older = times[-ring:], times[:-ring]
    approx = scoring.exact_activation_sum(recent, now, d) + scoring.petrov_tail(
        len(older), max(older), min(older), now, d
    )
    assert abs(approx - exact) / exact < 0.01
    # and through base_level, as the recall uses it
    b = scoring.base_level(recent, now, d, old_count=len(older), old_newest=max(older), old_oldest=min(older))
    assert abs(b - math.log(exact)) < 0.01


def test_petrov_tail_on_a_regular_rhythm() -> None:
    now = 1_000_000.0
    times = [now - 60 * i for i in range(1, 10_001)]  # once a minute for a week
    exact = scoring.exact_activation_sum(times, now, 0.5)
    recent, older = times[:64], times[64:]
    approx = scoring.exact_activation_sum(recent, now, 0.5) + scoring.petrov_tail(
        len(older), max(older), min(older), now, 0.5
    )
    assert abs(approx - exact) / exact < 0.01


def test_never_accessed_has_zero_recency() -> None:
    assert scoring.base_level([], 100.0, 0.5) == -math.inf
    assert scoring.recency(-math.inf) == 0.0


@given(st.lists(st.floats(min_value=0, max_value=1e6), min_size=1, max_size=50), st.floats(min_value=0, max_value=1e6))
def test_recency_is_bounded_and_falls_with_time(times: list[float], later: float) -> None:
    now = max(times) + 1
    r1 = scoring.recency(scoring.base_level(times, now, 0.5))
    r2 = scoring.recency(scoring.base_level(times, now + later, 0.5))
    assert 0.0 < r2 <= r1 < 1.0


@given(st.lists(st.floats(min_value=0, max_value=1e6), min_size=1, max_size=30))
def test_more_accesses_never_lower_activation(times: list[float]) -> None:
    now = max(times) + 10
    assert scoring.base_level([*times, now - 5], now, 0.5) > scoring.base_level(times, now, 0.5)


@given(st.lists(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), max_size=40))
def test_minmax_is_in_unit_interval_and_order_preserving(values: list[float]) -> None:
    out = scoring.minmax(values)
    assert all(0.0 <= v <= 1.0 for v in out)
    pairs = list(zip(values, out, strict=True))
    for a, x in pairs:
        for b, y in pairs:
            if a < b:
                assert x <= y


@given(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1))
def test_relevance_is_a_convex_mix(cos: float, cue: float, lam: float) -> None:
    r = scoring.relevance(cos, cue, lam)
    assert min(cos, cue) - 1e-12 <= r <= max(cos, cue) + 1e-12


GRAPH = {
    # own(1) -> foreign(2) -> own(3): 2 is invisible, so 3 must get nothing through it
    1: [(2, True, 1.0), (4, False, 1.0)],
    2: [(3, True, 1.0)],
    4: [(5, True, 1.0)],
}


def _neighbours(visible: set[int]) -> scoring.Neighbours[int]:
    def fn(nodes: object) -> dict[int, list[tuple[int, bool, float]]]:
        return {n: [e for e in GRAPH.get(n, []) if e[0] in visible] for n in nodes}  # type: ignore[attr-defined]

    return fn


def test_spread_neither_leaks_nor_relays_through_invisible_nodes() -> None:
    cfg = ScoringConfig(hops=3)
    got = scoring.spread({1: 1.0}, _neighbours({1, 3, 4, 5}), cfg)
    assert 2 not in got and 3 not in got
    assert got[4] == pytest.approx(1.0 * 0.6 * 0.6)  # associative edge: other factor × hop decay
    assert got[5] == pytest.approx(got[4] * 1.0 * 0.6)  # causal edge from 4


def test_spread_respects_hops_fanout_and_floor() -> None:
    star = {0: [(i, False, 1.0 / i) for i in range(1, 10)]}
    got = scoring.spread({0: 1.0}, lambda nodes: {n: star.get(n, []) for n in nodes}, ScoringConfig(fanout=5))
    assert sorted(got) == [1, 2, 3, 4, 5]
    got = scoring.spread({0: 0.1}, lambda nodes: {n: star.get(n, []) for n in nodes}, ScoringConfig(floor=0.05))
    assert got == {}  # 0.1 × 1 × 0.6 × 0.6 = 0.036 < floor
    assert scoring.spread({0: 1.0}, lambda nodes: {n: star.get(n, []) for n in nodes}, ScoringConfig(hops=0)) == {}


def test_config_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        ScoringConfig(lam=1.5)
    with pytest.raises(ValueError):
        ScoringConfig(decay=1.0)


@given(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1), st.floats(0, 1), st.floats(0, 1))
def test_relevance_with_bm25_is_still_a_convex_mix(cos: float, cue: float, bm25: float, lam: float, mu: float) -> None:
    r = scoring.relevance(cos, cue, lam, bm25, mu)
    assert min(cos, cue, bm25) - 1e-12 <= r <= max(cos, cue, bm25) + 1e-12
    assert scoring.relevance(cos, cue, lam, bm25, 0.0) == pytest.approx(scoring.relevance(cos, cue, lam))
    assert scoring.relevance(cos, cue, lam, bm25, 1.0) == pytest.approx(bm25)


def test_spread_combines_by_sum_or_by_the_strongest_contribution() -> None:
    # 1 and 2 both point at 3; 3 points at 4.
    graph = {1: [(3, False, 1.0)], 2: [(3, False, 1.0)], 3: [(4, False, 1.0)]}

    def neighbours(nodes: object) -> dict[int, list[tuple[int, bool, float]]]:
        return {n: graph.get(n, []) for n in nodes}  # type: ignore[attr-defined]

    one = 0.6 * 0.6  # other factor × hop decay
    summed = scoring.spread({1: 1.0, 2: 0.5}, neighbours, ScoringConfig(hops=2, spread_combine="sum"))
    assert summed[3] == pytest.approx(1.5 * one) and summed[4] == pytest.approx(1.5 * one * one)
    strongest = scoring.spread({1: 1.0, 2: 0.5}, neighbours, ScoringConfig(hops=2, spread_combine="max"))
    assert strongest[3] == pytest.approx(one) and strongest[4] == pytest.approx(one * one)
    # hops still add up: a node reached in two hops keeps what each hop brought
    echo = {1: [(2, False, 1.0)], 2: [(1, False, 1.0)]}
    got = scoring.spread({1: 1.0}, lambda ns: {n: echo[n] for n in ns}, ScoringConfig(hops=2, spread_combine="max"))
    assert got == {2: pytest.approx(one), 1: pytest.approx(one * one)}


def test_config_rejects_a_bad_mu_or_combine() -> None:
    with pytest.raises(ValueError, match="mu"):
        ScoringConfig(mu=-0.1)
    with pytest.raises(ValueError, match="spread_combine"):
        ScoringConfig(spread_combine="mean")


_times = st.lists(st.floats(min_value=0, max_value=2e9, allow_nan=False), max_size=70)
_old = st.one_of(
    st.just((0, None, None)),
    st.tuples(st.integers(1, 10_000), st.floats(0, 2e9), st.floats(0, 2e9)).map(
        lambda t: (t[0], max(t[1], t[2]), min(t[1], t[2]))
    ),
)


@given(st.lists(st.tuples(_times, _old), max_size=30), st.floats(0.05, 0.95), st.floats(0.0, 2.0))
def test_vectorised_recencies_equal_the_scalar_base_level(
    memories: list[tuple[list[float], tuple[int, float | None, float | None]]], d: float, min_age: float
) -> None:
    now = 2e9 + 10.0
    rings = [scoring_pack(times) for times, _ in memories]
    got = scoring.recencies(rings, [old for _, old in memories], now, d, max(min_age, 1e-3))
    for (times, (count, newest, oldest)), value in zip(memories, got, strict=True):
        b = scoring.base_level(
            times, now, d, old_count=count, old_newest=newest, old_oldest=oldest, min_age=max(min_age, 1e-3)
        )
        assert value == pytest.approx(scoring.recency(b), rel=1e-9, abs=1e-12)
        assert 0.0 <= value < 1.0


_any_old = st.tuples(
    st.integers(0, 100), st.one_of(st.none(), st.floats(0, 2e9)), st.one_of(st.none(), st.floats(0, 2e9))
)


@given(st.lists(st.tuples(_times, _old | _any_old), max_size=30), st.floats(0.05, 0.95), st.floats(0.0, 2.0))
def test_recencies_over_columns_are_the_recencies_bit_for_bit(
    memories: list[tuple[list[float], tuple[int, float | None, float | None]]], d: float, min_age: float
) -> None:
    import numpy as np

    now = 2e9 + 10.0
    rings = [scoring_pack(times) for times, _ in memories]
    olds = [old for _, old in memories]
    count = np.asarray([c for c, _, _ in olds], dtype=np.int64)
    newest = np.asarray([math.nan if x is None else x for _, x, _ in olds], dtype=np.float64)
    oldest = np.asarray([math.nan if x is None else x for _, _, x in olds], dtype=np.float64)
    got = scoring.recency_columns(rings, count, newest, oldest, now, d, max(min_age, 1e-3))
    want = scoring.recencies(rings, olds, now, d, max(min_age, 1e-3))
    assert [x.hex() for x in got.tolist()] == [x.hex() for x in want]


def scoring_pack(times: list[float]) -> bytes | None:
    from engramdb.memories.text import pack_times

    return pack_times(times) if times else None


def test_temporal_context_is_the_best_anchor_faded_by_time_apart() -> None:
    from engramdb.memories.scoring import temporal_context

    got = temporal_context([1, 2, 3], [0.0, 900.0, 10_000.0], [1, 3], [0.0, 10_000.0], [1.0, 0.4], 900.0)
    assert got[0] == pytest.approx(1.0)
    assert got[1] == pytest.approx(math.exp(-1.0))
    assert got[2] == pytest.approx(0.4)  # its own anchor beats the far strong one
    assert temporal_context([1], [1.0], [], [], [], 900.0) == [0.0]
    assert temporal_context([], [], [1], [1.0], [1.0], 900.0) == []
    # made at the same instant as the strong anchor (one batch): no lift from it, only from itself
    assert temporal_context([2], [0.0], [1, 2], [0.0, 0.0], [1.0, 0.3], 900.0) == [pytest.approx(0.3)]


@given(
    st.lists(
        st.tuples(
            st.integers(0, 30), st.sampled_from([0.0, 1.0, 5.0, 60.0, 900.0, 86_400.0, 650_000.0, 671_000.0, 1e7])
        ),
        max_size=40,
    ),
    st.lists(st.sampled_from([0.0, 1e-300, 0.25, 0.5, 1.0, 0.3333333333333333]), min_size=40, max_size=40),
    st.sampled_from([1.0, 900.0, 3600.0]),
    st.integers(0, 40),
)
def test_temporal_context_over_near_pairs_is_the_dense_form_bit_for_bit(
    made: list[tuple[int, float]], rels: list[float], tau: float, n_anchors: int
) -> None:
    import numpy as np

    # times on a coarse grid (ties: same-batch pairs) spread over months (pairs past the underflow,
    # and some just inside it: 650,000 s is 722 τ at τ = 900 s)
    keys = np.asarray([k for k, _ in made], dtype=np.int64)
    times = np.cumsum([dt for _, dt in made]).astype(np.float64) + 1.7e9
    anchors = slice(0, min(n_anchors, len(made)))
    # numpy arrays, as recall passes them (temporal_context's parameters say Sequence)
    args: tuple[Any, ...] = (keys, times, keys[anchors], times[anchors], np.asarray(rels[: len(keys[anchors])]), tau)
    if not len(times) or not len(times[anchors]):
        return
    near = scoring._near_context(*args)
    dense = scoring._dense_context(*args)
    assert [x.hex() for x in near] == [x.hex() for x in dense]
    assert [x.hex() for x in scoring.temporal_context(*args)] == [x.hex() for x in dense]


@pytest.mark.parametrize("bad", [{"w_entity": -0.1}, {"w_ctx": -1.0}, {"ctx_tau": 0.0}, {"ctx_tau": -5.0}])
def test_scoring_config_refuses_bad_lifts(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"w_entity|ctx_tau"):
        ScoringConfig(**bad)


def test_top_weight_counts_the_lifts_a_query_allows() -> None:
    from engramdb.memories.scoring import top_weight

    cfg = ScoringConfig(w_rel=1.0, w_rec=0.1, w_imp=0.5, w_when=0.75, w_entity=0.5, w_ctx=1.0)
    assert top_weight(cfg, windows=False, entity=False) == pytest.approx(2.6)
    assert top_weight(cfg, windows=True, entity=True) == pytest.approx(3.85)


def test_entity_tokens() -> None:
    from engramdb.retrieval.keywords import entity_terms, entity_token, query_entity_tokens

    assert entity_token("New  York") == entity_token("new york") == "=new+york"
    assert entity_token("ACME Corp.") == "=acme+corp"
    assert entity_token("!!") is None
    assert entity_terms(["Dave", "dave", "New York"]) == "=dave =new+york"
    toks = query_entity_tokens("Did Caroline's trip to New York go well?")
    assert {"=caroline", "=new+york", "=did+caroline+s+trip+to+new"} <= set(toks)
    assert "=did+caroline+s+trip+to+new+york" not in toks  # longer than MAX_ENTITY_WORDS
