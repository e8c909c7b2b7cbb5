"""PostgreSQL connections: a pool, per-thread units of work, the tenant of each call, translated errors.

Every port call takes a connection from a `psycopg_pool.ConnectionPool` for the length of the call
(``with pool.connection()``: it always goes back), unless the calling thread has a unit of work
open (`PgStore.atomic` or `PgStore.snapshot`), which holds one connection until it ends; every
port call on that thread inside joins it, and a nested `atomic` is a savepoint.

**The tenant of a call.** Row-level security on every tenant table (FORCE, so the tables' owner
is bound by it too) admits a row only when ``current_setting('engramdb.tenant')`` is its tenant,
or is ``'*'``. The rule the adapter keeps:

1. a port call that names a tenant (a `Visibility`, or a ``tenant`` argument) runs with
   ``engramdb.tenant`` set to that tenant, so even a wrong predicate cannot return another
   tenant's rows; the calling thread remembers it as its current tenant;
2. a call that names only keys (engine-internal: the keys were seen through a visibility just
   before) runs under the thread's current tenant, so it cannot read or write another tenant's
   rows either (a thread that named no tenant yet runs it under ``'*'``);
3. reads that span every tenant on purpose (store-wide upkeep, a worker claiming the extraction
   queue's next job of any tenant) run under ``'*'``; recall's caches load one tenant each, under it.

A connection with no setting sees nothing (fails closed). The engine's statements run as a role without BYPASSRLS
(``<database>_engine``, made by the migrations), so the wall stands even when the URL's role is a
superuser.

In the default mode the role and the tenant are session settings, set again only when they
change (a rollback forgets what was set). With ``pgbouncer=True`` (PgBouncer transaction
pooling) nothing is left on a session: no server-side prepared statements, and role and tenant
are set with ``set_config(…, true)`` inside each transaction, every call outside a unit of work
running in a transaction of its own.

**Citus.** On a database with the ``citus`` extension the same rule holds on every worker: the
tenant is set with ``SET LOCAL`` inside each transaction (with ``citus.propagate_set_commands =
'local'``, so Citus replays it on each worker connection the transaction opens), never as a
session setting, which a worker never sees, and never with ``set_config``, which Citus does not
propagate. Row-level security then decides on the worker that holds the shard.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, TypeVar
from urllib.parse import urlsplit, urlunsplit

import psycopg
import psycopg.errors
import psycopg_pool
from psycopg import sql

from engramdb.errors import BackendError, ConstraintError, EngramError, SqlError, ValidationError
from engramdb.storage.postgres.migrations import has_citus

#: every engine table lives in this schema (USAGE revoked from PUBLIC)
SCHEMA = "engram"
#: the tenant setting row-level security reads
TENANT_SETTING = "engramdb.tenant"
#: the tenant value of engine-internal calls that read every tenant (cache loads)
ALL_TENANTS = "*"
#: calls by key alone: they run under the tenant the calling thread last named (all, if none yet)
KEYS = "<keys>"
#: calls on store-wide tables only (no row-level security): the setting is left as it is
STORE = "<store>"


@dataclass(frozen=True, slots=True)
class PostgresSettings:
    """How the engine talks to PostgreSQL. Times in seconds, sizes in bytes.

    Example::

        PostgresBackend("postgresql://engram@db/team", PostgresSettings(pool_max_size=20, pgbouncer=True))
    """

    #: how long a statement waits for a row lock held by another writer before `BackendError`
    lock_timeout: float = 30.0
    #: wall-clock budget of one raw-SQL scope statement
    statement_timeout: float = 5.0
    #: the largest value a scope statement may build
    max_value_bytes: int = 16 * 1024 * 1024
    #: the most rows / bytes one scope read may return
    max_result_rows: int = 100_000
    max_result_bytes: int = 64 * 1024 * 1024
    #: seconds to wait for a new connection (and for the server at open)
    connect_timeout: float = 10.0
    #: connections kept open, and the most the pool opens
    pool_min_size: int = 1
    pool_max_size: int = 10
    #: seconds a call waits for a free pooled connection before `BackendError`
    pool_timeout: float = 30.0
    #: psycopg's ``prepare_threshold``: executions of a query before it is prepared server-side
    #: (None: never; forced to None with `pgbouncer`)
    prepare_threshold: int | None = 5
    #: PgBouncer transaction pooling: no prepared statements, no session state across transactions
    pgbouncer: bool = False
    #: retries of a single call (outside a unit of work) that hit a serialization failure or deadlock
    retries: int = 3
    #: TCP keepalives on every connection (libpq ``keepalives_idle`` / ``_interval`` / ``_count``):
    #: an idle connection to a host that vanished is found dead in idle + interval × count seconds
    keepalives_idle: int = 10
    keepalives_interval: int = 5
    keepalives_count: int = 3
    #: libpq ``tcp_user_timeout``, seconds: data the server has not acknowledged for this long
    #: closes the connection (a network that drops packets without a reset)
    tcp_user_timeout: float = 20.0
    #: seconds a call may wait on the server before the engine checks that the server still
    #: answers (a new connection within `connect_timeout`); when it does not, the waiting calls'
    #: connections are shut and the calls fail with `BackendError` instead of waiting for the
    #: network to come back. A slow call on a server that answers is left alone.
    probe_after: float = 5.0
    #: raw-SQL scope connections open at once over all scopes of this engine (each scope logs in
    #: as its own role; a connection is opened when a statement needs one and closed when idle)
    scope_connections: int = 20
    #: seconds an idle scope connection stays open
    scope_idle_timeout: float = 60.0

    def __post_init__(self) -> None:
        if self.pool_min_size < 0 or self.pool_max_size < max(1, self.pool_min_size):
            raise ValueError("pool sizes must satisfy 0 <= pool_min_size <= pool_max_size, pool_max_size >= 1")
        for name in ("lock_timeout", "statement_timeout", "connect_timeout", "pool_timeout", "tcp_user_timeout",
                     "probe_after"):  # fmt: skip
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be a positive number of seconds")
        if (
            isinstance(self.scope_connections, bool)
            or not isinstance(self.scope_connections, int)
            or self.scope_connections < 1
        ):
            raise ValueError("scope_connections must be a whole number of 1 or more")
        if self.scope_idle_timeout <= 0:
            raise ValueError("scope_idle_timeout must be a positive number of seconds")
        for name in ("keepalives_idle", "keepalives_interval", "keepalives_count"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number of 1 or more")

    def network_options(self, url: str) -> dict[str, Any]:
        """The libpq parameters that bound a connection's waits on a silent network, for every
        connection the engine opens. A parameter the URL gives itself (``?keepalives_idle=30``) wins."""
        from psycopg.conninfo import conninfo_to_dict

        given = conninfo_to_dict(url)
        options: dict[str, Any] = {
            "connect_timeout": max(2, round(self.connect_timeout)),  # libpq's floor is 2 s
            "keepalives": 1,
            "keepalives_idle": self.keepalives_idle,
            "keepalives_interval": self.keepalives_interval,
            "keepalives_count": self.keepalives_count,
            "tcp_user_timeout": max(1, round(self.tcp_user_timeout * 1000)),  # milliseconds
        }
        return {k: v for k, v in options.items() if k not in given}

    @property
    def effective_prepare_threshold(self) -> int | None:
        """The threshold handed to psycopg (None in PgBouncer mode)."""
        return None if self.pgbouncer else self.prepare_threshold


def redact(url: str) -> str:
    """`url` without its password (for messages and `Backend.location`)."""
    parts = urlsplit(url)
    if not parts.password:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    netloc = f"{parts.username}:***@{host}" if parts.username else f"***@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def is_postgres_url(value: object) -> bool:
    """True for a ``postgresql://`` or ``postgres://`` URL."""
    return isinstance(value, str) and value.split("://", 1)[0].lower() in ("postgresql", "postgres")


