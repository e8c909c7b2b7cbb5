"""Schemas and login roles for raw-SQL scopes on PostgreSQL: the server decides isolation.

Each (tenant, namespace) pair gets

- a schema of its own, owned by the admin role, holding that namespace's tables under their full
  names (``shared_notes``, ``private_researcher_scratch``);
- a LOGIN role of its own: NOINHERIT, member of nothing, with USAGE and CREATE on its schema and
  CONNECT on the database — no other privilege — and ``search_path`` set to its schema.

Scope statements run on connections that log in as that role, so the session user *is* the scope
role: ``SET ROLE`` and ``SET SESSION AUTHORIZATION`` have nowhere to go. The admin owning the
schema (not the scope role) means the scope can neither drop its schema nor grant anyone USAGE on
it, so even a table it grants to PUBLIC stays out of other scopes' reach.

Role names are cluster-wide, so each starts with the database name (the test fixture drops roles
by that prefix) and ends with a hash of (tenant, namespace); names stay within 63 bytes. The
password of a role is an HMAC of its name under a random secret that only the admin role can read
(``engram_scopes.secret``), so any process holding the admin URL can log in as any scope role.

`harden` makes the database deny by default what PUBLIC would otherwise give every scope role; it
needs a superuser for the parts that change objects of ``pg_catalog`` (see `HARDENING`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading
from dataclasses import dataclass
from typing import Any

from engramdb.errors import BackendError, MissingExtra

try:
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo
except ImportError:  # pragma: no cover - the extra is installed wherever the tests run
    raise MissingExtra("the PostgreSQL backend", "postgres") from None

from engramdb.scopes.namespace import Namespace
from engramdb.storage.postgres.migrations import has_citus

#: the admin-only schema of the scope registry and the password secret
REGISTRY_SCHEMA = "engram_scopes"

#: one advisory lock key for provisioning (admin sessions only: PUBLIC may not take advisory locks)
_LOCK_KEY = 0x656E6772616D  # "engram"

#: Functions PUBLIC may no longer execute in this database, with every overload. Each one would
#: let a scope reach past its schema: session settings (set_config: search_path, role, timeouts),
#: cross-session signals (pg_notify), database-wide lock keys (advisory locks), large objects
#: (server files through lo_import / lo_export, and objects outside any schema), server files and
#: directories, and lookups by oid that print names or definitions of other schemas' objects.
#: (``pg_get_expr`` stays: it needs a node tree that only the revoked catalogs hold, and
#: ``information_schema.columns`` calls it as the querying role.)
#: the revoked functions the engine's own statements call (granted back to the engine's role)
ENGINE_FUNCTIONS = (
    "set_config",
    "pg_advisory_lock",
    "pg_advisory_unlock",
    "pg_try_advisory_lock",
    "pg_advisory_xact_lock",
    "pg_try_advisory_xact_lock",
    "pg_advisory_unlock_all",
)

REVOKED_FUNCTIONS = (
    "set_config",
    "pg_notify",
    "pg_listening_channels",
    "pg_advisory_lock",
    "pg_advisory_lock_shared",
    "pg_advisory_unlock",
    "pg_advisory_unlock_shared",
    "pg_advisory_unlock_all",
    "pg_try_advisory_lock",
    "pg_try_advisory_lock_shared",
    "pg_advisory_xact_lock",
    "pg_advisory_xact_lock_shared",
    "pg_try_advisory_xact_lock",
    "pg_try_advisory_xact_lock_shared",
    "lo_creat",
    "lo_create",
    "lo_open",
    "lo_close",
    "loread",
    "lowrite",
    "lo_lseek",
    "lo_lseek64",
    "lo_tell",
    "lo_tell64",
    "lo_truncate",
    "lo_truncate64",
    "lo_unlink",
    "lo_import",
    "lo_export",
    "lo_get",
    "lo_put",
    "lo_from_bytea",
    "pg_read_file",
    "pg_read_binary_file",
    "pg_ls_dir",
    "pg_stat_file",
    "pg_ls_logdir",
    "pg_ls_waldir",
    "pg_ls_tmpdir",
    "pg_ls_archive_statusdir",
    "pg_get_userbyid",
    "pg_stat_get_activity",
    "pg_stat_get_backend_userid",
    "pg_stat_get_backend_dbid",
    "pg_stat_get_backend_activity",
    "pg_stat_get_backend_pid",
    "pg_stat_get_backend_idset",
    "pg_blocking_pids",
    "pg_safe_snapshot_blocking_pids",
    "pg_lock_status",
    "pg_describe_object",
    "pg_identify_object",
    "pg_identify_object_as_address",
    "pg_get_object_address",
    "pg_get_indexdef",
    "pg_get_constraintdef",
    "pg_get_triggerdef",
    "pg_get_viewdef",
    "pg_get_ruledef",
    "pg_get_functiondef",
    "pg_get_statisticsobjdef",
    "pg_get_partkeydef",
    "pg_get_serial_sequence",
    "pg_get_publication_tables",
    "pg_relation_filenode",
    "pg_relation_filepath",
    "pg_filenode_relation",
    "pg_terminate_backend",
    "pg_cancel_backend",
    # sizes by oid or name move with another scope's writes (how much it stored, and when)
    "pg_relation_size",
    "pg_total_relation_size",
    "pg_table_size",
    "pg_indexes_size",
    "pg_database_size",
    "pg_tablespace_size",
    "pg_stat_have_stats",
)

#: Every function whose name starts with one of these is revoked too: the ``pg_stat_get_*`` family
#: reads the statistics collector by oid (tuples inserted, scans, blocks, vacuum times) without a
#: privilege check, so it counts what another scope writes to tables the caller may not read.
REVOKED_PREFIXES = ("pg_stat_get_",)

#: On Citus, the functions of the ``citus`` extension PUBLIC may no longer execute (names, or
#: prefixes ending in ``_``): each works for a table's owner, a scope role on its own tables, and
#: would move the table to the workers (where `PgRowVectors.version`, which reads the coordinator,
#: would not see it change) or run commands on other nodes as the scope role, where nothing is
#: hardened. Citus's internal functions stay: its executor calls them as the querying role.
CITUS_REVOKED = (
    "create_distributed_table",
    "create_distributed_table_concurrently",
    "create_reference_table",
    "create_distributed_function",
    "create_time_partitions",
    "drop_old_time_partitions",
    "undistribute_table",
    "alter_distributed_table",
    "alter_table_set_access_method",
    "alter_old_partitions_set_access_method",
    "citus_add_local_table_to_metadata",
    "truncate_local_data_after_distributing_table",
    "update_distributed_table_colocation",
    "citus_schema_distribute",
    "citus_schema_undistribute",
    "run_command_on_",
    "master_run_on_worker",
)

#: The name of the event trigger that refuses ``DROP OWNED`` to scope roles (see `GUARD`).
GUARD_TRIGGER = "engram_scope_guard"

#: ``DROP OWNED BY CURRENT_USER`` needs no privilege beyond being the role, and would drop every
#: table of the scope; an event trigger is the one place the server lets a database refuse it.
#: (``REASSIGN OWNED`` needs membership in the receiving role, which a scope role never has, so the
#: server refuses it already; role commands fire no event trigger, see `provision`.)
GUARD = (
    "CREATE OR REPLACE FUNCTION engram_scopes.refuse_scope_commands() RETURNS event_trigger "
    "LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $guard$ BEGIN "
    "IF to_regclass('engram_scopes.scopes') IS NOT NULL "
    "AND EXISTS (SELECT 1 FROM engram_scopes.scopes WHERE role_name = session_user) THEN "
    "RAISE EXCEPTION 'permission denied to run % as a scope role', tg_tag USING ERRCODE = 'insufficient_privilege'; "
    "END IF; END $guard$",
    f"REVOKE ALL ON FUNCTION {REGISTRY_SCHEMA}.refuse_scope_commands() FROM PUBLIC",
    f"CREATE EVENT TRIGGER {GUARD_TRIGGER} ON ddl_command_start WHEN TAG IN ('DROP OWNED') "
    f"EXECUTE FUNCTION {REGISTRY_SCHEMA}.refuse_scope_commands()",
)

#: What `harden` does, for the docs and for a DBA to run by hand (``{db}`` is the database).
HARDENING = (
    "REVOKE ALL ON DATABASE {db} FROM PUBLIC  -- CONNECT, TEMP (no temp tables), CREATE",
    "REVOKE ALL ON SCHEMA public FROM PUBLIC  -- no CREATE and no USAGE in public",
    "REVOKE USAGE ON LANGUAGE sql, plpgsql FROM PUBLIC  -- no CREATE FUNCTION, no DO",
    "REVOKE SELECT ON ALL TABLES IN SCHEMA pg_catalog FROM PUBLIC  -- catalogs name other schemas' objects",
    "REVOKE EXECUTE ON FUNCTION <each of REVOKED_FUNCTIONS, and every pg_stat_get_* function> FROM PUBLIC",
    "REVOKE EXECUTE ON FUNCTION <on Citus, each function of CITUS_REVOKED> FROM PUBLIC",
    "REVOKE ALL ON TABLE <on Citus, each view and table of its extensions outside pg_catalog> FROM PUBLIC",
    "CREATE EVENT TRIGGER engram_scope_guard ON ddl_command_start WHEN TAG IN ('DROP OWNED') "
    "EXECUTE FUNCTION engram_scopes.refuse_scope_commands()  -- roles.GUARD: no DROP OWNED for a scope role",
)


@dataclass(frozen=True, slots=True)
class ScopeRole:
    """Where one scope lives: its schema, its login role, and how to connect as that role."""

    tenant: str
    label: str
    schema: str
    role: str
    conninfo: str  # a libpq connection string logging in as `role` (password included)


def _mac(secret: bytes, *parts: str, n: int) -> str:
    msg = "\x00".join(parts).encode("utf-8", "surrogatepass")
    return hmac.new(secret, msg, hashlib.sha256).hexdigest()[:n]


def role_name(database: str, secret: bytes, tenant: str, namespace: Namespace) -> str:
    """``<database>_s<mac>``, at most 63 bytes; a database name too long for that is shortened
    and hashed (its roles then no longer start with the full name). The MAC is keyed by the
    database's secret, so nobody can compute a tenant's or an agent's role name from its name."""
    return _role_name(database, secret, tenant, namespace.label)


