"""A damaged database file: every call works or raises `BackendError`, never a `sqlite3` exception.

The store is written for real (memories, edges, accesses, a scope table), closed so that the WAL
is checkpointed into the main file, then bytes in the middle of the file — inside b-tree pages of
the engine's tables — are overwritten with random bytes (one seed per case). Opening and the main
operations run in a worker thread with a deadline, so a loop on a broken page fails the test
instead of hanging it.
"""

from __future__ import annotations

import itertools
import random
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from engramdb import BackendError, DynamicMemoryEngine, EngramError
from engramdb.testing import FixedClock

pytestmark = pytest.mark.sqlite_only

#: the engine's tables and indexes (not a scope's) are the pages that get damaged
_ENGINE_PREFIX = "engram_"
_DEADLINE = 30.0


def _write_store(path: Path) -> None:
    clock = FixedClock()
    with DynamicMemoryEngine(path, clock=clock, memory_embedder=None) as engine:
        me = engine.agent("alice")
        made = me.remember_many(
            [{"content": f"note {i}: the build of service {i % 7} failed on step {i % 5}", "shared": i % 3 == 0}
             for i in range(300)]
        )  # fmt: skip
        for a, b in itertools.pairwise(made[:41]):
            me.link(a.id, b.id)
        for i in range(20):
            clock.advance(60)
            me.recall(f"service {i % 7} build")
        me.shared.execute("CREATE TABLE shared_notes (id INTEGER PRIMARY KEY, body TEXT)")
        me.shared.executemany("INSERT INTO shared_notes (body) VALUES (?)", [(f"row {i} " * 20,) for i in range(300)])


def _engine_pages(path: Path) -> tuple[int, list[int]]:
    """The page size and the page numbers (1-based) of the engine tables' b-trees, from the catalog."""
    raw = sqlite3.connect(path)
    try:
        page_size = raw.execute("PRAGMA page_size").fetchone()[0]
        names = [
            row[0]
            for row in raw.execute("SELECT name FROM sqlite_schema WHERE type IN ('table', 'index')")
            if row[0].startswith(_ENGINE_PREFIX)
        ]
        pages: set[int] = set()
        try:
            for name in names:
                pages |= {r[0] for r in raw.execute("SELECT pageno FROM dbstat WHERE name = ?", (name,))}
        except sqlite3.OperationalError:  # no dbstat in this build: the root pages, then the middle of the file
            pages = {r[0] for r in raw.execute("SELECT rootpage FROM sqlite_schema WHERE name IN "
                                               f"({','.join('?' * len(names))})", names) if r[0]}  # fmt: skip
        return page_size, sorted(p for p in pages if p > 1)
    finally:
        raw.close()


def _damage(path: Path, seed: int, page_size: int, pages: list[int]) -> None:
    rng = random.Random(seed)
    data = bytearray(path.read_bytes())
    for page in rng.sample(pages, k=min(len(pages), rng.randint(1, 4))):
        start = (page - 1) * page_size
        if seed % 3 == 0:  # a whole page of garbage (a torn or misdirected write)
            data[start : start + page_size] = rng.randbytes(page_size)
            continue
        offset = start + rng.randrange(0, page_size - 64)  # a few bytes to most of a page
        length = rng.randint(8, min(page_size, len(data) - offset))
        data[offset : offset + length] = rng.randbytes(length)
    path.write_bytes(bytes(data))


def _exercise(path: Path) -> list[str]:
    """Open the store and run the main calls; what each did (``ok`` or the error class)."""
    outcomes: list[str] = []

    def attempt(label: str, call: Callable[[], object]) -> None:
        try:
            call()
            outcomes.append(f"{label}: ok")
        except BackendError:
            outcomes.append(f"{label}: BackendError")
        except EngramError as exc:
            outcomes.append(f"{label}: {type(exc).__name__}")

    try:
        engine = DynamicMemoryEngine(path, clock=FixedClock(), memory_embedder=None)
    except BackendError:
        return ["open: BackendError"]
    try:
        me = engine.agent("alice")
        attempt("recall", lambda: me.recall("service build failed", k=5))
        attempt("search", lambda: me.search("step", k=5))
        attempt("remember", lambda: me.remember("a fresh note after the damage"))
        attempt("memories", lambda: me.memories())
        attempt("forget", lambda: me.forget(me.memories()[0].id))
        attempt("reflect", lambda: me.reflect())
        attempt("scope select", lambda: me.shared.execute("SELECT count(*), max(body) FROM shared_notes").rows)
        attempt("scope insert", lambda: me.shared.execute("INSERT INTO shared_notes (body) VALUES ('x')"))
        attempt("stats", lambda: me.stats())
    finally:
        try:
            engine.close()
        except BackendError:
            outcomes.append("close: BackendError")
    return outcomes


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, int, list[int]]:
    path = tmp_path_factory.mktemp("pristine") / "memory.db"
    _write_store(path)
    page_size, pages = _engine_pages(path)
    assert len(pages) > 10, "the store should span many engine pages"
    return path.read_bytes(), page_size, pages


@pytest.mark.parametrize("seed", range(24))
def test_a_damaged_file_raises_backend_errors_only(
    pristine: tuple[bytes, int, list[int]], tmp_path: Path, seed: int
) -> None:
    image, page_size, pages = pristine
    path = tmp_path / "memory.db"
    path.write_bytes(image)
    _damage(path, seed, page_size, pages)
    result: list[str] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            result.extend(_exercise(path))
        except BaseException as exc:  # reported below with its type: the test's whole point
            failure.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(_DEADLINE)
    assert not worker.is_alive(), f"seed {seed}: a call on the damaged file hung past {_DEADLINE} s"
    assert not failure, f"seed {seed}: {type(failure[0]).__module__}.{type(failure[0]).__name__}: {failure[0]}"
    wrong = [r for r in result if not r.endswith((": ok", ": BackendError"))]
    assert not wrong, f"seed {seed}: expected success or BackendError, got {wrong} (all: {result})"


def test_the_damage_reaches_the_engine(pristine: tuple[bytes, int, list[int]], tmp_path: Path) -> None:
    """Not vacuous: the damaged pages are ones the calls read (most seeds break some call)."""
    image, page_size, pages = pristine
    broken = 0
    for seed in range(6):
        path = tmp_path / f"memory-{seed}.db"
        path.write_bytes(image)
        _damage(path, seed, page_size, pages)
        broken += any(r.endswith("BackendError") for r in _exercise(path))
    assert broken >= 3
