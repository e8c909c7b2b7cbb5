"""The PostgreSQL schema of the engine's own tables: named, ordered, append-only migrations.

Everything lives in the schema ``engram``, owned by the role the engine was opened with, with
USAGE revoked from PUBLIC: the roles of raw-SQL scopes cannot even resolve an engine table's name.
Each migration runs once, all of them inside one transaction that first takes
``pg_advisory_xact_lock`` (so several processes opening a new database at once apply them once),
recorded in ``engram.engram_migrations``; a database whose recorded version is newer than the code
refuses to open (`SchemaVersionError`). Append new migrations at the end; never edit, rename or
reorder an applied one.

Keys, for distribution by tenant (Citus): the tenant leads the primary key of every tenant table
((tenant, n) for memories, (tenant, src, dst, type) for edges, …) and every unique constraint. The
internal key ``n`` comes from one sequence, so it is unique in the store as the ports require. One
non-unique index does not lead with the tenant, because the ports address rows without one:
``engram_memories (n)`` (engine-internal calls by key). Citus accepts it (only unique indexes must
hold the distribution column); such calls fan out over the shards.

Each tenant has its own change sequence (``engram_changes``, one row per tenant, under row-level
security like the tenant tables; migration 7): the caches of a tenant load it by
``(tenant, changed)``. Store-wide tables without a tenant: ``engram_migrations``, ``engram_meta``
(``instance_id``, ``engine_role``) and ``engram_counters`` (the store-wide sequence of stores made
before migration 7, no longer advanced): reference tables on Citus.

Row-level security, FORCE'd, on every tenant table: see `engramdb.storage.postgres.connection`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from engramdb.errors import BackendError, SchemaVersionError

#: the advisory lock key of migrations ("engramdb" as a number)
MIGRATION_LOCK = 0x656E6772616D6462

#: the tables carrying a tenant, each under row-level security
TENANT_TABLES = (
    "engram_memories",
    "engram_vectors",
    "engram_edges",
    "engram_access",
    "engram_recalls",
    "engram_versions",
    "engram_tombstones",
    "engram_row_vectors",
)
#: tenant tables made by later migrations (row-level security set by each; distributed on Citus)
LATER_TENANT_TABLES = ("engram_changes", "engram_jobs")
#: the store-wide tables (reference tables on Citus)
STORE_TABLES = ("engram_migrations", "engram_meta", "engram_counters")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    apply: Callable[[psycopg.Connection[Any]], None]


_TABLES = [
    "CREATE TABLE engram.engram_meta (key text PRIMARY KEY, value text NOT NULL)",
    "CREATE TABLE engram.engram_counters (name text PRIMARY KEY, value bigint NOT NULL)",
    "INSERT INTO engram.engram_counters VALUES ('memories', 0)",
    "CREATE SEQUENCE engram.engram_memory_keys AS bigint MINVALUE 1 CACHE 1",
    """CREATE TABLE engram.engram_memories (
        tenant text NOT NULL,
        n bigint NOT NULL,
        id text NOT NULL,
        owner text NOT NULL,
        author text NOT NULL,
        type text NOT NULL,
        title text NOT NULL DEFAULT '',
        content text NOT NULL,
        tags text NOT NULL DEFAULT '',
        entities text NOT NULL DEFAULT '',
        n_chars integer NOT NULL,
        n_tokens integer NOT NULL,
        n_sentences integer NOT NULL,
        importance double precision NOT NULL,
        salience double precision NOT NULL,
        confidence double precision NOT NULL,
        strength integer NOT NULL DEFAULT 0,
        confidentiality integer NOT NULL DEFAULT 0,
        created_at double precision NOT NULL,
        recorded_at double precision NOT NULL,
        valid_from double precision,
        valid_to double precision,
        archived integer NOT NULL DEFAULT 0,
        status text,
        refs text NOT NULL DEFAULT '[]',
        version integer NOT NULL DEFAULT 1,
        content_hash text NOT NULL,
        terms text NOT NULL DEFAULT '',
        ring bytea NOT NULL DEFAULT '',
        access_count integer NOT NULL DEFAULT 0,
        old_count integer NOT NULL DEFAULT 0,
        old_newest double precision,
        old_oldest double precision,
        last_access double precision,
        changed bigint NOT NULL,
        PRIMARY KEY (tenant, n),
        UNIQUE (tenant, id)
    )""",
    "CREATE INDEX engram_memories_visible ON engram.engram_memories (tenant, owner, archived)",
    "CREATE INDEX engram_memories_hash ON engram.engram_memories (tenant, content_hash)",
    "CREATE INDEX engram_memories_key ON engram.engram_memories (n)",
    "CREATE INDEX engram_memories_changed ON engram.engram_memories (changed)",
    # No typmod on the vector: the dimension is the embedder's, and a store may hold several models.
    """CREATE TABLE engram.engram_vectors (
        tenant text NOT NULL, n bigint NOT NULL, model text NOT NULL, vec vector NOT NULL,
        PRIMARY KEY (tenant, n))""",
    """CREATE TABLE engram.engram_edges (
        tenant text NOT NULL, src bigint NOT NULL, dst bigint NOT NULL, type text NOT NULL,
        weight double precision NOT NULL, created_at double precision NOT NULL, created_by text NOT NULL,
        PRIMARY KEY (tenant, src, dst, type))""",
    "CREATE INDEX engram_edges_dst ON engram.engram_edges (tenant, dst)",
    """CREATE TABLE engram.engram_access (
        tenant text NOT NULL, id bigint GENERATED ALWAYS AS IDENTITY, ts double precision NOT NULL,
        n bigint NOT NULL, channel text NOT NULL, reader text NOT NULL, trace_ref text, query text,
        score double precision, rank integer, rel double precision, rec double precision,
        imp double precision, spread double precision, recall_id text,
        PRIMARY KEY (tenant, id))""",
    "CREATE INDEX engram_access_memory ON engram.engram_access (tenant, n, ts)",
    "CREATE INDEX engram_access_recall ON engram.engram_access (tenant, recall_id) WHERE recall_id IS NOT NULL",
    "CREATE INDEX engram_access_channel ON engram.engram_access (tenant, channel)",
    """CREATE TABLE engram.engram_recalls (
        tenant text NOT NULL, recall_id text NOT NULL, ts double precision NOT NULL, reader text NOT NULL,
        query text NOT NULL, params text NOT NULL, near_misses text NOT NULL,
        PRIMARY KEY (tenant, recall_id))""",
    """CREATE TABLE engram.engram_versions (
        tenant text NOT NULL, n bigint NOT NULL, version integer NOT NULL, title text NOT NULL,
        content text NOT NULL, changed_at double precision NOT NULL, changed_by text NOT NULL,
        PRIMARY KEY (tenant, n, version))""",
    """CREATE TABLE engram.engram_tombstones (
        tenant text NOT NULL, id bigint GENERATED ALWAYS AS IDENTITY, memory_id text NOT NULL,
        owner text NOT NULL, content_hash text NOT NULL, forgotten_by text NOT NULL,
        forgotten_at double precision NOT NULL, reason text NOT NULL,
        PRIMARY KEY (tenant, id))""",
    "CREATE INDEX engram_tombstones_hash ON engram.engram_tombstones (tenant, owner, content_hash)",
    """CREATE TABLE engram.engram_row_vectors (
        tenant text NOT NULL, tbl text NOT NULL, col text NOT NULL, row_id bigint NOT NULL,
        digest bytea NOT NULL, model text NOT NULL, vec vector NOT NULL,
        PRIMARY KEY (tenant, tbl, col, row_id))""",
]


def _m0001_engine_tables(db: psycopg.Connection[Any]) -> None:
    for statement in _TABLES:
        db.execute(statement)  # constant DDL
    db.execute("INSERT INTO engram.engram_meta VALUES ('instance_id', %s)", (uuid.uuid4().hex,))


def _m0002_row_level_security(db: psycopg.Connection[Any]) -> None:
    # The second wall behind every visibility predicate: a row is seen only under its own tenant's
    # setting (or '*', engine-internal calls); no setting, no rows. FORCE binds the owner too.
    for table in TENANT_TABLES:
        _tenant_policy(db, table)


def _tenant_policy(db: psycopg.Connection[Any], table: str) -> None:
    """Row-level security on `table`, forced: a row only under its own tenant's setting, or '*'."""
    name = sql.Identifier("engram", table)
    db.execute(sql.SQL("ALTER TABLE {} ENABLE ROW LEVEL SECURITY").format(name))
    db.execute(sql.SQL("ALTER TABLE {} FORCE ROW LEVEL SECURITY").format(name))
    # Replayable, like every later migration's CREATE ... IF NOT EXISTS (PostgreSQL has no
    # CREATE POLICY IF NOT EXISTS): a store whose migration rows were rewound keeps opening.
    db.execute(sql.SQL("DROP POLICY IF EXISTS engram_tenant ON {}").format(name))
    db.execute(
        sql.SQL(
            "CREATE POLICY engram_tenant ON {} USING "
            "(tenant = current_setting('engramdb.tenant', true) OR current_setting('engramdb.tenant', true) = '*') "
            "WITH CHECK "
            "(tenant = current_setting('engramdb.tenant', true) OR current_setting('engramdb.tenant', true) = '*')"
        ).format(name)
    )