def _role_name(database: str, secret: bytes, tenant: str, label: str) -> str:
    tail = "_s" + _mac(secret, "role", tenant, label, n=16)
    db = database
    if len(db.encode()) + len(tail) > 63:
        db = db.encode()[:38].decode("utf-8", "ignore") + "_" + hashlib.sha256(database.encode()).hexdigest()[:8]
    return db + tail


def schema_name(secret: bytes, tenant: str, namespace: Namespace) -> str:
    """``scope_<mac>``: tenant and agent names stay out of catalog names, and a schema's name
    cannot be computed (and then probed for) from a tenant's name."""
    return _schema_name(secret, tenant, namespace.label)


def _schema_name(secret: bytes, tenant: str, label: str) -> str:
    return "scope_" + _mac(secret, "schema", tenant, label, n=24)


_hardened: set[str] = set()
_hardened_lock = threading.Lock()


def provision(admin_url: str, tenant: str, namespace: Namespace, *, connect_timeout: float = 10.0) -> ScopeRole:
    """Make (or find) the schema and role of (`tenant`, `namespace`); safe to call from many
    threads and processes at once, and again and again. Harden the database first (once per
    process). Raises `BackendError` when the server refuses (e.g. the admin lacks CREATEROLE).

    A role that exists is put back as `provision` made it: PostgreSQL lets any role change its
    own password (``ALTER ROLE CURRENT_USER PASSWORD``) and its own per-role settings (``ALTER
    ROLE CURRENT_USER SET default_transaction_read_only = on``), and no privilege or event
    trigger can refuse either, so the admin restores the password, the attributes and the
    settings whenever it provisions (see `restore`)."""
    return _open(admin_url, tenant, namespace.label, connect_timeout)


