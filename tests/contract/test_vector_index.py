"""One contract for every `VectorIndex` implementation.

Parametrised over `ExactIndex` (always) and `AnnIndex` (when faiss, the ``ann`` extra, imports;
skipped otherwise). `AnnIndex` runs twice: with a small ``train_at`` so its IVF path is what
answers, and additionally with ``exact_rows=0`` so even narrow filters go through the IVF.
The data are clustered unit vectors from a seeded RNG (i.i.d. random vectors have no neighbour
structure, which makes approximate recall meaningless).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from engramdb.errors import MissingExtra
from engramdb.vectors.base import VectorIndex
from engramdb.vectors.exact import ExactIndex

HAVE_FAISS = importlib.util.find_spec("faiss") is not None
NO_FAISS = 'faiss is not installed (the "ann" extra)'

DIM = 48
N = 3000
CLUSTERS = 40
K = 10

Factory = Callable[[int], Any]


def _ann(**kwargs: Any) -> Factory:
    def make(dim: int) -> Any:
        from engramdb.vectors.ann import AnnIndex

        return AnnIndex(dim, **kwargs)

    return make


IMPLEMENTATIONS = [
    pytest.param(lambda dim: ExactIndex(dim), id="exact"),
    pytest.param(_ann(train_at=256, nlist=32), id="ann", marks=pytest.mark.skipif(not HAVE_FAISS, reason=NO_FAISS)),
    pytest.param(
        _ann(train_at=256, nlist=32, compact=False),
        id="ann-float32",
        marks=pytest.mark.skipif(not HAVE_FAISS, reason=NO_FAISS),
    ),
    pytest.param(
        _ann(train_at=256, nlist=32, exact_rows=0),
        id="ann-ivf-filters",
        marks=pytest.mark.skipif(not HAVE_FAISS, reason=NO_FAISS),
    ),
]


@pytest.fixture(params=IMPLEMENTATIONS)
def make(request: pytest.FixtureRequest) -> Factory:
    factory: Factory = request.param
    return factory


def clustered(n: int, dim: int = DIM, clusters: int = CLUSTERS, seed: int = 0) -> npt.NDArray[np.float32]:
    """`n` unit vectors around `clusters` random centres (plus a shared offset, like real embeddings)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(clusters, dim)) + 0.5 * rng.normal(size=dim)
    labels = rng.integers(0, clusters, size=n)
    vecs = centres[labels] + 0.35 * rng.normal(size=(n, dim))
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return vecs.astype(np.float32)


def shuffled_keys(n: int, seed: int = 1) -> npt.NDArray[np.int64]:
    """Sparse keys in a shuffled order, so `keys()` order is neither sorted nor 0..n-1."""
    rng = np.random.default_rng(seed)
    return (rng.permutation(n).astype(np.int64) * 13 + 5).astype(np.int64)


@pytest.fixture(scope="module")
def data() -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """(keys, vectors, queries): queries are perturbed copies of stored vectors plus fresh points."""
    vecs = clustered(N)
    rng = np.random.default_rng(2)
    near = vecs[rng.choice(N, 30, replace=False)] + 0.1 * rng.normal(size=(30, DIM)).astype(np.float32)
    fresh = clustered(30, seed=3)
    queries = np.concatenate([near, fresh]).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    return shuffled_keys(N), vecs, queries


def filled(make: Factory, keys: npt.NDArray[np.int64], vecs: npt.NDArray[np.float32]) -> Any:
    index = make(DIM)
    for start in range(0, len(keys), 700):  # several batches: crosses train_at and a rebuild
        index.upsert(keys[start : start + 700], vecs[start : start + 700])
    return index


def brute(
    keys: npt.NDArray[np.int64],
    vecs: npt.NDArray[np.float32],
    query: npt.NDArray[np.float32],
    k: int,
    mask: npt.NDArray[np.bool_] | None = None,
) -> set[int]:
    sims = vecs @ query
    if mask is not None:
        sims = np.where(mask, sims, -np.inf)
        k = min(k, int(mask.sum()))
    return set(keys[np.argsort(-sims, kind="stable")[:k]].tolist())