def _m0003_engine_role(db: psycopg.Connection[Any]) -> None:
    # Superusers and BYPASSRLS roles pass row-level security even when it is forced, so the engine's
    # statements run as a role of their own without either: named after the database (roles are
    # cluster-wide), granted to the opening role so it may SET ROLE to it.
    database = str(db.execute("SELECT current_database()").fetchone()[0])  # type: ignore[index]
    role = f"{database[:56]}_engine"
    exists = db.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
    ident = sql.Identifier(role)
    if exists is None:
        db.execute(sql.SQL("CREATE ROLE {} NOLOGIN NOSUPERUSER NOBYPASSRLS NOINHERIT").format(ident))
    db.execute(sql.SQL("GRANT {} TO CURRENT_USER").format(ident))
    db.execute(sql.SQL("GRANT USAGE ON SCHEMA engram TO {}").format(ident))
    db.execute(sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA engram TO {}").format(ident))
    db.execute(sql.SQL("GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA engram TO {}").format(ident))
    db.execute("INSERT INTO engram.engram_meta VALUES ('engine_role', %s)", (role,))


def _m0004_tombstone_levels(db: psycopg.Connection[Any]) -> None:
    # The level of what a tombstone replaced (as SQLite's migration 10); older ones count as the highest.
    db.execute(
        "ALTER TABLE engram.engram_tombstones ADD COLUMN IF NOT EXISTS confidentiality integer NOT NULL DEFAULT 3"
    )


def _m0005_unused_access_indexes(db: psycopg.Connection[Any]) -> None:
    # As SQLite's migration 11: nothing reads the access stream by recall id or by channel (by
    # tenant and memory only), and each recall's ten access rows kept both indexes up to date.
    db.execute("DROP INDEX IF EXISTS engram.engram_access_recall")
    db.execute("DROP INDEX IF EXISTS engram.engram_access_channel")


def _m0006_importance_source(db: psycopg.Connection[Any]) -> None:
    # As SQLite's migration 14: who set each importance (0 nobody, 1 a caller, 2 reflection), so
    # that reflection rescores only what no caller scored. A stored row cannot say: one at 5.0,
    # the default, counts as nobody's; any other value as a caller's, which reflection keeps.
    db.execute("ALTER TABLE engram.engram_memories ADD COLUMN IF NOT EXISTS imp_source smallint NOT NULL DEFAULT 1")
    db.execute("UPDATE engram.engram_memories SET imp_source = 0 WHERE importance = 5.0")


def _m0007_tenant_changes(db: psycopg.Connection[Any]) -> None:
    # One change sequence per tenant instead of one store-wide counter row: writers of different
    # tenants no longer queue on one row lock, and a process's caches poll only the tenants they
    # hold. Each tenant's sequence starts where the store-wide one stood, so every stored `changed`
    # stays at or below its tenant's current number. The caches load a tenant by (tenant, changed).
    db.execute("CREATE TABLE engram.engram_changes (tenant text PRIMARY KEY, value bigint NOT NULL)")
    db.execute(
        "INSERT INTO engram.engram_changes (tenant, value) SELECT DISTINCT m.tenant, c.value "
        "FROM engram.engram_memories m, engram.engram_counters c WHERE c.name = 'memories'"
    )
    _tenant_policy(db, "engram_changes")
    role = db.execute("SELECT value FROM engram.engram_meta WHERE key = 'engine_role'").fetchone()
    if role is not None:
        db.execute(
            sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON engram.engram_changes TO {}").format(
                sql.Identifier(str(role[0]))
            )
        )
    db.execute("CREATE INDEX engram_memories_tenant_changed ON engram.engram_memories (tenant, changed)")
    # Nothing loads every tenant by change any more (each cache loads its own tenant).
    db.execute("DROP INDEX IF EXISTS engram.engram_memories_changed")


