"""Vectors and pairwise similarity for reflection: loading a run's vectors, calibrating an
embedder's anisotropy, and finding near pairs blockwise with bounded memory."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from engramdb.embeddings.base import Embedder
    from engramdb.memories.model import Visibility
    from engramdb.memories.reflection_support import ReflectionConfig
    from engramdb.storage.ports import Backend


# A fixed, deliberately diverse probe set: the calibration of an embedder must not depend on the store.
_PROBES = (
    "The quarterly invoice was paid late because the bank holiday moved the transfer.",
    "Remember to water the tomato plants on the balcony twice a week in summer.",
    "The Kubernetes node pool ran out of memory after the nightly batch job started.",
    "She prefers aisle seats on long flights and always books the earliest train.",
    "Our customer in Lisbon asked for a discount if they sign a three-year contract.",
    "The experiment showed that smaller learning rates reduce overfitting on the noisy set.",
    "Grandma's birthday dinner is at the Italian restaurant near the river on Saturday.",
    "A failing health check made the load balancer drop half of the web servers.",
    "Chess openings that control the center early tend to give a lasting advantage.",
    "The museum closes at six, but the rooftop café stays open until ten.",
    "Password reset emails were delayed because the mail provider throttled us.",
    "He learned to bake sourdough bread during the long winter months.",
    "The contract renewal requires approval from legal before the end of March.",
    "Heavy rain flooded the basement and ruined the old photo albums.",
    "To rotate the API key, revoke the old one and update the secret in the vault.",
    "The football match was postponed because the pitch was frozen.",
    "Translate the onboarding guide into Spanish and German before launch.",
    "The patient reported mild headaches after switching to the new medication.",
    "Quantum computers use qubits that can represent several states at once.",
    "Book a dentist appointment for next Tuesday morning.",
    "The sales pipeline doubled after the webinar about data privacy.",
    "A fox crossed the road just before dawn near the old farmhouse.",
    "Replace the printer toner and order more paper for the office.",
    "The hiking trail to the lake is closed until the bridge is repaired.",
)
_CALIBRATION: dict[str, tuple[float, Any]] = {}
_CALIBRATION_LOCK = threading.Lock()


def _calibration(embedder: Embedder) -> tuple[float, Any]:
    """(mean pairwise cosine of the probes, their mean vector), once per embedder name."""
    import numpy as np

    with _CALIBRATION_LOCK:
        found = _CALIBRATION.get(embedder.name)
        if found is None:
            probes = np.asarray(embedder.embed(list(_PROBES)), dtype=np.float32)
            k = len(probes)
            total = probes.sum(axis=0)
            mean_cos = float((total @ total - float((probes * probes).sum())) / (k * (k - 1)))
            found = _CALIBRATION[embedder.name] = (mean_cos, probes.mean(axis=0))
        return found


@dataclass(slots=True)
class _Vectors:
    """The scope's vectors, rows in (owner, created_at, n) order, unit length (zero rows stay zero)."""

    ns: list[int]
    owners: list[str]
    types: list[str]
    levels: list[int]
    mat: npt.NDArray[np.float32]
    note: str | None = None

    def groups(self, key: Callable[[int], tuple[str, Any]]) -> list[list[int]]:
        """Row indices grouped by `key`, each group in row order, groups in key order."""
        out: dict[tuple[str, Any], list[int]] = {}
        for r in range(len(self.ns)):
            out.setdefault(key(r), []).append(r)
        return [out[k] for k in sorted(out, key=lambda k: (k[0], str(k[1])))]


def _load_vectors(store: Backend, embedder: Embedder, vis: Visibility, cfg: ReflectionConfig) -> _Vectors:
    """The vectors of what `vis` shows, by owner, creation time and key, unit length (see `_Vectors`)."""
    import numpy as np

    dim = embedder.dim
    width = 4 * dim
    ns: list[int] = []
    owners: list[str] = []
    types: list[str] = []
    levels: list[int] = []
    mat = np.zeros((1024, dim), dtype=np.float32)
    for rows in store.vectors.in_scope(vis, embedder.name):
        blobs = []
        for n, owner, mtype, level, vec in rows:
            if len(vec) != width:  # a vector of another dimension: not comparable
                continue
            ns.append(int(n))
            owners.append(owner)
            types.append(mtype)
            levels.append(int(level))
            blobs.append(vec)
        if blobs:
            if len(ns) > len(mat):  # grow geometrically: one matrix, never a list of chunks to join
                grown = np.zeros((max(len(ns), 2 * len(mat)), dim), dtype=np.float32)
                grown[: len(ns) - len(blobs)] = mat[: len(ns) - len(blobs)]
                mat = grown
            mat[len(ns) - len(blobs) : len(ns)] = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(-1, dim)
    mat = mat[: len(ns)]
    vecs = _Vectors(ns, owners, types, levels, mat)
    zero = _normalise(mat)
    mean_cos, mean = _calibration(embedder)
    center = cfg.center if cfg.center is not None else mean_cos > cfg.anisotropy_limit
    if center and len(mat):
        mat -= mean.astype(np.float32)
        mat[zero] = 0.0  # a text without words stays without a direction
        _normalise(mat)
        vecs.note = f"vectors centred: {embedder.name} probes have mean pairwise cosine {mean_cos:.2f}"
    return vecs


