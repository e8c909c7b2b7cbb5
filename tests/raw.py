"""Raw SQL against an engine's own store, behind the API's back, for tests on either backend.

Statements are written in SQLite's dialect with ``?`` placeholders over the engine's table names;
on PostgreSQL they run as the admin URL's role with ``search_path = engram`` (``?`` becomes ``%s``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from engramdb import DynamicMemoryEngine
from engramdb.storage.sqlite import SqliteBackend


def rows(engine: DynamicMemoryEngine, sql: str, *params: object) -> list[tuple[Any, ...]]:
    """The rows of one statement."""
    if isinstance(engine.backend, SqliteBackend):
        import sqlite3

        db = sqlite3.connect(engine.path)
        try:
            with db:
                return db.execute(sql, params).fetchall()
        finally:
            db.close()
    import psycopg

    with psycopg.connect(engine.backend.url, autocommit=True) as pg:  # type: ignore[attr-defined]
        pg.execute("SET search_path = engram, public")
        cur = pg.execute(sql.replace("?", "%s"), params or None)  # type: ignore[arg-type]
        return cur.fetchall() if cur.description else []


def scalar(engine: DynamicMemoryEngine, sql: str, *params: object) -> Any:
    """The first value of the first row of one statement."""
    return rows(engine, sql, *params)[0][0]


def executemany(engine: DynamicMemoryEngine, sql: str, seq: Iterable[Sequence[object]]) -> None:
    """Run one statement per parameter set, in one transaction."""
    if isinstance(engine.backend, SqliteBackend):
        import sqlite3

        db = sqlite3.connect(engine.path)
        try:
            with db:
                db.executemany(sql, seq)
        finally:
            db.close()
        return
    import psycopg

    with psycopg.connect(engine.backend.url) as pg:  # type: ignore[attr-defined]
        pg.execute("SET search_path = engram, public")
        pg.cursor().executemany(sql.replace("?", "%s"), seq)  # type: ignore[arg-type]
