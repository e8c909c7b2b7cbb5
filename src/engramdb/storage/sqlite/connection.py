"""SQLite connections: one per thread and role, configured once, translated errors.

A *role* is either the engine itself (no authorizer) or one table namespace (an authorizer
`Policy`, limits and a time budget). Each thread gets its own connection per role, so a
transaction begun on one thread can never capture another thread's statements, and a prepared
statement is only ever reused under the authorizer it was prepared with (SQLite consults the
authorizer at prepare time only).

WAL lets readers run beside the single writer; writers queue on the busy timeout. Explicit
transactions start with ``BEGIN IMMEDIATE`` so that they never fail half-way on a lock upgrade.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import sqlite3
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from engramdb.errors import (
    BackendError,
    ConfigError,
    ConstraintError,
    EngramError,
    ResourceLimitExceeded,
    ScopeViolation,
    SqlError,
    TransactionError,
    ValidationError,
)
from engramdb.scopes.namespace import Namespace
from engramdb.storage.sqlite.authorizer import Policy

_SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")


@dataclass(frozen=True, slots=True)
class SqliteSettings:
    """How the engine opens its SQLite file. Times in seconds, sizes in bytes."""

    busy_timeout: float = 30.0
    #: wall-clock budget of one scope statement; a runaway query is interrupted past it
    statement_timeout: float = 5.0
    #: the largest string or blob a scope statement may build (randomblob, zeroblob, printf)
    max_value_bytes: int = 16 * 1024 * 1024
    #: NORMAL is durable across process crashes in WAL mode; FULL also survives power loss
    synchronous: str = "NORMAL"
    #: ON zeroes pages as they become wholly free (a long memory's overflow pages, freed when a
    #: recall rewrites its row, would otherwise keep the text for other tables to reuse); FAST
    #: zeroes only deleted content inside b-tree pages
    secure_delete: str = "ON"
    #: the most rows one scope call (execute / query) may return; `stream` reads past it in batches
    max_result_rows: int = 100_000
    #: the most bytes of text and blobs one scope call may return (counted from its 256th row on)
    max_result_bytes: int = 64 * 1024 * 1024
    #: seconds a background thread lets commits gather before copying the write-ahead log into
    #: the database (a PASSIVE checkpoint, off the writers' path; 0 turns the thread off and
    #: leaves checkpoints to the committing writer at SQLite's default 1,000 pages). At 1M
    #: memories, 1,000 single writes: 0.25 s gave a higher p50 than 1 s (the checkpoints compete
    #: with the writer for the 2 cores), and 0 the same p50 as 1 s but long stalls in 1% of calls.
    checkpoint_interval: float = 1.0
    #: log pages at which a committing writer checkpoints itself all the same (SQLite's
    #: ``wal_autocheckpoint``): the bound on the log when the background thread falls behind
    checkpoint_bound_pages: int = 16384


#: rows fetched at a time when a result is capped; a result smaller than this is one call
_CHUNK = 256


#: rows fetched at first by the scope's hot paths: a result shorter than this is complete
FIRST_CHUNK = _CHUNK


def fetch_capped(cur: sqlite3.Cursor, settings: SqliteSettings) -> list[Any]:
    """The rows of `cur`, or `ResourceLimitExceeded` as soon as they pass the settings' row or
    byte cap (so a runaway SELECT never fills memory)."""
    if cur.description is None:
        return []
    rows = cur.fetchmany(_CHUNK)
    if len(rows) < _CHUNK:
        return rows  # the common case: one call, nothing counted
    return fetch_rest(cur, rows, settings)


def fetch_rest(cur: sqlite3.Cursor, rows: list[Any], settings: SqliteSettings) -> list[Any]:
    """`rows` (the first full chunk of `cur`) and the rest, within the settings' caps."""
    max_rows, max_bytes = settings.max_result_rows, settings.max_result_bytes
    size = _size(rows)
    while True:
        if len(rows) > max_rows or size > max_bytes:
            what = f"{max_rows:,} rows" if len(rows) > max_rows else f"{max_bytes:,} bytes"
            cur.close()  # ends the statement (and its read snapshot) now
            raise ResourceLimitExceeded(
                f"the statement returns more than {what} (the scope's result limit); add a LIMIT, "
                "read it in batches with scope.stream(), or raise max_result_rows / max_result_bytes"
            )
        more = cur.fetchmany(_CHUNK * 16)
        if not more:
            return rows
        rows += more
        size += _size(more)