def _normalise(mat: npt.NDArray[np.float32]) -> npt.NDArray[np.bool_]:
    """Scale rows to unit length in place; the mask of all-zero rows."""
    import numpy as np

    norms = np.linalg.norm(mat, axis=1)
    zero = norms < 1e-12
    mat[~zero] /= norms[~zero, None]
    return np.asarray(zero, dtype=np.bool_)


@dataclass(frozen=True, slots=True)
class _Pairs:
    """Candidate pairs (a, b) of row indices, a before b in row order, by a then descending cosine."""

    a: npt.NDArray[np.int64]
    b: npt.NDArray[np.int64]
    sims: npt.NDArray[np.float32]

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter(zip(self.a.tolist(), self.b.tolist(), strict=True))

    def with_sims(self) -> Iterator[tuple[int, int, float]]:
        return iter(zip(self.a.tolist(), self.b.tolist(), self.sims.tolist(), strict=True))

    def both_ways(self) -> Callable[[int], list[tuple[int, float]]]:
        """row -> its candidates in either direction, most similar first (ties by row)."""
        import numpy as np

        src = np.concatenate([self.a, self.b])
        dst = np.concatenate([self.b, self.a])
        sim = np.concatenate([self.sims, self.sims])
        order = np.lexsort((dst, -sim, src))
        src, dst, sim = src[order], dst[order], sim[order]

        def near(row: int) -> list[tuple[int, float]]:
            lo, hi = np.searchsorted(src, row, "left"), np.searchsorted(src, row, "right")
            return list(zip(dst[lo:hi].tolist(), sim[lo:hi].tolist(), strict=True))

        return near


def _pairs(
    mat: npt.NDArray[np.float32],
    rows: Sequence[int],
    lo: float,
    hi: float | None,
    cfg: ReflectionConfig,
    stop: Callable[[], bool],
    *,
    k: int | None = None,
) -> _Pairs | None:
    """Pairs of `rows` (row indices of `mat`) with lo ≤ cosine (< hi), at most `k` per earlier row.

    Up to `cfg.exact_pairs_up_to` rows every pair is compared (`_exact_pairs`). Beyond, comparing
    every pair grows with n² (impractical for a million memories on two cores), so the rows are
    first clustered (`_clusters`) and only rows sharing a cluster are compared: a pair whose two
    ends fall in different clusters can be missed. None when `stop` fired.
    """
    import numpy as np

    k = cfg.candidates if k is None else k
    idx = np.asarray(rows, dtype=np.int64)
    if len(idx) < 2:
        return _no_pairs()
    group = mat[idx] if len(idx) != len(mat) else mat
    if len(idx) <= cfg.exact_pairs_up_to:
        found = _exact_pairs(group, lo, hi, k, cfg.block_bytes, stop)
    else:
        found = _clustered_pairs(group, lo, hi, k, cfg, stop)
    if found is None:
        return None
    a, b, sims = found
    return _Pairs(idx[a], idx[b], sims)


def _no_pairs() -> _Pairs:
    import numpy as np

    return _Pairs(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32))


_Found = tuple["npt.NDArray[np.int64]", "npt.NDArray[np.int64]", "npt.NDArray[np.float32]"]


def _top_k(a: Any, b: Any, vals: Any, k: int) -> _Found:
    """The pairs ordered by a, then descending cosine, then b; at most `k` per a."""
    import numpy as np

    order = np.lexsort((b, -vals, a))
    a, b, vals = a[order], b[order], vals[order]
    first = np.searchsorted(a, a, side="left")
    keep = (np.arange(len(a)) - first) < k
    return a[keep], b[keep], vals[keep].astype(np.float32)