def restore(admin_url: str, where: ScopeRole, *, connect_timeout: float = 10.0) -> ScopeRole:
    """Put the role of `where` back as `provision` made it (password, attributes, settings,
    grants): what a scope does when its login fails or its session finds a setting it did not
    ask for."""
    return _open(admin_url, where.tenant, where.label, connect_timeout)


def _open(admin_url: str, tenant: str, label: str, connect_timeout: float) -> ScopeRole:
    try:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=int(connect_timeout)) as conn:
            database = str(_one(conn, "SELECT current_database()"))
            key = f"{conninfo_to_dict(admin_url).get('host', '')}/{database}"
            with _hardened_lock:
                done = key in _hardened
            if not done:
                harden(conn)
                with _hardened_lock:
                    _hardened.add(key)
            for attempt in range(3):
                try:
                    return _provision(conn, admin_url, database, tenant, label)
                except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateObject, psycopg.errors.DuplicateSchema):
                    # another process won a race outside our advisory lock (a non-superuser admin
                    # whose advisory locks were revoked by a DBA): its work stands, look again
                    if attempt == 2:
                        raise
            raise AssertionError("unreachable")
    except psycopg.Error as exc:
        raise BackendError(f"cannot provision the PostgreSQL scope '{label}' of tenant {tenant!r}: {exc}") from None