def _size(rows: list[Any]) -> int:
    return sum(len(v) if isinstance(v, (str, bytes)) else 8 for row in rows for v in row)


class Conn:
    """One thread's connection for one role. Not shared between threads."""

    __slots__ = ("__weakref__", "label", "policy", "raw", "started")

    def __init__(self, raw: sqlite3.Connection, policy: Policy | None, label: str) -> None:
        self.raw = raw
        self.policy = policy
        self.label = label
        #: when the running scope call's clock started; every scope call arms the clock by setting
        #: None, and the progress handler starts it the first time it runs within the call, so the
        #: hot path costs one store and a statement that ends sooner costs nothing
        self.started: float | None = None

    @property
    def in_transaction(self) -> bool:
        return self.raw.in_transaction

    @contextlib.contextmanager
    def trusted(self) -> Iterator[sqlite3.Connection]:
        """Run engine-issued statements (transaction control, catalog checks) past the policy."""
        if self.policy is None:
            yield self.raw
            return
        self.policy.trusted = True
        try:
            yield self.raw
        finally:
            self.policy.trusted = False


class ThreadState:
    """One thread's connections by role, and which of them holds its explicit transaction."""

    __slots__ = ("conns", "holder", "last")

    def __init__(self) -> None:
        self.conns: dict[str, Conn] = {}
        #: the connection of this thread that holds an explicit transaction, if any
        self.holder: Conn | None = None
        #: the last connection that began one (to explain a transaction SQLite rolled back)
        self.last: Conn | None = None


class _Local(threading.local):
    # One attribute, so a call reads the thread-local storage once (each read costs as much as
    # a few plain attribute reads) and everything else from a plain object.
    def __init__(self) -> None:
        self.state = ThreadState()


def _database_file(path: str | os.PathLike[str]) -> Path:
    """The database file at `path`. Its folder is made only when that alone is missing (the
    ``.engramdb/`` of ``.engramdb/memory.db``); a deeper missing tree is a `ConfigError`, since a
    typo should not silently make folders, and so is a path that names a folder."""
    file = Path(path).expanduser()
    if file.is_dir():
        raise ConfigError(f"{file} is a folder; give the path of the database file in it, e.g. {file / 'memory.db'}")
    folder = file.parent
    if not folder.exists():
        if not folder.parent.is_dir():
            raise ConfigError(
                f"cannot create {file}: the folder {folder.parent} does not exist; create it first "
                "(engramdb makes at most the database's own folder)"
            )
        try:
            folder.mkdir(exist_ok=True)
        except OSError as exc:
            raise BackendError(f"cannot create the folder {folder}: {exc.strerror or exc}") from None
    elif not folder.is_dir():
        raise ConfigError(f"cannot create {file}: {folder} is not a folder")
    return file