def _exact_pairs(
    group: npt.NDArray[np.float32], lo: float, hi: float | None, k: int, block_bytes: int, stop: Callable[[], bool]
) -> _Found | None:
    """Every pair (i < j) of `group`'s rows with lo ≤ cosine (< hi), at most `k` per i.

    Blockwise over the upper triangle: one block is at most `block_bytes` of float32, so a
    100k-row group needs ~64 MB beside its vectors. None when `stop` fired between blocks.
    """
    import numpy as np

    n = len(group)
    out_a, out_b, out_s = [], [], []
    start = 0
    while start < n:
        width = n - start
        height = max(1, min(width, block_bytes // (4 * width)))
        sims = group[start : start + height] @ group[start:].T
        sims[:, :height][np.tri(height, dtype=np.bool_)] = -np.inf  # only pairs (i, j) with j > i
        # Sparse: only rows with a candidate are scanned, and the upper bound is applied to the survivors.
        mask = sims >= lo
        hot = np.flatnonzero(mask.any(axis=1))
        r, c = np.nonzero(mask[hot])
        del mask
        if len(r):
            r = hot[r]
            vals = sims[r, c]
            if hi is not None:
                ok = vals < hi
                r, c, vals = r[ok], c[ok], vals[ok]
            r, c, vals = _top_k(r + start, c + start, vals, k)
            out_a.append(r)
            out_b.append(c)
            out_s.append(vals)
        del sims  # before the next block is allocated: one block alive at a time
        start += height
        if stop():
            return None
    if not out_a:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
    return np.concatenate(out_a), np.concatenate(out_b), np.concatenate(out_s)


def _clusters(group: npt.NDArray[np.float32], cfg: ReflectionConfig) -> list[npt.NDArray[np.int64]]:
    """Rows of `group` by cluster, each cluster's rows ascending: spherical k-means (a few rounds,
    on a sample of at most 64 rows per centroid, seeded) into about n / `cfg.cluster_size`
    centroids, then each row joins the clusters of its `cfg.cluster_probes` nearest centroids, so
    two close rows near a border still meet in one of them."""
    import numpy as np

    n = len(group)
    rng = np.random.default_rng(0)  # deterministic: the same store gives the same pairs
    n_centroids = max(2, n // cfg.cluster_size)
    sample = group[np.sort(rng.choice(n, size=min(n, 64 * n_centroids), replace=False))]
    centroids = sample[rng.choice(len(sample), size=n_centroids, replace=False)].copy()
    for _ in range(8):
        nearest = _nearest(sample, centroids, 1, cfg.block_bytes)[:, 0]
        order = np.argsort(nearest, kind="stable")
        used, starts = np.unique(nearest[order], return_index=True)
        sums = np.zeros_like(centroids)
        sums[used] = np.add.reduceat(sample[order], starts, axis=0)
        norms = np.linalg.norm(sums, axis=1)
        live = norms > 1e-12
        centroids[live] = sums[live] / norms[live, None]  # an empty cluster keeps its old centroid
    probes = min(cfg.cluster_probes, n_centroids)
    owner = _nearest(group, centroids, probes, cfg.block_bytes)  # (n, probes)
    cluster = owner.reshape(-1)
    member = np.repeat(np.arange(n, dtype=np.int64), probes)
    order = np.lexsort((member, cluster))
    cluster, member = cluster[order], member[order]
    bounds = np.flatnonzero(np.diff(cluster)) + 1
    return [m for m in np.split(member, bounds) if len(m) > 1]


def _nearest(x: npt.NDArray[np.float32], centroids: npt.NDArray[np.float32], m: int, block_bytes: int) -> Any:
    """Indices of each row's `m` most similar centroids, in blocks of rows of ~`block_bytes`."""
    import numpy as np

    out = np.empty((len(x), m), dtype=np.int64)
    step = max(1, block_bytes // (4 * len(centroids)))
    for start in range(0, len(x), step):
        sims = x[start : start + step] @ centroids.T
        rows = np.arange(len(sims))
        for j in range(m):  # m is small: m argmax passes beat one argpartition
            best = sims.argmax(axis=1)
            out[start : start + step, j] = best
            sims[rows, best] = -np.inf
    return out


def _clustered_pairs(
    group: npt.NDArray[np.float32],
    lo: float,
    hi: float | None,
    k: int,
    cfg: ReflectionConfig,
    stop: Callable[[], bool],
) -> _Found | None:
    """`_exact_pairs` within each cluster of `_clusters`; a pair met in two clusters counts once."""
    import numpy as np

    out_a, out_b, out_s = [], [], []
    for members in _clusters(group, cfg):
        found = _exact_pairs(group[members], lo, hi, k, cfg.block_bytes, stop)
        if found is None:
            return None
        a, b, vals = found
        out_a.append(members[a])  # members ascend, so a < b stays true in the group's order
        out_b.append(members[b])
        out_s.append(vals)
    if not out_a:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
    a, b, vals = np.concatenate(out_a), np.concatenate(out_b), np.concatenate(out_s)
    _, first = np.unique(a * len(group) + b, return_index=True)
    return _top_k(a[first], b[first], vals[first], k)
