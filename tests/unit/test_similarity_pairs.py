"""Reflection's pair search: the exact blockwise join, and the clustered join used above
`exact_pairs_up_to` rows, which may miss a pair but never invents one."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from engramdb.errors import ConfigError
from engramdb.memories.reflection_support import ReflectionConfig
from engramdb.memories.similarity import _clustered_pairs, _exact_pairs, _pairs

NEVER = lambda: False  # noqa: E731


def families(n_families: int, size: int, dim: int = 48, spread: float = 0.15, seed: int = 1) -> Any:
    """Unit rows in tight families around random centres (near pairs within a family, none across),
    shuffled so that families do not sit in consecutive rows."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_families, dim))
    rows = np.repeat(centres, size, axis=0) + spread * rng.normal(size=(n_families * size, dim))
    rows = rows[rng.permutation(len(rows))].astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def as_set(found: Any) -> set[tuple[int, int]]:
    a, b, _ = found
    return set(zip(a.tolist(), b.tolist(), strict=True))


def brute(mat: Any, lo: float, hi: float | None) -> set[tuple[int, int]]:
    sims = mat @ mat.T
    i, j = np.nonzero(np.triu(sims >= lo, 1) & (sims < (hi if hi is not None else np.inf)))
    return set(zip(i.tolist(), j.tolist(), strict=True))


def test_exact_pairs_match_brute_force_in_any_block_size() -> None:
    mat = families(12, 10)
    want = brute(mat, 0.8, 0.99)
    for block in (4, 4 * 7 * len(mat), 64 << 20):  # one row, seven rows, all at once
        assert as_set(_exact_pairs(mat, 0.8, 0.99, 1000, block, NEVER)) == want


def test_clustered_pairs_are_true_pairs_ordered_and_capped() -> None:
    mat = families(40, 25)
    cfg = ReflectionConfig(cluster_size=50, cluster_probes=2)
    found = _clustered_pairs(mat, 0.8, 0.99, 5, cfg, NEVER)
    assert found is not None
    a, b, sims = found
    assert len(a) and (a < b).all()
    np.testing.assert_allclose(sims, np.einsum("ij,ij->i", mat[a], mat[b]), rtol=1e-5)
    assert ((sims >= 0.8) & (sims < 0.99)).all()
    assert len(set(zip(a.tolist(), b.tolist(), strict=True))) == len(a)  # met in two clusters, counted once
    assert (np.bincount(a) <= 5).all()  # at most k per earlier row
    for row in np.unique(a)[:20]:  # by row, most similar first
        assert (np.diff(sims[a == row]) <= 0).all()


def test_clustered_pairs_find_the_near_pairs_of_separated_families() -> None:
    mat = families(40, 25)
    want = brute(mat, 0.8, None)
    got = as_set(_clustered_pairs(mat, 0.8, None, 1000, ReflectionConfig(cluster_size=50), NEVER))
    assert got <= want and len(got) >= 0.95 * len(want)


def test_pairs_switches_to_clusters_above_the_limit_and_is_deterministic() -> None:
    mat = families(40, 25)
    rows = list(range(0, len(mat), 2))  # a subset of the matrix, as an owner's group is
    small = ReflectionConfig(exact_pairs_up_to=100, cluster_size=40)
    exact = _pairs(mat, rows, 0.8, None, ReflectionConfig(), NEVER, k=1000)
    first = _pairs(mat, rows, 0.8, None, small, NEVER, k=1000)
    again = _pairs(mat, rows, 0.8, None, small, NEVER, k=1000)
    assert exact is not None and first is not None and again is not None
    assert set(exact) == brute(mat, 0.8, None) & {(i, j) for i in rows for j in rows}  # group row ids, mapped back
    assert set(first) <= set(exact) and len(set(first)) >= 0.9 * len(set(exact))
    assert list(first.with_sims()) == list(again.with_sims())


def test_a_stop_between_clusters_returns_none() -> None:
    calls = iter(range(10_000))
    assert (
        _clustered_pairs(families(20, 10), 0.8, None, 5, ReflectionConfig(cluster_size=20), lambda: next(calls) >= 2)
        is None
    )


@pytest.mark.parametrize("field", ["exact_pairs_up_to", "cluster_size", "cluster_probes"])
def test_cluster_settings_are_checked(field: str) -> None:
    bad: dict[str, Any] = {field: 0}
    with pytest.raises(ConfigError, match=field):
        ReflectionConfig(**bad)
