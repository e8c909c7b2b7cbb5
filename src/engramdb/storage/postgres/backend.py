"""`PostgresBackend`: every storage port over one PostgreSQL database (16+, with pgvector)."""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg

from engramdb.errors import BackendError, TransactionError
from engramdb.scopes.namespace import Namespace
from engramdb.storage.ports import MemoryScope
from engramdb.storage.postgres.connection import STORE, PgStore, PostgresSettings, translate
from engramdb.storage.postgres.graph import PgEdges
from engramdb.storage.postgres.jobs import PgJobs
from engramdb.storage.postgres.migrations import migrate
from engramdb.storage.postgres.rows import PgMemoryRows
from engramdb.storage.postgres.server_index import PgServerIndex
from engramdb.storage.postgres.stream import (
    PgAccessStream,
    PgChangeSequence,
    PgRecallLog,
    PgTombstones,
    PgVersions,
)
from engramdb.storage.postgres.vectors import PgMemoryVectors, PgRowVectors

if TYPE_CHECKING:
    from engramdb.embeddings.base import Embedder


_APP = "engramdb: "


def _lock_key(tenant: str) -> int:
    """The advisory lock key of reflection runs on `tenant` (a signed 64-bit number)."""
    digest = hashlib.blake2b(f"engramdb reflect {tenant}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class PostgresBackend:
    """The storage ports (`engramdb.storage.ports.Backend`) over one PostgreSQL database.

    Example::

        backend = PostgresBackend("postgresql://engram@db.internal/team")
        engine = DynamicMemoryEngine(backend)      # or DynamicMemoryEngine("postgresql://…")

    Args:
        url: a ``postgresql://`` (or ``postgres://``) URL of a role that may own the engine's schema
            ``engram`` and create roles (the raw-SQL scopes' and the engine's own).
        settings: timeouts, limits, pool sizes and the PgBouncer mode (`PostgresSettings`).
    """

    def __init__(self, url: str, settings: PostgresSettings | None = None) -> None:
        self.settings = settings or PostgresSettings()
        self.url = url
        self._store = PgStore(url, self.settings)
        self.memories = PgMemoryRows(self._store)
        self.edges = PgEdges(self._store)
        self.accesses = PgAccessStream(self._store)
        self.tombstones = PgTombstones(self._store)
        self.recalls = PgRecallLog(self._store)
        self.versions = PgVersions(self._store)
        self.changes = PgChangeSequence(self._store)
        self.jobs = PgJobs(self._store)
        self.vectors = PgMemoryVectors(self._store)
        #: exact reads for a tenant no cache of this process holds (`ServerIndex`)
        self.server_index = PgServerIndex(self._store)
        self._row_vectors: dict[str, PgRowVectors] = {}
        self._rv_lock = threading.Lock()
        self._scopes_lock = threading.Lock()
        self._scope_conns: Any = None

    def __repr__(self) -> str:
        return f"PostgresBackend({self.location!r})"

    @property
    def store(self) -> PgStore:
        """The pool and units of work (adapter-internal; tests of PostgreSQL specifics use it)."""
        return self._store

    @property
    def row_vectors(self) -> PgRowVectors:
        return self.row_vectors_for("default")

    def row_vectors_for(self, tenant: str) -> PgRowVectors:
        """The row-vector store of `tenant`'s raw-SQL tables."""
        with self._rv_lock:
            rv = self._row_vectors.get(tenant)
            if rv is None:
                rv = self._row_vectors[tenant] = PgRowVectors(self._store, tenant)
            return rv

    @property
    def location(self) -> str:
        return self._store.location

    @property
    def cache_file(self) -> Path | None:
        # No local file: caches beside the store would be per machine, and the server is shared.
        return None

    @property
    def caches_by_tenant(self) -> bool:
        # A server of many tenants: each process holds only the tenants it serves.
        return True

    # -- units of work ----------------------------------------------------------------------------

    def atomic(self) -> contextlib.AbstractContextManager[None]:
        return self._store.atomic()

    def snapshot(self) -> contextlib.AbstractContextManager[None]:
        return self._store.snapshot()

    def in_transaction(self) -> bool:
        return self._store.in_transaction()

    @contextlib.contextmanager
    def tenant_lock(self, tenant: str, holder: str) -> Iterator[None]:
        # An advisory lock on a connection of its own, held for the run: the server releases it
        # when that session ends, so a crashed holder never leaves it held. With PgBouncer the
        # transaction-scoped variant inside one open transaction (a session may be shared there).
        key = _lock_key(tenant)
        conn = self._store.connect()
        try:
            with translate():
                conn.execute("SELECT set_config('application_name', %s, false)", (f"{_APP}{holder}"[:63],))
                if self.settings.pgbouncer:
                    conn.execute("BEGIN")
                    row = conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (key,)).fetchone()
                else:
                    row = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
            if not (row and row[0]):
                raise TransactionError(
                    f"a reflection is already running on tenant {tenant!r} (held by {self._holder(conn, key)}); "
                    "nothing was changed: run it again when that one has finished"
                )
            try:
                yield
            finally:
                with contextlib.suppress(psycopg.Error):
                    if self.settings.pgbouncer:
                        conn.execute("COMMIT")
                    else:
                        conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
        finally:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    @staticmethod
    def _holder(conn: psycopg.Connection[Any], key: int) -> str:
        # The session holding the lock named itself in application_name when it took it.
        unsigned = key & 0xFFFFFFFFFFFFFFFF
        with contextlib.suppress(psycopg.Error):
            row = conn.execute(
                "SELECT a.application_name, a.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE l.locktype = 'advisory' AND l.granted AND l.classid = %s AND l.objid = %s AND l.objsubid = 1 "
                "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                (unsigned >> 32, unsigned & 0xFFFFFFFF),
            ).fetchone()
            if row is not None:
                return f"{str(row[0]).removeprefix(_APP)} pid {row[1]}"
        return "another session"

    # -- schema and identity ----------------------------------------------------------------------

    def migrate(self, now: float) -> int:
        conn = self._store.connect()
        try:
            with translate():
                version = migrate(conn, lambda: now)
                self._store.find_role(conn)
            return version
        finally:
            conn.close()

    def instance_id(self) -> str | None:
        def go(db: psycopg.Connection[Any]) -> str | None:
            row = db.execute("SELECT value FROM engram.engram_meta WHERE key = 'instance_id'").fetchone()
            return None if row is None else str(row[0])

        return self._store.run(STORE, go)

    @contextlib.contextmanager
    def erasing(self) -> Iterator[None]:
        # Nothing to switch: dead row versions stay until VACUUM marks them free (after_forget).
        yield

    def compact(self) -> None:
        # VACUUM FULL writes each table anew from its live rows and drops the old files, dead
        # row versions (a forgotten text's among them) included; it needs the tables' owner, so
        # it runs on a connection of the opening role. It locks each table while it runs.
        if self.in_transaction():
            raise TransactionError("compact() cannot run inside a transaction: commit or roll it back first")
        conn = self._store.connect()
        try:
            with translate():
                # VACUUM FULL skips, with only a WARNING, a table its role does not own: check first.
                foreign = conn.execute(
                    "SELECT tablename, tableowner FROM pg_tables WHERE schemaname = 'engram' "
                    "AND NOT pg_has_role(current_user, tableowner, 'USAGE')"
                ).fetchall()
                if foreign:
                    raise BackendError(
                        f"compact() needs the owner of the engine's tables; {foreign[0][1]} owns {foreign[0][0]}, "
                        "not this URL's role: run it with the owner's URL"
                    )
                conn.execute(
                    "VACUUM FULL engram.engram_memories, engram.engram_versions, engram.engram_recalls, "
                    "engram.engram_access, engram.engram_vectors, engram.engram_edges, engram.engram_tombstones"
                )
        finally:
            conn.close()

    def after_forget(self) -> None:
        # Best effort: VACUUM marks the dead row versions holding the forgotten text as free space,
        # to be overwritten by later writes; it needs the tables' owner, so it runs on a connection
        # of the opening role, and waits on no lock (SKIP_LOCKED). The server's WAL and any base
        # backups keep older copies until they are recycled (see docs/postgres.md).
        if self.in_transaction():
            return
        with contextlib.suppress(Exception):
            conn = self._store.connect()
            try:
                conn.execute("SET lock_timeout = '100ms'")
                conn.execute("VACUUM (SKIP_LOCKED) engram.engram_memories, engram.engram_versions")
            finally:
                conn.close()

    # -- raw-SQL scopes -----------------------------------------------------------------------------

    def scope(self, namespace: Namespace, embedder: Embedder | None, *, tenant: str = "default") -> MemoryScope:
        # The raw-SQL scope (roles and grants per tenant namespace) is its own module, imported
        # only when a scope is asked for (by name, so this module type-checks without it).
        scope_class: Any = importlib.import_module("engramdb.storage.postgres.scope").PostgresScope
        s = self.settings
        scope: MemoryScope = scope_class(
            self.url,
            namespace,
            tenant,
            self.row_vectors_for(tenant),
            lambda: embedder,
            statement_timeout=s.statement_timeout,
            max_value_bytes=s.max_value_bytes,
            max_result_rows=s.max_result_rows,
            max_result_bytes=s.max_result_bytes,
            network=s.network_options(self.url),
            pool_timeout=s.pool_timeout,
            connections=self._scope_connections(),
        )
        return scope

    def _scope_connections(self) -> Any:
        """The one `ScopeConnections` of this backend's scopes (made with the first scope)."""
        with self._scopes_lock:
            if self._scope_conns is None:
                from engramdb.storage.postgres.scope_connections import ScopeConnections

                s = self.settings
                self._scope_conns = ScopeConnections(
                    s.scope_connections, s.scope_idle_timeout, timeout=max(s.pool_timeout, s.statement_timeout * 4)
                )
            return self._scope_conns

    def table_names(self) -> list[str]:
        def go(db: psycopg.Connection[Any]) -> list[str]:
            rows = db.execute(
                "SELECT DISTINCT c.relname FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace "
                "WHERE c.relkind IN ('r', 'p') AND s.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast') "
                "AND s.nspname NOT LIKE 'pg_temp%%' AND s.nspname NOT LIKE 'pg_toast_temp%%' ORDER BY 1",
                (),
            ).fetchall()
            return [str(r[0]) for r in rows]

        return self._store.run(STORE, go)

    def close(self) -> None:
        if self._scope_conns is not None:
            self._scope_conns.close()
        self._store.close()