class SqliteStore:
    """The engine's SQLite file: per-thread connections by role, and its lifecycle."""

    def __init__(self, path: str | os.PathLike[str], settings: SqliteSettings) -> None:
        if not isinstance(settings.synchronous, str) or settings.synchronous.upper() not in _SYNCHRONOUS:
            raise ConfigError(f"synchronous must be one of {', '.join(_SYNCHRONOUS)}, got {settings.synchronous!r}")
        if not isinstance(settings.secure_delete, str) or settings.secure_delete.upper() not in ("FAST", "ON"):
            raise ConfigError('secure_delete must be "FAST" or "ON" (forgotten text must not stay in the file)')
        interval = settings.checkpoint_interval
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not 0 <= interval <= 60:
            raise ConfigError(f"checkpoint_interval must be a number of seconds from 0 to 60, got {interval!r}")
        for name in ("max_result_rows", "max_result_bytes", "checkpoint_bound_pages"):
            v = getattr(settings, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"{name} must be a whole number of 1 or more, got {v!r}")
        self.settings = settings
        self._cleanup: Any = None
        if str(path) == ":memory:":
            # Per-thread connections cannot share one in-memory database; a private temp file
            # behaves the same and is removed on close() (or when the store is collected).
            tmpdir = tempfile.mkdtemp(prefix="engramdb-")
            self._cleanup = weakref.finalize(self, shutil.rmtree, tmpdir, True)
            path = Path(tmpdir) / "memory.db"
        self.path = _database_file(path)
        #: ``local.state`` is the calling thread's `ThreadState`; the scope's hot path reads it
        #: directly (close() replaces `local`, so nothing may keep a reference to it)
        self.local = _Local()
        self._all: weakref.WeakSet[Conn] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._closed = False
        self.checkpointer = Checkpointer(self) if settings.checkpoint_interval > 0 else None
        #: a forget's TRUNCATE checkpoint did not complete (a reader held an older snapshot): the
        #: log may still hold frames with the forgotten text, so it is tried again (`truncate_log`)
        #: by the checkpointer thread, or after the next commit without one, until it completes
        self.truncate_owed = False
        #: monotonic time before which a commit does not try an owed TRUNCATE again
        self._owed_next_try = 0.0
        # Switch the file to WAL once; the mode is persistent in the file. (A connection's `with`
        # commits but does not close it: closed here, or it stayed open until collected, and the
        # last close of the store did not remove the log.)
        first = self._open()
        try:
            try:
                mode = first.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            except sqlite3.DatabaseError as exc:
                raise BackendError(f"cannot open {self.path} as a SQLite database: {exc}") from None
            if str(mode).lower() != "wal":
                raise BackendError(f"{self.path}: could not switch to WAL mode (got {mode!r})")
        finally:
            first.close()

    def _open(self) -> sqlite3.Connection:
        try:
            raw = sqlite3.connect(
                self.path,
                timeout=self.settings.busy_timeout,
                isolation_level=None,
                check_same_thread=False,
                cached_statements=256,
            )
            raw.execute(f"PRAGMA busy_timeout={int(self.settings.busy_timeout * 1000)}")
            raw.execute("PRAGMA foreign_keys=ON")
            raw.execute("PRAGMA trusted_schema=OFF")
            # Deleted content is overwritten with zeros rather than left in free space: `forget`
            # means the text is gone from the file, not merely unlinked from the b-tree.
            raw.execute(f"PRAGMA secure_delete={self.settings.secure_delete.upper()}")
            raw.execute(f"PRAGMA synchronous={self.settings.synchronous.upper()}")
            if self.settings.checkpoint_interval > 0:
                # A commit that passed SQLite's default 1,000 log pages copied them into the
                # database itself (a stalled write every ~150 single writes at 1M memories): the
                # background `Checkpointer` does that now, the writer only past the bound.
                bound = int(self.settings.checkpoint_bound_pages)
                raw.execute(f"PRAGMA wal_autocheckpoint={bound}")
                # A log reset after a burst shrinks back to this (else the file keeps its largest
                # size, and the checkpointer's size check below would see a burst that is over).
                raw.execute(f"PRAGMA journal_size_limit={bound * _RESET_BYTES_PER_PAGE}")
        except sqlite3.Error as exc:
            raw.close()
            raise BackendError(f"cannot open {self.path} as a SQLite database: {exc}") from None
        return raw

    def connection(self, role: str, namespace: Namespace | None = None) -> Conn:
        """This thread's connection for `role`, opened and configured on first use."""
        if self._closed:
            raise BackendError("the engine is closed")
        conns = self.local.state.conns
        conn = conns.get(role)
        if conn is None:
            conn = self._make(role, namespace)
            conns[role] = conn
            with self._lock:
                self._all.add(conn)
        return conn

    def _make(self, role: str, namespace: Namespace | None) -> Conn:
        raw = self._open()
        if namespace is None:
            return Conn(raw, None, role)
        # Eponymous virtual tables announce themselves with schema bookkeeping on first use;
        # do that once here, trusted, so the policy never has to allow it.
        raw.execute("SELECT count(*) FROM json_each('[]')").fetchone()
        raw.execute("SELECT count(*) FROM json_tree('[]')").fetchone()
        limits = {
            sqlite3.SQLITE_LIMIT_LENGTH: self.settings.max_value_bytes,
            sqlite3.SQLITE_LIMIT_SQL_LENGTH: 1_000_000,
            sqlite3.SQLITE_LIMIT_ATTACHED: 0,
            sqlite3.SQLITE_LIMIT_EXPR_DEPTH: 200,
            sqlite3.SQLITE_LIMIT_COMPOUND_SELECT: 100,
            sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH: 1000,
            sqlite3.SQLITE_LIMIT_TRIGGER_DEPTH: 1,
        }
        for limit, value in limits.items():
            raw.setlimit(limit, value)
        policy = Policy(namespace, self._table_exists)
        conn = Conn(raw, policy, namespace.label)
        raw.set_authorizer(policy.authorize)
        # A closure over a weak reference: the connection must not keep its wrapper alive.
        ref = weakref.ref(conn)
        budget = self.settings.statement_timeout

        def over_budget() -> int:
            # Called every 1,000 VM steps. The first call within a scope call starts its clock
            # (a statement that ends sooner costs nothing); later ones stop it past the budget.
            c = ref()
            if c is None:
                return 0
            now = time.monotonic()
            started = c.started
            if started is None:
                c.started = now
                return 0
            return 1 if now - started > budget else 0

        raw.set_progress_handler(over_budget, 1000)
        guard_printf(raw, policy, self.settings.max_value_bytes)
        return conn

    # -- transactions -----------------------------------------------------------------------

    @property
    def holder(self) -> Conn | None:
        """The connection of the calling thread that holds an explicit transaction."""
        state = self.local.state
        h = state.holder
        if h is not None and not h.raw.in_transaction:
            state.holder = h = None  # SQLite ended it (e.g. an interrupted write)
        return h

    @property
    def last_holder(self) -> Conn | None:
        """The connection that most recently began an explicit transaction on this thread."""
        return self.local.state.last

    def check_write(self, conn: Conn) -> None:
        """Refuse a write that would wait forever on this thread's own open transaction."""
        h = self.holder
        if h is not None and h is not conn:
            raise TransactionError(
                f"this thread has an open transaction on '{h.label}'; commit or roll it back "
                f"before writing through '{conn.label}' (one transaction spans one scope)"
            )

    def begin(self, conn: Conn) -> None:
        if conn.in_transaction:
            raise TransactionError(f"a transaction is already open on '{conn.label}' in this thread")
        self.check_write(conn)
        with conn.trusted() as raw, translate(conn):
            raw.execute("BEGIN IMMEDIATE")
        state = self.local.state
        state.holder = state.last = conn

    def commit(self, conn: Conn) -> None:
        if not conn.in_transaction:
            raise TransactionError(f"commit() without begin() on '{conn.label}' in this thread")
        with conn.trusted() as raw, translate(conn):
            raw.execute("COMMIT")
        state = self.local.state
        state.holder = state.last = None
        if self.checkpointer is not None:
            self.checkpointer.poke()

    def rollback(self, conn: Conn) -> None:
        """Roll back this thread's transaction on `conn`; a no-op when none is open."""
        if conn.in_transaction:
            with conn.trusted() as raw, translate(conn):
                raw.execute("ROLLBACK")
        state = self.local.state
        if state.holder is conn:
            state.holder = None
        state.last = None

    @contextlib.contextmanager
    def atomic(self, conn: Conn, *, immediate: bool = True) -> Iterator[None]:
        """All or nothing: a savepoint inside an open transaction, else a transaction of its own."""
        with conn.trusted() as raw:
            nested = conn.in_transaction
            if not nested:
                self.check_write(conn)
            with translate(conn):
                raw.execute("SAVEPOINT engram_call" if nested else ("BEGIN IMMEDIATE" if immediate else "BEGIN"))
        try:
            yield
        except BaseException:
            with conn.trusted() as raw, contextlib.suppress(sqlite3.Error):
                if raw.in_transaction:
                    if nested:
                        raw.execute("ROLLBACK TO engram_call")
                        raw.execute("RELEASE engram_call")
                    else:
                        raw.execute("ROLLBACK")
            raise
        with conn.trusted() as raw, translate(conn):
            if raw.in_transaction:
                raw.execute("RELEASE engram_call" if nested else "COMMIT")
        if not nested and self.checkpointer is not None:
            self.checkpointer.poke()
        elif not nested and time.monotonic() >= self._owed_next_try:
            # Without the checkpointer thread, a commit looks for an owed checkpoint (this
            # process's, or one another process recorded in the file) and tries it, at most once
            # a second and without waiting for the reader (waiting on every commit made each write
            # last the whole wait for as long as the reader kept its snapshot).
            self._owed_next_try = time.monotonic() + 1.0
            with conn.trusted() as raw, contextlib.suppress(sqlite3.Error):
                if self.truncate_owed or self.owed_in_file(raw):
                    self.truncate_log(raw, wait_ms=0)

    def owed_in_file(self, raw: sqlite3.Connection) -> bool:
        """True when a process recorded in the file (`record_owed`) a log checkpoint it could not
        complete; False also before the engine's tables exist."""
        try:
            return raw.execute("SELECT 1 FROM engram_meta WHERE key = ?", (_OWED_KEY,)).fetchone() is not None
        except sqlite3.Error:
            return False

    def record_owed(self, raw: sqlite3.Connection) -> None:
        """Record in the file that a forget's log checkpoint is owed, so that every process's
        checkpointer (or commit) tries it until one completes, not only this process's: this one
        may close, or stop writing, before the reader that blocks it goes away."""
        self.truncate_owed = True
        self._owed_next_try = 0.0  # the next commit tries
        raw.execute("INSERT OR REPLACE INTO engram_meta (key, value) VALUES (?, '1')", (_OWED_KEY,))

    def truncate_log(self, raw: sqlite3.Connection, *, wait_ms: int = 100) -> bool:
        """Copy the whole write-ahead log into the database and empty it (a TRUNCATE checkpoint),
        waiting at most `wait_ms` for readers (a TRUNCATE holds the write lock while it waits);
        True when that completed. Until it does, `truncate_owed` stays set: after a forget the
        log's older frames may hold its text (a log restarted from its start keeps the frames
        past the new ones)."""
        waited = int(raw.execute("PRAGMA busy_timeout").fetchone()[0])
        try:
            raw.execute(f"PRAGMA busy_timeout={int(wait_ms)}")
            row = raw.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        finally:
            raw.execute(f"PRAGMA busy_timeout={waited}")
        done = row is not None and int(row[0]) == 0
        self.truncate_owed = not done
        if done and not raw.in_transaction and self.owed_in_file(raw):
            with contextlib.suppress(sqlite3.Error):  # another process may have cleared it
                raw.execute("DELETE FROM engram_meta WHERE key = ?", (_OWED_KEY,))
        return done

    def _table_exists(self, name: str) -> bool:
        conn = self.connection("engine")
        row = conn.raw.execute(
            "SELECT 1 FROM sqlite_schema WHERE type IN ('table', 'view') AND name = ? COLLATE NOCASE", (name,)
        ).fetchone()
        return row is not None

    def table_names(self) -> list[str]:
        """Every table in ``main``, sorted; for engine code and the admin view only."""
        conn = self.connection("engine")
        with translate(conn):
            rows = conn.raw.execute("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name").fetchall()
        return [str(r[0]) for r in rows]

    def close(self) -> None:
        """Close every connection of every thread; further use raises `BackendError`."""
        if self.checkpointer is not None:
            self.checkpointer.stop()  # before the connections close: the last one checkpoints
        if self.truncate_owed and not self._closed:
            # A forget's log checkpoint still owed: a last try, waiting for readers as a forget
            # does (another process keeps the file open: else the last close empties the log).
            with contextlib.suppress(sqlite3.Error, EngramError):
                raw = self._open()
                try:
                    self.truncate_log(raw)
                finally:
                    raw.close()
        with self._lock:
            self._closed = True
            conns = list(self._all)
        for conn in conns:
            with contextlib.suppress(sqlite3.Error):
                conn.raw.close()
        self.local = _Local()
        if self._cleanup is not None:
            self._cleanup()