def tol(index: Any) -> float:
    """How far a cosine or a vector component may be from the exact one: exact for float32, within
    int8 quantisation (half a step of max|x| / 127) for a compact `AnnIndex`."""
    return 3e-3 if getattr(index, "compact", False) else 1e-5


def check_result(
    index: Any,
    query: npt.NDArray[np.float32],
    got: tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]],
    expected_len: int,
) -> None:
    """Shape, dtypes, uniqueness, order and exact cosines of one search result."""
    keys, sims = got
    assert keys.dtype == np.int64 and sims.dtype == np.float32
    assert len(keys) == len(sims) == expected_len
    assert len(set(keys.tolist())) == len(keys)
    assert np.all(np.diff(sims) <= 1e-6), "results must be best first"
    np.testing.assert_allclose(sims, index.vectors_of(keys) @ query, atol=1e-5)  # as stored


def test_implements_the_protocol(make: Factory) -> None:
    index: VectorIndex = make(DIM)
    assert index.dim == DIM


def test_empty_index(make: Factory) -> None:
    index = make(DIM)
    query = clustered(1)[0]
    assert len(index) == 0
    assert index.keys().shape == (0,)
    for allowed in (None, np.zeros(0, dtype=np.bool_)):
        keys, sims = index.search(query, K, allowed)
        assert keys.dtype == np.int64 and sims.dtype == np.float32
        assert len(keys) == len(sims) == 0
    assert not index.vectors_of(np.array([1, 2], dtype=np.int64)).any()
    index.upsert(np.zeros(0, dtype=np.int64), np.zeros((0, DIM), dtype=np.float32))
    assert len(index) == 0


def test_upsert_keys_order_and_vectors(make: Factory) -> None:
    vecs = clustered(50)
    keys = shuffled_keys(50)
    index = make(DIM)
    index.upsert(keys[:20], vecs[:20])
    index.upsert(keys[20:], vecs[20:])
    assert len(index) == 50
    assert index.keys().tolist() == keys.tolist()
    np.testing.assert_array_equal(index.vectors_of(keys[::-1]), vecs[::-1])
    unknown = index.vectors_of(np.array([keys[3], 10**12], dtype=np.int64))
    np.testing.assert_array_equal(unknown[0], vecs[3])
    assert not unknown[1].any()
    # One batch mixing replaced and new keys: replaced keys keep their rows, new ones append in order.
    mixed = np.array([keys[7], 10**9, keys[0], 10**9 + 1], dtype=np.int64)
    fresh = clustered(4, seed=11)
    index.upsert(mixed, fresh)
    assert index.keys().tolist() == [*keys.tolist(), 10**9, 10**9 + 1]
    np.testing.assert_array_equal(index.vectors_of(mixed), fresh)
    np.testing.assert_array_equal(index.vectors_of(keys[1:7]), vecs[1:7])


def test_upsert_rejects_mismatched_lengths(make: Factory) -> None:
    index = make(DIM)
    with pytest.raises(ValueError):
        index.upsert(np.arange(3, dtype=np.int64), clustered(2))


def test_replace_keeps_row_and_changes_vector(make: Factory, data: Any) -> None:
    keys, vecs, _ = data
    index = filled(make, keys, vecs)
    order = index.keys().copy()
    victims = keys[[0, 1500, N - 1]]
    new = clustered(3, seed=9)
    index.upsert(victims, new)
    assert len(index) == N
    np.testing.assert_array_equal(index.keys(), order)
    np.testing.assert_allclose(index.vectors_of(victims), new, atol=tol(index))
    for key, vec in zip(victims.tolist(), new, strict=True):
        got = index.search(vec, K)
        check_result(index, vec, got, K)
        assert got[0][0] == key and got[1][0] == pytest.approx(1.0, abs=tol(index))
    # The old vector is gone: searching for it never reports the replaced key with cosine ~1.
    for key, old in zip(victims.tolist(), vecs[[0, 1500, N - 1]], strict=True):
        got_keys, got_sims = index.search(old, K)
        assert not any(k == key and s > 0.999 for k, s in zip(got_keys.tolist(), got_sims.tolist(), strict=True))


