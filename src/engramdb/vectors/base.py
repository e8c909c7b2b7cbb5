"""The `VectorIndex` protocol: nearest neighbours by cosine over integer keys.

Invariants: vectors are float32 and L2-normalised (so a dot product is a cosine, higher is
closer); keys are the memories' internal integer keys; `search` returns at most `k` keys,
best first, among those `allowed` says are visible — the filter is applied *before* the top-k is
taken, never after. An index is a cache: the stored vectors are the truth and it can always be
rebuilt from them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt


class VectorIndex(Protocol):
    """Upsert and search unit vectors by integer key."""

    @property
    def dim(self) -> int: ...

    def __len__(self) -> int: ...

    def upsert(self, keys: npt.NDArray[np.int64], vectors: npt.NDArray[np.float32]) -> None:
        """Add or replace the vectors of `keys`."""
        ...

    def search(
        self, query: npt.NDArray[np.float32], k: int, allowed: npt.NDArray[np.bool_] | None = None
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """The `k` best keys and their cosines; `allowed` is a mask over `keys()` order."""
        ...

    def keys(self) -> npt.NDArray[np.int64]:
        """Every key, in the order `allowed` masks refer to."""
        ...

    def vectors_of(self, keys: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        """The stored vectors of `keys` (zeros for unknown keys)."""
        ...

    def vectors_matrix(self) -> npt.NDArray[np.float32]:
        """Every stored vector, one row per key in `keys()` order (a view; do not modify)."""
        ...

    def row_of(self, key: int) -> int | None:
        """The position of `key` in `keys()` order, or None."""
        ...
