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
from engramdb.storage.ports import VectorRow
from engramdb.testing import fake_embedder

faiss = pytest.importorskip("faiss")

DIM = 64
THRESHOLD = 0.92
TYPES = ("info", "fact", "preference")
OWNERS = ("", "alice", "bob")


def _unit(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)
    return out


def _rows(keys: range, vecs: np.ndarray, rng: np.random.Generator) -> list[VectorRow]:
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
    want: list[object] = [(5000, pytest.approx(cos, abs=2e-3))]
    assert got == want


@pytest.mark.parametrize("train_at", [3000, 100_000])  # with an IVF (int8 rows), and the exact scan
@pytest.mark.parametrize("few", [False, True])  # a batch, and a call of few items (another exact path)
def test_near_matches_are_the_best_and_the_memories_of_its_vector(train_at: int, few: bool) -> None:
    """`near_matches` (dedup's candidates): the first is `near_duplicates`' answer, the others
    are exactly the other memories tied with it (the same vector) that pass the item's filter, at
    most `limit` in all; merely near ones are not among them."""
    from engramdb.vectors.ann import AnnIndex

    rng = np.random.default_rng(11)
    centres = _unit(rng.standard_normal((20, DIM)))
    texts = _unit(centres[rng.integers(0, 20, 600)] + 0.03 * rng.standard_normal((600, DIM)))
    copies = rng.integers(1, 7, 600)  # each text stored 1-6 times, each copy its own owner, type, level
    which = np.repeat(np.arange(600), copies)
    stored = _rows(range(1, len(which) + 1), texts[which], rng)
    channel = VectorChannel(fake_embedder(DIM), AnnIndex(DIM, train_at=train_at, nlist=16, rebuild_growth=0))
    channel._apply(stored)
    assert channel.approximate == (train_at <= len(stored))
    vis = Visibility("t", "alice", Confidentiality(3))
    picked = rng.integers(0, 600, 3 if few else 200)
    items = texts[picked]
    filters = [(str(rng.choice(TYPES)), str(rng.choice(OWNERS[:2])), 0) for _ in picked]
    for i, p in enumerate(picked[: len(picked) // 2]):  # half ask for a stored copy's own type and owner
        k = int(np.flatnonzero(which == p)[0])
        filters[i] = (stored[k][8], stored[k][3], 0)
    got = channel.near_matches(items, vis, filters, THRESHOLD, 4)
    first = channel.near_duplicates(items, vis, filters, THRESHOLD)
    several = 0
    for i, (matches, best) in enumerate(zip(got, first, strict=True)):
        assert (matches[0] if matches else None) == best
        mtype, owner, _ = filters[i]
        same = {k + 1 for k in np.flatnonzero(which == picked[i]) if stored[k][3] == owner and stored[k][8] == mtype}
        if (
            same and owner != "bob"
        ):  # bob's memories are not alice's to see  # its own vector is stored where it may look: those copies, and only they, are the ties
            assert len(matches) == min(4, len(same)) and {k for k, _ in matches} <= same
            several += len(matches) > 1
        for _, cos in matches:
            assert cos == pytest.approx(matches[0][1], abs=1e-5) and cos >= THRESHOLD
    if not few:
        assert several > 10  # the check has teeth