def _m0008_sessions_metadata(db: psycopg.Connection[Any]) -> None:
    # As SQLite's migration 15: the conversation a memory came from and the caller's JSON object
    # (jsonb: typed equality and ranges inside the query, engramdb.memories.filters).
    db.execute("ALTER TABLE engram.engram_memories ADD COLUMN IF NOT EXISTS session text")
    db.execute("ALTER TABLE engram.engram_memories ADD COLUMN IF NOT EXISTS metadata jsonb NOT NULL DEFAULT '{}'")
    db.execute(
        "CREATE INDEX IF NOT EXISTS engram_memories_session ON engram.engram_memories (tenant, session) "
        "WHERE session IS NOT NULL"
    )


def _m0009_extraction_jobs(db: psycopg.Connection[Any]) -> None:
    # As SQLite's migration 16: the durable queue of LLM extraction, ids only, under row-level
    # security like every tenant table (a worker claims across tenants under '*').
    db.execute(
        """CREATE TABLE IF NOT EXISTS engram.engram_jobs (
            tenant text NOT NULL, job_id text NOT NULL, agent text NOT NULL, memory_ids text NOT NULL,
            created_at double precision NOT NULL, status text NOT NULL DEFAULT 'pending',
            attempts integer NOT NULL DEFAULT 0, not_before double precision NOT NULL DEFAULT 0,
            lease_until double precision, worker text, last_error text, done_at double precision,
            decisions text NOT NULL DEFAULT '[]', PRIMARY KEY (tenant, job_id))"""
    )
    db.execute(
        "CREATE INDEX IF NOT EXISTS engram_jobs_due ON engram.engram_jobs (not_before, created_at) "
        "WHERE status = 'pending'"
    )
    db.execute("CREATE INDEX IF NOT EXISTS engram_jobs_listing ON engram.engram_jobs (tenant, status, created_at)")
    _tenant_policy(db, "engram_jobs")
    role = db.execute("SELECT value FROM engram.engram_meta WHERE key = 'engine_role'").fetchone()
    if role is not None:
        db.execute(
            sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON engram.engram_jobs TO {}").format(
                sql.Identifier(str(role[0]))
            )
        )


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "engine_tables", _m0001_engine_tables),
    Migration(2, "row_level_security", _m0002_row_level_security),
    Migration(3, "engine_role", _m0003_engine_role),
    Migration(4, "tombstone_levels", _m0004_tombstone_levels),
    Migration(5, "unused_access_indexes", _m0005_unused_access_indexes),
    Migration(6, "importance_source", _m0006_importance_source),
    Migration(7, "tenant_changes", _m0007_tenant_changes),
    Migration(8, "sessions_metadata", _m0008_sessions_metadata),
    Migration(9, "extraction_jobs", _m0009_extraction_jobs),
)


