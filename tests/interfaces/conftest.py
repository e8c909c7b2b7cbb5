"""Fixtures for the interface tests: an engine through `make_engine` with the fast embedder."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from engramdb import DynamicMemoryEngine
from engramdb.testing import fake_embedder


@pytest.fixture
def eng(make_engine: Callable[..., DynamicMemoryEngine]) -> DynamicMemoryEngine:
    return make_engine(memory_embedder=fake_embedder())
