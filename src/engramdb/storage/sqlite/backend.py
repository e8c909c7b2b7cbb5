"""`SqliteBackend`: every storage port over one SQLite file in WAL mode (the embedded default)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from engramdb.errors import TransactionError
from engramdb.scopes.namespace import Namespace
from engramdb.storage.sqlite.connection import SqliteSettings, SqliteStore, translate
from engramdb.storage.sqlite.graph import SqliteEdges
from engramdb.storage.sqlite.jobs import SqliteJobs
from engramdb.storage.sqlite.locks import tenant_lock
from engramdb.storage.sqlite.migrations import migrate
from engramdb.storage.sqlite.rows import SqliteMemoryRows
from engramdb.storage.sqlite.scope import SqliteScope
from engramdb.storage.sqlite.stream import (
    SqliteAccessStream,
    SqliteChangeSequence,
    SqliteRecallLog,
    SqliteTombstones,
    SqliteVersions,
)
from engramdb.storage.sqlite.tenant_tables import TenantTables
from engramdb.storage.sqlite.vectors import SqliteMemoryVectors, SqliteRowVectors

if TYPE_CHECKING:
    from engramdb.embeddings.base import Embedder


class SqliteBackend:
    """The storage ports (`engramdb.storage.ports.Backend`) over one SQLite file.

    Args:
        path: the database file (its parent directory is created); ``":memory:"`` uses a private
            temporary file removed on `close`.
        settings: timeouts, limits and durability (`SqliteSettings`).
    """

    def __init__(self, path: str | os.PathLike[str], settings: SqliteSettings | None = None) -> None:
        self.settings = settings or SqliteSettings()
        self._store = SqliteStore(path, self.settings)
        self._memory_file = str(path) == ":memory:"
        self.memories = SqliteMemoryRows(self._store)
        self.edges = SqliteEdges(self._store)
        self.accesses = SqliteAccessStream(self._store)
        self.tombstones = SqliteTombstones(self._store)
        self.recalls = SqliteRecallLog(self._store)
        self.versions = SqliteVersions(self._store)
        self.changes = SqliteChangeSequence(self._store)
        self.jobs = SqliteJobs(self._store)
        self.vectors = SqliteMemoryVectors(self._store)
        self.row_vectors = SqliteRowVectors(self._store)
        #: each tenant's raw-SQL tables: this file's for its home tenant, a file beside it for others
        self.tenant_tables = TenantTables(self._store, self.row_vectors, memory_file=self._memory_file)

    def __repr__(self) -> str:
        return f"SqliteBackend({self.location!r})"

    @property
    def path(self) -> Path:
        """The database file."""
        return self._store.path

    @property
    def store(self) -> SqliteStore:
        """The per-thread connections (adapter-internal; tests of SQLite specifics use it)."""
        return self._store

    @property
    def location(self) -> str:
        return str(self._store.path)

    @property
    def cache_file(self) -> Path | None:
        # Only a real file gets caches beside it (not the private temp file of ":memory:").
        return None if self._memory_file or not self._store.path.is_file() else self._store.path

    @property
    def caches_by_tenant(self) -> bool:
        # One file: its caches follow the whole file (tenants that need their own use TenantFiles).
        return False

    @property
    def server_index(self) -> None:
        # A local file: its one cache is always loaded, so nothing is read around it.
        return None

    # -- units of work ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def atomic(self) -> Iterator[None]:
        conn = self._store.connection("engine")
        with self._store.atomic(conn):
            yield

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        conn = self._store.connection("engine")
        raw = conn.raw
        if raw.in_transaction:
            yield
            return
        # A plain read transaction: it takes no write lock, so it never waits on this thread's
        # scope transactions either.
        with translate(conn):
            raw.execute("BEGIN")
        try:
            yield
        finally:
            with translate(conn):
                raw.execute("COMMIT")

    def in_transaction(self) -> bool:
        return self._store.connection("engine").in_transaction

    def tenant_lock(self, tenant: str, holder: str) -> contextlib.AbstractContextManager[None]:
        return tenant_lock(self._store.path, tenant, holder)

    # -- schema and identity ----------------------------------------------------------------------

    def migrate(self, now: float) -> int:
        conn = self._store.connection("engine")
        with translate(conn):
            return migrate(conn.raw, lambda: now)

    def instance_id(self) -> str | None:
        conn = self._store.connection("engine")
        with translate(conn):
            row = conn.raw.execute("SELECT value FROM engram_meta WHERE key = 'instance_id'").fetchone()
        return None if row is None else str(row[0])

    @contextlib.contextmanager
    def erasing(self) -> Iterator[None]:
        # secure_delete=FAST (the default setting) zeroes deleted cells but leaves the pages it
        # frees as they were: a long text's overflow pages, freed by every rewrite of its row (an
        # access rewrites the row), kept copies of it on the freelist. Inside, ON zeroes what the
        # forget frees; at the end every free page of the file is overwritten with zeros.
        conn = self._store.connection("engine")
        raw = conn.raw
        with translate(conn):
            before = int(raw.execute("PRAGMA secure_delete").fetchone()[0])
            raw.execute("PRAGMA secure_delete=ON")
        try:
            yield
            with translate(conn), self._store.atomic(conn):
                _wipe_free_pages(raw)
        finally:
            with translate(conn):
                # PRAGMA secure_delete reads back 0 / 1 / 2, but only accepts FAST by name: "=2"
                # parses as a boolean and sets ON.
                raw.execute(f"PRAGMA secure_delete={_SECURE_DELETE_NAMES.get(before, 'ON')}")

    def compact(self) -> None:
        # Cells deleted or moved by a b-tree rebalance can leave their old bytes in the unused
        # space between a live page's cell pointers and its cells, which neither secure_delete nor
        # the freelist wipe reach; VACUUM rebuilds every page from the live rows. Keys (INTEGER
        # PRIMARY KEY) are kept, so the side files stay valid.
        conn = self._store.connection("engine")
        raw = conn.raw
        if raw.in_transaction:
            raise TransactionError("compact() cannot run inside a transaction: commit or roll it back first")
        with translate(conn):
            raw.execute("VACUUM")
            self._store.truncate_log(raw)

    def after_forget(self) -> None:
        # secure_delete and the wipe have zeroed the freed space in the database; a checkpoint
        # moves the log into it and empties the log, so older copies of the text in the log go
        # too. Another process's open read blocks that: wait at most 0.1 s, then record it as
        # owed, in the file (`SqliteStore.record_owed`), for every process's checkpointer thread
        # or next commit to try until one completes.
        conn = self._store.connection("engine")
        raw = conn.raw
        if raw.in_transaction:
            self._store.truncate_owed = True
            return
        with translate(conn):
            if not self._store.truncate_log(raw):
                self._store.record_owed(raw)
                if self._store.checkpointer is not None:
                    self._store.checkpointer.poke()

    # -- raw-SQL scopes -----------------------------------------------------------------------------

    def scope(self, namespace: Namespace, embedder: Embedder | None, *, tenant: str = "default") -> SqliteScope:
        # SQLite has one table namespace per file: each tenant's tables are in a file of their own.
        store, row_vectors = self.tenant_tables.of(tenant)
        return SqliteScope(store, namespace, row_vectors, lambda: embedder)

    def table_names(self) -> list[str]:
        return self._store.table_names()

    def close(self) -> None:
        try:
            self.tenant_tables.close()
        finally:
            self._store.close()


#: what `PRAGMA secure_delete` reads back, by the name that sets it again
_SECURE_DELETE_NAMES = {0: "OFF", 1: "ON", 2: "FAST"}

#: the most pages one row of the wipe covers (4 MiB of zeros at 4 KiB pages)
_WIPE_CHUNK_PAGES = 1024


def _wipe_free_pages(raw: sqlite3.Connection) -> None:
    """Overwrite every page on the file's freelist with zeros: rows of zeros take the free pages
    first (SQLite allocates from the freelist before it grows the file), and deleting them under
    secure_delete=ON frees the pages zeroed. Costs the freelist's size in log writes, once."""
    page = int(raw.execute("PRAGMA page_size").fetchone()[0])
    wrote = False
    while True:
        free = int(raw.execute("PRAGMA freelist_count").fetchone()[0])
        if not free:
            break
        # Sized to what `free` pages hold as overflow (page - 4 bytes each) less a page for the
        # cell's own bytes, so the file does not grow past its freelist; never less than a page,
        # so each row takes at least one free page and the loop ends.
        n = min(free, _WIPE_CHUNK_PAGES)
        raw.execute("INSERT INTO engram_wipe (b) VALUES (zeroblob(?))", (max(n * (page - 4) - page, page),))
        wrote = True
    if wrote:
        raw.execute("DELETE FROM engram_wipe")