# -- error translation ---------------------------------------------------------------------------

_RETRYABLE = (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected)


def convert(exc: BaseException) -> EngramError:
    """Translate a psycopg (or pool) exception into an `engramdb.errors` one."""
    if isinstance(exc, EngramError):
        return exc
    message = str(exc).strip() or type(exc).__name__
    if isinstance(exc, psycopg_pool.PoolTimeout):
        return BackendError(
            f"no PostgreSQL connection in time ({message}): the server is unreachable or every pooled "
            "connection is busy; check the server, or raise pool_max_size or pool_timeout"
        )
    if isinstance(exc, psycopg.errors.IntegrityError):
        return ConstraintError(message)
    if isinstance(exc, psycopg.errors.DiskFull):
        return BackendError(f"the PostgreSQL server's disk is full: {message}")
    if isinstance(exc, _RETRYABLE):
        return BackendError(f"a concurrent write conflicted and the transaction was rolled back ({message}); retry it")
    if isinstance(exc, psycopg.errors.LockNotAvailable):
        return BackendError(f"a row lock was held past lock_timeout: {message}")
    if isinstance(exc, psycopg.OperationalError):
        return BackendError(f"the PostgreSQL connection failed: {message}; check that the server is up and retry")
    if isinstance(exc, (psycopg.errors.DataError, psycopg.ProgrammingError)) and not isinstance(
        exc, psycopg.errors.InsufficientPrivilege
    ):
        return SqlError(message)
    return BackendError(f"PostgreSQL failed: {message}")


