"""Dedup's batched IVF lookup (`VectorChannel.near_duplicates`) decides as the filtered exact search.

For every item: the most similar visible memory of its type and owner at or above its level, kept
when its cosine reaches the threshold. The IVF path (one unfiltered ``nearest`` for the batch,
the filter applied to its candidates, a filtered search when they do not settle it) must give
the same memory as the exact scan (`best_matches`) with the filter inside, including memories
written since the IVF was built (pending, not yet in the IVF) and near-copies of other agents'
memories that the writer may not see.
"""

from __future__ import annotations

import numpy as np
import pytest

from engramdb.memories.model import Confidentiality, Visibility
from engramdb.retrieval.vector_channel import VectorChannel
from engramdb.testing import fake_embedder

faiss = pytest.importorskip("faiss")

DIM = 64
THRESHOLD = 0.92
TYPES = ("info", "fact", "preference")
OWNERS = ("", "alice", "bob")


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def _rows(keys: range, vecs: np.ndarray, rng: np.random.Generator) -> list[tuple]:
    return [
        (int(n), int(n), "t", str(rng.choice(OWNERS)), int(rng.integers(0, 4)), 0, None, None, str(rng.choice(TYPES)),
         vecs[i].astype(np.float32).tobytes())
        for i, n in enumerate(keys)
    ]  # fmt: skip


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_ivf_lookup_decides_as_the_exact_filtered_search(seed: int) -> None:
    from engramdb.vectors.ann import AnnIndex

    rng = np.random.default_rng(seed)
    centres = _unit(rng.standard_normal((40, DIM)))
    base = _unit(centres[rng.integers(0, 40, 6000)] + 0.35 * rng.standard_normal((6000, DIM)))
    channel = VectorChannel(fake_embedder(DIM), AnnIndex(DIM, train_at=3000, nlist=64, rebuild_growth=0))
    stored = _rows(range(1, 5001), base[:5000], rng)
    channel._apply(stored)
    assert channel.approximate
    # Written after the build, one at a time: pending rows, scored exactly until they go in.
    for n in range(5001, 5101):
        stored += _rows(range(n, n + 1), base[n - 1 : n], rng)
        channel._apply(stored[-1:])
    assert channel.index._pending  # type: ignore[attr-defined]
    # New items: near-copies of stored memories (any owner, type, level), and unrelated ones.
    picked = rng.integers(0, 5100, 300)
    copies = _unit(base[picked] + rng.uniform(0.02, 0.3, (300, 1)) * rng.standard_normal((300, DIM)) / np.sqrt(DIM))
    fresh = base[5100:5400]
    items = np.concatenate([copies, fresh])
    # Most copies ask for their original's type and owner (at or below its level); the rest any.
    filters = [(str(rng.choice(TYPES)), str(rng.choice(OWNERS)), int(rng.integers(0, 3))) for _ in items]
    for i, p in enumerate(picked[:200]):
        _, _, _, owner, level, _, _, _, mtype, _ = stored[p]
        filters[i] = (mtype, owner, int(rng.integers(0, level + 1)))
    for reader in ("alice", "bob"):
        vis = Visibility("t", reader, Confidentiality(2))
        got = channel.near_duplicates(items, vis, filters, THRESHOLD)
        exact = channel.best_matches(items, vis, filters)
        want = [b if b is not None and b[1] >= THRESHOLD else None for b in exact]
        assert sum(w is not None for w in want) > 20  # the check has teeth: ~100 items have a match
        assert [None if g is None else g[0] for g in got] == [None if w is None else w[0] for w in want]
        for g, w in zip(got, want, strict=True):
            if g is not None and w is not None:
                assert g[1] == pytest.approx(w[1], abs=2e-3)  # int8 rows: exact up to quantisation