def code_version() -> int:
    return MIGRATIONS[-1].version


def migrate(db: psycopg.Connection[Any], now: Callable[[], float] = time.time) -> int:
    """Bring the database up to this code's schema version (on `db`, an autocommit connection of
    the opening role); the version in force."""
    with db.transaction():
        # Serialises first opens by several processes; released at commit.
        db.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        has_vector = db.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone()
        if has_vector is None:
            try:
                with db.transaction():
                    db.execute("CREATE EXTENSION IF NOT EXISTS vector")
            except psycopg.Error as exc:
                raise BackendError(
                    f"the pgvector extension is not installed in this database and could not be created ({exc}); "
                    "install pgvector and run CREATE EXTENSION vector as a superuser"
                ) from None
        db.execute("CREATE SCHEMA IF NOT EXISTS engram")
        db.execute("REVOKE ALL ON SCHEMA engram FROM PUBLIC")
        db.execute(
            "CREATE TABLE IF NOT EXISTS engram.engram_migrations "
            "(version integer PRIMARY KEY, name text NOT NULL, applied_at double precision NOT NULL)"
        )
        row = db.execute("SELECT max(version) FROM engram.engram_migrations").fetchone()
        current = int(row[0] or 0) if row else 0
        if current > code_version():
            raise SchemaVersionError(
                f"this database has schema version {current}, newer than this engramdb knows ({code_version()}); "
                "upgrade engramdb to open it"
            )
        for m in MIGRATIONS:
            if m.version > current:
                m.apply(db)
                db.execute("INSERT INTO engram.engram_migrations VALUES (%s, %s, %s)", (m.version, m.name, now()))
        if has_citus(db):
            distribute(db)
    return code_version()