@contextlib.contextmanager
def translate() -> Iterator[None]:
    """Re-raise driver exceptions as engramdb errors."""
    try:
        yield
    except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
        raise convert(exc) from None
    except UnicodeEncodeError as exc:
        if exc.reason != "surrogates not allowed":
            raise
        # psycopg encodes text before anything is sent: nothing ran
        raise ValidationError(
            "a text value holds a lone surrogate, which is not valid text; nothing was stored"
        ) from None


# -- the store ---------------------------------------------------------------------------------


class _Local(threading.local):
    def __init__(self) -> None:
        #: the connection of this thread's open unit of work, if any
        self.conn: psycopg.Connection[Any] | None = None
        #: the tenant set inside that unit of work (PgBouncer mode: transaction-local settings)
        self.tenant: str | None = None
        #: the tenant this thread last named (key-only calls run under it)
        self.current: str | None = None


class PgStore:
    """The engine's PostgreSQL database: a connection pool and this thread's unit of work."""

    def __init__(self, url: str, settings: PostgresSettings) -> None:
        self.url = url
        self.settings = settings
        self.location = redact(url)
        #: the role the engine's statements run as (set by the migrations, or found at first use)
        self.role: str | None = None
        #: the database has the ``citus`` extension: settings per transaction, with ``SET LOCAL``
        self.citus = False
        self.local = _Local()
        self._lock = threading.Lock()
        self._closed = False
        self._pool: psycopg_pool.ConnectionPool[psycopg.Connection[Any]] | None = None
        # What each pooled connection has as session settings (default mode only).
        self._session: weakref.WeakKeyDictionary[psycopg.Connection[Any], str] = weakref.WeakKeyDictionary()
        #: calls waiting on the server, and the thread that checks the server answers when one waits long
        self.liveness = Liveness(url, settings)

    # -- connections ------------------------------------------------------------------------

    def connect(self, *, autocommit: bool = True) -> psycopg.Connection[Any]:
        """A connection of its own, outside the pool (migrations, locks, tests)."""
        with translate():
            return psycopg.connect(
                self.url,
                autocommit=autocommit,
                prepare_threshold=self.settings.effective_prepare_threshold,
                **self.settings.network_options(self.url),
            )

    def pool(self) -> psycopg_pool.ConnectionPool[psycopg.Connection[Any]]:
        """The pool, opened on first use (after the migrations have made the engine role)."""
        pool = self._pool
        if pool is not None:
            return pool
        with self._lock:
            if self._closed:
                raise BackendError("the engine is closed")
            if self._pool is None:
                s = self.settings
                self._pool = psycopg_pool.ConnectionPool(
                    self.url,
                    min_size=s.pool_min_size,
                    max_size=s.pool_max_size,
                    timeout=s.pool_timeout,
                    kwargs={
                        "autocommit": True,
                        "prepare_threshold": s.effective_prepare_threshold,
                        **s.network_options(self.url),
                    },
                    configure=self._configure,
                    open=False,
                    name="engramdb",
                )
                try:
                    self._pool.open(wait=s.pool_min_size > 0, timeout=s.connect_timeout)
                except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
                    self._pool.close()
                    self._pool = None
                    raise BackendError(f"cannot connect to {self.location}: {exc}") from None
            return self._pool

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        from pgvector.psycopg import register_vector

        # The vector type's OID, for binary vectors both ways (a stateless catalog read).
        with contextlib.suppress(psycopg.ProgrammingError):
            register_vector(conn)
        role = self.role or self.find_role(conn)
        if not self.per_transaction and role is not None:
            conn.execute(
                "SELECT set_config('role', %s, false), set_config('lock_timeout', %s, false)",
                (role, f"{int(self.settings.lock_timeout * 1000)}ms"),
            )

    def find_role(self, conn: psycopg.Connection[Any]) -> str | None:
        """The engine role recorded by the migrations, if they have run (and whether the database
        runs Citus)."""
        row = conn.execute(
            "SELECT value FROM engram.engram_meta WHERE key = 'engine_role'"
            if self._meta_exists(conn)
            else "SELECT NULL WHERE false"
        ).fetchone()
        self.role = None if row is None else str(row[0])
        self.citus = has_citus(conn)
        return self.role

    @property
    def per_transaction(self) -> bool:
        """Role and tenant are set inside each transaction, never left on a session (PgBouncer
        transaction pooling; Citus, whose workers see only what a transaction sets)."""
        return self.settings.pgbouncer or self.citus

    @staticmethod
    def _meta_exists(conn: psycopg.Connection[Any]) -> bool:
        row = conn.execute("SELECT to_regclass('engram.engram_meta') IS NOT NULL").fetchone()
        return bool(row and row[0])

    def _set(self, conn: psycopg.Connection[Any], tenant: str, *, local: bool) -> None:
        if local and self.citus:
            # Utility statements, not set_config: Citus replays SET LOCAL on the workers only.
            conn.execute(
                sql.SQL(
                    "SET LOCAL citus.propagate_set_commands = 'local'; SET LOCAL ROLE {}; "
                    "SET LOCAL engramdb.tenant = {}; SET LOCAL lock_timeout = {}"
                ).format(
                    sql.Identifier(self.role) if self.role else sql.SQL("NONE"),
                    sql.Literal(tenant),
                    sql.Literal(f"{int(self.settings.lock_timeout * 1000)}ms"),
                ),
                prepare=False,
            )
        elif local:
            conn.execute(
                "SELECT set_config('role', %s, true), set_config('engramdb.tenant', %s, true), "
                "set_config('lock_timeout', %s, true)",
                (self.role or "none", tenant, f"{int(self.settings.lock_timeout * 1000)}ms"),
            )
        else:
            conn.execute("SELECT set_config('engramdb.tenant', %s, false)", (tenant,))

    @contextlib.contextmanager
    def conn(self, tenant: str) -> Iterator[psycopg.Connection[Any]]:
        """This thread's connection for one port call, with ``engramdb.tenant`` = `tenant`."""
        st = self.local
        if tenant == KEYS:
            tenant = st.current or ALL_TENANTS
        elif tenant != ALL_TENANTS and tenant != STORE:
            st.current = tenant
        held = st.conn
        watch = self.liveness.watch
        if tenant == STORE:
            if held is not None:
                with watch(held):
                    yield held
            else:
                with self.pool().connection() as conn, watch(conn):
                    yield conn
            return
        if held is not None:
            with watch(held):
                if self.per_transaction:
                    if st.tenant != tenant:
                        self._set(held, tenant, local=True)
                        st.tenant = tenant
                elif self._session.get(held) != tenant:
                    self._set(held, tenant, local=False)
                    self._session[held] = tenant
                yield held
            return
        with self.pool().connection() as conn, watch(conn):
            if self.per_transaction:
                with conn.transaction():
                    self._set(conn, tenant, local=True)
                    yield conn
                return
            if self._session.get(conn) != tenant:
                self._set(conn, tenant, local=False)
                self._session[conn] = tenant
            yield conn

    def run(self, tenant: str, call: Callable[[psycopg.Connection[Any]], _R]) -> _R:
        """Run `call` on this thread's connection under `tenant`; driver errors translated, and a
        serialization failure or deadlock of a call outside a unit of work retried."""
        attempt = 0
        while True:
            c: psycopg.Connection[Any] | None = None
            try:
                with self.conn(tenant) as c:
                    return call(c)
            except _RETRYABLE as exc:
                if self.local.conn is not None or attempt >= self.settings.retries:
                    raise convert(exc) from None
                attempt += 1
                time.sleep(0.005 * 2**attempt)
            except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
                if self.local.conn is not None and not self.per_transaction:
                    self._session.pop(self.local.conn, None)
                raise self.liveness.explain(exc, c) from None

    # -- units of work ----------------------------------------------------------------------

    def in_transaction(self) -> bool:
        return self.local.conn is not None

    @contextlib.contextmanager
    def atomic(self) -> Iterator[None]:
        """All or nothing for this thread: a savepoint inside an open unit of work, else a transaction."""
        st = self.local
        held = st.conn
        conn: psycopg.Connection[Any] | None = held
        try:
            if held is not None:
                try:
                    with held.transaction():
                        yield
                except BaseException:
                    self._forget(held)  # a rollback undid what the savepoint set
                    raise
                return
            with self.pool().connection() as conn:
                st.conn, st.tenant = conn, None
                try:
                    with conn.transaction():
                        yield
                except BaseException:
                    self._forget(conn)
                    raise
                finally:
                    st.conn = st.tenant = None
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise self.liveness.explain(exc, conn) from None

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads inside see one state of the database (REPEATABLE READ, READ ONLY)."""
        st = self.local
        if st.conn is not None:
            yield
            return
        try:
            with self.pool().connection() as conn:
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                st.conn, st.tenant = conn, None
                try:
                    yield
                except BaseException:
                    self._forget(conn)
                    with contextlib.suppress(psycopg.Error):
                        conn.execute("ROLLBACK")
                    raise
                finally:
                    st.conn = st.tenant = None
                conn.execute("COMMIT")
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise convert(exc) from None

    def _forget(self, conn: psycopg.Connection[Any]) -> None:
        self._session.pop(conn, None)
        self.local.tenant = None

    def close(self) -> None:
        """Close the pool; further use raises `BackendError`."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
        self.liveness.stop()
        self.local = _Local()


