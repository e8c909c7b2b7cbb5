"""Test doubles for code that uses engramdb: a fixed clock and a deterministic embedder.

Example::

    from engramdb import DynamicMemoryEngine
    from engramdb.testing import FixedClock, fake_embedder

    clock = FixedClock()
    engine = DynamicMemoryEngine(":memory:", clock=clock, memory_embedder=fake_embedder())
    clock.advance(3600)  # an hour later
"""

from __future__ import annotations

from engramdb.embeddings.base import Embedder


class FixedClock:
    """A clock that stands still until told to move; pass it as ``clock=`` to the engine.

    Times are seconds since the epoch; the default start is 2025-11-24 16:00 UTC.
    """

    def __init__(self, start: float = 1_764_000_000.0) -> None:
        self.now = float(start)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock forward (or back, with a negative number) by `seconds`."""
        self.now += seconds

    def set(self, when: float) -> None:
        """Jump to `when` (epoch seconds)."""
        self.now = float(when)


def fake_embedder(dim: int = 256) -> Embedder:
    """A small, deterministic, offline embedder (feature hashing); needs the ``memory`` extra."""
    from engramdb.embeddings.hashing import HashingEmbedder

    return HashingEmbedder(dim=dim)