#: the tenant table the others are colocated with on Citus
_COLOCATION = "engram_memories"


def distribute(db: psycopg.Connection[Any]) -> list[str]:
    """On Citus: make the store-wide tables reference tables and distribute every tenant table by
    tenant, colocated, so that a tenant's rows of every table sit in one shard group (the engine
    joins them on (tenant, key)); the tables already distributed are left as they are. The engine
    role gets LOGIN, since Citus opens its connections to the workers as the role a statement runs
    as. Runs inside `migrate`'s transaction, under its lock. Returns the tables it distributed."""
    done = {
        str(r[0])
        for r in db.execute(
            "SELECT logicalrelid::regclass::text FROM pg_dist_partition "
            "WHERE logicalrelid::regclass::text LIKE 'engram.%%'"
        )
    }
    made: list[str] = []
    for table in STORE_TABLES:
        name = f"engram.{table}"
        if name not in done:
            db.execute("SELECT create_reference_table(%s)", (name,))
            made.append(name)
    for table in (_COLOCATION, *(t for t in (*TENANT_TABLES, *LATER_TENANT_TABLES) if t != _COLOCATION)):
        name = f"engram.{table}"
        if name in done:
            continue
        if table == _COLOCATION:
            db.execute("SELECT create_distributed_table(%s, 'tenant')", (name,))
        else:
            db.execute(
                "SELECT create_distributed_table(%s, 'tenant', colocate_with => %s)", (name, f"engram.{_COLOCATION}")
            )
        made.append(name)
    role = db.execute("SELECT value FROM engram.engram_meta WHERE key = 'engine_role'").fetchone()
    if role is not None:
        ident = sql.Identifier(str(role[0]))
        if not db.execute("SELECT rolcanlogin FROM pg_roles WHERE rolname = %s", (str(role[0]),)).fetchone()[0]:  # type: ignore[index]
            db.execute(sql.SQL("ALTER ROLE {} LOGIN").format(ident))
    return made


def has_citus(db: psycopg.Connection[Any]) -> bool:
    """True when the database has the ``citus`` extension."""
    row = db.execute("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')").fetchone()
    return bool(row and row[0])