# -- a server that went silent ------------------------------------------------------------------


def sever(conn: psycopg.Connection[Any]) -> None:
    """Shut `conn`'s socket, so that a call blocked on it (a server that went silent: no reply,
    no reset) returns now with an error instead of when the network comes back. The connection
    is broken afterwards; the pool discards it."""
    try:
        fd = conn.pgconn.socket
    except (psycopg.Error, OSError, ValueError):
        return
    with contextlib.suppress(OSError):
        sock = socket.socket(fileno=os.dup(fd))
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.close()


class _Watched:
    """One call's entry in `Liveness`, for the length of a ``with`` block (kept small: every port
    call makes one)."""

    __slots__ = ("_calls", "_conn")

    def __init__(
        self, calls: dict[object, tuple[float, psycopg.Connection[Any]]], conn: psycopg.Connection[Any]
    ) -> None:
        self._calls = calls
        self._conn = conn

    def __enter__(self) -> None:
        self._calls[self] = (time.monotonic(), self._conn)

    def __exit__(self, *exc: object) -> None:
        self._calls.pop(self, None)


class Liveness:
    """The calls of one store that wait on the server, and a thread that, when one has waited
    `PostgresSettings.probe_after`, checks that the server still answers a new connection. When
    it does not, every call waiting that long has its connection shut (`sever`) and fails with a
    `BackendError` that says so. TCP keepalives cannot tell this apart from a slow statement when
    the silent hop is beyond a proxy or a NAT that still acknowledges, and a slow statement on a
    server that answers must not be cut."""

    def __init__(self, url: str, settings: PostgresSettings) -> None:
        self._url = url
        self._settings = settings
        self._cond = threading.Condition()
        #: the waiting calls, by a token of their own (dict item set / pop are atomic: no lock)
        self._calls: dict[object, tuple[float, psycopg.Connection[Any]]] = {}
        self._severed: weakref.WeakSet[psycopg.Connection[Any]] = weakref.WeakSet()
        self._thread: threading.Thread | None = None
        self._stopping = False
        #: probes run, and calls severed (tests and the docs' numbers read them)
        self.probes = 0
        self.cut = 0

    def watch(self, conn: psycopg.Connection[Any]) -> _Watched:
        """Count `conn` as waiting on the server for the length of a ``with`` block."""
        if self._thread is None:
            with self._cond:
                if self._thread is None and not self._stopping:
                    self._thread = threading.Thread(target=self._loop, name="engramdb-pg-liveness", daemon=True)
                    self._thread.start()
        return _Watched(self._calls, conn)

    def explain(self, exc: BaseException, conn: psycopg.Connection[Any] | None) -> EngramError:
        """`convert(exc)`, saying so when `conn` was shut because the server went silent."""
        if conn is not None and conn in self._severed and isinstance(exc, psycopg.Error):
            return BackendError(
                f"the PostgreSQL server at {redact(self._url)} did not answer for {self._settings.probe_after:g} s and "
                "a new connection to it failed too: the network to it is down. The call was abandoned (a write "
                "whose commit was already sent may or may not have been committed); retry when it is back"
            )
        return convert(exc)

    def _loop(self) -> None:
        tick = min(1.0, self._settings.probe_after / 2)
        last_probe = 0.0
        while True:
            with self._cond:
                if self._stopping:
                    return
                self._cond.wait(timeout=tick)
                now = time.monotonic()
                late = [c for t0, c in self._calls.copy().values() if now - t0 >= self._settings.probe_after]
            if not late or now - last_probe < self._settings.probe_after:
                continue
            last_probe = now
            if self._answers():
                continue
            still = {id(c) for _, c in self._calls.copy().values()}
            for conn in late:
                if id(conn) in still:
                    self._severed.add(conn)
                    self.cut += 1
                    sever(conn)

    def _answers(self) -> bool:
        """Whether the server accepts a new connection and answers it within `connect_timeout`."""
        self.probes += 1
        try:
            with psycopg.connect(self._url, autocommit=True, **self._settings.network_options(self._url)) as c:
                c.execute("SELECT 1").fetchone()
        except psycopg.Error:
            return False
        return True

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()


_S = TypeVar("_S")
_P = ParamSpec("_P")
_R = TypeVar("_R")


def execute_rows(cur: psycopg.Cursor[Any], query: str, rows: Sequence[Any]) -> int:
    """Run `query` once per row of `rows`; the rows changed in all. One row is one plain execute:
    psycopg's ``executemany`` runs a pipeline of its own, whose syncs cost a remember two round
    trips more per statement."""
    if len(rows) == 1:
        cur.execute(query, rows[0])
        return max(cur.rowcount, 0)
    cur.executemany(query, rows)
    return max(cur.rowcount, 0)


def translated(method: Callable[Concatenate[_S, _P], _R]) -> Callable[Concatenate[_S, _P], _R]:
    """Decorate an adapter method: driver exceptions leave it as engramdb errors."""

    @functools.wraps(method)
    def wrapper(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(self, *args, **kwargs)
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise convert(exc) from None

    return wrapper
