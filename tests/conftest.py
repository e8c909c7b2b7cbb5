"""Shared fixtures: engines built per backend, a fixed clock.

``pytest --backend=sqlite`` (the default) runs every test on SQLite files; ``--backend=postgres``
runs the backend-neutral tests (the contract suites, the leak suite, and every test that builds
its engine through `make_engine`) on a real PostgreSQL server (see ``tests/pg_server.py``).
Tests of one backend's own machinery are marked ``sqlite_only`` or ``postgres_only``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from engramdb import DynamicMemoryEngine
from engramdb.testing import FixedClock

# Deterministic property tests: the same examples on every run and every machine.
settings.register_profile("engramdb", derandomize=True, deadline=None, max_examples=150)
settings.load_profile("engramdb")

BACKENDS = ("sqlite", "postgres")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--backend",
        choices=BACKENDS,
        default="sqlite",
        help="the storage backend the backend-neutral tests run on (default: sqlite)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "sqlite_only: tests of the SQLite backend's own machinery")
    config.addinivalue_line("markers", "postgres_only: tests of the PostgreSQL backend's own machinery")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    backend = config.getoption("--backend")
    for item in items:
        for mark, name in (("sqlite_only", "sqlite"), ("postgres_only", "postgres")):
            if item.get_closest_marker(mark) is not None and backend != name:
                item.add_marker(pytest.mark.skip(reason=f"{name} backend only (running --backend={backend})"))


@pytest.fixture(scope="session")
def backend_name(request: pytest.FixtureRequest) -> str:
    """The backend the backend-neutral tests run on."""
    return str(request.config.getoption("--backend"))


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock()


@pytest.fixture
def make_engine(backend_name: str, tmp_path: Path, clock: FixedClock) -> Iterator[Callable[..., DynamicMemoryEngine]]:
    """Build engines on the chosen backend: ``make_engine(**options)`` (the test's clock unless
    given). Engines made with the same ``name`` share one store (a file, or a database); every
    engine is closed and every store removed after the test."""
    made: list[DynamicMemoryEngine] = []
    stores: dict[str, Any] = {}
    exits = contextlib.ExitStack()

    def location(name: str) -> Any:
        if name not in stores:
            if backend_name == "sqlite":
                stores[name] = tmp_path / f"{name}.db"
            else:
                from tests.pg_server import fresh_database

                stores[name] = exits.enter_context(fresh_database())
        return stores[name]

    def make(name: str = "memory", **options: Any) -> DynamicMemoryEngine:
        options.setdefault("clock", clock)
        engine = DynamicMemoryEngine(location(name), **options)
        made.append(engine)
        return engine

    make.location = location  # type: ignore[attr-defined]
    yield make
    for engine in made:
        with contextlib.suppress(Exception):
            engine.close()
    exits.close()


@pytest.fixture
def engine(make_engine: Callable[..., DynamicMemoryEngine]) -> DynamicMemoryEngine:
    return make_engine()
