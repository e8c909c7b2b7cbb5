"""Read a store's engine tables directly, past the engine, on either backend: tests use it to
check what is really stored (row counts, text left on disk). Not a mock: a second connection.

SQL is written with ``?`` placeholders and the engine tables' names, which both backends share.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from engramdb import DynamicMemoryEngine


def raw_query(engine: DynamicMemoryEngine, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The rows of one read against `engine`'s store, over a connection of its own."""
    location = engine._backend.location
    if location.startswith(("postgresql://", "postgres://")):
        return _postgres(engine, sql, params)
    db = sqlite3.connect(engine.path)
    try:
        return list(db.execute(sql, params).fetchall())
    finally:
        db.close()


def raw_execute(engine: DynamicMemoryEngine, sql: str, params: tuple[Any, ...] = ()) -> None:
    """Run one write against `engine`'s store past the engine, committed (to set up a state the
    public API cannot make, e.g. what an older release or an earlier run left)."""
    location = engine._backend.location
    if location.startswith(("postgresql://", "postgres://")):
        _postgres(engine, sql + " RETURNING 1", params)
        return
    db = sqlite3.connect(engine.path)
    try:
        with db:
            db.execute(sql, params)
    finally:
        db.close()


def raw_count(engine: DynamicMemoryEngine, sql: str, params: tuple[Any, ...] = ()) -> int:
    """The single number a ``SELECT count(*) …`` returns."""
    return int(raw_query(engine, sql, params)[0][0])


def _postgres(engine: DynamicMemoryEngine, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    import psycopg

    url = getattr(engine._backend, "url", None) or engine._backend.location
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET search_path TO engram, public")
        return list(conn.execute(sql.replace("%", "%%").replace("?", "%s"), params).fetchall())
