"""The `Embedder` protocol: text in, unit vectors out.

Invariants every implementation keeps:

- `embed(texts)` returns a C-contiguous ``float32`` array of shape ``(len(texts), dim)``.
- Every row has L2 norm 1 (or is all zeros for a text with no usable token), so a dot
  product is a cosine similarity in ``[-1, 1]``; higher means more similar.
- The same text always gives the same vector (deterministic, no network, no download).
- `name` identifies the model and its version; vectors from different names are never
  compared (the store records the name beside each vector).

An embedder may also say what cosine two unrelated texts typically have (``unrelated_cosine``, a
float; 0 when absent): recall's absolute relevance counts only similarity above it.

A `Reranker` scores (query, text) pairs in [0, 1], one per text, in order, the same every time;
recall's second stage (`engramdb.embeddings.rerank`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors of a fixed dimension."""

    @property
    def name(self) -> str:
        """Stable identifier of the model and its version, e.g. ``"static-minilm-384-int8@1"``."""
        ...

    @property
    def dim(self) -> int:
        """Number of dimensions of every vector this embedder returns."""
        ...

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed a batch of texts; see the module docstring for the invariants."""
        ...


@runtime_checkable
class Reranker(Protocol):
    """Scores how well each text answers a query, in [0, 1]."""

    @property
    def name(self) -> str:
        """Identifier of the model, recorded in every recall's explanation."""
        ...

    def score(self, query: str, texts: Sequence[str]) -> Sequence[float]:
        """One score in [0, 1] per text, in order."""
        ...
