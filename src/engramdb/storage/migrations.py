"""Named, ordered, append-only migrations of the engine's own tables, recorded in the file.

Each migration runs once, inside one transaction with its record. A file whose recorded schema
version is newer than the code refuses to open (`SchemaVersionError`) rather than be misread.
Later issues append migrations; never edit or reorder an applied one.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass

from engramdb.errors import SchemaVersionError


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    apply: Callable[[sqlite3.Connection], None]


def _m0001_meta(db: sqlite3.Connection) -> None:
    db.execute("CREATE TABLE IF NOT EXISTS engram_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")


def _m0002_row_vectors(db: sqlite3.Connection) -> None:
    # Embeddings of scope-table rows for the retriever's semantic ranking. The vectors are the
    # truth; the in-memory search matrix is rebuilt from them.
    db.execute(
        """CREATE TABLE IF NOT EXISTS engram_row_vectors (
            tbl TEXT NOT NULL, col TEXT NOT NULL, row_id INTEGER NOT NULL,
            digest BLOB NOT NULL, model TEXT NOT NULL, vec BLOB NOT NULL,
            PRIMARY KEY (tbl, col, row_id)) WITHOUT ROWID"""
    )


def _m0003_sequence(db: sqlite3.Connection) -> None:
    # The first AUTOINCREMENT table makes SQLite create sqlite_sequence, a catalog shared by every
    # namespace that no scope may touch. Creating it here, once, means a scope's AUTOINCREMENT
    # table never has to, and whether it exists says nothing about other namespaces.
    db.execute("CREATE TABLE IF NOT EXISTS engram_autoincrement (id INTEGER PRIMARY KEY AUTOINCREMENT)")


MIGRATIONS: list[Migration] = [
    Migration(1, "meta", _m0001_meta),
    Migration(2, "row_vectors", _m0002_row_vectors),
    Migration(3, "sqlite_sequence", _m0003_sequence),
]


def register(migration: Migration) -> None:
    """Append a migration (used by later modules at import time); versions must keep increasing."""
    if any(m.version == migration.version for m in MIGRATIONS):
        return
    if migration.version != MIGRATIONS[-1].version + 1:
        raise RuntimeError(
            f"migration {migration.name} has version {migration.version}, expected {MIGRATIONS[-1].version + 1}"
        )
    MIGRATIONS.append(migration)


def code_version() -> int:
    return MIGRATIONS[-1].version


def migrate(db: sqlite3.Connection, now: Callable[[], float] = time.time) -> int:
    """Bring the file up to this code's schema version; return the version in force."""
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute(
            "CREATE TABLE IF NOT EXISTS engram_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
        )
        row = db.execute("SELECT max(version) FROM engram_migrations").fetchone()
        current = int(row[0] or 0)
        if current > code_version():
            raise SchemaVersionError(
                f"this database has schema version {current}, newer than this engramdb knows ({code_version()}); "
                "upgrade engramdb to open it"
            )
        for m in MIGRATIONS:
            if m.version > current:
                m.apply(db)
                db.execute("INSERT INTO engram_migrations VALUES (?, ?, ?)", (m.version, m.name, now()))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return code_version()
