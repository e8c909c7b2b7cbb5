"""Fixtures for memory tests: an engine on the backend under test with a fixed clock and the fast embedder."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from engramdb import DynamicMemoryEngine
from engramdb.agent import Agent
from engramdb.testing import fake_embedder


@pytest.fixture
def eng(make_engine: Callable[..., DynamicMemoryEngine]) -> DynamicMemoryEngine:
    """An engine on the backend under test (``--backend``), with the fast embedder."""
    return make_engine(memory_embedder=fake_embedder())


@pytest.fixture
def me(eng: DynamicMemoryEngine) -> Agent:
    return eng.agent("alice")