def test_near_copies_the_writer_cannot_see_do_not_hide_its_own() -> None:
    """Forty near-copies of a text in another tenant and in another agent's private memories
    fill the 32 nearest; the writer's own, farther copy is still the answer (the filter never
    cuts a top-k short: a filtered search follows)."""
    from engramdb.vectors.ann import AnnIndex

    rng = np.random.default_rng(7)
    centres = _unit(rng.standard_normal((40, DIM)))
    base = _unit(centres[rng.integers(0, 40, 4000)] + 0.35 * rng.standard_normal((4000, DIM)))
    channel = VectorChannel(fake_embedder(DIM), AnnIndex(DIM, train_at=3000, nlist=64, rebuild_growth=0))
    rows = [(n, n, "t", "alice", 0, 0, None, None, "info", base[n - 1].tobytes()) for n in range(1, 4001)]
    text = _unit(centres[3] + 0.1 * rng.standard_normal(DIM))
    hidden = _unit(text + 0.02 * rng.standard_normal((40, DIM)))
    mine = _unit(text + 0.25 * rng.standard_normal(DIM) / np.sqrt(DIM))
    for i, vec in enumerate(hidden):  # half in another tenant, half bob's own
        tenant, owner = ("other", "alice") if i % 2 else ("t", "bob")
        rows.append((4001 + i, 4001 + i, tenant, owner, 0, 0, None, None, "info", vec.tobytes()))
    rows.append((5000, 5000, "t", "alice", 0, 0, None, None, "info", mine.tobytes()))
    channel._apply(rows)
    assert channel.approximate
    vis = Visibility("t", "alice", Confidentiality(2))
    got = channel.near_duplicates(text[None, :], vis, [("info", "alice", 0)], THRESHOLD)
    cos = float(mine @ text)
    assert cos >= THRESHOLD and all(float(h @ text) > cos for h in hidden)
    assert got == [(5000, pytest.approx(cos, abs=2e-3))]


@pytest.mark.parametrize("train_at", [3000, 100_000])  # with an IVF, and the exact scan below its size
def test_near_matches_are_the_best_then_more_that_pass_the_filter(train_at: int) -> None:
    """`near_matches` (dedup's candidates, most similar first): the first is `near_duplicates`'
    answer; every other one passes the item's filter, reaches the threshold and is in order; at
    most `limit`. Without an IVF they are exactly the top `limit` of the filtered scan."""
    from engramdb.vectors.ann import AnnIndex

    rng = np.random.default_rng(11)
    centres = _unit(rng.standard_normal((20, DIM)))
    base = _unit(centres[rng.integers(0, 20, 4000)] + 0.03 * rng.standard_normal((4000, DIM)))
    channel = VectorChannel(fake_embedder(DIM), AnnIndex(DIM, train_at=train_at, nlist=64, rebuild_growth=0))
    stored = _rows(range(1, 4001), base, rng)
    channel._apply(stored)
    assert channel.approximate == (train_at <= 4000)
    attrs = {r[0]: (r[3], r[4], r[8]) for r in stored}  # owner, level, type
    picked = rng.integers(0, 4000, 120)
    items = _unit(base[picked] + 0.01 * rng.standard_normal((120, DIM)))
    filters = [(stored[p][8], stored[p][3], int(rng.integers(0, stored[p][4] + 1))) for p in picked]
    vis = Visibility("t", "alice", Confidentiality(3))
    threshold = 0.9
    for chunk in (slice(0, 120), slice(0, 3)):  # a batch, and a call of few items (another exact path)
        got = channel.near_matches(items[chunk], vis, filters[chunk], threshold, 4)
        first = channel.near_duplicates(items[chunk], vis, filters[chunk], threshold)
        exact = channel._best(items[chunk], vis, filters[chunk], 4, threshold)
        if len(got) > 3:  # the check has teeth: many items have several (bob's memories are not alice's)
            assert sum(len(m) > 1 for m in got) > len(got) // 3
        for matches, best, want, (mtype, owner, level), q in zip(
            got, first, exact, filters[chunk], items[chunk], strict=True
        ):
            assert (matches[0][0] if matches else None) == (best[0] if best else None)
            assert len(matches) <= 4
            cos = [c for _, c in matches]
            assert cos == sorted(cos, reverse=True) and all(c >= threshold for c in cos)
            for key, c in matches:
                assert attrs[key][0] == owner and attrs[key][2] == mtype
                assert attrs[key][1] >= level
                assert c == pytest.approx(float(base[key - 1] @ q), abs=5e-3)  # int8 rows once compact
            if not channel.approximate:
                assert [k for k, _ in matches] == [k for k, _ in want]