#: bytes of log file kept after a reset, per page of ``checkpoint_bound_pages`` (a sixteenth of
#: the bound at 4 KiB pages: 4 MiB at the default); also the growth since the last checkpoint
#: that makes a large log urgent
_RESET_BYTES_PER_PAGE = 256
#: the `engram_meta` key of a forget's log checkpoint that is still owed (`SqliteStore.record_owed`)
_OWED_KEY = "truncate_owed"
#: log file bytes, per page of the bound, past which a commit has the checkpointer run now
#: rather than after its interval (a quarter of the bound at 4 KiB pages: 16 MiB at the default)
_SOON_BYTES_PER_PAGE = 1024


class Checkpointer:
    """Copies the write-ahead log into the database on a daemon thread of its own (one per store
    and process), so that no writer pays for it: a commit wakes it, it waits
    `SqliteSettings.checkpoint_interval` for more commits (a page changed by many of them is then
    copied once), then runs a PASSIVE checkpoint on its own connection, which never blocks
    readers or writers. Durability is unchanged (a commit is durable once in the log, as
    `synchronous` says); so is the log's bound: past ``checkpoint_bound_pages`` a committing
    writer checkpoints itself, as SQLite always did (at 1,000 pages). Several processes on one
    file each run one; SQLite lets one checkpoint run at a time, and the others' attempts return
    at once. A log file past a quarter of the bound (several processes writing, or a burst)
    has the thread run at once instead of after its interval, so writers rarely meet the bound.
    A forked child starts its own thread on its first commit."""

    def __init__(self, store: SqliteStore) -> None:
        self._store = store
        self._wake = threading.Event()
        self._halt = threading.Event()
        self._soon = threading.Event()
        self._log = f"{store.path}-wal"
        self._soon_bytes = int(store.settings.checkpoint_bound_pages) * _SOON_BYTES_PER_PAGE
        self._grow_bytes = int(store.settings.checkpoint_bound_pages) * _RESET_BYTES_PER_PAGE
        self._size_then = 0  # the log file's size at the last checkpoint
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._pid = 0
        #: checkpoints run so far (tests and the benchmark read it)
        self.runs = 0

    def poke(self) -> None:
        """A commit happened: checkpoint soon (starts the thread on the first call of a process)."""
        thread = self._thread
        if thread is None or self._pid != os.getpid():
            with self._store._lock:
                if self._stopping:
                    return
                if self._thread is None or self._pid != os.getpid():
                    self._pid = os.getpid()
                    self._wake = threading.Event()
                    self._thread = threading.Thread(target=self._run, name="engramdb-checkpoint", daemon=True)
                    self._thread.start()
        self._wake.set()
        try:
            size = os.stat(self._log).st_size
        except OSError:
            return
        # The file only grows past its size at the last checkpoint with frames written since
        # (a reset reuses it from the start): past a quarter of the bound and growing, run now.
        if size > self._soon_bytes and size > self._size_then + self._grow_bytes:
            self._soon.set()

    def stop(self) -> None:
        """End the thread after the checkpoint it may be running (called by `SqliteStore.close`)."""
        self._stopping = True
        self._halt.set()
        self._soon.set()
        thread = self._thread
        if thread is not None and self._pid == os.getpid():
            self._wake.set()
            thread.join(timeout=30)

    def _run(self) -> None:
        raw: sqlite3.Connection | None = None
        wake, halt, soon = self._wake, self._halt, self._soon
        interval = self._store.settings.checkpoint_interval
        try:
            while not self._stopping:
                # An owed TRUNCATE (see `SqliteStore.truncate_owed`) is tried again every interval,
                # with or without commits to wake the thread.
                wake.wait(interval if self._store.truncate_owed else None)
                soon.wait(interval)
                if halt.is_set():
                    return  # closing: the last connection's close checkpoints
                wake.clear()
                soon.clear()
                try:
                    if raw is None:
                        raw = self._store._open()
                    if self._store.truncate_owed or self._store.owed_in_file(raw):
                        # Not waiting for the reader: a TRUNCATE holds the write lock while it
                        # waits, and stalled other writers once an interval.
                        self._store.truncate_log(raw, wait_ms=0)
                    else:
                        raw.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    self.runs += 1
                    # Writers keep appending while it copies, so the log seldom restarts from
                    # its start after it: the writer that passes the bound checkpoints what is
                    # left (little, by then) and restarts it (measured at 1M memories: the worst
                    # single write stayed short; a TRUNCATE here, which holds the write lock through
                    # its sync, stalled a writer far longer).
                    self._size_then = os.stat(self._log).st_size
                except (sqlite3.Error, EngramError, OSError):
                    # Busy (another process checkpoints), a full disk, a closed file: a later
                    # commit wakes the thread again, and the writers' bound still holds.
                    pass
        finally:
            if raw is not None:
                with contextlib.suppress(sqlite3.Error):
                    raw.close()


