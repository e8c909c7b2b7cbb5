"""Shared fixtures: engines on temporary files, a fixed clock."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from engramdb import DynamicMemoryEngine
from engramdb.testing import FixedClock

# Deterministic property tests: the same examples on every run and every machine.
settings.register_profile("engramdb", derandomize=True, deadline=None, max_examples=150)
settings.load_profile("engramdb")


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock()


@pytest.fixture
def engine(tmp_path: Path, clock: FixedClock) -> Iterator[DynamicMemoryEngine]:
    eng = DynamicMemoryEngine(tmp_path / "memory.db", clock=clock)
    yield eng
    eng.close()