def test_duplicate_keys_in_one_call_keep_the_last_vector(make: Factory) -> None:
    vecs = clustered(3)
    index = make(DIM)
    index.upsert(np.array([7, 8, 7], dtype=np.int64), vecs)
    assert index.keys().tolist() == [7, 8]
    np.testing.assert_array_equal(index.vectors_of(np.array([7], dtype=np.int64))[0], vecs[2])


def test_search_cosines_order_and_recall(make: Factory, data: Any) -> None:
    keys, vecs, queries = data
    index = filled(make, keys, vecs)
    row_of_key = {key: row for row, key in enumerate(keys.tolist())}
    hits = 0
    for query in queries:
        got = index.search(query, K)
        check_result(index, query, got, K)
        np.testing.assert_allclose(got[1], vecs[[row_of_key[key] for key in got[0].tolist()]] @ query, atol=tol(index))
        hits += len(brute(keys, vecs, query, K) & set(got[0].tolist()))
    assert hits / (K * len(queries)) >= 0.9
    # A stored vector finds itself first.
    for row in (0, 777, N - 1):
        got_keys, got_sims = index.search(vecs[row], 1)
        assert got_keys.tolist() == [keys[row]] and got_sims[0] == pytest.approx(1.0, abs=tol(index))


def test_nearest_answers_a_batch_best_first_with_exact_cosines(make: Factory, data: Any) -> None:
    """`nearest` (unfiltered top-k rows for a batch of queries; dedup filters them itself) agrees
    with one `search` per query, pads past the index's size, and finds a stored vector first."""
    keys, vecs, queries = data
    index = filled(make, keys, vecs)
    rows, sims = index.nearest(queries, K)
    assert rows.shape == sims.shape == (len(queries), K) and rows.dtype == np.int64 and sims.dtype == np.float32
    matrix, index_keys = index.vectors_matrix(), index.keys()
    hits = 0
    for q, r, s in zip(queries, rows, sims, strict=True):
        assert np.all(np.diff(s) <= 1e-6) and len(set(r.tolist())) == K
        np.testing.assert_allclose(s, matrix[r] @ q, atol=1e-5)  # exact cosines of the rows named
        hits += len(brute(keys, vecs, q, K) & set(index_keys[r].tolist()))
    assert hits / (K * len(queries)) >= 0.8
    rows, sims = index.nearest(vecs[[0, 777, N - 1]], 1)
    assert index_keys[rows[:, 0]].tolist() == [keys[0], keys[777], keys[N - 1]]
    small = make(DIM)
    small.upsert(keys[:3], vecs[:3])
    rows, sims = small.nearest(vecs[:2], 5)
    assert (rows[:, 3:] == -1).all() and np.isneginf(sims[:, 3:]).all() and (rows[:, :3] >= 0).all()


def test_k_larger_than_size_and_k_zero(make: Factory) -> None:
    vecs = clustered(12)
    keys = shuffled_keys(12)
    index = make(DIM)
    index.upsert(keys, vecs)
    got = index.search(vecs[0], 100)
    check_result(index, vecs[0], got, 12)
    assert set(got[0].tolist()) == set(keys.tolist())
    assert len(index.search(vecs[0], 0)[0]) == 0


@pytest.mark.parametrize("density", [1.0, 0.5, 0.1, 0.03, 0.01])
def test_allowed_mask_filters_before_top_k(make: Factory, data: Any, density: float) -> None:
    keys, vecs, queries = data
    index = filled(make, keys, vecs)
    rng = np.random.default_rng(int(density * 1000))
    mask = rng.random(N) < density
    allowed_keys = set(index.keys()[mask].tolist())
    expected = min(K, len(allowed_keys))
    stored = index.vectors_of(index.keys())
    hits = 0
    for query in queries:
        got = index.search(query, K, mask)
        check_result(index, query, got, expected)
        assert set(got[0].tolist()) <= allowed_keys, "a disallowed key came through the filter"
        hits += len(brute(index.keys(), stored, query, K, mask) & set(got[0].tolist()))
    assert hits / (expected * len(queries)) >= 0.9