# -- printf with bounded widths -------------------------------------------------------------

_SPEC = re.compile(r"%[-+ 0#,!]*(\*|\d+)?(?:\.(\*|\d+))?[a-zA-Z%]")
_side = threading.local()


def guard_printf(raw: sqlite3.Connection, policy: Policy, limit: int) -> None:
    """Replace printf() and format() on a scope connection with a bounded version.

    SQLite's printf runs a huge width or precision (``printf('%.*c', 2000000000, 'x')``) as one C
    call that no progress handler can interrupt: it ran for many seconds here before returning NULL. The
    replacement refuses any width or precision above the value-size limit, then hands the call to
    SQLite's own printf on a private in-memory connection, so results are identical.
    """

    def bounded(fmt: object, *args: object) -> str | None:
        if isinstance(fmt, str) and "%" in fmt:
            pos = 0
            for m in _SPEC.finditer(fmt):
                for part in (m.group(1), m.group(2)):
                    if part is None:
                        continue
                    if part == "*":
                        value = args[pos] if pos < len(args) else 0
                        pos += 1
                    else:
                        value = int(part)
                    if isinstance(value, (int, float)) and abs(value) > limit:
                        policy.limit = (
                            f"printf width or precision {int(value):,} exceeds the value-size limit of {limit:,} bytes"
                        )
                        raise ValueError(policy.limit)
                if m.group(0)[-1] != "%":
                    pos += 1
        side = getattr(_side, "conn", None)
        if side is None:
            side = _side.conn = sqlite3.connect(":memory:")
            side.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limit)
        marks = ",".join("?" * (len(args) + 1))
        result = side.execute(f"SELECT printf({marks})", (fmt, *args)).fetchone()[0]
        return None if result is None else str(result)

    raw.create_function("printf", -1, bounded, deterministic=True)
    raw.create_function("format", -1, bounded, deterministic=True)