def _one(conn: psycopg.Connection[Any], query: str, params: tuple[Any, ...] = ()) -> Any:
    row = conn.execute(query, params).fetchone()
    return None if row is None else row[0]


def _provision(conn: psycopg.Connection[Any], admin_url: str, database: str, tenant: str, label: str) -> ScopeRole:
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        citus = has_citus(conn)
        if citus:
            # A scope is the coordinator's alone: its role, schema and grants are made here and
            # not sent to the workers, so the role is no distributed object. That also keeps the
            # role out of Citus 13.2's REASSIGN OWNED post-processing, which crashes the
            # coordinator's backend on ``REASSIGN OWNED BY CURRENT_USER TO CURRENT_USER`` (an
            # allowed no-op for any role, and no event trigger can refuse it) but is skipped for
            # roles that are not distributed.
            conn.execute("SET LOCAL citus.enable_ddl_propagation = off")
        secret = _secret(conn)
        role, schema = _role_name(database, secret, tenant, label), _schema_name(secret, tenant, label)
        ident_role, ident_schema = sql.Identifier(role), sql.Identifier(schema)
        password = _mac(secret, "password", role, n=40)
        known = _one(
            conn,
            f"SELECT role_name FROM {REGISTRY_SCHEMA}.scopes WHERE tenant = %s AND label = %s",  # noqa: S608 - constant
            (tenant, label),
        )
        exists = _one(conn, "SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)) is not None
        attrs = sql.SQL(
            "LOGIN NOINHERIT NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD {}"
        ).format(sql.Literal(password))
        if not exists:
            conn.execute(sql.SQL("CREATE ROLE {} ").format(ident_role) + attrs)
        elif known is not None:
            _restore_role(conn, role, password, attrs)
        else:
            # A role of that name without a registry row: left over from an earlier database of the
            # same name. Take it over with this database's password and no memberships.
            conn.execute(sql.SQL("ALTER ROLE {} ").format(ident_role) + attrs)
            for (group,) in conn.execute(
                "SELECT g.rolname FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid "
                "JOIN pg_roles r ON r.oid = m.member WHERE r.rolname = %s",
                (role,),
            ).fetchall():
                conn.execute(sql.SQL("REVOKE {} FROM {}").format(sql.Identifier(group), ident_role))
        if has_citus(conn):
            # A scope's schema stays on the coordinator even where schema-based sharding is on:
            # its role and its tables are the coordinator's (see CITUS_REVOKED).
            conn.execute("SET LOCAL citus.enable_schema_based_sharding = off")
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {} AUTHORIZATION CURRENT_USER").format(ident_schema))
        conn.execute(sql.SQL("REVOKE ALL ON SCHEMA {} FROM PUBLIC").format(ident_schema))
        conn.execute(sql.SQL("GRANT USAGE, CREATE ON SCHEMA {} TO {}").format(ident_schema, ident_role))
        conn.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(sql.Identifier(database), ident_role))
        settings = conn.execute(
            "SELECT s.setdatabase = d.oid, s.setconfig FROM pg_db_role_setting s, pg_database d "
            "WHERE d.datname = current_database() AND s.setrole = %s::regrole AND s.setdatabase IN (0, d.oid)",
            (role,),
        ).fetchall()
        if settings != [(True, [f"search_path={schema}"])]:
            # whatever the role set for itself goes, in this database and in all of them
            conn.execute(sql.SQL("ALTER ROLE {} RESET ALL").format(ident_role))
            conn.execute(sql.SQL("ALTER ROLE {} IN DATABASE {} RESET ALL").format(ident_role, sql.Identifier(database)))
            conn.execute(
                sql.SQL("ALTER ROLE {} IN DATABASE {} SET search_path TO {}").format(
                    ident_role, sql.Identifier(database), ident_schema
                )
            )
        if known is None:
            conn.execute(
                f"INSERT INTO {REGISTRY_SCHEMA}.scopes (tenant, label, schema_name, role_name) "  # noqa: S608 - constant
                "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (tenant, label, schema, role),
            )
    options: dict[str, str] = {}
    if citus:
        # and so are its sessions: with DDL propagation on, Citus would send a VACUUM, or check a
        # new view in pg_rewrite (which hardening closed to PUBLIC), for the workers, where the
        # role does not exist. A startup option, so no per-role setting to guard.
        given = conninfo_to_dict(admin_url).get("options")
        options["options"] = " ".join([*([str(given)] if given else []), "-c citus.enable_ddl_propagation=off"])
    conninfo = make_conninfo(admin_url, user=role, password=password, application_name="engramdb-scope", **options)
    return ScopeRole(tenant, label, schema, role, conninfo)


