"""A full disk during recall, remember, forget, reflect and scope SQL: `BackendError` saying so, nothing half-written.

Two ways to fill it, both SQLite's own ``SQLITE_FULL`` ("database or disk is full"):

* ``PRAGMA max_page_count`` on the engine's and the scope's connections of this thread (test-only
  access to ``engine._backend.store``): the file may not grow by one page. A call that needs a new page fails;
  one that fits in the pages already there may succeed, so the calls that must fail carry enough
  text to need new pages.
* a real filesystem of 2 MB (tmpfs, mounted for the test; skipped where mounting is not allowed)
  filled up to the last byte after the write-ahead log is truncated: every write then fails.

After each failed call the store still opens and every engine table holds what it held before.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import sqlite3
import subprocess
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from engramdb import Agent, BackendError, DynamicMemoryEngine
from engramdb.testing import FixedClock, fake_embedder

pytestmark = pytest.mark.sqlite_only

_FULL = "disk is full"


def _counts(path: Path) -> dict[str, int]:
    """Rows per table (the engine's and the scopes'), read over a connection of its own (past the engine)."""
    db = sqlite3.connect(path)
    try:
        names = [
            r[0] for r in db.execute("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        ]
        return {name: db.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0] for name in names}
    finally:
        db.close()


def _fill(me: Agent, clock: FixedClock) -> list[str]:
    made = me.remember_many(
        [{"content": f"episode {i}: the deploy of service {i % 5} failed at step {i % 3}", "type": "episode"}
         for i in range(40)]
    )  # fmt: skip
    # near-duplicates, so that reflect has merges and links to write
    for i in range(6):
        me.remember(f"the deploy of service {i % 5} failed at step {i % 3} again", dedup=False)
    for i in range(5):
        clock.advance(3600)
        me.recall(f"service {i} deploy")
    me.shared.execute("CREATE TABLE shared_big (id INTEGER PRIMARY KEY, body TEXT)")
    return [m.id for m in made]


CALLS: dict[str, Callable[[Agent, list[str]], object]] = {
    # each one needs new pages: a recall logs its (long) query, a remember stores 60 KB of text
    "recall": lambda me, ids: me.recall("deploy of service failed " + "with a long query " * 400, k=10),
    "remember": lambda me, ids: me.remember("a note too big for a full disk " * 2000),
    "forget": lambda me, ids: me.forget(ids[0], reason="freeing space " * 1500),
    "reflect": lambda me, ids: me.reflect(),
    "scope insert": lambda me, ids: me.shared.execute("INSERT INTO shared_big (body) VALUES (?)", ("row " * 15000,)),
}


class LongGists:
    """A deterministic `Reasoner` whose gist is long enough to need new pages."""

    name = "long-gists@1"

    def abstract(self, episodes: Sequence[str]) -> str | None:
        return "In short: " + " ".join(episodes) * 60


#: under a page cap a full reflect may fit its first items in the pages there are; the abstract
#: step alone writes one long gist, which cannot fit
PAGE_CAP_CALLS: dict[str, Callable[[Agent, list[str]], object]] = {
    **CALLS,
    "reflect": lambda me, ids: me.reflect(reasoner=LongGists(), steps=("abstract",)),
}


def _check_failed_cleanly(path: Path, before: dict[str, int], error: BackendError) -> None:
    assert _FULL in str(error), f"the message should say the disk is full: {error}"
    assert _counts(path) == before, "a failed call left rows behind"


def _cap_pages(engine: DynamicMemoryEngine, pages: int | None) -> None:
    """Cap the file at `pages` (None: its size now) on every connection this thread holds.

    ``max_page_count`` belongs to a connection: the engine's (role ``engine``) and each scope's."""
    conns = engine._backend.store.local.state.conns  # type: ignore[attr-defined]
    engine._backend.store.connection("engine")  # type: ignore[attr-defined]
    for conn in conns.values():
        with conn.trusted() as raw:  # past a scope's authorizer, which never allows a PRAGMA
            size = pages or raw.execute("PRAGMA page_count").fetchone()[0]
            raw.execute(f"PRAGMA max_page_count = {size}")


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_full_database_file_fails_the_call_cleanly(tmp_path: Path, name: str) -> None:
    path = tmp_path / "memory.db"
    clock = FixedClock()
    with DynamicMemoryEngine(path, clock=clock, memory_embedder=None) as engine:
        me = engine.agent("alice")
        ids = _fill(me, clock)
        raw = engine._backend.store.connection("engine").raw  # type: ignore[attr-defined]
        raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        raw.execute("VACUUM")  # no free pages left to reuse: growth means a new page
        before = _counts(path)
        _cap_pages(engine, None)
        with pytest.raises(BackendError) as info:
            PAGE_CAP_CALLS[name](me, ids)
        _check_failed_cleanly(path, before, info.value)
        _cap_pages(engine, 1 << 30)
        me.remember("space again: writes work")  # the store was left usable
    with DynamicMemoryEngine(path, clock=clock, memory_embedder=None) as engine:
        assert engine.agent("alice").stats().memories == before["engram_memories"] + 1 - _archived(path)


def _archived(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute("SELECT count(*) FROM engram_memories WHERE archived").fetchone()[0])
    finally:
        db.close()


@contextlib.contextmanager
def _small_filesystem(where: Path) -> Iterator[Path]:
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)], capture_output=True, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


def _fill_disk(folder: Path) -> Path:
    """Write a filler file until the filesystem has no byte left; the filler's path."""
    filler = folder / f"filler-{uuid.uuid4().hex}"
    with open(filler, "wb", buffering=0) as fp:
        for size in (1 << 16, 1 << 12, 1 << 9, 1):
            while True:
                try:
                    fp.write(b"\0" * size)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
                    break
    return filler


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_full_filesystem_fails_the_call_cleanly(tmp_path: Path, name: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    with _small_filesystem(tmp_path / "small") as folder:
        path = folder / "memory.db"
        clock = FixedClock()
        with DynamicMemoryEngine(path, clock=clock, memory_embedder=fake_embedder(64)) as engine:
            me = engine.agent("alice")
            ids = _fill(me, clock)
            me.recall("warm the caches")
            raw = engine._backend.store.connection("engine").raw  # type: ignore[attr-defined]
            raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the next write must grow the log
            before = _counts(path)
            filler = _fill_disk(folder)
            with pytest.raises(BackendError) as info:
                CALLS[name](me, ids)
            _check_failed_cleanly(path, before, info.value)
            filler.unlink()
            me.remember("space again: writes work")
        with DynamicMemoryEngine(path, clock=clock, memory_embedder=fake_embedder(64)) as engine:
            assert _counts(path)["engram_memories"] == before["engram_memories"] + 1
            assert engine.agent("alice").recall("space again").hits


@pytest.mark.parametrize("when", ["recall", "close"])
def test_a_full_disk_under_the_side_files_is_logged_and_the_call_succeeds(
    tmp_path: Path, when: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The caches' folder on a filesystem of its own that is full: every side file write fails
    (faiss's IVF writer among them), and recall and close answer as if there were no cache file."""
    pytest.importorskip("faiss")
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    from engramdb.retrieval.side_files import side_dir_for
    from engramdb.vectors.ann import AnnIndex

    path = tmp_path / "memory.db"
    clock = FixedClock()
    with _small_filesystem(side_dir_for(path)) as folder:
        _fill_disk(folder)
        engine = DynamicMemoryEngine(
            path,
            clock=clock,
            memory_embedder=fake_embedder(32),
            vector_index=lambda dim: AnnIndex(dim, train_at=64, nlist=8, exact_rows=0),
        )
        try:
            me = engine.agent("alice")
            me.remember_many([{"content": f"note {i}: the otter crossed the harbour on day {i}"} for i in range(300)])
            with caplog.at_level(logging.WARNING, "engramdb"):
                if when == "close":
                    me.remember("a first write builds the caches without a recall")
                    engine.close()
                else:
                    assert me.recall("otter harbour day 12", k=3).hits
        finally:
            engine.close()
        assert "could not save the vector cache" in caplog.text
        assert not [p for p in folder.iterdir() if p.suffix in (".npz", ".faiss")]
    with DynamicMemoryEngine(path, clock=clock, memory_embedder=fake_embedder(32)) as engine:
        assert engine.agent("alice").recall("otter harbour day 12", k=3).hits