# -- error translation ---------------------------------------------------------------------

_FOREIGNISH = re.compile(r"\b(?:[A-Za-z_]+\.)?((?:private|shared|engram|sqlite)_[\w$-]*)", re.IGNORECASE)
_NO_SUCH_TABLE = re.compile(r"no such table: (?:[\w]+\.)?([^\s]+)")
_IO = ("disk i/o", "malformed", "unable to open", "readonly database", "database or disk is full", "not a database")


def _leaks(namespace: Namespace, message: str) -> bool:
    """True if an error message names something outside the namespace (its wording could reveal it)."""
    if any(not namespace.owns(m.group(1)) for m in _FOREIGNISH.finditer(message)):
        return True
    m = _NO_SUCH_TABLE.search(message)
    return m is not None and not namespace.owns(m.group(1))


def convert(exc: sqlite3.Error, conn: Conn | None) -> EngramError:
    """Translate a driver exception; scope errors never reveal foreign names or their existence."""
    message = str(exc)
    low = message.lower()
    policy = conn.policy if conn is not None else None
    if policy is not None:
        # What the policy recorded belongs to the statement that just failed: take it, so that it
        # cannot explain a later, unrelated failure (the hot path does not reset `limit`).
        limit, denial = policy.limit, policy.denial
        policy.limit = policy.denial = None
        if limit is not None:
            return ResourceLimitExceeded(limit)
        # A denial may be followed by another error that overwrites SQLite's message: the
        # recorded denial wins, whatever the driver says.
        if denial is not None:
            return ScopeViolation(denial)
        if "not authorized" in low or "prohibited" in low or "vtable constructor failed" in low:
            return ScopeViolation(policy.namespace.rule())
        if _leaks(policy.namespace, message):
            return ScopeViolation(policy.namespace.rule())
    if "interrupted" in low:
        return ResourceLimitExceeded("the statement ran past its time budget and was stopped")
    if any(s in low for s in ("too big", "too large", "too many", "too deep", "stack overflow")):
        return ResourceLimitExceeded(f"the statement exceeds a size limit: {message}")
    if isinstance(exc, sqlite3.IntegrityError):
        return ConstraintError(message)
    if "locked" in low or "busy" in low or any(s in low for s in _IO):
        return BackendError(_explain_failure(message, low))
    # Only a caller's own statement (a scope connection has a policy) can be the caller's
    # mistake; the engine's own SQL failing means the file is damaged (text that is not UTF-8,
    # a broken record), never a caller error.
    if policy is not None and isinstance(
        exc, (sqlite3.OperationalError, sqlite3.ProgrammingError, sqlite3.InterfaceError)
    ):
        return SqlError(message)
    return BackendError(_explain_failure(message, low))