def _restore_role(conn: psycopg.Connection[Any], role: str, password: str, attrs: sql.Composed) -> None:
    """Reset a known role's attributes and password when they are not what provisioning set. A
    superuser admin reads the stored SCRAM verifier and leaves a matching one alone; an admin
    that may not read ``pg_authid`` sets the password again."""
    row = conn.execute(
        "SELECT rolcanlogin AND NOT rolinherit AND NOT rolsuper AND NOT rolcreatedb AND NOT rolcreaterole "
        "AND NOT rolreplication AND NOT rolbypassrls, rolvaliduntil IS NULL AND rolconnlimit = -1, "
        "has_table_privilege('pg_catalog.pg_authid', 'SELECT') FROM pg_roles WHERE rolname = %s",
        (role,),
    ).fetchone()
    if row is None:  # pragma: no cover - the caller found the role under the advisory lock
        return
    plain, unlimited, readable = row
    if plain and unlimited and readable:
        verifier = _one(conn, "SELECT rolpassword FROM pg_authid WHERE rolname = %s", (role,))
        if isinstance(verifier, str) and scram_matches(verifier, password):
            return
    conn.execute(
        sql.SQL("ALTER ROLE {} ").format(sql.Identifier(role))
        + attrs
        + sql.SQL(" VALID UNTIL 'infinity' CONNECTION LIMIT -1")
    )


def scram_matches(verifier: str, password: str) -> bool:
    """Whether a ``SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`` verifier (RFC 5802,
    as PostgreSQL stores it) was made from `password`."""
    try:
        method, salt_part, keys = verifier.split("$")
        iterations, salt = salt_part.split(":")
        stored, server = keys.split(":")
        if method != "SCRAM-SHA-256":
            return False
        salted = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(salt), int(iterations))
    except ValueError:
        return False
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
    return hmac.compare_digest(
        base64.b64encode(hashlib.sha256(client_key).digest()).decode(), stored
    ) and hmac.compare_digest(base64.b64encode(server_key).decode(), server)


def _secret(conn: psycopg.Connection[Any]) -> bytes:
    _registry(conn)
    conn.execute(
        f"INSERT INTO {REGISTRY_SCHEMA}.secret (key) VALUES (%s) ON CONFLICT DO NOTHING",  # noqa: S608 - constant
        (secrets.token_bytes(32),),
    )
    return bytes(_one(conn, f"SELECT key FROM {REGISTRY_SCHEMA}.secret"))  # noqa: S608 - constant


