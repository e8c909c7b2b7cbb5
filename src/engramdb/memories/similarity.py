"""Vectors and pairwise similarity for reflection: loading a run's vectors, calibrating an
embedder's anisotropy, and finding near pairs blockwise with bounded memory."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sqlite3

    import numpy as np
    import numpy.typing as npt

    from engramdb.embeddings.base import Embedder
    from engramdb.memories.reflection_support import ReflectionConfig


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


def _load_vectors(
    db: sqlite3.Connection, embedder: Embedder, pred: str, params: dict[str, Any], cfg: ReflectionConfig
) -> _Vectors:
    import numpy as np

    dim = embedder.dim
    width = 4 * dim
    cur = db.execute(
        "SELECT m.n, m.owner, m.type, m.confidentiality, v.vec FROM engram_memories m JOIN engram_vectors v ON v.n = m.n "  # noqa: S608
        f"WHERE {pred} AND v.model = :r_model ORDER BY m.owner, m.created_at, m.n",
        dict(params, r_model=embedder.name),
    )
    ns: list[int] = []
    owners: list[str] = []
    types: list[str] = []
    levels: list[int] = []
    mat = np.zeros((1024, dim), dtype=np.float32)
    while rows := cur.fetchmany(4096):
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

    Blockwise over the upper triangle: one block is at most `cfg.block_bytes` of float32, so a
    100k-memory group needs ~64 MB beside its vectors. None when `stop` fired between blocks.
    """
    import numpy as np

    k = cfg.candidates if k is None else k
    idx = np.asarray(rows, dtype=np.int64)
    empty = _Pairs(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32))
    if len(idx) < 2:
        return empty
    group = mat[idx] if len(idx) != len(mat) else mat
    n = len(group)
    out_a, out_b, out_s = [], [], []
    start = 0
    while start < n:
        width = n - start
        height = max(1, min(width, cfg.block_bytes // (4 * width)))
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
            order = np.lexsort((c, -vals, r))
            r, c, vals = r[order], c[order], vals[order]
            first = np.searchsorted(r, r, side="left")
            keep = (np.arange(len(r)) - first) < k
            out_a.append(r[keep] + start)
            out_b.append(c[keep] + start)
            out_s.append(vals[keep])
        del sims  # before the next block is allocated: one block alive at a time
        start += height
        if stop():
            return None
    if not out_a:
        return empty
    a, b = np.concatenate(out_a), np.concatenate(out_b)
    return _Pairs(idx[a], idx[b], np.concatenate(out_s).astype(np.float32))
