"""Fixtures for memory tests: an engine on a temp file with a fixed clock and the fast embedder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engramdb import DynamicMemoryEngine
from engramdb.agent import Agent
from engramdb.testing import FixedClock, fake_embedder


@pytest.fixture
def eng(tmp_path: Path, clock: FixedClock) -> Iterator[DynamicMemoryEngine]:
    e = DynamicMemoryEngine(tmp_path / "m.db", clock=clock, memory_embedder=fake_embedder())
    yield e
    e.close()


@pytest.fixture
def me(eng: DynamicMemoryEngine) -> Agent:
    return eng.agent("alice")