def _registry(conn: psycopg.Connection[Any]) -> None:
    """The admin-only schema with the secret and the scope registry (the guard reads the latter)."""
    conn.execute(f"CREATE SCHEMA IF NOT EXISTS {REGISTRY_SCHEMA} AUTHORIZATION CURRENT_USER")
    conn.execute(f"REVOKE ALL ON SCHEMA {REGISTRY_SCHEMA} FROM PUBLIC")
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {REGISTRY_SCHEMA}.secret "
        "(one boolean PRIMARY KEY DEFAULT true CHECK (one), key bytea NOT NULL)"
    )
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {REGISTRY_SCHEMA}.scopes (tenant text NOT NULL, label text NOT NULL, "
        "schema_name text NOT NULL UNIQUE, role_name text NOT NULL UNIQUE, "
        "created_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (tenant, label))"
    )
    conn.execute(f"REVOKE ALL ON ALL TABLES IN SCHEMA {REGISTRY_SCHEMA} FROM PUBLIC")


def harden(conn: psycopg.Connection[Any]) -> None:
    """Take from PUBLIC, in this database, what would let a scope role reach past its schema
    (`HARDENING`). Idempotent. Without a superuser, the ``pg_catalog`` part is checked instead of
    made: a `BackendError` names the statements a superuser must run once."""
    database = sql.Identifier(str(_one(conn, "SELECT current_database()")))
    superuser = bool(_one(conn, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"))
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        conn.execute(sql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(database))
        conn.execute("REVOKE ALL ON SCHEMA public FROM PUBLIC")
        _grant_engine(conn, database, functions=False)
        if not superuser:
            missing = _unhardened(conn)
            if missing:
                raise BackendError(
                    "PostgreSQL scopes need this database hardened by a superuser once; still open to PUBLIC: "
                    + ", ".join(missing)
                    + ". Run: "
                    + "; ".join(HARDENING)
                )
            return
        conn.execute("REVOKE USAGE ON LANGUAGE sql, plpgsql FROM PUBLIC")
        conn.execute("REVOKE SELECT ON ALL TABLES IN SCHEMA pg_catalog FROM PUBLIC")
        for (signature,) in conn.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p WHERE p.pronamespace = 'pg_catalog'::regnamespace "
            "AND (p.proname = ANY(%s) OR p.proname LIKE ANY(%s))",
            (list(REVOKED_FUNCTIONS), [_like(p) for p in REVOKED_PREFIXES]),
        ).fetchall():
            conn.execute(sql.SQL("REVOKE EXECUTE ON FUNCTION {} FROM PUBLIC").format(sql.SQL(signature)))
        if has_citus(conn):
            for signature in _citus_functions(conn, public=False):
                # ROUTINE: some are procedures (alter_old_partitions_set_access_method)
                conn.execute(sql.SQL("REVOKE EXECUTE ON ROUTINE {} FROM PUBLIC").format(sql.SQL(signature)))
            for relation in _citus_relations(conn):
                conn.execute(sql.SQL("REVOKE ALL ON TABLE {} FROM PUBLIC").format(sql.SQL(relation)))
        _grant_engine(conn, database, functions=True)
        _registry(conn)
        for statement in GUARD:
            if statement.startswith("CREATE EVENT TRIGGER"):
                state = _one(conn, "SELECT evtenabled FROM pg_event_trigger WHERE evtname = %s", (GUARD_TRIGGER,))
                if state is None:
                    conn.execute(statement)
                elif state == "D":
                    conn.execute(sql.SQL("ALTER EVENT TRIGGER {} ENABLE").format(sql.Identifier(GUARD_TRIGGER)))
            else:
                conn.execute(statement)


def _citus_relations(conn: psycopg.Connection[Any]) -> list[str]:
    """The views and tables of Citus's extensions outside ``pg_catalog`` that PUBLIC may still read
    (``citus_tables``, ``citus_shards`` … in ``public``): a scope would see them listed in its
    ``information_schema``, and read the names and sizes of the engine's tables in them."""
    rows = conn.execute(
        "SELECT c.oid::regclass::text FROM pg_class c "
        "JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e' "
        "JOIN pg_extension e ON e.oid = d.refobjid AND e.extname IN ('citus', 'citus_columnar') "
        "WHERE c.relnamespace <> 'pg_catalog'::regnamespace AND c.relkind IN ('r', 'v', 'm', 'p', 'f') "
        "AND has_table_privilege('public', c.oid, 'SELECT') ORDER BY 1"
    ).fetchall()
    return [str(r[0]) for r in rows]


def _citus_functions(conn: psycopg.Connection[Any], *, public: bool) -> list[str]:
    """The signatures of the ``citus`` extension's functions named by `CITUS_REVOKED` (only those
    PUBLIC may still execute, with `public`)."""
    names = [n for n in CITUS_REVOKED if not n.endswith("_")]
    prefixes = [_like(n) for n in CITUS_REVOKED if n.endswith("_")]
    return [
        str(r[0])
        for r in conn.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p "
            "JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e' "
            "JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'citus' "
            "WHERE (p.proname = ANY(%s) OR p.proname LIKE ANY(%s)) "
            "AND (NOT %s OR has_function_privilege('public', p.oid, 'EXECUTE'))",
            (names, prefixes, public),
        ).fetchall()
    ]


