"""Shared fixtures: engines on temporary files, a fixed clock."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from engramdb import DynamicMemoryEngine

# Deterministic property tests: the same examples on every run and every machine.
settings.register_profile("engramdb", derandomize=True, deadline=None, max_examples=150)
settings.load_profile("engramdb")


class FixedClock:
    """A clock for tests: starts at `start` (epoch seconds) and moves only when told."""

    def __init__(self, start: float = 1_764_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock()


@pytest.fixture
def engine(tmp_path: Path, clock: FixedClock) -> Iterator[DynamicMemoryEngine]:
    eng = DynamicMemoryEngine(tmp_path / "memory.db", clock=clock)
    yield eng
    eng.close()
