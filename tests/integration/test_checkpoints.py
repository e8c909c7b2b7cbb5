"""The SQLite adapter's checkpoints: a background thread copies the write-ahead log into the
database, writers do it only past the bound, and commits stay durable across a SIGKILL."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from engramdb.errors import ConfigError
from engramdb.storage.sqlite.connection import SqliteSettings, SqliteStore

pytestmark = pytest.mark.sqlite_only


def _write(store: SqliteStore, rows: int) -> None:
    conn = store.connection("engine")
    conn.raw.execute("CREATE TABLE IF NOT EXISTS t (n INTEGER PRIMARY KEY, v TEXT)")
    for i in range(rows):
        with store.atomic(conn):
            conn.raw.execute("INSERT INTO t (v) VALUES (?)", (f"row {i}",))


def _in_main_file(path: Path) -> int:
    """Rows of ``t`` in the database file itself: ``immutable`` reads it without the log."""
    db = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
    try:
        return int(db.execute("SELECT count(*) FROM t").fetchone()[0])
    except sqlite3.OperationalError:  # the table itself is still only in the log
        return 0
    finally:
        db.close()


def test_the_background_thread_copies_the_log_into_the_database(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "db.sqlite", SqliteSettings(checkpoint_interval=0.01))
    try:
        _write(store, 30)
        raw = store.connection("engine").raw
        # The writers' own checkpoints wait for the bound (SQLite's default was 1,000 pages).
        assert raw.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 16384
        assert raw.execute("PRAGMA journal_size_limit").fetchone()[0] == 16384 * 256  # after a restart
        checkpointer = store.checkpointer
        assert checkpointer is not None
        deadline = time.monotonic() + 20
        while _in_main_file(store.path) < 30 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _in_main_file(store.path) == 30
        assert checkpointer.runs >= 1
    finally:
        store.close()
    assert not Path(f"{store.path}-wal").exists()  # the last close still checkpoints and removes the log


def test_close_ends_the_thread_without_waiting_out_its_interval(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "db.sqlite", SqliteSettings(checkpoint_interval=60))
    _write(store, 3)
    checkpointer = store.checkpointer
    assert checkpointer is not None
    thread = checkpointer._thread
    assert thread is not None and thread.is_alive()
    started = time.monotonic()
    store.close()
    assert not thread.is_alive()
    assert time.monotonic() - started < 30  # not the 60 s interval
    assert _in_main_file(store.path) == 3


def test_interval_zero_leaves_checkpoints_to_the_writers(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "db.sqlite", SqliteSettings(checkpoint_interval=0))
    try:
        assert store.checkpointer is None
        _write(store, 2)
        assert store.connection("engine").raw.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000
    finally:
        store.close()


@pytest.mark.parametrize("value", [-1, 61, "0.25", True])
def test_a_bad_interval_is_a_config_error(tmp_path: Path, value: object) -> None:
    with pytest.raises(ConfigError, match="checkpoint_interval"):
        SqliteStore(tmp_path / "db.sqlite", SqliteSettings(checkpoint_interval=value))  # type: ignore[arg-type]


def test_commits_survive_a_sigkill_with_the_log_not_yet_copied(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    script = textwrap.dedent(
        f"""
        import os, signal
        from engramdb.storage.sqlite.connection import SqliteSettings, SqliteStore
        store = SqliteStore({str(path)!r}, SqliteSettings(checkpoint_interval=60))
        conn = store.connection("engine")
        conn.raw.execute("CREATE TABLE t (n INTEGER PRIMARY KEY, v TEXT)")
        for i in range(200):
            with store.atomic(conn):
                conn.raw.execute("INSERT INTO t (v) VALUES (?)", (f"row {{i}}",))
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    assert _in_main_file(path) == 0  # nothing was checkpointed: every row is only in the log
    store = SqliteStore(path, SqliteSettings())
    try:
        assert store.connection("engine").raw.execute("SELECT count(*) FROM t").fetchone()[0] == 200
    finally:
        store.close()