def _like(prefix: str) -> str:
    """A LIKE pattern for names starting with `prefix` (``_`` is a wildcard to LIKE)."""
    return prefix.replace("\\", "\\\\").replace("_", "\\_").replace("%", "\\%") + "%"


def _grant_engine(conn: psycopg.Connection[Any], database: sql.Identifier, *, functions: bool) -> None:
    """Give the engine's own role (`engramdb.storage.postgres.migrations`: the role engine
    statements run as) back what hardening took from PUBLIC and the engine uses: the database,
    the ``public`` schema (pgvector's type lives there), the catalogs, and the functions it calls
    (``set_config`` for the tenant setting, advisory locks for reflection)."""
    found = conn.execute(
        "SELECT value FROM engram.engram_meta WHERE key = 'engine_role'"
        if _one(conn, "SELECT to_regclass('engram.engram_meta') IS NOT NULL")
        else "SELECT NULL WHERE false"
    ).fetchone()
    if found is None or not found[0]:
        return
    role = sql.Identifier(str(found[0]))
    conn.execute(sql.SQL("GRANT CONNECT, TEMPORARY ON DATABASE {} TO {}").format(database, role))
    conn.execute(sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(role))
    if not functions:
        return
    conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA pg_catalog TO {}").format(role))
    for (signature,) in conn.execute(
        "SELECT p.oid::regprocedure::text FROM pg_proc p WHERE p.pronamespace = 'pg_catalog'::regnamespace "
        "AND p.proname = ANY(%s)",
        (list(ENGINE_FUNCTIONS),),
    ).fetchall():
        conn.execute(sql.SQL("GRANT EXECUTE ON FUNCTION {} TO {}").format(sql.SQL(signature), role))


def _unhardened(conn: psycopg.Connection[Any]) -> list[str]:
    """What PUBLIC can still use among the superuser-only hardening steps."""
    missing: list[str] = []
    if _one(conn, "SELECT has_language_privilege('public', 'plpgsql', 'USAGE')"):
        missing.append("LANGUAGE plpgsql")
    if _one(conn, "SELECT has_table_privilege('public', 'pg_catalog.pg_class', 'SELECT')"):
        missing.append("pg_catalog tables")
    open_functions = _one(
        conn,
        "SELECT count(*) FROM pg_proc p WHERE p.pronamespace = 'pg_catalog'::regnamespace "
        "AND (p.proname = ANY(%s) OR p.proname LIKE ANY(%s)) AND has_function_privilege('public', p.oid, 'EXECUTE')",
        (list(REVOKED_FUNCTIONS), [_like(p) for p in REVOKED_PREFIXES]),
    )
    if open_functions:
        missing.append(f"{open_functions} functions of REVOKED_FUNCTIONS and REVOKED_PREFIXES")
    if has_citus(conn) and (open_citus := _citus_functions(conn, public=True)):
        missing.append(f"{len(open_citus)} Citus functions of CITUS_REVOKED")
    if has_citus(conn) and (open_views := _citus_relations(conn)):
        missing.append(f"{len(open_views)} Citus views ({', '.join(open_views[:3])} …)")
    if _one(conn, "SELECT evtenabled FROM pg_event_trigger WHERE evtname = %s", (GUARD_TRIGGER,)) in (None, "D"):
        missing.append(f"the event trigger {GUARD_TRIGGER} (roles.GUARD)")
    return missing