def _explain_failure(message: str, low: str) -> str:
    """The driver's message with what it means for the caller and what to do."""
    if "database or disk is full" in low:
        return (
            f"the disk is full ({message}): the call was rolled back and wrote nothing; "
            "free some space (or raise the file's size limit) and retry"
        )
    if "malformed" in low or "not a database" in low or "could not decode" in low or "corrupt" in low:
        return (
            f"the database file is damaged ({message}); restore it from a backup, "
            "or check it with PRAGMA integrity_check"
        )
    return message


def unbindable(exc: Exception) -> EngramError | None:
    """The driver refusing a Python value while binding it (nothing ran): a `ValidationError`,
    else None for any other exception (which is not the driver's and keeps its own type)."""
    if isinstance(exc, OverflowError) and "SQLite INTEGER" in str(exc):
        return ValidationError("a value is an integer outside SQLite's 64-bit range (-2**63 .. 2**63-1)")
    if isinstance(exc, UnicodeEncodeError) and exc.reason == "surrogates not allowed":
        return ValidationError("a text value holds a lone surrogate, which is not valid text; nothing was stored")
    return None


@contextlib.contextmanager
def translate(conn: Conn | None = None) -> Iterator[None]:
    """Re-raise driver exceptions as engramdb errors (see `errors`)."""
    try:
        yield
    except sqlite3.Error as exc:
        raise convert(exc, conn) from None
    except (OverflowError, UnicodeEncodeError) as exc:
        err = unbindable(exc)
        if err is None:
            raise
        raise err from None


_S = TypeVar("_S")
_P = ParamSpec("_P")
_R = TypeVar("_R")


def translated(method: Callable[Concatenate[_S, _P], _R]) -> Callable[Concatenate[_S, _P], _R]:
    """Decorate an engine-side adapter method: driver exceptions leave it as engramdb errors."""

    @functools.wraps(method)
    def wrapper(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as exc:
            raise convert(exc, None) from None
        except (OverflowError, UnicodeEncodeError) as exc:
            err = unbindable(exc)
            if err is None:
                raise
            raise err from None

    return wrapper
