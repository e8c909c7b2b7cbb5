"""Escape attempts against PostgreSQL scopes: the server's privileges keep every namespace apart.

The world: two tenants, each with a shared scope and private scopes, a secret in every table, and
an engine table in schema ``engram`` (owned by the admin, no USAGE for PUBLIC), all in one fresh
database from ``tests/pg_server.py``. Each refused case checks, as the SQLite suite does:

- the refusal class (``ScopeViolation`` / ``ForbiddenDDLError`` / ``InvalidStatement``);
- that nothing changed: schemas, relations, their owners and ACLs, every table's rows, roles,
  memberships and role settings, large objects and functions, read by the admin before and after;
- that the error message names nothing outside the namespace (no foreign table, column, schema or
  role name, no foreign secret).

`test_server_refuses_directly` runs the dangerous kinds on a raw connection logged in as the scope
role, past the classifier, and requires the server's own refusal. `CLASSIFIER_ONLY` lists what
only the classifier stops, each with the reason it is safe. Existence pairs require identical
errors for an existing and a missing foreign object.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import psycopg
import pytest

from engramdb import (
    ConstraintError,
    EngramError,
    ForbiddenDDLError,
    InvalidStatement,
    MemoryRetriever,
    ResourceLimitExceeded,
    ScopeViolation,
    SqlError,
    TransactionError,
    ValidationError,
)
from engramdb.scopes.namespace import Namespace
from engramdb.storage.postgres import roles
from engramdb.storage.postgres.scope import PostgresScope, _Watchdog

pytestmark = pytest.mark.postgres_only

AGENTS = ("a", "ab", "a-b", "researcher")
TENANTS = ("default", "other")
ENGINE_SECRET = "SECRET-engine-77ab3e"


class Limits(TypedDict):
    """The limits every scope of these tests opens with (PostgresScope's keywords)."""

    statement_timeout: float
    max_value_bytes: int
    max_result_rows: int
    max_result_bytes: int


LIMITS: Limits = {
    "statement_timeout": 1.0,
    "max_value_bytes": 1 << 20,
    "max_result_rows": 5000,
    "max_result_bytes": 1 << 23,
}


def secret(tenant: str, label: str) -> str:
    return f"SECRET-{tenant}-{label}-c0ffee"


def agent_table(agent: str) -> str:
    return f"private_{agent}_t"


def agent_column(agent: str) -> str:
    return f"hidden_{agent.replace('-', '_')}_col"


def q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def ns_of(label: str) -> Namespace:
    if label == "shared":
        return Namespace("shared", "shared_")
    agent = label.split(":", 1)[1]
    return Namespace(label, f"private_{agent}_")


class TinyRowVectors:
    """An in-memory `RowVectorStore` (the backend's is not merged here); its version changes on
    every question, so a retriever always re-reads the table."""

    def __init__(self) -> None:
        self._rows: dict[tuple[str, str, str], dict[int, tuple[bytes, bytes]]] = {}
        self._version = 0

    def digests(self, table: str, column: str, model: str) -> dict[int, bytes]:
        return {k: d for k, (d, _) in self._rows.get((table, column, model), {}).items()}

    def apply(self, table: str, column: str, model: str, gone: Any, new: Any) -> None:
        rows = self._rows.setdefault((table, column, model), {})
        for k in gone:
            rows.pop(k, None)
        for k, d, v in new:
            rows[k] = (d, v)

    def load(self, table: str, column: str, model: str) -> list[tuple[int, bytes]]:
        return [(k, v) for k, (_, v) in sorted(self._rows.get((table, column, model), {}).items())]

    def version(self) -> int:
        self._version += 1
        return self._version


def _quiet_pgserver_import() -> None:
    """pgserver reads platformdirs' runtime dir when imported, which warns (an error under this
    suite's filterwarnings) on machines without XDG_RUNTIME_DIR; import it once, quietly."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.suppress(ImportError):
            import pgserver  # noqa: F401


def make_scope(url: str, label: str, tenant: str = "default", **limits: Any) -> PostgresScope:
    return PostgresScope(url, ns_of(label), tenant, TinyRowVectors(), lambda: None, **{**LIMITS, **limits})


# -- the admin's view of everything -----------------------------------------------------------------


def snapshot(url: str) -> dict[str, Any]:
    """Everything a refused statement must leave as it was."""
    with psycopg.connect(url, autocommit=True) as c:
        schemas = [
            r[0]
            for r in c.execute(
                "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'scope\\_%' "
                "OR nspname IN ('engram', 'public', 'engram_scopes') ORDER BY 1"
            )
        ]
        rels = c.execute(
            "SELECT n.nspname, c.relname, c.relkind, c.relacl::text, pg_get_userbyid(c.relowner) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = ANY(%s) ORDER BY 1, 2",
            (schemas,),
        ).fetchall()
        data = {}
        for nsp, rel, kind, *_ in rels:
            if kind == "r":
                data[f"{nsp}.{rel}"] = sorted(
                    (repr(r) for r in c.execute(f"SELECT * FROM {q(nsp)}.{q(rel)}")),
                )
        return {
            "schemas": c.execute(
                "SELECT nspname, nspacl::text, pg_get_userbyid(nspowner) FROM pg_namespace ORDER BY 1"
            ).fetchall(),
            "rels": rels,
            "data": data,
            "roles": c.execute(
                "SELECT rolname, rolsuper, rolinherit, rolcreaterole, rolcreatedb, rolcanlogin, rolbypassrls, "
                "rolconfig::text FROM pg_roles ORDER BY 1"
            ).fetchall(),
            "members": c.execute("SELECT roleid, member, admin_option FROM pg_auth_members ORDER BY 1, 2").fetchall(),
            "settings": c.execute(
                "SELECT setdatabase, setrole, setconfig::text FROM pg_db_role_setting ORDER BY 1, 2"
            ).fetchall(),
            "database": c.execute("SELECT datacl::text FROM pg_database WHERE datname = current_database()").fetchall(),
            "functions": c.execute(
                "SELECT count(*) FROM pg_proc WHERE pronamespace <> ALL(ARRAY['pg_catalog'::regnamespace, "
                "'information_schema'::regnamespace])"
            ).fetchall(),
            "largeobjects": c.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchall(),
            "extensions": c.execute("SELECT extname FROM pg_extension ORDER BY 1").fetchall(),
        }


@dataclass
class World:
    url: str
    dir: Path
    scopes: dict[tuple[str, str], PostgresScope] = field(default_factory=dict)
    where: dict[tuple[str, str], roles.ScopeRole] = field(default_factory=dict)

    def scope(self, label: str, tenant: str = "default") -> PostgresScope:
        return self.scopes[(tenant, label)]

    def schema(self, label: str, tenant: str = "default") -> str:
        return self.where[(tenant, label)].schema

    def snap(self) -> dict[str, Any]:
        return snapshot(self.url)

    def foreign_words(self, label: str, tenant: str = "default") -> list[str]:
        """What (`tenant`, `label`) must never see in a message: others' names, schemas, roles, secrets."""
        words = [ENGINE_SECRET, "engram.memories", "engram_scopes", "memories_secret"]
        for (t, lab), where in self.where.items():
            if (t, lab) == (tenant, label):
                continue
            words += [secret(t, lab), where.schema, where.role]
            if lab != label:
                if lab == "shared":
                    words += ["shared_notes"]
                else:
                    agent = lab.split(":", 1)[1]
                    words += [agent_table(agent), agent_column(agent)]
        return words

    def own_table(self, label: str) -> str:
        return "shared_notes" if label == "shared" else agent_table(label.split(":", 1)[1])


def build_world(url: str, tmp: Path) -> World:
    world = World(url, tmp)
    for tenant in TENANTS:
        for label in ("shared", *(f"private:{a}" for a in AGENTS)):
            scope = make_scope(url, label, tenant)
            world.scopes[(tenant, label)] = scope
            world.where[(tenant, label)] = roles.provision(url, tenant, ns_of(label))
            if label == "shared":
                scope.execute(
                    "CREATE TABLE shared_notes (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, "
                    "content text, created_ts double precision)"
                )
                scope.executemany(
                    "INSERT INTO shared_notes (content, created_ts) VALUES (?, ?)",
                    [(secret(tenant, label), 1.0), ("second shared note", 2.0)],
                )
                scope.execute("CREATE INDEX idx_notes_ts ON shared_notes(created_ts)")
            else:
                agent = label.split(":", 1)[1]
                table = q(agent_table(agent))
                scope.execute(
                    f"CREATE TABLE {table} (id integer PRIMARY KEY, secretcol text, {agent_column(agent)} text)"
                )
                scope.execute(
                    f"INSERT INTO {table} (id, secretcol, {agent_column(agent)}) VALUES (1, ?, ?)",
                    (secret(tenant, label), secret(tenant, label)),
                )
    with psycopg.connect(url, autocommit=True) as c:
        # the engine's schema as the backend makes it: the admin's, no USAGE for PUBLIC
        c.execute("CREATE SCHEMA engram")
        c.execute("REVOKE ALL ON SCHEMA engram FROM PUBLIC")
        c.execute("CREATE TABLE engram.memories (id int PRIMARY KEY, content text, memories_secret text)")
        c.execute("INSERT INTO engram.memories VALUES (1, %s, %s)", (ENGINE_SECRET, ENGINE_SECRET))
        c.execute("CREATE FUNCTION engram.touch() RETURNS int LANGUAGE sql SECURITY DEFINER AS 'SELECT 1'")
    return world


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    from tests.pg_server import fresh_database

    _quiet_pgserver_import()
    with fresh_database() as url:
        w = build_world(url, tmp_path_factory.mktemp("pgscope"))
        try:
            yield w
        finally:
            for scope in w.scopes.values():
                scope.close()


def assert_no_leak(world: World, label: str, text: str, tenant: str = "default") -> None:
    for word in world.foreign_words(label, tenant):
        assert word.lower() not in text.lower(), f"{word!r} leaked into: {text!r}"


def expect_refusal(
    world: World, label: str, sql: str, expected: tuple[type[BaseException], ...], tenant: str = "default"
) -> EngramError:
    before = world.snap()
    scope = world.scope(label, tenant)
    with pytest.raises(expected) as info:
        scope.execute(sql)
    exc = info.value
    assert isinstance(exc, EngramError)
    assert_no_leak(world, label, str(exc), tenant)
    for call in (scope.execute, scope.query):  # the same refusal, word for word, the second time
        with pytest.raises(type(exc)) as again:
            call(sql)
        assert str(again.value) == str(exc)
    assert world.snap() == before, "a refused statement changed the database"
    return exc


# -- refused through the scope -------------------------------------------------------------------------

SV = (ScopeViolation,)
FD = (ForbiddenDDLError,)
IS = (InvalidStatement,)
S, A, AB = "shared", "private:a", "private:ab"

#: (id, actor, SQL, expected). ``{a}``, ``{ab}``, ``{s}`` are schemas of the default tenant's
#: private:a, private:ab and shared scopes; ``{os}``, ``{oa}`` those of tenant "other".
CASES: list[tuple[str, str, str, tuple[type[BaseException], ...]]] = [
    # --- other namespaces by name (unqualified names resolve in the own schema only)
    ("read-private-from-shared", S, "SELECT * FROM private_ab_t", SV),
    ("read-shared-from-private", A, "SELECT * FROM shared_notes", SV),
    ("read-hyphen-agent", S, 'SELECT * FROM "private_a-b_t"', SV),
    ("read-ab-from-a", A, "SELECT secretcol FROM private_ab_t", SV),
    ("insert-private-from-shared", S, "INSERT INTO private_ab_t (id, secretcol) VALUES (9, 'x')", SV),
    ("update-private-from-shared", S, "UPDATE private_ab_t SET secretcol = 'x'", SV),
    ("delete-private-from-shared", S, "DELETE FROM private_ab_t", SV),
    # --- schema-qualified names: the server refuses USAGE on every schema but the own
    ("qualified-private-from-shared", S, "SELECT * FROM {ab}.private_ab_t", SV),
    ("qualified-own-name-other-schema", A, "SELECT * FROM {ab}.private_a_t", SV),
    ("qualified-quoted", S, 'SELECT * FROM "{ab}"."private_ab_t"', SV),
    ("qualified-shared-from-private", A, "SELECT content FROM {s}.shared_notes", SV),
    ("qualified-insert", S, "INSERT INTO {a}.private_a_t (id) VALUES (5)", SV),
    ("qualified-update", S, "UPDATE {a}.private_a_t SET secretcol = 'x'", SV),
    ("qualified-delete", S, "DELETE FROM {a}.private_a_t", SV),
    ("qualified-missing-schema", S, "SELECT * FROM scope_000000000000000000000000.shared_notes", SV),
    ("cross-database-name", S, "SELECT * FROM postgres.public.x", SV),
    # --- the same namespace name in another tenant
    ("cross-tenant-shared", S, "SELECT content FROM {os}.shared_notes", SV),
    ("cross-tenant-shared-insert", S, "INSERT INTO {os}.shared_notes (content) VALUES ('x')", SV),
    ("cross-tenant-private", A, "SELECT secretcol FROM {oa}.private_a_t", SV),
    ("cross-tenant-union", S, "SELECT content FROM shared_notes UNION SELECT content FROM {os}.shared_notes", SV),
    ("cross-tenant-join", S, "SELECT 1 FROM shared_notes n JOIN {os}.shared_notes o ON o.id = n.id", SV),
    # --- engine tables
    ("engine-table", S, "SELECT * FROM engram.memories", SV),
    ("engine-table-count", A, "SELECT count(*) FROM engram.memories", SV),
    ("engine-table-insert", S, "INSERT INTO engram.memories VALUES (2, 'x', 'y')", SV),
    ("engine-table-delete", S, "DELETE FROM engram.memories", SV),
    ("engine-registry", S, "SELECT * FROM engram_scopes.secret", SV),
    ("engine-function", S, "SELECT engram.touch()", SV),
    ("engram-prefixed-name", S, "SELECT * FROM engram_meta", SV),
    # --- catalogs that name other objects
    ("pg-class", S, "SELECT relname FROM pg_catalog.pg_class", SV),
    ("pg-class-unqualified", A, "SELECT relname FROM pg_class WHERE relname LIKE 'private%'", SV),
    ("pg-namespace", S, "SELECT nspname FROM pg_namespace", SV),
    ("pg-tables", S, "SELECT schemaname, tablename FROM pg_tables", SV),
    ("pg-indexes", S, "SELECT indexname FROM pg_indexes", SV),
    ("pg-attribute", S, "SELECT attname FROM pg_attribute", SV),
    ("pg-type", S, "SELECT typname FROM pg_type WHERE typname LIKE 'private%'", SV),
    ("pg-roles", S, "SELECT rolname FROM pg_roles", SV),
    ("pg-user", A, "SELECT usename FROM pg_user", SV),
    ("pg-auth-members", S, "SELECT * FROM pg_auth_members", SV),
    ("pg-db-role-setting", S, "SELECT setconfig FROM pg_db_role_setting", SV),
    ("pg-stat-activity", S, "SELECT usename, query FROM pg_stat_activity", SV),
    ("pg-stat-user-tables", S, "SELECT relname FROM pg_stat_user_tables", SV),
    ("pg-locks", S, "SELECT * FROM pg_locks", SV),
    ("pg-settings", S, "SELECT name, setting FROM pg_settings", SV),
    ("pg-proc", S, "SELECT proname FROM pg_proc", SV),
    ("pg-largeobject", S, "SELECT * FROM pg_largeobject_metadata", SV),
    ("ctas-from-catalog", S, "CREATE TABLE shared_cat AS SELECT relname FROM pg_class", SV),
    ("insert-from-catalog", S, "INSERT INTO shared_notes (content) SELECT nspname FROM pg_namespace", SV),
    ("regclass-foreign", S, "SELECT '{ab}.private_ab_t'::regclass", SV),
    ("to-regclass-foreign", S, "SELECT to_regclass('{ab}.private_ab_t')", SV),
    ("current-setting-data-dir", S, "SELECT current_setting('data_directory')", SV),
    ("pg-get-userbyid", S, "SELECT pg_get_userbyid(10)", SV),
    ("pg-stat-get-activity", S, "SELECT * FROM pg_stat_get_activity(NULL)", SV),
    # --- server files and programs, large objects
    ("pg-read-file", S, "SELECT pg_read_file('/etc/passwd')", SV),
    ("pg-read-binary-file", S, "SELECT pg_read_binary_file('/etc/passwd')", SV),
    ("pg-ls-dir", S, "SELECT pg_ls_dir('.')", SV),
    ("pg-stat-file", S, "SELECT pg_stat_file('/etc/passwd')", SV),
    ("lo-import", S, "SELECT lo_import('/etc/passwd')", SV),
    ("lo-export", S, "SELECT lo_export(1, '{dir}/lo.out')", SV),
    ("lo-create", S, "SELECT lo_create(0)", SV),
    ("lo-from-bytea", A, "SELECT lo_from_bytea(0, 'x')", SV),
    ("copy-to-file", S, "COPY shared_notes TO '{dir}/copy.out'", IS),
    ("copy-from-program", S, "COPY shared_notes FROM PROGRAM 'id'", IS),
    ("copy-to-stdout", S, "COPY (SELECT * FROM shared_notes) TO STDOUT", IS),
    # --- session, roles, settings, signals, locks
    ("set-role", S, "SET ROLE postgres", IS),
    ("reset-role", S, "RESET ROLE", IS),
    ("set-session-authorization", S, "SET SESSION AUTHORIZATION postgres", IS),
    ("set-statement-timeout", S, "SET statement_timeout = 0", IS),
    ("set-config-role", S, "SELECT set_config('role', 'postgres', false)", SV),
    ("set-config-search-path", A, "SELECT set_config('search_path', '{ab}', false)", SV),
    ("listen", S, "LISTEN engram", IS),
    ("notify", S, "NOTIFY engram, 'x'", IS),
    ("pg-notify", S, "SELECT pg_notify('engram', 'x')", SV),
    ("advisory-lock", S, "SELECT pg_advisory_lock(1)", SV),
    ("advisory-try-lock", A, "SELECT pg_try_advisory_lock(1, 2)", SV),
    ("advisory-xact-lock", S, "SELECT pg_advisory_xact_lock(1)", SV),
    ("pg-terminate-backend", S, "SELECT pg_terminate_backend(1)", SV),
    ("lock-table", S, "LOCK TABLE shared_notes", IS),
    ("lock-foreign-table", S, "LOCK TABLE {ab}.private_ab_t IN ACCESS EXCLUSIVE MODE", IS),
    # --- schema changes beyond the safelist
    ("drop-table", S, "DROP TABLE shared_notes", FD),
    ("drop-foreign-qualified", S, "DROP TABLE {ab}.private_ab_t", FD),
    ("truncate", S, "TRUNCATE shared_notes", IS),
    ("alter-owner", S, "ALTER TABLE shared_notes OWNER TO postgres", FD),
    ("alter-rename", S, "ALTER TABLE shared_notes RENAME TO shared_x", FD),
    ("alter-role", S, "ALTER ROLE CURRENT_USER SUPERUSER", FD),
    ("grant-select", S, "GRANT SELECT ON shared_notes TO PUBLIC", IS),
    ("grant-role", S, "GRANT postgres TO CURRENT_USER", IS),
    ("create-schema", S, "CREATE SCHEMA shared_x", FD),
    ("create-extension", S, "CREATE EXTENSION dblink", FD),
    (
        "create-function-plpgsql",
        S,
        "CREATE FUNCTION shared_f() RETURNS int LANGUAGE plpgsql AS 'begin return 1; end'",
        FD,
    ),
    (
        "create-function-security-definer",
        S,
        "CREATE FUNCTION shared_f() RETURNS int LANGUAGE sql SECURITY DEFINER AS 'SELECT 1'",
        FD,
    ),
    ("create-view", S, "CREATE VIEW shared_v AS SELECT * FROM shared_notes", FD),
    ("create-trigger", S, "CREATE TRIGGER shared_tr BEFORE INSERT ON shared_notes EXECUTE FUNCTION x()", FD),
    ("create-role", S, "CREATE ROLE shared_r", FD),
    ("create-temp-table", S, "CREATE TEMP TABLE shared_tmp (a int)", FD),
    ("create-in-public", S, "CREATE TABLE public.shared_x (a int)", SV),
    ("create-in-foreign-schema", S, "CREATE TABLE {ab}.shared_x (a int)", SV),
    ("do-block", S, "DO $$BEGIN PERFORM 1; END$$", IS),
    ("vacuum", S, "VACUUM", FD),
    ("vacuum-foreign", S, "VACUUM {ab}.private_ab_t", FD),
    ("prepare", S, "PREPARE p AS SELECT * FROM {ab}.private_ab_t", IS),
    ("execute-prepared", S, "EXECUTE p", IS),
    ("declare-cursor", S, "DECLARE c CURSOR FOR SELECT * FROM shared_notes", IS),
    ("begin-in-sql", S, "BEGIN", SV),
    ("commit-in-sql", S, "COMMIT", SV),
    ("two-statements", S, "SELECT 1; DROP TABLE shared_notes", IS),
    ("nested-comment-hides-drop", S, "/* /* */ SELECT 1 */ DROP TABLE shared_notes", SV),
    (
        "nested-comment-hides-drop-after-insert",
        S,
        "/* /* */ INSERT INTO shared_notes (content) VALUES ('x') */ DROP TABLE shared_notes",
        IS,
    ),
    (
        "e-string-hides-statement",
        S,
        "INSERT INTO shared_notes (content) VALUES (E'\\''); DROP TABLE shared_notes; --')",
        IS,
    ),
    # --- reads of foreign tables in every position
    ("cte-read", S, "WITH c AS (SELECT * FROM {ab}.private_ab_t) SELECT * FROM c", SV),
    ("subquery-read", S, "SELECT (SELECT secretcol FROM {ab}.private_ab_t LIMIT 1)", SV),
    ("lateral-read", S, "SELECT * FROM shared_notes n, LATERAL (SELECT secretcol FROM {ab}.private_ab_t) p", SV),
    ("exists-probe", S, "SELECT 1 WHERE EXISTS (SELECT 1 FROM {ab}.private_ab_t WHERE secretcol LIKE 'SECRET%')", SV),
    ("union-read", S, "SELECT content FROM shared_notes UNION ALL SELECT secretcol FROM {ab}.private_ab_t", SV),
    ("ctas-foreign", S, "CREATE TABLE shared_copy AS SELECT * FROM {ab}.private_ab_t", SV),
    ("insert-select-foreign", S, "INSERT INTO shared_notes (content) SELECT secretcol FROM {ab}.private_ab_t", SV),
    ("update-from-foreign", S, "UPDATE shared_notes SET content = p.secretcol FROM {ab}.private_ab_t p", SV),
    ("fk-into-foreign", S, "CREATE TABLE shared_fk (x int REFERENCES {ab}.private_ab_t(id))", SV),
    ("fk-add-column-foreign", S, "ALTER TABLE shared_notes ADD COLUMN r int REFERENCES {os}.shared_notes(id)", SV),
    ("index-on-foreign", S, "CREATE INDEX shared_i ON {ab}.private_ab_t(secretcol)", SV),
    # --- writes through data-modifying CTEs
    ("cte-delete-foreign", S, "WITH d AS (DELETE FROM {ab}.private_ab_t RETURNING *) SELECT * FROM d", SV),
    (
        "cte-update-foreign-insert",
        S,
        "WITH u AS (UPDATE {a}.private_a_t SET secretcol = 'x' RETURNING id) INSERT INTO shared_notes (content) SELECT 'y' FROM u",
        SV,
    ),
    ("select-into-makes-table", S, "SELECT * INTO shared_copy FROM shared_notes", SV),
    ("select-for-update-foreign", S, "SELECT * FROM {os}.shared_notes FOR UPDATE", SV),
    ("cte-delete-own-in-read", S, "WITH d AS (DELETE FROM shared_notes RETURNING *) SELECT count(*) FROM d", SV),
]


def _fill(world: World, sql: str) -> str:
    return sql.format(
        role_ab=q(world.where[("default", AB)].role),
        a=world.schema(A),
        ab=world.schema(AB),
        s=world.schema(S),
        os=world.schema(S, "other"),
        oa=world.schema(A, "other"),
        dir=world.dir,
    )


@pytest.mark.parametrize(("actor", "sql", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_escape_is_refused(world: World, actor: str, sql: str, expected: tuple[type[BaseException], ...]) -> None:
    expect_refusal(world, actor, _fill(world, sql), expected)
    assert not any(world.dir.iterdir()), "a file was written"
    own = world.own_table(actor)
    assert world.scope(actor).query(f"SELECT count(*) FROM {q(own)}")[0][0] >= 1


def test_at_least_eighty_distinct_escape_cases() -> None:
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(ids) >= 80


# -- the server refuses by itself ----------------------------------------------------------------------

#: (id, SQL) run on a raw connection logged in as the shared scope's role of the default tenant,
#: past the classifier; the server must refuse each with insufficient privilege (42501), or for
#: the ones marked, with the SQLSTATE given.
DIRECT: list[tuple[str, str, str]] = [
    ("read-other-schema", "SELECT * FROM {ab}.private_ab_t", "42501"),
    ("write-other-schema", "INSERT INTO {ab}.private_ab_t (id) VALUES (7)", "42501"),
    ("cross-tenant", "SELECT * FROM {os}.shared_notes", "42501"),
    ("engine-table", "SELECT * FROM engram.memories", "42501"),
    ("registry", "SELECT * FROM engram_scopes.secret", "42501"),
    ("security-definer-function", "SELECT engram.touch()", "42501"),
    ("pg-class", "SELECT relname FROM pg_class", "42501"),
    ("pg-namespace", "SELECT nspname FROM pg_namespace", "42501"),
    ("pg-roles", "SELECT rolname FROM pg_roles", "42501"),
    ("pg-stat-activity", "SELECT usename FROM pg_stat_activity", "42501"),
    ("pg-tables", "SELECT tablename FROM pg_tables", "42501"),
    ("pg-type", "SELECT typname FROM pg_type", "42501"),
    ("pg-db-role-setting", "SELECT * FROM pg_db_role_setting", "42501"),
    ("copy-to-file", "COPY shared_notes TO '{dir}/direct.out'", "42501"),
    ("copy-from-file", "COPY shared_notes FROM '/etc/hostname'", "42501"),
    ("copy-to-program", "COPY (SELECT 1) TO PROGRAM 'id'", "42501"),
    ("pg-read-file", "SELECT pg_read_file('/etc/passwd')", "42501"),
    ("pg-ls-dir", "SELECT pg_ls_dir('.')", "42501"),
    ("lo-import", "SELECT lo_import('/etc/passwd')", "42501"),
    ("lo-export", "SELECT lo_export(1, '{dir}/lo.out')", "42501"),
    ("lo-create", "SELECT lo_create(0)", "42501"),
    ("drop-extension", "DROP EXTENSION vector", "42501"),
    ("create-function-sql", "CREATE FUNCTION shared_f() RETURNS int LANGUAGE sql AS 'SELECT 1'", "42501"),
    (
        "create-function-plpgsql",
        "CREATE FUNCTION shared_f() RETURNS int LANGUAGE plpgsql AS 'begin return 1; end'",
        "42501",
    ),
    (
        "create-function-security-definer",
        "CREATE FUNCTION shared_f() RETURNS int LANGUAGE sql SECURITY DEFINER AS 'SELECT 1'",
        "42501",
    ),
    ("do-block", "DO $$BEGIN PERFORM 1; END$$", "42501"),
    ("set-config", "SELECT set_config('search_path', 'public', false)", "42501"),
    ("pg-notify", "SELECT pg_notify('engram', 'x')", "42501"),
    ("advisory-lock", "SELECT pg_advisory_lock(1)", "42501"),
    ("advisory-xact-lock", "SELECT pg_try_advisory_xact_lock(1)", "42501"),
    ("temp-table", "CREATE TEMP TABLE shared_tmp (a int)", "42501"),
    ("create-in-public", "CREATE TABLE public.shared_x (a int)", "42501"),
    ("read-public", "SELECT * FROM public.anything", "42501"),
    ("set-role-admin", "SET ROLE postgres", "42501"),
    ("set-role-other-scope", "SET ROLE {role_ab}", "42501"),
    ("set-session-authorization", "SET SESSION AUTHORIZATION postgres", "42501"),
    ("alter-owner", "ALTER TABLE shared_notes OWNER TO {role_ab}", "42501"),
    ("grant-role-to-self", "GRANT {role_ab} TO CURRENT_USER", "42501"),
    ("alter-role-superuser", "ALTER ROLE CURRENT_USER SUPERUSER", "42501"),
    ("alter-other-role", "ALTER ROLE {role_ab} PASSWORD 'x'", "42501"),
    ("create-role", "CREATE ROLE shared_r", "42501"),
    ("create-schema", "CREATE SCHEMA shared_x", "42501"),
    ("lock-foreign", "LOCK TABLE {ab}.private_ab_t", "42501"),
    ("truncate-foreign", "TRUNCATE {ab}.private_ab_t", "42501"),
    ("drop-foreign", "DROP TABLE {ab}.private_ab_t", "42501"),
    ("drop-own-schema", "DROP SCHEMA {s} CASCADE", "42501"),
    ("fk-into-foreign", "CREATE TABLE shared_fk (x int REFERENCES {ab}.private_ab_t(id))", "42501"),
    ("checkpoint", "CHECKPOINT", "42501"),
    ("alter-system", "ALTER SYSTEM SET work_mem = '1GB'", "42501"),
    ("terminate-backend", "SELECT pg_terminate_backend(pg_backend_pid())", "42501"),
    ("data-directory", "SELECT current_setting('data_directory')", "42501"),
    ("prepare-foreign", "PREPARE p AS SELECT * FROM {ab}.private_ab_t", "42501"),
]


@pytest.fixture
def raw(world: World) -> Iterator[psycopg.Connection[Any]]:
    """A connection logged in as the default tenant's shared scope role, past the classifier."""
    where = roles.provision(world.url, "default", ns_of(S))
    with psycopg.connect(where.conninfo, autocommit=True) as conn:
        yield conn


@pytest.mark.parametrize(("sql", "state"), [d[1:] for d in DIRECT], ids=[d[0] for d in DIRECT])
def test_server_refuses_directly(world: World, raw: psycopg.Connection[Any], sql: str, state: str) -> None:
    sql = _fill(world, sql)
    before = world.snap()
    with pytest.raises(psycopg.Error) as info:
        if sql.startswith("LOCK"):  # only inside a transaction block
            with raw.transaction():
                raw.execute(sql)
        else:
            raw.execute(sql)
    assert info.value.sqlstate == state, f"{sql!r}: {info.value.sqlstate} {info.value}"
    assert world.snap() == before
    assert not any(world.dir.iterdir())
    row = raw.execute("SELECT session_user, current_user").fetchone()
    assert row is not None and row[0] == row[1] == world.where[("default", S)].role


def test_server_refuses_a_second_statement(raw: psycopg.Connection[Any]) -> None:
    """Every scope statement goes through the extended protocol, where the server refuses two."""
    with raw.cursor(binary=True) as cur, pytest.raises(psycopg.errors.SyntaxError):
        cur.execute("SELECT 1; SELECT 2", [])


def test_scope_role_is_alone(world: World) -> None:
    """LOGIN, NOINHERIT, no attribute, member of nothing, search_path its schema, its schema the admin's."""
    with psycopg.connect(world.url, autocommit=True) as c:
        for (tenant, label), where in world.where.items():
            row = c.execute(
                "SELECT rolcanlogin, rolinherit, rolsuper, rolcreaterole, rolcreatedb, rolreplication, rolbypassrls "
                "FROM pg_roles WHERE rolname = %s",
                (where.role,),
            ).fetchone()
            assert row == (True, False, False, False, False, False, False), (tenant, label)
            assert where.role.startswith(c.execute("SELECT current_database()").fetchone()[0])  # type: ignore[index]
            assert len(where.role.encode()) <= 63
            groups = c.execute(
                "SELECT count(*) FROM pg_auth_members WHERE member = %s::regrole", (where.role,)
            ).fetchone()
            assert groups == (0,)
            owner = c.execute("SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = %s", (where.schema,))
            assert owner.fetchone() == (c.execute("SELECT current_user").fetchone()[0],)  # type: ignore[index]
            can_create = c.execute(
                "SELECT has_database_privilege(%s, current_database(), 'CREATE'), "
                "has_database_privilege(%s, current_database(), 'TEMP')",
                (where.role, where.role),
            ).fetchone()
            assert can_create == (False, False)  # no CREATE EXTENSION, no CREATE SCHEMA, no temp tables
            setting = c.execute(
                "SELECT setconfig FROM pg_db_role_setting WHERE setrole = %s::regrole", (where.role,)
            ).fetchone()
            assert setting is not None and setting[0] == [f"search_path={where.schema}"]


#: What the server allows a scope role and only the classifier refuses, and why that is safe.
CLASSIFIER_ONLY = [
    (
        "NOTIFY engram, 'x'",
        "NOTIFY has no privilege in PostgreSQL; a read's NOTIFY is rolled back, and writes refuse it",
    ),
    ("LISTEN engram", "LISTEN has no privilege; notifications never reach a scope's caller"),
    (
        "SET statement_timeout = 0",
        "user-level settings have no privilege; a read's SET is rolled back, the client cancel stays",
    ),
    ("VACUUM", "VACUUM skips every table the role does not own"),
    ("CREATE VIEW shared_v AS SELECT 1", "objects in the own schema only, with the role's own privileges"),
    ("TRUNCATE shared_gone", "own tables only"),
    ("COPY (SELECT 1) TO STDOUT", "own data only; files and programs are refused (copy-to-file above)"),
    ("PREPARE p2 AS SELECT 1", "a prepared statement lives in the session and has the role's privileges"),
    ("GRANT SELECT ON shared_gone TO PUBLIC", "nobody else has USAGE on the schema, which the role cannot grant"),
    ("DROP TABLE shared_gone", "the role owns its tables; another schema's are refused (drop-foreign above)"),
]


def test_what_only_the_classifier_stops_is_contained(world: World, raw: psycopg.Connection[Any]) -> None:
    raw.execute("CREATE TABLE shared_gone (a int)")
    for sql, _why in CLASSIFIER_ONLY:
        if sql.startswith("COPY"):
            with raw.cursor() as cur, cur.copy(sql) as copy:
                assert [bytes(b) for b in copy] == [b"1\n"]
        else:
            raw.execute(sql)  # allowed by the server: contained
        with pytest.raises((ScopeViolation, ForbiddenDDLError, InvalidStatement)):
            world.scope(S).execute(sql.replace("shared_gone", "shared_notes"))
    raw.execute("RESET statement_timeout")
    raw.execute("DROP VIEW IF EXISTS shared_v")
    raw.execute("DROP TABLE IF EXISTS shared_gone")
    raw.execute("DEALLOCATE ALL")
    # a table the role granted to PUBLIC stays out of every other scope's reach
    raw.execute("CREATE TABLE shared_public (a text)")
    raw.execute("INSERT INTO shared_public VALUES ('x')")
    raw.execute("GRANT ALL ON shared_public TO PUBLIC")
    try:
        other = roles.provision(world.url, "default", ns_of(AB))
        with psycopg.connect(other.conninfo, autocommit=True) as c, pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute(f"SELECT * FROM {world.schema(S)}.shared_public")
    finally:
        raw.execute("DROP TABLE shared_public")


def test_information_schema_shows_only_own_objects(world: World) -> None:
    shared = world.scope(S)
    views = ["tables", "schemata", "table_privileges", "sequences", "table_constraints", "key_column_usage"]
    for view in views:
        rows = shared.query(f"SELECT * FROM information_schema.{view}")
        assert_no_leak(world, S, repr(rows))
    assert shared.query(
        "SELECT table_name FROM information_schema.tables WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
    ) == [("shared_notes",)]


# -- refusals read the same whether or not the foreign object exists --------------------------------

#: (id, actor, template, existing, missing); ``{X}`` is substituted.
PAIRS: list[tuple[str, str, str, str, str]] = [
    ("qualified-schema", S, "SELECT * FROM {X}.shared_notes", "{os}", "scope_000000000000000000000000"),
    ("qualified-schema-insert", S, "INSERT INTO {X}.shared_notes (content) VALUES ('x')", "{os}", "scope_0000"),
    ("qualified-schema-count", A, "SELECT count(*) FROM {X}.private_a_t", "{oa}", "scope_ffff"),
    ("qualified-table", S, "SELECT * FROM {os}.{X}", "shared_notes", "shared_nothing"),
    ("qualified-column", S, "SELECT {X} FROM {os}.shared_notes", "content", "nosuch"),
    ("qualified-where-column", S, "SELECT 1 FROM {os}.shared_notes WHERE {X} IS NULL", "created_ts", "nosuch"),
    ("engine-table", S, "SELECT * FROM engram.{X}", "memories", "nothing"),
    ("engine-column", S, "SELECT {X} FROM engram.memories", "memories_secret", "nosuch"),
    ("engine-function", S, "SELECT engram.{X}()", "touch", "nothing"),
    ("schema-of-function", S, "SELECT {X}.touch()", "engram", "nosuchschema"),
    ("private-table-name", S, "SELECT * FROM {X}", "private_ab_t", "private_zz_t"),
    ("private-table-column", S, "SELECT {X} FROM private_ab_t", "hidden_ab_col", "nosuch"),
    ("shared-from-private", A, "SELECT * FROM {X}", "shared_notes", "shared_nothing"),
    ("cte-foreign", S, "WITH c AS (SELECT * FROM {os}.{X}) SELECT count(*) FROM c", "shared_notes", "shared_zz"),
    ("ctas-foreign", S, "CREATE TABLE shared_copy AS SELECT * FROM {os}.{X}", "shared_notes", "shared_zz"),
    ("fk-foreign", S, "CREATE TABLE shared_fk (x int REFERENCES {os}.{X}(id))", "shared_notes", "shared_zz"),
    ("index-foreign", S, "CREATE INDEX shared_i ON {os}.{X}(id)", "shared_notes", "shared_zz"),
    ("role-owner", S, "ALTER TABLE shared_notes OWNER TO {X}", "{role_ab}", "nosuchrole"),
    ("regclass", S, "SELECT '{X}.shared_notes'::regclass", "{os}", "scope_0000"),
    ("add-column-foreign", S, "ALTER TABLE {X}.shared_notes ADD COLUMN z int", "{os}", "scope_0000"),
    (
        "insert-select-foreign",
        S,
        "INSERT INTO shared_notes (content) SELECT content FROM {X}.shared_notes",
        "{os}",
        "scope_0",
    ),
    ("update-foreign", S, "UPDATE {os}.{X} SET content = 'x'", "shared_notes", "shared_zz"),
    ("delete-foreign", S, "DELETE FROM {os}.{X}", "shared_notes", "shared_zz"),
]


@pytest.mark.parametrize(
    ("actor", "template", "existing", "missing"), [p[1:] for p in PAIRS], ids=[p[0] for p in PAIRS]
)
def test_refusal_does_not_depend_on_existence(
    world: World, actor: str, template: str, existing: str, missing: str
) -> None:
    outcomes = []
    for subst in (existing, missing):
        sql = _fill(world, template.replace("{X}", subst))
        before = world.snap()
        try:
            world.scope(actor).execute(sql)
        except EngramError as exc:
            outcomes.append((type(exc).__name__, str(exc)))
            assert_no_leak(world, actor, str(exc))
        else:
            outcomes.append(("no error", ""))
        assert world.snap() == before
    assert outcomes[0] == outcomes[1], f"existing → {outcomes[0]}; missing → {outcomes[1]}"
    assert outcomes[0][0] in ("ScopeViolation", "ForbiddenDDLError")


def test_column_defaults_run_with_the_scope_role_privileges(world: World, raw: psycopg.Connection[Any]) -> None:
    """A DEFAULT is evaluated by the role that inserts: one that reads what the scope may not
    read is refused by the server when it runs, whatever the classifier thought of it."""
    shared = world.scope(S)
    shared.execute("CREATE TABLE shared_d (a text DEFAULT (current_setting('data_directory')), b int)")
    try:
        before = world.snap()
        with pytest.raises(ScopeViolation) as info:
            shared.execute("INSERT INTO shared_d (b) VALUES (1)")
        assert_no_leak(world, S, str(info.value))
        assert world.snap() == before
    finally:
        raw.execute("DROP TABLE shared_d")


# -- runaway statements -------------------------------------------------------------------------------

RUNAWAY = [
    ("pg-sleep", "SELECT pg_sleep(10)"),
    ("cross-join", "SELECT count(*) FROM generate_series(1, 100000) a, generate_series(1, 100000) b"),
    ("recursive-cte", "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r"),
    ("generate-series-rows", "SELECT generate_series(1, 100000000)"),
    ("generate-series-bytes", "SELECT repeat('x', 1000) FROM generate_series(1, 100000)"),
    ("repeat-value", "SELECT repeat('x', 5000000)"),
    ("lpad-value", "SELECT lpad('x', 5000000, 'y')"),
    ("string-agg-value", "SELECT string_agg(repeat('x', 1000), ',') FROM generate_series(1, 10000)"),
    (
        "doubling-cte",
        "WITH RECURSIVE r(s, n) AS (SELECT 'x'::text, 0 UNION ALL SELECT s || s, n + 1 FROM r WHERE n < 40) SELECT max(length(s)) FROM r",
    ),
    ("insert-unbounded", "INSERT INTO shared_notes (content) SELECT 'x' FROM generate_series(1, 1000000000)"),
    (
        "insert-returning-many",
        "INSERT INTO shared_notes (content) SELECT 'x' FROM generate_series(1, 10000) RETURNING id",
    ),
]


@pytest.mark.parametrize("sql", [r[1] for r in RUNAWAY], ids=[r[0] for r in RUNAWAY])
def test_runaway_statement_is_stopped(world: World, sql: str) -> None:
    shared = world.scope(S)
    before = world.snap()
    start = time.monotonic()
    with pytest.raises(ResourceLimitExceeded) as info:
        shared.execute(sql)
    assert time.monotonic() - start < 4.0
    assert_no_leak(world, S, str(info.value))
    assert world.snap() == before
    assert shared.query("SELECT count(*) FROM shared_notes") == [(2,)]


def test_client_cancel_backstops_the_server_timeout(world: World, raw: psycopg.Connection[Any]) -> None:
    """With the server's own timeout off, the watchdog's cancel still stops the statement."""
    raw.execute("SET statement_timeout = 0")
    dog = _Watchdog()
    token = dog.arm(raw, 0.3)
    start = time.monotonic()
    try:
        with pytest.raises(psycopg.errors.QueryCanceled):
            raw.execute("SELECT pg_sleep(5)")
    finally:
        dog.disarm(token)
        raw.execute("RESET statement_timeout")
    assert time.monotonic() - start < 2.0


def test_stream_stops_at_the_row_cap(world: World) -> None:
    shared = world.scope(S)
    got = 0
    with pytest.raises(ResourceLimitExceeded):
        for rows in shared.stream("SELECT generate_series(1, 1000000)", batch=1000):
            got += len(rows)
    assert got == LIMITS["max_result_rows"]
    with pytest.raises(ValidationError, match="batch must be"):
        shared.stream("SELECT 1", batch=0)
    assert shared.query("SELECT 1") == [(1,)]


# -- what a scope may do: spec 000 on PostgreSQL ---------------------------------------------------------


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[tuple[str, list[PostgresScope]]]:
    from tests.pg_server import fresh_database

    _quiet_pgserver_import()
    made: list[PostgresScope] = []
    with fresh_database() as url:
        yield url, made
        for scope in made:
            scope.close()


def _open(fresh: tuple[str, list[PostgresScope]], label: str, tenant: str = "default", **kw: Any) -> PostgresScope:
    url, made = fresh
    scope = make_scope(url, label, tenant, **kw)
    made.append(scope)
    return scope


def test_spec000_examples(fresh: tuple[str, list[PostgresScope]]) -> None:
    shared = _open(fresh, "shared")
    # spec 000's table, in PostgreSQL's words (no INTEGER PRIMARY KEY rowid alias, no strftime)
    shared.execute(
        """
        CREATE TABLE IF NOT EXISTS shared_notes (
            id         bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
            agent_id   TEXT NOT NULL,
            content    TEXT NOT NULL,
            created_ts INTEGER NOT NULL DEFAULT (extract(epoch FROM now())::integer)
        )
    """
    )
    r = shared.execute(
        "INSERT INTO shared_notes (agent_id, content) VALUES (?, ?)", ("researcher", "Finding: X implies Y")
    )
    assert r.rowcount == 1
    rows = shared.query("SELECT agent_id, content FROM shared_notes ORDER BY created_ts DESC")
    assert rows == [("researcher", "Finding: X implies Y")]
    shared.execute("CREATE INDEX idx_notes_ts ON shared_notes(created_ts)")
    shared.execute("ALTER TABLE shared_notes ADD COLUMN tags TEXT")
    with pytest.raises(ForbiddenDDLError, match="DROP TABLE is not permitted"):
        shared.execute("DROP TABLE shared_notes")
    private = _open(fresh, "private:researcher")
    private.execute(
        "CREATE TABLE IF NOT EXISTS private_researcher_scratch (id bigserial PRIMARY KEY, key TEXT NOT NULL, value TEXT NOT NULL)"
    )
    private.execute("INSERT INTO private_researcher_scratch (key, value) VALUES (?, ?)", ("plan", "..."))
    with pytest.raises(ScopeViolation):
        private.query("SELECT * FROM shared_notes")
    assert private.list_tables() == ["private_researcher_scratch"]
    assert shared.list_tables() == ["shared_notes"]
    assert shared.columns("shared_notes") == ["id", "agent_id", "content", "created_ts", "tags"]
    with pytest.raises(SqlError, match="no such table"):
        private.columns("shared_notes")
    # transactions (spec 000's begin / commit / rollback)
    shared.begin()
    try:
        shared.execute("INSERT INTO shared_notes (agent_id, content) VALUES (?, ?)", ("orch", "a"))
        shared.execute("INSERT INTO shared_notes (agent_id, content) VALUES (?, ?)", ("orch", "b"))
        shared.commit()
    except Exception:
        shared.rollback()
        raise
    assert shared.query("SELECT count(*) FROM shared_notes WHERE agent_id = 'orch'") == [(2,)]
    with shared.transaction():
        shared.execute("INSERT INTO shared_notes (agent_id, content) VALUES ('orch', 'c')")
    with contextlib.suppress(RuntimeError), shared.transaction():
        shared.execute("INSERT INTO shared_notes (agent_id, content) VALUES ('orch', 'd')")
        raise RuntimeError("undo")
    assert [r[0] for r in shared.query("SELECT content FROM shared_notes WHERE agent_id = 'orch' ORDER BY id")] == [
        "a",
        "b",
        "c",
    ]


def test_returning_params_and_literals(fresh: tuple[str, list[PostgresScope]]) -> None:
    shared = _open(fresh, "shared")
    shared.execute(
        "CREATE TABLE shared_t (id integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v text, n int DEFAULT 0)"
    )
    r = shared.execute("INSERT INTO shared_t (v) VALUES (?), (?) RETURNING id, v", ("x", "y"))
    assert r.rows == [(1, "x"), (2, "y")] and r.rowcount == 2 and r.lastrowid is None
    assert shared.execute("UPDATE shared_t SET n = n + 1 WHERE v <> ?", ("x",)).rowcount == 1
    assert shared.query("SELECT v FROM shared_t WHERE id = :id", {"id": 2}) == [("y",)]
    # ? and % inside literals, identifiers and comments are the user's, untouched
    assert shared.query("SELECT '?', '100%', ? /* ? */, 'it''s ?'", ("p",)) == [("?", "100%", "p", "it's ?")]
    assert shared.query('SELECT 1 AS "what?"') == [(1,)]
    assert shared.query("SELECT '5'::int + ?", (1,)) == [(6,)]
    assert shared.query("SELECT v FROM shared_t WHERE v LIKE ? ORDER BY 1", ("%",)) == [("x",), ("y",)]
    assert (
        shared.execute("WITH k(id) AS (VALUES (1)) DELETE FROM shared_t WHERE id IN (SELECT id FROM k)").rowcount == 1
    )
    with pytest.raises(SqlError):
        shared.query("SELECT :missing", {"other": 1})
    with pytest.raises(SqlError):
        shared.query("SELECT ?", {"a": 1})
    with pytest.raises(SqlError):
        shared.query("SELECT nosuch FROM shared_t")
    with pytest.raises(SqlError):
        shared.query("SELECT 1 +")
    with pytest.raises(InvalidStatement):
        shared.query("SELEC 1")
    with pytest.raises(InvalidStatement):
        shared.query("")
    with pytest.raises(ResourceLimitExceeded):
        shared.query("SELECT length(?)", ("x" * (LIMITS["max_value_bytes"] + 1),))


def test_executemany_is_all_or_nothing(fresh: tuple[str, list[PostgresScope]]) -> None:
    shared = _open(fresh, "shared")
    shared.execute("CREATE TABLE shared_u (id bigserial PRIMARY KEY, v text UNIQUE)")
    shared.execute("INSERT INTO shared_u (v) VALUES ('dup')")
    with pytest.raises(ConstraintError):
        shared.executemany("INSERT INTO shared_u (v) VALUES (?)", [("m1",), ("m2",), ("dup",), ("m4",)])
    assert shared.query("SELECT v FROM shared_u ORDER BY id") == [("dup",)]
    shared.begin()
    shared.execute("INSERT INTO shared_u (v) VALUES ('first')")
    with pytest.raises(ConstraintError):
        shared.executemany("INSERT INTO shared_u (v) VALUES (?)", [("n1",), ("first",)])
    with pytest.raises(ConstraintError):
        shared.execute("INSERT INTO shared_u (v) VALUES ('dup')")
    with pytest.raises(ScopeViolation):
        shared.execute("SELECT * FROM pg_class")
    with pytest.raises(ForbiddenDDLError):
        shared.execute("DROP TABLE shared_u")
    assert shared.in_transaction
    shared.commit()
    assert shared.query("SELECT v FROM shared_u ORDER BY id") == [("dup",), ("first",)]
    assert shared.executemany("INSERT INTO shared_u (v) VALUES (?)", [("ok1",), ("ok2",)]).rowcount == 2
    with pytest.raises(ScopeViolation):
        shared.executemany("SELECT ?", [(1,)])
    with pytest.raises(TransactionError):
        shared.commit()
    shared.rollback()  # a no-op without a transaction


def test_index_names_follow_the_namespace_rule(fresh: tuple[str, list[PostgresScope]]) -> None:
    shared, a = _open(fresh, "shared"), _open(fresh, "private:a")
    shared.execute("CREATE TABLE shared_log (id bigserial PRIMARY KEY, ts double precision, body text)")
    shared.execute("CREATE INDEX idx_log_ts ON shared_log(ts)")
    shared.execute("CREATE UNIQUE INDEX IF NOT EXISTS shared_log_body ON shared_log(body)")
    shared.execute("CREATE INDEX shared_log_both ON shared_log(ts, body) WHERE body IS NOT NULL")
    a.execute("CREATE TABLE private_a_t (id int PRIMARY KEY, v text)")
    a.execute("CREATE INDEX private_a_t_v ON private_a_t(lower(v))")
    with pytest.raises(ScopeViolation):
        a.execute("CREATE INDEX idx_a ON private_a_t(v)")
    with pytest.raises(ScopeViolation):
        shared.execute("CREATE INDEX private_a_x ON shared_log(ts)")
    # index names are per schema on PostgreSQL: the same name in two scopes does not collide
    b = _open(fresh, "shared", "other")
    b.execute("CREATE TABLE shared_log (id bigserial PRIMARY KEY, ts double precision)")
    b.execute("CREATE INDEX idx_log_ts ON shared_log(ts)")


def test_tenants_have_separate_tables(fresh: tuple[str, list[PostgresScope]]) -> None:
    one, two = _open(fresh, "shared", "t1"), _open(fresh, "shared", "t2")
    one.execute("CREATE TABLE shared_notes (id bigserial PRIMARY KEY, content text)")
    assert two.list_tables() == []
    two.execute("CREATE TABLE shared_notes (id bigserial PRIMARY KEY, content text)")
    one.execute("INSERT INTO shared_notes (content) VALUES ('one')")
    assert two.query("SELECT count(*) FROM shared_notes") == [(0,)]
    assert one.schema != two.schema and one.role != two.role


def test_two_threads_have_separate_transactions(fresh: tuple[str, list[PostgresScope]]) -> None:
    shared = _open(fresh, "shared")
    shared.execute("CREATE TABLE shared_c (id bigserial PRIMARY KEY, who text)")
    ready, done = threading.Barrier(2), threading.Event()
    seen: dict[str, Any] = {}

    def writer() -> None:
        shared.begin()
        shared.execute("INSERT INTO shared_c (who) VALUES ('writer')")
        ready.wait()
        done.wait(5)
        shared.rollback()

    t = threading.Thread(target=writer)
    t.start()
    ready.wait()
    try:
        seen["in_tx_here"] = shared.in_transaction
        seen["visible"] = shared.query("SELECT count(*) FROM shared_c")
        shared.execute("INSERT INTO shared_c (who) VALUES ('main')")  # commits on its own
    finally:
        done.set()
        t.join()
    assert seen == {"in_tx_here": False, "visible": [(0,)]}
    assert shared.query("SELECT who FROM shared_c") == [("main",)]


def test_provisioning_is_idempotent_and_safe_in_parallel(fresh: tuple[str, list[PostgresScope]]) -> None:
    url, _ = fresh
    ns = ns_of("private:researcher")
    results: list[roles.ScopeRole] = []
    errors: list[BaseException] = []

    def go() -> None:
        try:
            results.append(roles.provision(url, "team", ns))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=go) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len({(r.schema, r.role, r.conninfo) for r in results}) == 1
    with psycopg.connect(url, autocommit=True) as c:
        assert c.execute("SELECT count(*) FROM engram_scopes.scopes").fetchone() == (1,)
    # another "process" holding the admin URL derives the same password and logs in
    with psycopg.connect(roles.provision(url, "team", ns).conninfo) as c:
        assert c.execute("SELECT current_schema()").fetchone() == (results[0].schema,)


def test_retriever_on_a_postgres_table(fresh: tuple[str, list[PostgresScope]]) -> None:
    shared = _open(fresh, "shared")
    shared.execute("CREATE TABLE shared_notes (id bigserial PRIMARY KEY, content text, created_ts double precision)")
    shared.executemany(
        "INSERT INTO shared_notes (content, created_ts) VALUES (?, ?)",
        [("Finding: X implies Y", 1.0), ("unrelated text", 2.0), ("FINDING about Z", 3.0), (None, 4.0)],
    )
    retriever = MemoryRetriever(scope=shared, token_budget=200, table="shared_notes", content_column="content")
    ranked = retriever.rank("finding implies")
    assert [r.content for r in ranked][:2] == ["Finding: X implies Y", "FINDING about Z"]
    assert ranked[0].rowid == 1
    text = retriever.retrieve("what implies Y")
    assert "[shared_notes row 1] Finding: X implies Y" in text
    with pytest.raises(SqlError, match="PRIMARY KEY"):
        shared.execute("CREATE TABLE shared_nokey (content text)")
        MemoryRetriever(scope=shared, table="shared_nokey")
    from engramdb.testing import fake_embedder

    scope = PostgresScope(fresh[0], ns_of("shared"), "default", TinyRowVectors(), lambda: fake_embedder(), **LIMITS)
    fresh[1].append(scope)
    semantic = MemoryRetriever(scope=scope, table="shared_notes", semantic=True)
    assert semantic.rank("implies")[0].content == "Finding: X implies Y"


def test_stream_inside_a_transaction(fresh: tuple[str, list[PostgresScope]]) -> None:
    shared = _open(fresh, "shared")
    shared.execute("CREATE TABLE shared_s (id bigserial PRIMARY KEY, v int)")
    shared.executemany("INSERT INTO shared_s (v) VALUES (?)", [(i,) for i in range(10)])
    shared.begin()
    shared.execute("INSERT INTO shared_s (v) VALUES (100)")
    stream = shared.stream("SELECT v FROM shared_s ORDER BY id", batch=4)
    assert next(stream) == [(0,), (1,), (2,), (3,)]
    # its connection answers one statement at a time: a clear error, not a wait
    with pytest.raises(TransactionError, match="stream"):
        shared.execute("SELECT 1")
    assert shared.in_transaction
    stream.close()
    assert shared.query("SELECT count(*) FROM shared_s") == [(11,)]
    stream = shared.stream("SELECT v FROM shared_s", batch=2)
    next(stream)
    shared.rollback()  # closes the stream still reading, then rolls back
    assert shared.query("SELECT count(*) FROM shared_s") == [(10,)]
    # outside a transaction a stream reads on a connection of its own
    stream = shared.stream("SELECT v FROM shared_s ORDER BY id", batch=3)
    assert next(stream) == [(0,), (1,), (2,)]
    shared.execute("INSERT INTO shared_s (v) VALUES (200)")
    assert sum(len(b) for b in stream) == 7


def test_a_statement_hidden_behind_a_read_outlives_nothing(fresh: tuple[str, list[PostgresScope]]) -> None:
    """PostgreSQL's nested comments hide a SET (or a LISTEN) from the classifier, which calls the
    text a read: reads are rolled back, so the setting never outlives the call."""
    shared = _open(fresh, "shared")
    budget = shared.query("SELECT current_setting('statement_timeout')")
    for hidden in ("SET statement_timeout = 0", "LISTEN engram", "SET search_path = public"):
        with pytest.raises(EngramError):
            shared.execute(f"/* /* */ SELECT 1 */ {hidden}")
        assert shared.query("SELECT current_setting('statement_timeout')") == budget
        assert shared.query("SELECT current_schema()") == [(shared.schema,)]
    shared.begin()
    with pytest.raises(EngramError):
        shared.execute("/* /* */ SELECT 1 */ SET statement_timeout = 0")
    assert shared.query("SELECT current_setting('statement_timeout')") == budget
    shared.rollback()


def test_timeout_inside_a_transaction_keeps_it(fresh: tuple[str, list[PostgresScope]]) -> None:
    shared = _open(fresh, "shared", statement_timeout=0.3)
    shared.execute("CREATE TABLE shared_k (id bigserial PRIMARY KEY, v text)")
    shared.begin()
    shared.execute("INSERT INTO shared_k (v) VALUES ('kept')")
    with pytest.raises(ResourceLimitExceeded):
        shared.execute("SELECT pg_sleep(3)")
    with pytest.raises(ResourceLimitExceeded):
        shared.execute("INSERT INTO shared_k (v) SELECT 'x' FROM generate_series(1, 1000000000)")
    assert shared.in_transaction
    shared.commit()
    assert shared.query("SELECT v FROM shared_k") == [("kept",)]


def test_a_constraint_failing_at_commit_is_a_constraint_error(fresh: tuple[str, list[PostgresScope]]) -> None:
    shared = _open(fresh, "shared")
    shared.execute("CREATE TABLE shared_p (id int PRIMARY KEY)")
    shared.execute("CREATE TABLE shared_c (p int REFERENCES shared_p(id) DEFERRABLE INITIALLY DEFERRED)")
    with pytest.raises(ConstraintError):
        shared.execute("INSERT INTO shared_c VALUES (5)")  # checked at the call's own COMMIT
    shared.begin()
    shared.execute("INSERT INTO shared_c VALUES (6)")
    with pytest.raises(ConstraintError):
        shared.commit()
    assert not shared.in_transaction
    assert shared.query("SELECT count(*) FROM shared_c") == [(0,)]


def test_the_derived_password_is_the_role_password(world: World) -> None:
    """The test server trusts local logins, so check the password against the role's stored SCRAM
    verifier instead: what `provision` derives in any process is what the server will accept."""
    import base64
    import hashlib
    import hmac

    from psycopg.conninfo import conninfo_to_dict

    where = roles.provision(world.url, "other", ns_of(A))
    password = str(conninfo_to_dict(where.conninfo)["password"])
    with psycopg.connect(world.url) as c:
        row = c.execute("SELECT rolpassword FROM pg_authid WHERE rolname = %s", (where.role,)).fetchone()
    assert row is not None and str(row[0]).startswith("SCRAM-SHA-256$")
    iterations_salt, keys = str(row[0]).split("$", 1)[1].split("$")
    iterations, salt = iterations_salt.split(":")
    stored_key, server_key = keys.split(":")
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(salt), int(iterations))
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    assert base64.b64encode(hashlib.sha256(client_key).digest()).decode() == stored_key
    assert base64.b64encode(hmac.new(salted, b"Server Key", hashlib.sha256).digest()).decode() == server_key


# -- what a role may change about itself, past the classifier ---------------------------------------

#: run straight as the default tenant's shared role; the server must refuse each (42501; a rename
#: of the session user is 0A000)
SELF_REFUSED = [
    ("drop-owned", "DROP OWNED BY CURRENT_USER"),
    ("reassign-owned", "REASSIGN OWNED BY CURRENT_USER TO {role_ab}"),
    ("valid-until", "ALTER ROLE CURRENT_USER VALID UNTIL '2000-01-01'"),
    ("connection-limit", "ALTER ROLE CURRENT_USER CONNECTION LIMIT 0"),
    ("rename", 'ALTER ROLE "{role_s}" RENAME TO "{role_s}x"'),
    ("stat-tuples-inserted", "SELECT pg_stat_get_tuples_inserted({oid_ab})"),
    ("stat-live-tuples", "SELECT pg_stat_get_live_tuples({oid_ab})"),
    ("total-relation-size", "SELECT pg_total_relation_size({oid_ab})"),
    ("relation-size", "SELECT pg_relation_size({oid_ab})"),
    ("table-size", "SELECT pg_table_size({oid_ab})"),
    ("database-size", "SELECT pg_database_size(current_database())"),
]


@pytest.mark.parametrize("sql", [c[1] for c in SELF_REFUSED], ids=[c[0] for c in SELF_REFUSED])
def test_server_refuses_self_harm_directly(world: World, raw: psycopg.Connection[Any], sql: str) -> None:
    with psycopg.connect(world.url) as c:
        oid = c.execute("SELECT %s::regclass::oid", (f"{world.schema(AB)}.private_ab_t",)).fetchone()
    assert oid is not None
    # by oid: a regclass cast of a foreign name is refused already (it needs USAGE on the schema)
    sql = sql.replace("{role_s}", world.where[("default", S)].role).replace("{oid_ab}", str(oid[0]))
    sql = _fill(world, sql)
    before = world.snap()
    with pytest.raises(psycopg.Error) as info:
        raw.execute(sql)
    assert info.value.sqlstate in ("42501", "0A000"), f"{sql!r}: {info.value.sqlstate} {info.value}"
    assert world.snap() == before
    with pytest.raises((ScopeViolation, ForbiddenDDLError, InvalidStatement)):
        world.scope(S).execute(sql)
    assert world.snap() == before


#: what PostgreSQL lets any role do to itself: through the scope these are refused, and when they
#: reach the server past the classifier, the engine's command-tag check rolls them back
SELF_CHANGES = [
    ("password", "ALTER ROLE CURRENT_USER PASSWORD 'locked-out'"),
    ("read-only", "ALTER ROLE CURRENT_USER SET default_transaction_read_only = on"),
    ("timeout", "ALTER ROLE CURRENT_USER SET statement_timeout = 1"),
    ("search-path", "ALTER ROLE CURRENT_USER SET search_path = public"),
    ("in-database", "ALTER ROLE CURRENT_USER IN DATABASE {db} SET default_transaction_read_only = on"),
    ("conforming-strings", "ALTER ROLE CURRENT_USER SET standard_conforming_strings = off"),
    ("drop-owned", "DROP OWNED BY CURRENT_USER"),
    ("reassign-owned-self", "REASSIGN OWNED BY CURRENT_USER TO CURRENT_USER"),
]


def _db(world: World) -> str:
    with psycopg.connect(world.url) as c:
        return q(str(c.execute("SELECT current_database()").fetchone()[0]))  # type: ignore[index]


@pytest.mark.parametrize("sql", [c[1] for c in SELF_CHANGES], ids=[c[0] for c in SELF_CHANGES])
def test_self_changes_past_the_classifier_are_rolled_back(
    world: World, monkeypatch: pytest.MonkeyPatch, sql: str
) -> None:
    from engramdb.scopes.classify import Kind, Statement
    from engramdb.storage.postgres import scope as scope_module

    sql = sql.replace("{db}", _db(world))
    shared = world.scope(S)
    before = world.snap()
    with pytest.raises((ScopeViolation, ForbiddenDDLError, InvalidStatement)):
        shared.execute(sql)
    assert world.snap() == before
    # a classifier that calls it an INSERT: the server's command tag says otherwise
    monkeypatch.setattr(scope_module, "classify", lambda _sql: Statement(Kind.WRITE))
    monkeypatch.setattr(scope_module, "lexers_agree", lambda _sql: True)
    for nested in (False, True):
        if nested:
            shared.begin()
        with pytest.raises(ScopeViolation):  # the tag check's, or the server's own (DROP OWNED)
            shared.execute(sql)
        if nested:
            shared.commit()
        assert world.snap() == before, sql


@pytest.mark.parametrize("sql", [c[1] for c in SELF_CHANGES[:6]], ids=[c[0] for c in SELF_CHANGES[:6]])
def test_self_changes_straight_at_the_server_do_not_reach_the_engine(world: World, sql: str) -> None:
    """PostgreSQL lets the role commit these; the next connection of a scope restores the role
    before it runs anything, so no engine session runs with them and the role is as provisioned."""
    sql = sql.replace("{db}", _db(world))
    before = world.snap()
    where = world.where[("default", S)]
    with psycopg.connect(where.conninfo, autocommit=True) as c:
        c.execute(sql)
    scope = make_scope(world.url, S)  # a new pool: a new session of the role
    try:
        scope.execute("INSERT INTO shared_notes (content) VALUES ('after')")
        assert scope.query("SELECT current_setting('default_transaction_read_only'), current_schema()") == [
            ("off", where.schema)
        ]
        scope.execute("DELETE FROM shared_notes WHERE content = 'after'")
    finally:
        scope.close()
    assert world.snap() == before
    with psycopg.connect(world.url) as c:
        row = c.execute("SELECT rolpassword FROM pg_authid WHERE rolname = %s", (where.role,)).fetchone()
    from psycopg.conninfo import conninfo_to_dict

    assert row is not None and roles.scram_matches(str(row[0]), str(conninfo_to_dict(where.conninfo)["password"]))


def test_a_session_of_a_tampered_role_is_replaced(world: World) -> None:
    """A setting committed while a scope has a connection open reaches its next new session: that
    one is closed, the role restored, and a clean one opened in its place."""
    scope = make_scope(world.url, S, max_connections=2)
    try:
        where = world.where[("default", S)]
        with psycopg.connect(where.conninfo, autocommit=True) as c:
            c.execute("ALTER ROLE CURRENT_USER SET default_transaction_read_only = on")
        scope.begin()  # holds the first connection: the next call needs a new one
        try:
            scope.execute("INSERT INTO shared_notes (content) VALUES ('tx')")
            conn = scope._borrow()  # a new session of the scope's role
            try:
                assert conn.execute("SHOW default_transaction_read_only").fetchone() == ("off",)
            finally:
                scope._give_back(conn)
        finally:
            scope.rollback()
    finally:
        scope.close()
    with psycopg.connect(world.url) as c:
        assert c.execute(
            "SELECT setconfig FROM pg_db_role_setting WHERE setrole = %s::regrole ORDER BY setdatabase",
            (world.where[("default", S)].role,),
        ).fetchall() == [([f"search_path={world.where[('default', S)].schema}"],)]
