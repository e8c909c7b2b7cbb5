"""Each tenant's raw-SQL tables in a file of their own, beside the store's file.

SQLite has one table namespace per file: two tenants' ``shared_notes`` can only be two tables if
they live in two files. So a tenant's scopes open that tenant's file and nothing else. The names
the model writes are the names SQLite resolves (no rewriting, no per-tenant prefix the model must
remember), the scope's authorizer is the same policy as ever, and a scope connection cannot
``ATTACH`` (its limit is 0), so no statement of one tenant's scope can name another tenant's file.

The store's own file keeps the tables of its *home* tenant: ``default``, or the tenant named by
the ``engram_meta`` key ``tables_tenant`` (set by `TenantFiles` on the file it keeps for one
tenant). Every file made before tenants had tables of their own therefore reads as it did.
Tables another tenant made in the store's file back then stay there, the home tenant's now;
`TenantTables.move` hands them to the tenant they belong to.

Layout: ``memory.db`` keeps its home tenant's tables; ``memory.db.tenants/<slug>-<hash>.db``
(`engramdb.tenancy.ids.tenant_file_name`) keeps each other tenant's. A ``:memory:`` store gives
each tenant a private temporary file, removed on close.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from engramdb.errors import ConfigError, TransactionError, ValidationError
from engramdb.scopes.namespace import ascii_lower
from engramdb.storage.sqlite.connection import SqliteStore, translate
from engramdb.storage.sqlite.migrations import migrate
from engramdb.storage.sqlite.vectors import SqliteRowVectors
from engramdb.tenancy.ids import check_tenant, tenant_file_name

log = logging.getLogger(__name__)

#: the ``engram_meta`` key naming the tenant whose raw-SQL tables a file holds (absent: ``default``)
TABLES_TENANT_KEY = "tables_tenant"
DEFAULT_TENANT = "default"
_NAMESPACES = ("shared_", "private_")


def _home_of(store: SqliteStore) -> str:
    conn = store.connection("engine")
    with translate(conn):
        row = conn.raw.execute("SELECT value FROM engram_meta WHERE key = ?", (TABLES_TENANT_KEY,)).fetchone()
    return DEFAULT_TENANT if row is None else str(row[0])


def _namespace_tables(raw: sqlite3.Connection, schema: str = "main") -> list[str]:
    rows = raw.execute(f"SELECT name FROM {schema}.sqlite_schema WHERE type = 'table' ORDER BY name").fetchall()  # noqa: S608 - schema is "main" or "src"
    return [str(r[0]) for r in rows if ascii_lower(str(r[0])).startswith(_NAMESPACES)]


class TenantTables:
    """The files of raw-SQL tables of one SQLite store: the store's own for its home tenant, one
    beside it for each other tenant, opened on a tenant's first scope and kept until `close`."""

    def __init__(self, store: SqliteStore, row_vectors: SqliteRowVectors, *, memory_file: bool) -> None:
        self._main = store
        self._main_vectors = row_vectors
        self._memory_file = memory_file
        self._lock = threading.Lock()
        self._files: dict[str, tuple[SqliteStore, SqliteRowVectors]] = {}
        self._home: str | None = None
        self._warned = False

    @property
    def folder(self) -> Path:
        """Where the other tenants' files live (made on the first one)."""
        path = self._main.path
        return path.with_name(path.name + ".tenants")

    def home(self) -> str:
        """The tenant whose tables are in the store's own file."""
        home = self._home
        if home is None:
            home = self._home = _home_of(self._main)
        return home

    def claim(self, tenant: str) -> None:
        """Make `tenant` the home tenant of the store's file (a file kept for that tenant alone).

        `ConfigError` when the file's tables already belong to another tenant, or another
        tenant's tables were already opened in a file beside it."""
        check_tenant(tenant)
        with self._lock:
            if tenant == self.home():
                return
            if self.home() != DEFAULT_TENANT or self._files:
                raise self._taken(tenant)
            conn = self._main.connection("engine")
            with translate(conn), self._main.atomic(conn):
                conn.raw.execute(
                    "INSERT OR IGNORE INTO engram_meta (key, value) VALUES (?, ?)", (TABLES_TENANT_KEY, tenant)
                )
            self._home = None
            if self.home() != tenant:  # another process claimed it first, for another tenant
                raise self._taken(tenant)

    def _taken(self, tenant: str) -> ConfigError:
        return ConfigError(
            f"{self._main.path} keeps the raw-SQL tables of tenant {self.home()!r}; "
            f"it cannot be made the file of tenant {tenant!r}"
        )

    def of(self, tenant: str) -> tuple[SqliteStore, SqliteRowVectors]:
        """The store and row vectors of `tenant`'s raw-SQL tables (its file opened on first use)."""
        if tenant == self.home():
            return self._main, self._main_vectors
        found = self._files.get(tenant)
        if found is not None:
            return found
        with self._lock:
            found = self._files.get(tenant)
            if found is None:
                found = self._files[tenant] = self._open(tenant)
        return found

    def _open(self, tenant: str) -> tuple[SqliteStore, SqliteRowVectors]:
        # Tenant files hold agents' own tables, written far less than the store's: SQLite's own
        # checkpoint inside the committing writer is enough, and a thousand tenants must not
        # start a thousand checkpoint threads.
        settings = dataclasses.replace(self._main.settings, checkpoint_interval=0)
        path: str | Path = ":memory:" if self._memory_file else self.folder / tenant_file_name(tenant)
        new = path == ":memory:" or not Path(path).exists()
        store = SqliteStore(path, settings)
        try:
            conn = store.connection("engine")
            with translate(conn):
                migrate(conn.raw)
            with translate(conn), store.atomic(conn):
                conn.raw.execute(
                    "INSERT OR IGNORE INTO engram_meta (key, value) VALUES (?, ?)", (TABLES_TENANT_KEY, tenant)
                )
            owner = _home_of(store)
            if owner != tenant:
                raise ConfigError(f"{store.path} holds the raw-SQL tables of tenant {owner!r}, not of {tenant!r}")
        except BaseException:
            store.close()
            raise
        if new:
            self._warn_once(tenant)
        return store, SqliteRowVectors(store)

    def _warn_once(self, tenant: str) -> None:
        """Before each tenant had its own tables, every tenant's were in the store's file."""
        if self._warned:
            return
        self._warned = True
        conn = self._main.connection("engine")
        with translate(conn):
            names = _namespace_tables(conn.raw)
        if names:
            log.warning(
                "tenant %r gets raw-SQL tables of its own; the %d raw-SQL tables in %s (%s) belong to tenant %r. "
                "If some were made by another tenant (before engramdb kept tenants' tables apart), hand them over "
                "with engine.move_tables([...], to_tenant=...)",
                tenant,
                len(names),
                self._main.path,
                ", ".join(names[:5]) + (", …" if len(names) > 5 else ""),
                self.home(),
            )

    def table_names(self, tenant: str) -> list[str]:
        """Every table in `tenant`'s file, sorted (engine tables included)."""
        store, _ = self.of(tenant)
        return store.table_names()

    def move(self, tables: Sequence[str], *, source: str, target: str) -> list[str]:
        """Move raw-SQL tables (rows, indexes, row vectors, AUTOINCREMENT counters) from `source`'s
        tables to `target`'s; returns their names. Checked before anything is written: each name
        is a ``shared_*`` / ``private_*`` table of `source`, none exists in `target`, and no
        foreign key joins a moved table to one left behind. The target's copy commits first, then
        the source's tables are dropped: a crash between leaves both copies, never none."""
        check_tenant(source)
        check_tenant(target)
        if source == target:
            raise ValidationError(f"the tables are tenant {source!r}'s already; name another tenant to move them to")
        if isinstance(tables, str) or not tables or not all(isinstance(t, str) for t in tables):
            raise ValidationError("tables must be a non-empty list of table names")
        src, _ = self.of(source)
        dst, _ = self.of(target)
        with self._exclusive(src) as src_raw, self._exclusive(dst) as dst_raw:
            names = self._check_move(src_raw, dst_raw, tables, source, target)
            dst_raw.execute("ATTACH DATABASE ? AS src", (str(src.path),))
            try:
                with translate():
                    self._copy(dst_raw, names)
            finally:
                dst_raw.execute("DETACH DATABASE src")
            with translate():
                src_raw.execute("BEGIN IMMEDIATE")
                try:
                    for name in names:
                        src_raw.execute(f'DROP TABLE "{name}"')
                        src_raw.execute("DELETE FROM engram_row_vectors WHERE tbl = ? COLLATE NOCASE", (name,))
                        src_raw.execute("DELETE FROM sqlite_sequence WHERE name = ?", (name,))
                    src_raw.execute("COMMIT")
                except BaseException:
                    src_raw.execute("ROLLBACK")
                    raise
        return names

    @contextlib.contextmanager
    def _exclusive(self, store: SqliteStore) -> Iterator[sqlite3.Connection]:
        """A connection of its own on `store`, outside every open transaction of this thread."""
        if store.holder is not None:
            raise TransactionError("move_tables() cannot run inside a transaction: commit or roll it back first")
        raw = sqlite3.connect(store.path, timeout=store.settings.busy_timeout, isolation_level=None)
        try:
            raw.execute("PRAGMA foreign_keys=ON")
            raw.execute(f"PRAGMA secure_delete={store.settings.secure_delete.upper()}")
            yield raw
        finally:
            raw.close()

    @staticmethod
    def _check_move(
        src: sqlite3.Connection, dst: sqlite3.Connection, tables: Sequence[str], source: str, target: str
    ) -> list[str]:
        have = {ascii_lower(n): n for n in _namespace_tables(src)}
        names: list[str] = []
        for table in tables:
            name = have.get(ascii_lower(table))
            if name is None:
                raise ValidationError(f"tenant {source!r} has no raw-SQL table {table!r}; nothing was moved")
            if name not in names:
                names.append(name)
        there = {ascii_lower(n) for n in _namespace_tables(dst)}
        clash = [n for n in names if ascii_lower(n) in there]
        if clash:
            raise ValidationError(
                f"tenant {target!r} already has a table named {', '.join(clash)}; nothing was moved "
                "(rename or drop one of them first)"
            )
        moving = {ascii_lower(n) for n in names}
        for name in have.values():
            refs = {
                ascii_lower(str(r[0])) for r in src.execute('SELECT "table" FROM pragma_foreign_key_list(?)', (name,))
            }
            inside = ascii_lower(name) in moving
            if (inside and not refs <= moving) or (not inside and refs & moving):
                raise ValidationError(
                    f"a foreign key joins {name} and another table on the other side of the move; "
                    "move the tables a foreign key joins together"
                )
        return names

    @staticmethod
    def _copy(dst: sqlite3.Connection, names: list[str]) -> None:
        dst.execute("BEGIN IMMEDIATE")
        try:
            # Children may be copied before their parents: the keys are checked at commit.
            dst.execute("PRAGMA defer_foreign_keys=ON")
            # Every table first, then the rows: a child's insert needs its parent table to exist.
            for name in names:
                ddl = dst.execute(
                    "SELECT sql FROM src.sqlite_schema WHERE tbl_name = ? AND sql IS NOT NULL "
                    "ORDER BY type = 'table' DESC, rowid",
                    (name,),
                ).fetchall()
                for (statement,) in ddl:
                    # The table's own statement, as its scope wrote it and SQLite stored it:
                    # unqualified, it creates the table in the target file.
                    dst.execute(statement)
            for name in names:
                cols = [
                    '"{}"'.format(str(r[1]).replace('"', '""'))
                    for r in dst.execute("SELECT * FROM src.pragma_table_xinfo(?)", (name,))
                    if int(r[6]) == 0  # generated and hidden columns are computed, not copied
                ]
                rowid = dst.execute("SELECT wr FROM src.pragma_table_list(?)", (name,)).fetchone()
                keyed = rowid is not None and not int(rowid[0])
                listed = ", ".join((["rowid"] if keyed else []) + cols)
                dst.execute(f'INSERT INTO main."{name}" ({listed}) SELECT {listed} FROM src."{name}"')  # noqa: S608 - names from the catalog
                dst.execute(
                    "INSERT OR REPLACE INTO main.engram_row_vectors "
                    "SELECT * FROM src.engram_row_vectors WHERE tbl = ? COLLATE NOCASE",
                    (name,),
                )
                # The copy's inserts set the counter to the largest key copied; the source's may
                # be past it (rows deleted at the end), and a key is never handed out twice.
                dst.execute("DELETE FROM main.sqlite_sequence WHERE name = ?", (name,))
                dst.execute(
                    "INSERT INTO main.sqlite_sequence (name, seq) SELECT name, seq FROM src.sqlite_sequence WHERE name = ?",
                    (name,),
                )
            dst.execute("COMMIT")
        except BaseException:
            dst.execute("ROLLBACK")
            raise

    def close(self) -> None:
        with self._lock:
            files, self._files = list(self._files.values()), {}
        for store, _ in files:
            store.close()


__all__ = ["TABLES_TENANT_KEY", "TenantTables"]