def test_allowed_mask_is_aligned_with_keys_order(make: Factory, data: Any) -> None:
    keys, vecs, queries = data
    index = filled(make, keys, vecs)
    mask = index.keys() % 2 == 0  # keys are shuffled, so this mask is not a prefix or a stride of rows
    for query in queries[:10]:
        got_keys, _ = index.search(query, K, mask)
        assert len(got_keys) == K and all(key % 2 == 0 for key in got_keys.tolist())


def test_tiny_masks_return_every_allowed_key(make: Factory, data: Any) -> None:
    keys, vecs, queries = data
    index = filled(make, keys, vecs)
    for allowed_rows in ([5], [5, 2999], list(range(0, N, N // 7))):
        mask = np.zeros(N, dtype=np.bool_)
        mask[allowed_rows] = True
        got = index.search(queries[0], K, mask)
        check_result(index, queries[0], got, min(K, len(allowed_rows)))
        assert set(got[0].tolist()) == set(index.keys()[allowed_rows].tolist())
    nothing = np.zeros(N, dtype=np.bool_)
    assert len(index.search(queries[0], K, nothing)[0]) == 0


def test_all_true_mask_equals_no_mask_and_longer_masks_are_sliced(make: Factory, data: Any) -> None:
    keys, vecs, queries = data
    index = filled(make, keys, vecs)
    everything = np.ones(N + 50, dtype=np.bool_)
    for query in queries[:10]:
        plain = index.search(query, K)
        masked = index.search(query, K, everything)
        np.testing.assert_array_equal(plain[0], masked[0])


def test_short_mask_is_an_error(make: Factory, data: Any) -> None:
    keys, vecs, queries = data
    index = filled(make, keys, vecs)
    with pytest.raises(ValueError):
        index.search(queries[0], K, np.ones(N - 1, dtype=np.bool_))


def test_deterministic_for_the_same_data(make: Factory, data: Any) -> None:
    keys, vecs, queries = data
    first, second = filled(make, keys, vecs), filled(make, keys, vecs)
    mask = np.random.default_rng(5).random(N) < 0.2
    for query in queries[:15]:
        for allowed in (None, mask):
            a, b = first.search(query, K, allowed), second.search(query, K, allowed)
            np.testing.assert_array_equal(a[0], b[0])
            np.testing.assert_array_equal(a[1], b[1])
            np.testing.assert_array_equal(first.search(query, K, allowed)[0], a[0])


# ---------------------------------------------------------------------------------------------
# AnnIndex only: persistence, the IVF path and the missing extra
# ---------------------------------------------------------------------------------------------


@pytest.mark.skipif(not HAVE_FAISS, reason=NO_FAISS)
def test_ann_save_load_round_trip(tmp_path: Path, data: Any) -> None:
    from engramdb.vectors.ann import AnnIndex

    keys, vecs, queries = data
    for train_at in (256, 10**6):  # with and without an IVF
        index = filled(_ann(train_at=train_at, nlist=32), keys, vecs)
        assert index.trained == (train_at == 256)
        path = tmp_path / f"index-{train_at}.npz"
        index.save(path)
        loaded = AnnIndex.load(path)
        assert loaded.trained == index.trained and loaded.nlist == index.nlist
        np.testing.assert_array_equal(loaded.keys(), index.keys())
        mask = index.keys() % 3 == 0
        for query in queries[:10]:
            for allowed in (None, mask):
                np.testing.assert_array_equal(loaded.search(query, K, allowed)[0], index.search(query, K, allowed)[0])
        loaded.upsert(np.array([10**9], dtype=np.int64), vecs[:1])  # still writable after loading
        assert len(loaded) == N + 1


@pytest.mark.skipif(not HAVE_FAISS, reason=NO_FAISS)
def test_ann_generation_counts_builds_and_arrays_round_trip(data: Any) -> None:
    from engramdb.vectors.ann import AnnIndex

    keys, vecs, queries = data
    index = AnnIndex(DIM, train_at=256, nlist=32, rebuild_growth=4.0)
    index.upsert(keys[:255], vecs[:255])
    assert (index.generation, index.built_at) == (0, 0)
    index.upsert(keys[255:300], vecs[255:300])
    assert (index.generation, index.built_at) == (1, 300)
    index.upsert(keys[300:400], vecs[300:400])  # added to the IVF, not rebuilt
    assert (index.generation, index.built_at) == (1, 300)
    index.upsert(keys[400:], vecs[400:])  # grown 4x since the build
    assert (index.generation, index.built_at) == (2, N)
    for copy in (True, False):
        arrays = {name: np.array(a) for name, a in index.to_arrays().items()}
        loaded = AnnIndex.from_arrays(arrays, copy=copy)
        assert loaded.generation == 0 and loaded.built_at == N and loaded.settings == index.settings
        np.testing.assert_array_equal(loaded.keys(), index.keys())
        for query in queries[:5]:
            np.testing.assert_array_equal(loaded.search(query, K)[0], index.search(query, K)[0])
        stored = "codes" if index.compact else "vectors"
        held = loaded._codes if loaded.compact else loaded.vectors_matrix()
        assert np.shares_memory(held, arrays[stored]) == (not copy)  # adopted, not copied
    arrays = index.to_arrays()
    with pytest.raises(ValueError, match="do not match"):
        AnnIndex.from_arrays({**arrays, stored: arrays[stored][:-1]})
    with pytest.raises(ValueError, match="format"):
        AnnIndex.from_arrays({**arrays, "meta": np.frombuffer(b'{"format": 0}', dtype=np.uint8)})


@pytest.mark.skipif(not HAVE_FAISS, reason=NO_FAISS)
def test_ann_arrays_carry_the_centroid_graph(monkeypatch: pytest.MonkeyPatch, data: Any) -> None:
    """An IVF large enough to walk a centroid graph saves the graph with it (made for the save if
    no `nearest` made it), and the loaded index walks the saved graph instead of making its own;
    a graph over other centroids or damaged is ignored, and arrays without one (older files) load."""
    import faiss

    from engramdb.vectors import ann

    keys, vecs, _ = data
    index = filled(_ann(train_at=256, nlist=32, rebuild_growth=0), keys, vecs)
    assert len(index.to_arrays()["graph"]) == 0  # 32 lists: no graph is walked, none saved
    monkeypatch.setattr(ann, "_GRAPH_LISTS", 1)
    assert index._graph is None
    arrays = {name: np.array(a) for name, a in index.to_arrays().items()}
    assert index._graph is not None and len(arrays["graph"])
    loaded = ann.AnnIndex.from_arrays(arrays)
    assert loaded._graph is not None
    other = filled(_ann(train_at=256, nlist=32, rebuild_growth=0, seed=7), keys, vecs).to_arrays()["graph"]
    made, real = [], faiss.IndexHNSWFlat
    monkeypatch.setattr(faiss, "IndexHNSWFlat", lambda *a: made.append(a))  # no graph is made again
    probe = vecs[::97] + np.float32(0.01)
    for one in probe:
        assert loaded.nearest(one[None], K)[0].tolist() == index.nearest(one[None], K)[0].tolist()
    assert not made
    monkeypatch.setattr(faiss, "IndexHNSWFlat", real)
    # A graph over other centroids, or a damaged one, is ignored (made again on first use): the index loads.
    for bad in (other, arrays["graph"][: len(arrays["graph"]) // 2], np.arange(64, dtype=np.uint8)):
        again = ann.AnnIndex.from_arrays({**arrays, "graph": bad})
        assert again._graph is None and again.trained
        assert again.nearest(probe[:1], K)[0].tolist() == index.nearest(probe[:1], K)[0].tolist()
    older = {name: a for name, a in arrays.items() if name != "graph"}
    assert ann.AnnIndex.from_arrays(older)._graph is None  # made on first use, as before


@pytest.mark.skipif(not HAVE_FAISS, reason=NO_FAISS)
def test_ann_load_refuses_what_is_not_an_index(tmp_path: Path) -> None:
    from engramdb.vectors.ann import AnnIndex
    from engramdb.vectors.npz import write_arrays

    path = tmp_path / "x.npz"
    write_arrays(path, {"other": np.arange(3)})
    with np.load(path) as npz:  # an ordinary .npz file
        assert npz["other"].tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="not an AnnIndex file"):
        AnnIndex.load(path)
    with path.open("wb") as fh:
        np.save(fh, np.arange(3))  # a plain .npy under that name
    with pytest.raises(ValueError, match="not a zip file"):
        AnnIndex.load(path)


@pytest.mark.skipif(not HAVE_FAISS, reason=NO_FAISS)
def test_ann_builds_at_train_at_and_rebuilds_on_growth() -> None:
    from engramdb.vectors.ann import AnnIndex

    vecs = clustered(1200)
    keys = np.arange(1200, dtype=np.int64)
    index = AnnIndex(DIM, train_at=200, rebuild_growth=4.0)
    index.upsert(keys[:199], vecs[:199])
    assert not index.trained
    index.upsert(keys[199:300], vecs[199:300])
    assert index.trained and index.nprobe >= 1
    first_nlist = index.nlist
    index.upsert(keys[300:], vecs[300:])  # 1200 >= 4 * 300: rebuilt with more lists
    assert index.nlist > first_nlist
    # Replacing vectors after the build moves their IVF entries instead of adding second ones.
    index.upsert(keys[:50], clustered(50, seed=4))
    # The replaced rows left the IVF and wait, pending, for the next batch add; searches score them.
    assert index._ivf.ntotal + len(index._pending) == len(index) == 1200 and len(index._pending) == 50
    for row in range(0, 50, 7):
        got_keys, got_sims = index.search(clustered(50, seed=4)[row], 1)
        assert got_keys.tolist() == [row] and got_sims[0] == pytest.approx(1.0, abs=tol(index))
        rows, _ = index.nearest(clustered(50, seed=4)[row][None, :], 1)
        assert rows.tolist() == [[row]]
    index.upsert(keys[:50], clustered(50, seed=4))  # again: still pending, not added twice
    assert len(index._pending) == 50
    index._flush()
    assert index._ivf.ntotal == len(index) == 1200 and not index._pending
    for row in range(0, 50, 7):
        got_keys, _ = index.search(clustered(50, seed=4)[row], 1)
        assert got_keys.tolist() == [row]


@pytest.mark.skipif(not HAVE_FAISS, reason=NO_FAISS)
def test_ann_pending_vectors_are_found_and_flushed_in_one_add() -> None:
    """Vectors added to a trained index wait, pending, until `_PENDING_ROWS` gather: every
    search (filtered or not) and `nearest` scores them exactly meanwhile, and a saved index
    holds them in its IVF."""
    from engramdb.vectors.ann import _PENDING_ROWS, AnnIndex

    vecs = clustered(600)
    keys = np.arange(600, dtype=np.int64)
    index = AnnIndex(DIM, train_at=300, rebuild_growth=0)
    index.upsert(keys[:300], vecs[:300])
    assert index.trained and not index._pending
    for i in range(300, 300 + _PENDING_ROWS - 1):
        index.upsert(keys[i : i + 1], vecs[i : i + 1])
    assert len(index._pending) == _PENDING_ROWS - 1 and index._ivf.ntotal == 300
    allowed = np.zeros(len(index), dtype=np.bool_)
    allowed[300:] = True
    for i in (300, 400, 300 + _PENDING_ROWS - 2):
        assert index.search(vecs[i], 1)[0].tolist() == [i]
        assert index.search(vecs[i], 1, allowed)[0].tolist() == [i]
        assert index.nearest(vecs[i][None, :], 1, exact=False)[0].tolist() == [[i]]
    arrays = index.to_arrays()  # a save puts every row in the IVF
    assert index._ivf.ntotal == len(index) and not index._pending
    again = AnnIndex.from_arrays(arrays)
    assert again.search(vecs[400], 1)[0].tolist() == [400]
    index.upsert(keys[556:], vecs[556:])
    index.upsert(keys[300 + _PENDING_ROWS - 1 : 556], vecs[300 + _PENDING_ROWS - 1 : 556])
    assert index._ivf.ntotal + len(index._pending) == len(index) == 600
    # A pending row written again is held once, with its new vector (scored as written).
    held = len(index._pending)
    index.upsert(keys[598:599], vecs[10:11])
    index.upsert(keys[598:599], vecs[20:21])
    assert len(index._pending) == held  # 598 was pending already
    rows, scores = index.nearest(vecs[20][None, :], 2, exact=False)
    assert index.row_of(598) in rows[0].tolist() and scores[0][0] == pytest.approx(1.0, abs=1e-5)
    index._flush()
    assert not index._pending and index._ivf.ntotal == 600
    assert index.nearest(vecs[20][None, :], 2)[0][0].tolist().count(index.row_of(598)) == 1


def test_ann_without_faiss_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import engramdb.vectors.ann as ann

    monkeypatch.setattr(ann, "_faiss_module", None)
    monkeypatch.setitem(sys.modules, "faiss", None)  # makes `import faiss` raise ImportError
    with pytest.raises(MissingExtra) as info:
        ann.AnnIndex(DIM)
    assert info.value.extra == "ann" and "engramdb[ann]" in str(info.value)
    assert not ann.faiss_available()


@pytest.mark.skipif(not HAVE_FAISS, reason=NO_FAISS)
def test_ann_add_reuses_the_lists_nearest_found() -> None:
    """A vector `nearest` was asked about goes into the list that search found for it (no second
    coarse search): the IVF ends up as one filled by plain adds, list by list."""
    from engramdb.vectors.ann import _PENDING_ROWS, AnnIndex

    vecs = clustered(300 + 2 * _PENDING_ROWS)
    keys = np.arange(len(vecs), dtype=np.int64)
    plain, asked = (AnnIndex(DIM, train_at=300, rebuild_growth=0) for _ in range(2))
    for index in (plain, asked):
        index.upsert(keys[:300], vecs[:300])
    asked.nearest(vecs[300 : 300 + _PENDING_ROWS], 4, exact=False)  # as dedup does before a write
    assert len(asked._lists) == _PENDING_ROWS
    for index in (plain, asked):
        index.upsert(keys[300:], vecs[300:])
        index._flush()
    assert not asked._lists  # used up
    sizes = [[index._ivf.invlists.list_size(i) for i in range(index.nlist)] for index in (plain, asked)]
    assert sizes[0] == sizes[1] and sum(sizes[0]) == len(vecs)
    for row in range(300, len(vecs), 37):
        assert asked.search(vecs[row], 3)[0].tolist() == plain.search(vecs[row], 3)[0].tolist()


@pytest.mark.skipif(not HAVE_FAISS, reason=NO_FAISS)
def test_ann_few_query_nearest_walks_a_centroid_graph(monkeypatch: pytest.MonkeyPatch, data: Any) -> None:
    """A `nearest` call with few queries finds its lists through the HNSW graph over the
    centroids (made once, dropped by a rebuild); it answers as the exact scoring of every
    centroid does for near-duplicate queries, and the add puts each vector asked about into the
    list the graph found first for it — the exact nearest list nearly always."""
    from engramdb.vectors import ann

    keys, vecs, _ = data
    graph, flat = (ann.AnnIndex(DIM, train_at=256, nlist=32, rebuild_growth=0) for _ in range(2))
    for index in (graph, flat):
        index.upsert(keys, vecs)
    rng = np.random.default_rng(5)
    picked = rng.choice(N, 60, replace=False)
    near = vecs[picked] + 0.02 * rng.normal(size=(60, DIM)).astype(np.float32)
    near /= np.linalg.norm(near, axis=1, keepdims=True)
    expected = [flat.nearest(near[i : i + 1], K)[0][0].tolist() for i in range(60)]  # 32 lists < _GRAPH_LISTS
    monkeypatch.setattr(ann, "_GRAPH_LISTS", 1)
    assert graph._graph is None
    got = [graph.nearest(near[i : i + 1], K)[0][0].tolist() for i in range(60)]
    assert graph._graph is not None
    assert all(g[0] == graph.row_of(int(keys[p])) for g, p in zip(got, picked, strict=True))  # the copy first
    assert sum(g == e for g, e in zip(got, expected, strict=True)) >= 57  # the same top 10, nearly always
    extra = clustered(300, seed=9)
    extra_keys = np.arange(10**6, 10**6 + 300, dtype=np.int64)
    found = {}
    for i in range(300):  # as a single `remember`'s dedup does, one vector a call
        graph.nearest(extra[i : i + 1], 4, exact=False)
        found[i] = graph._lists[extra[i].tobytes()]
    _, exact = flat._ivf.quantizer.search(extra, 1)
    assert sum(found[i] == exact[i, 0] for i in range(300)) >= 285  # the graph's first list is the nearest
    held = graph._ivf.ntotal
    quantizer = type(graph._ivf.quantizer)
    scored: list[int] = []
    search = quantizer.search
    monkeypatch.setattr(quantizer, "search", lambda self, x, k, **kw: scored.append(len(x)) or search(self, x, k, **kw))
    graph.upsert(extra_keys, extra)
    graph._flush()
    assert not scored  # no centroid scored again for the add
    assert graph._ivf.ntotal == held + 300
    assert not any(v.tobytes() in graph._lists for v in extra)  # used up by the add
    import faiss

    invlists = graph._ivf.invlists
    for i in range(0, 300, 7):  # each went into the list the graph found for it
        ids = faiss.rev_swig_ptr(invlists.get_ids(found[i]), invlists.list_size(found[i]))
        assert graph.row_of(int(extra_keys[i])) in ids.tolist()
    # Vectors no `nearest` was asked about (a todo, dedup off): a few find their list through the
    # graph, many through the exact scoring of every centroid (BLAS, cheaper per vector).
    unseen = clustered(80, seed=11)
    graph.upsert(np.arange(2 * 10**6, 2 * 10**6 + 80, dtype=np.int64), unseen)
    monkeypatch.setattr(ann, "_GRAPH_ASSIGN", 64)
    graph._flush()
    assert scored == [80]  # more than 64: every centroid scored
    assert graph._graph is not None
    monkeypatch.setattr(quantizer, "search", search)
    few = clustered(40, seed=12)
    few_keys = np.arange(3 * 10**6, 3 * 10**6 + 40, dtype=np.int64)
    walked: list[int] = []
    hnsw = type(graph._graph)
    walk = hnsw.search
    monkeypatch.setattr(hnsw, "search", lambda self, x, k, **kw: walked.append(len(x)) or walk(self, x, k, **kw))
    graph.upsert(few_keys, few)
    graph._flush()
    assert walked == [40] and graph._ivf.ntotal == held + 300 + 80 + 40
    graph.rebuild()
    assert graph._graph is None


def test_ann_scores_of_repeats_the_last_full_scan_bit_for_bit(data: Any) -> None:
    """`scores_of` gives, for the query the last exact scan of the whole matrix was made for, the
    very values `dot(vectors_of(keys), query)` gives; after a write, for another query, for a key
    without a vector, or once the scan was filtered to a few rows, it says None."""
    from engramdb.vectors.ann import AnnIndex, dot

    keys, vecs, queries = data
    index = AnnIndex(DIM, train_at=10 * N)  # exact scans only
    index.upsert(keys, vecs)
    q, other = queries[0], queries[1]
    assert index.scores_of(q, keys[:5]) is None  # no scan yet
    index.search(q, K)
    some = keys[np.random.default_rng(4).choice(N, 50, replace=False)]
    got = index.scores_of(q, some)
    assert got is not None
    assert got.tobytes() == dot(index.vectors_of(some), q).tobytes()
    mask = np.ones(N, dtype=np.bool_)
    mask[::2] = False  # half allowed: still a scan of every row
    index.search(other, K, mask)
    assert index.scores_of(q, some) is None
    got = index.scores_of(other, some)
    assert got is not None and got.tobytes() == dot(index.vectors_of(some), other).tobytes()
    assert index.scores_of(other, np.array([-7], dtype=np.int64)) is None  # no such key
    index.upsert(keys[:1], vecs[1:2])
    assert index.scores_of(other, some) is None  # written since
    few = np.zeros(N, dtype=np.bool_)
    few[:10] = True  # a few rows: only those are scored, nothing kept
    index.search(q, K, few)
    assert index.scores_of(q, some) is None
