"""Escape attempts against memory scopes: every way out of a namespace is refused or contained.

Each refused case checks three things:

- the refusal class (``ScopeViolation`` / ``ForbiddenDDLError``, or ``InvalidStatement`` for
  several statements in one call);
- that nothing in the database changed (a byte-for-byte dump of ``sqlite_schema`` and of every
  table, read through a separate read-only ``sqlite3`` connection, before and after);
- that the error message names nothing outside the namespace: no foreign table, index or column
  name and no foreign content (every foreign table holds a secret marker string).

Existence-uniformity pairs run the same statement shape against an existing and a non-existing
foreign object and require identical error classes and messages, so that nobody can list another
namespace by guessing names.
"""

from __future__ import annotations

import shutil
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from engramdb import (
    ConstraintError,
    DynamicMemoryEngine,
    EngramError,
    ForbiddenDDLError,
    InvalidStatement,
    MemoryScope,
    ResourceLimitExceeded,
    ScopeViolation,
    SqlError,
    TransactionError,
)

pytestmark = pytest.mark.sqlite_only  # SQLite's own machinery; other backends have their own suite

AGENTS = ("a", "a-b", "ab", "researcher")

SHARED_SECRET = "SECRET-shared-5d1f0c"
ENGINE_SECRET = "SECRET-engine-77ab3e"


def agent_secret(agent: str) -> str:
    return f"SECRET-{agent}-c0ffee"


def agent_table(agent: str) -> str:
    return f"private_{agent}_t"


def agent_index(agent: str) -> str:
    return f"private_{agent}_idx"


def agent_column(agent: str) -> str:
    """A column name that only that agent's table has (so a leaked column name is recognisable)."""
    return f"hidden_{agent.replace('-', '_')}_col"


def q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# -- database snapshots ------------------------------------------------------------------------


Snapshot = tuple[list[tuple[Any, ...]], dict[str, list[tuple[Any, ...]]]]


def snapshot(path: Path) -> Snapshot:
    """The whole database: every ``sqlite_schema`` row and the contents of every table."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        schema = sorted(
            con.execute("SELECT type, name, tbl_name, rootpage, sql FROM sqlite_schema").fetchall(), key=repr
        )
        data: dict[str, list[tuple[Any, ...]]] = {}
        for kind, name, *_ in schema:
            if kind == "table":
                data[name] = sorted(con.execute(f"SELECT * FROM {q(name)}").fetchall(), key=repr)
        return schema, data
    finally:
        con.close()


# -- the populated database ----------------------------------------------------------------------


@dataclass
class World:
    engine: DynamicMemoryEngine
    path: Path
    dir: Path
    scopes: dict[str, MemoryScope] = field(default_factory=dict)

    def scope(self, actor: str) -> MemoryScope:
        return self.scopes[actor]

    def snap(self) -> Snapshot:
        return snapshot(self.path)

    def foreign_words(self, actor: str) -> list[str]:
        """Names and contents that `actor` must never see in a message or a result."""
        words = [ENGINE_SECRET, "engram_meta", "engram_migrations", "engram_row_vectors"]
        if actor != "shared":
            words += [SHARED_SECRET, "shared_notes", "shared_seq", "idx_notes_ts", "shared_notes_content_idx"]
        for agent in AGENTS:
            if actor == f"private:{agent}":
                continue
            words += [agent_secret(agent), agent_table(agent), agent_index(agent), agent_column(agent)]
        return words

    def secrets(self, actor: str) -> list[str]:
        return [w for w in self.foreign_words(actor) if w.startswith("SECRET-")]


def open_world(path: Path, **engine_kwargs: Any) -> World:
    engine = DynamicMemoryEngine(path, **engine_kwargs)
    world = World(engine, path, path.parent)
    world.scopes["shared"] = engine.get_shared_scope()
    for agent in AGENTS:
        world.scopes[f"private:{agent}"] = engine.get_private_scope(agent)
    return world


def build_world(tmp_path: Path, **engine_kwargs: Any) -> World:
    """A fresh database: shared tables, private tables of every agent, secrets everywhere."""
    path = tmp_path / "escapes.db"
    world = open_world(path, **engine_kwargs)
    engine = world.engine
    shared = world.scope("shared")
    shared.execute("CREATE TABLE shared_notes (id INTEGER PRIMARY KEY, content TEXT, created_ts REAL)")
    shared.executemany(
        "INSERT INTO shared_notes (content, created_ts) VALUES (?, ?)",
        [(SHARED_SECRET, 1.0), ("second shared note", 2.0)],
    )
    shared.execute("CREATE INDEX idx_notes_ts ON shared_notes(created_ts)")
    shared.execute("CREATE INDEX shared_notes_content_idx ON shared_notes(content)")
    for agent in AGENTS:
        scope = engine.get_private_scope(agent)
        table = q(agent_table(agent))
        scope.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, secretcol TEXT, {agent_column(agent)} TEXT)")
        scope.execute(
            f"INSERT INTO {table} (secretcol, {agent_column(agent)}) VALUES (?, ?)",
            (agent_secret(agent), agent_secret(agent)),
        )
        scope.execute(f"CREATE INDEX {q(agent_index(agent))} ON {table}(secretcol)")
    # Written past the engine (test setup only): a secret in an engine-owned table, and a shared
    # AUTOINCREMENT table so that the catalog table sqlite_sequence exists (something to probe).
    con = sqlite3.connect(path)
    try:
        con.execute("INSERT INTO engram_meta (key, value) VALUES ('test-secret', ?)", (ENGINE_SECRET,))
        con.execute("CREATE TABLE shared_seq (id INTEGER PRIMARY KEY AUTOINCREMENT, v TEXT)")
        con.execute("INSERT INTO shared_seq (v) VALUES ('one')")
        con.commit()
    finally:
        con.close()
    return world


@pytest.fixture(scope="module")
def template_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built once per module and copied for each test (each test gets its own database file)."""
    w = build_world(tmp_path_factory.mktemp("template"))
    w.engine.close()
    assert not Path(f"{w.path}-wal").exists() or Path(f"{w.path}-wal").stat().st_size == 0
    return w.path


def world_from(template: Path, tmp_path: Path, **engine_kwargs: Any) -> World:
    path = tmp_path / template.name
    shutil.copyfile(template, path)
    return open_world(path, **engine_kwargs)


@pytest.fixture
def world(template_db: Path, tmp_path: Path) -> Iterator[World]:
    w = world_from(template_db, tmp_path, statement_timeout=2.0, busy_timeout=5.0)
    yield w
    w.engine.close()


def assert_no_leak(world: World, actor: str, text: str) -> None:
    for word in world.foreign_words(actor):
        assert word.lower() not in text.lower(), f"{word!r} leaked into: {text!r}"


def expect_refusal(world: World, actor: str, sql: str, expected: tuple[type[BaseException], ...]) -> EngramError:
    """Run `sql` as `actor`; it must raise one of `expected` and change nothing."""
    before = world.snap()
    with pytest.raises(expected) as info:
        world.scope(actor).execute(sql)
    after = world.snap()
    assert after == before, "a refused statement changed the database"
    exc = info.value
    assert isinstance(exc, EngramError)
    assert_no_leak(world, actor, str(exc))
    # Again, now that the scope has seen this text (its hot path, for a text that passed the
    # name check): the same refusal, word for word, and still nothing changed.
    for call in (world.scope(actor).execute, world.scope(actor).query):
        with pytest.raises(type(exc)) as again:
            call(sql)
        assert str(again.value) == str(exc)
    assert world.snap() == before
    return exc


# -- refused escape attempts ---------------------------------------------------------------------

SV = (ScopeViolation,)
FD = (ForbiddenDDLError,)
IS = (InvalidStatement,)
#: a schema-qualified own name in a schema that a scope never has (temp, an unattached name):
#: SQLite's "no such table" is a contained answer (nothing foreign exists there to be revealed).
SV_OR_MISSING = (ScopeViolation, SqlError)

S = "shared"
A = "private:a"
AB = "private:ab"
A_B = "private:a-b"

CASES: list[tuple[str, str, str, tuple[type[BaseException], ...]]] = [
    # --- other namespaces: reads
    ("read-private-from-shared", S, "SELECT * FROM private_ab_t", SV),
    ("read-hyphen-agent-from-shared", S, 'SELECT * FROM "private_a-b_t"', SV),
    ("count-private-from-shared", S, "SELECT count(*) FROM private_researcher_t", SV),
    ("read-ab-from-a", A, "SELECT * FROM private_ab_t", SV),
    ("read-a-b-from-a", A, 'SELECT * FROM "private_a-b_t"', SV),
    ("read-a-b-column-from-a", A, 'SELECT hidden_a_b_col FROM "private_a-b_t"', SV),
    ("read-shared-from-a", A, "SELECT * FROM shared_notes", SV),
    ("read-a-from-ab", AB, "SELECT * FROM private_a_t", SV),
    ("read-a-from-a-b", A_B, "SELECT * FROM private_a_t", SV),
    ("read-constant-from-foreign", A, "SELECT 1 FROM private_researcher_t", SV),
    ("read-rowid-from-foreign", A, "SELECT rowid FROM private_ab_t", SV),
    ("read-foreign-limit-0", S, "SELECT * FROM private_ab_t LIMIT 0", SV),
    # --- other namespaces: writes
    ("insert-private-from-shared", S, "INSERT INTO private_ab_t (secretcol) VALUES ('x')", SV),
    ("update-private-from-shared", S, "UPDATE private_ab_t SET secretcol = 'x'", SV),
    ("delete-private-from-shared", S, "DELETE FROM private_ab_t", SV),
    ("replace-private-from-shared", S, "REPLACE INTO private_ab_t (id, secretcol) VALUES (1, 'x')", SV),
    ("insert-shared-from-a", A, "INSERT INTO shared_notes (content) VALUES ('x')", SV),
    ("update-shared-from-a", A, "UPDATE shared_notes SET content = 'x'", SV),
    ("delete-a-b-from-a", A, 'DELETE FROM "private_a-b_t"', SV),
    ("insert-ab-from-a", A, "INSERT INTO private_ab_t (secretcol) VALUES ('x')", SV),
    (
        "upsert-set-from-foreign",
        S,
        "INSERT INTO shared_notes (id, content) VALUES (1, 'x') "
        "ON CONFLICT(id) DO UPDATE SET content = (SELECT secretcol FROM private_ab_t)",
        SV,
    ),
    (
        "upsert-where-exists-foreign",
        S,
        "INSERT INTO shared_notes (id, content) VALUES (1, 'x') "
        "ON CONFLICT(id) DO UPDATE SET content = 'y' WHERE EXISTS (SELECT 1 FROM private_ab_t)",
        SV,
    ),
    # --- engine-owned tables
    ("read-engram-meta", S, "SELECT * FROM engram_meta", SV),
    ("count-engram-migrations", S, "SELECT count(*) FROM engram_migrations", SV),
    ("read-engram-row-vectors", A, "SELECT * FROM engram_row_vectors", SV),
    ("insert-engram-meta", A, "INSERT INTO engram_meta (key, value) VALUES ('k', 'v')", SV),
    ("update-engram-migrations", S, "UPDATE engram_migrations SET name = 'x'", SV),
    ("delete-engram-meta", S, "DELETE FROM engram_meta", SV),
    ("create-engram-table", S, "CREATE TABLE engram_evil (a)", SV),
    ("index-on-engram-table", S, "CREATE INDEX shared_evil_i ON engram_meta(value)", SV),
    # --- catalogs
    ("sqlite-master", S, "SELECT * FROM sqlite_master", SV),
    ("sqlite-schema", A, "SELECT name, sql FROM sqlite_schema", SV),
    ("sqlite-temp-master", S, "SELECT * FROM sqlite_temp_master", SV),
    ("sqlite-temp-schema", A, "SELECT * FROM sqlite_temp_schema", SV),
    ("main-sqlite-master-count", S, "SELECT count(*) FROM main.sqlite_master", SV),
    ("sqlite-sequence", S, "SELECT * FROM sqlite_sequence", SV),
    ("sqlite-stat1", S, "SELECT * FROM sqlite_stat1", SV),
    ("sqlite-dbpage", S, "SELECT * FROM sqlite_dbpage", SV),
    ("insert-sqlite-master", S, "INSERT INTO sqlite_master VALUES ('table', 'x', 'x', 0, 'CREATE TABLE x(a)')", SV),
    ("update-sqlite-schema", S, "UPDATE sqlite_schema SET sql = 'x' WHERE name = 'shared_notes'", SV),
    ("mixed-case-catalog", A, "SeLeCt * FrOm SQLITE_MASTER", SV),
    # --- pragmas: statements and table-valued functions
    ("pragma-table-info", S, "PRAGMA table_info(private_ab_t)", SV),
    ("pragma-writable-schema", S, "PRAGMA writable_schema = ON", SV),
    ("pragma-foreign-keys-off", A, "PRAGMA foreign_keys = OFF", SV),
    ("pragma-lowercase", S, "pragma database_list", SV),
    ("pragma-after-comment", S, "/* harmless */ PRAGMA main.journal_mode = DELETE", SV),
    ("pragma-fn-table-info", S, "SELECT * FROM pragma_table_info('private_ab_t')", SV),
    ("pragma-fn-table-list", A, "SELECT name FROM pragma_table_list", SV),
    ("pragma-fn-upper-index-list", S, "SELECT * FROM PRAGMA_INDEX_LIST('private_ab_t')", SV),
    ("pragma-fn-database-list", S, "SELECT * FROM pragma_database_list", SV),
    ("pragma-fn-main-xinfo", S, "SELECT * FROM main.pragma_table_xinfo('private_ab_t')", SV),
    ("pragma-fn-function-list", A, "SELECT * FROM pragma_function_list", SV),
    ("pragma-fn-own-table", S, "SELECT * FROM pragma_foreign_key_list('shared_notes')", SV),
    # --- dbstat
    ("dbstat", S, "SELECT * FROM dbstat", SV),
    ("dbstat-main-names", A, "SELECT name FROM dbstat('main') WHERE name LIKE 'private%'", SV),
    # --- files and extensions
    ("attach-memory", S, "ATTACH DATABASE ':memory:' AS x", SV),
    ("attach-file", S, "ATTACH '{dir}/attached.db' AS other", SV),
    ("detach", S, "DETACH DATABASE other", SV),
    ("vacuum-into", S, "VACUUM INTO '{dir}/copy.db'", FD),
    ("vacuum", A, "VACUUM", FD),
    ("load-extension", S, "SELECT load_extension('/nonexistent/evil')", SV),
    ("load-extension-upper", A, "SELECT LOAD_EXTENSION('/nonexistent/evil', 'entry')", SV),
    ("load-extension-generated-column", S, "CREATE TABLE shared_le (a, b AS (load_extension('x')))", SV),
    ("fts3-tokenizer", S, "SELECT fts3_tokenizer('simple')", SV),
    ("compileoption-get", S, "SELECT sqlite_compileoption_get(0)", SV),
    # --- quoting and case
    ("double-quoted", S, 'SELECT * FROM "private_ab_t"', SV),
    ("bracketed", S, "SELECT * FROM [private_ab_t]", SV),
    ("backticked", S, "SELECT * FROM `private_ab_t`", SV),
    ("upper-case", S, "SELECT * FROM PRIVATE_AB_T", SV),
    ("mixed-case", S, "SELECT * FROM PrIvAtE_aB_t", SV),
    ("quoted-upper", A, 'SELECT * FROM "PRIVATE_AB_T"', SV),
    ("main-dot-quoted", S, 'SELECT * FROM main."private_ab_t"', SV),
    ("quoted-main-dot-quoted", S, 'SELECT * FROM "main"."private_ab_t"', SV),
    ("string-as-table-name", S, "SELECT * FROM 'private_ab_t'", SV),
    # --- Unicode look-alikes
    ("kelvin-sign-read", S, "SELECT * FROM private_ab_\u212a", SV),
    ("long-s-read", A, "SELECT * FROM \u017fhared_notes", SV),
    ("fullwidth-read", S, "SELECT * FROM \uff50\uff52\uff49\uff56\uff41\uff54\uff45_ab_t", SV),
    ("dotless-i-read", S, "SELECT * FROM pr\u0131vate_ab_t", SV),
    ("kelvin-sign-create", S, "CREATE TABLE shared_\u212a (x)", SV),
    ("long-s-create", S, 'CREATE TABLE "shared_\u017f" (x)', SV),
    ("fullwidth-create", S, "CREATE TABLE shared_\uff4eotes (x)", SV),
    ("kelvin-sign-private-create", A, "CREATE TABLE private_a_\u212a (x)", SV),
    ("kelvin-sign-index", S, "CREATE INDEX shared_\u212a_i ON shared_notes(content)", SV),
    # --- comments
    ("block-comment-glued", S, "SELECT * FROM/**/private_ab_t", SV),
    ("line-comment-before-name", S, "SELECT * FROM -- nothing here\nprivate_ab_t", SV),
    ("comment-naming-own-table", S, "SELECT * FROM /* shared_notes */ private_ab_t", SV),
    ("comment-hides-comma", S, "SELECT * FROM shared_notes -- private_ab_t\n, private_ab_t", SV),
    ("leading-block-comment-drop", S, "/* select */ DROP TABLE shared_notes", FD),
    ("leading-line-comment-drop", S, "-- select\nDROP TABLE shared_notes", FD),
    ("comment-drop-foreign", A, "/* SELECT */ DROP TABLE private_ab_t", FD),
    ("two-statements", S, "SELECT 1; DROP TABLE shared_notes", IS),
    ("semicolon-after-comment", S, "SELECT 1 /* ; */ ; DELETE FROM shared_notes", IS),
    ("semicolon-after-line-comment", S, "SELECT 1 -- x\n; DELETE FROM shared_notes", IS),
    # --- joins and subqueries
    ("comma-join", S, "SELECT * FROM shared_notes, private_ab_t", SV),
    ("join-on", S, "SELECT n.content, p.secretcol FROM shared_notes n JOIN private_ab_t p ON 1", SV),
    ("natural-join", S, "SELECT * FROM shared_notes NATURAL JOIN private_ab_t", SV),
    ("left-join", A, "SELECT * FROM private_a_t LEFT JOIN private_ab_t USING (id)", SV),
    ("scalar-subquery", S, "SELECT (SELECT secretcol FROM private_ab_t)", SV),
    ("in-subquery", S, "SELECT * FROM shared_notes WHERE content IN (SELECT secretcol FROM private_ab_t)", SV),
    ("in-table", S, "SELECT * FROM shared_notes WHERE id IN private_ab_t", SV),
    ("exists-subquery", S, "SELECT 1 WHERE EXISTS (SELECT 1 FROM private_ab_t WHERE secretcol LIKE 'SECRET%')", SV),
    ("from-subquery", A, "SELECT * FROM (SELECT * FROM private_ab_t)", SV),
    (
        "where-count-subquery",
        S,
        "SELECT content FROM shared_notes WHERE (SELECT count(*) FROM private_ab_t WHERE secretcol > 'S') > 0",
        SV,
    ),
    ("table-valued-call-on-table", S, "SELECT * FROM private_ab_t(1)", SV),
    # --- CTEs
    ("cte-over-foreign", S, "WITH c AS (SELECT secretcol FROM private_ab_t) SELECT * FROM c", SV),
    (
        "recursive-cte-over-foreign",
        S,
        "WITH RECURSIVE r(x) AS (SELECT secretcol FROM private_ab_t UNION ALL SELECT x FROM r LIMIT 5) SELECT * FROM r",
        SV,
    ),
    (
        "cte-insert-from-foreign",
        S,
        "WITH c AS (SELECT secretcol FROM private_ab_t) INSERT INTO shared_notes (content) SELECT * FROM c",
        SV,
    ),
    ("materialized-cte-catalog", A, "WITH c AS MATERIALIZED (SELECT * FROM sqlite_master) SELECT name FROM c", SV),
    # --- compound selects
    ("union", S, "SELECT content FROM shared_notes UNION SELECT secretcol FROM private_ab_t", SV),
    ("union-all", S, "SELECT content FROM shared_notes UNION ALL SELECT secretcol FROM private_ab_t", SV),
    ("intersect", S, "SELECT content FROM shared_notes INTERSECT SELECT secretcol FROM private_ab_t", SV),
    ("except", S, "SELECT content FROM shared_notes EXCEPT SELECT secretcol FROM private_ab_t", SV),
    ("union-catalog", A, "SELECT secretcol FROM private_a_t UNION SELECT name FROM sqlite_master", SV),
    # --- CREATE TABLE … AS SELECT
    ("ctas-foreign", S, "CREATE TABLE shared_copy AS SELECT * FROM private_ab_t", SV),
    ("ctas-catalog", S, "CREATE TABLE shared_copy AS SELECT sql FROM sqlite_master", SV),
    ("ctas-catalog-rowid", S, "CREATE TABLE shared_copy AS SELECT rowid AS r FROM sqlite_master", SV),
    ("ctas-engine", S, "CREATE TABLE shared_copy AS SELECT * FROM engram_meta", SV),
    ("ctas-pragma", S, "CREATE TABLE shared_copy AS SELECT * FROM pragma_table_list", SV),
    ("ctas-shared-from-private", A, "CREATE TABLE private_a_copy AS SELECT * FROM shared_notes", SV),
    ("ctas-named-foreign", S, "CREATE TABLE private_ab_copy AS SELECT 1 AS x", SV),
    # --- INSERT … SELECT, UPDATE … FROM, DELETE with subquery
    ("insert-select-foreign", S, "INSERT INTO shared_notes (content) SELECT secretcol FROM private_ab_t", SV),
    ("insert-select-catalog", S, "INSERT INTO shared_notes (content) SELECT name FROM sqlite_master", SV),
    ("insert-select-shared-from-a", A, "INSERT INTO private_a_t (secretcol) SELECT content FROM shared_notes", SV),
    ("update-from-foreign", S, "UPDATE shared_notes SET content = p.secretcol FROM private_ab_t AS p", SV),
    ("update-set-subquery", S, "UPDATE shared_notes SET content = (SELECT secretcol FROM private_ab_t)", SV),
    ("delete-in-subquery", S, "DELETE FROM shared_notes WHERE id IN (SELECT id FROM private_ab_t)", SV),
    (
        "delete-exists-probe",
        S,
        "DELETE FROM shared_notes WHERE EXISTS (SELECT 1 FROM private_ab_t WHERE secretcol LIKE 'SECRET%')",
        SV,
    ),
    # --- foreign keys into other namespaces
    ("fk-column-foreign", S, "CREATE TABLE shared_fk (x INTEGER REFERENCES private_ab_t(id))", SV),
    (
        "fk-table-constraint",
        S,
        'CREATE TABLE shared_fk (x INTEGER, FOREIGN KEY (x) REFERENCES "private_a-b_t"(id))',
        SV,
    ),
    ("fk-engine", S, "CREATE TABLE shared_fk (x TEXT REFERENCES engram_meta(key))", SV),
    ("fk-catalog", S, "CREATE TABLE shared_fk (x REFERENCES sqlite_master)", SV),
    ("fk-add-column", S, "ALTER TABLE shared_notes ADD COLUMN r INTEGER REFERENCES private_ab_t(id)", SV),
    ("fk-private-to-shared", A, "CREATE TABLE private_a_fk (x REFERENCES shared_notes(id))", SV),
    ("fk-add-column-private", A, 'ALTER TABLE private_a_t ADD COLUMN r REFERENCES "private_a-b_t"(id)', SV),
    # --- temp objects shadowing shared ones
    ("temp-table-shadow", S, "CREATE TEMP TABLE shared_notes (x)", FD),
    ("temporary-table", S, "CREATE TEMPORARY TABLE shared_tmp (x)", FD),
    ("temp-dot-table", S, "CREATE TABLE temp.shared_notes (x)", FD),  # DDL outside the safelist
    ("quoted-temp-dot-table", S, 'CREATE TABLE "temp"."shared_tmp" (x)', FD),
    ("temp-view", S, "CREATE TEMP VIEW shared_v AS SELECT * FROM private_ab_t", FD),
    ("read-temp-foreign", S, "SELECT * FROM temp.private_ab_t", SV),
    ("read-temp-own-name", S, "SELECT * FROM temp.shared_notes", SV_OR_MISSING),
    ("insert-temp-own-name", S, "INSERT INTO temp.shared_notes (content) VALUES ('x')", SV_OR_MISSING),
    ("temp-dot-index", S, "CREATE INDEX temp.shared_ti ON shared_notes(content)", FD),
    # --- views and triggers
    ("view-over-foreign", S, "CREATE VIEW shared_v AS SELECT * FROM private_ab_t", FD),
    ("view-harmless", S, "CREATE VIEW shared_v AS SELECT 1", FD),
    (
        "trigger-copying-out",
        S,
        "CREATE TRIGGER shared_tr AFTER INSERT ON shared_notes BEGIN "
        "INSERT INTO private_ab_t (secretcol) VALUES (new.content); END",
        FD,
    ),
    (
        "temp-trigger",
        S,
        "CREATE TEMP TRIGGER shared_tr AFTER DELETE ON shared_notes BEGIN SELECT 1; END",
        FD,
    ),
    (
        "trigger-comment-lowercase",
        S,
        "create /* x */ trigger if not exists shared_tr before update on shared_notes begin select 1; select 2; end;",
        FD,
    ),
    ("drop-view", S, "DROP VIEW shared_v", FD),
    ("drop-trigger", S, "DROP TRIGGER shared_tr", FD),
    # --- schema-qualified names
    ("other-schema-foreign", S, "SELECT * FROM other.private_ab_t", SV),
    ("other-schema-own-name", S, "SELECT * FROM other.shared_notes", SV_OR_MISSING),
    ("main-insert-foreign", S, "INSERT INTO main.private_ab_t (secretcol) VALUES ('x')", SV),
    ("other-schema-create", S, "CREATE TABLE other.shared_x (a)", SV),
    ("main-index-foreign-name", S, "CREATE INDEX main.private_ab_i ON shared_notes(content)", SV),
    ("main-alter-foreign", S, "ALTER TABLE main.private_ab_t ADD COLUMN z", SV),
    # --- RETURNING
    (
        "returning-insert",
        S,
        "INSERT INTO shared_notes (content) VALUES ('x') RETURNING (SELECT secretcol FROM private_ab_t)",
        SV,
    ),
    (
        "returning-update-catalog",
        S,
        "UPDATE shared_notes SET content = 'y' RETURNING (SELECT group_concat(name) FROM sqlite_master)",
        SV,
    ),
    ("returning-delete", S, "DELETE FROM shared_notes RETURNING (SELECT secretcol FROM private_ab_t)", SV),
    (
        "returning-private",
        A,
        "INSERT INTO private_a_t (secretcol) VALUES ('x') RETURNING (SELECT content FROM shared_notes)",
        SV,
    ),
    # --- window functions
    ("window-over-foreign", S, "SELECT secretcol, row_number() OVER () FROM private_ab_t", SV),
    (
        "window-arg-subquery",
        S,
        "SELECT content, first_value((SELECT secretcol FROM private_ab_t)) OVER (ORDER BY id) FROM shared_notes",
        SV,
    ),
    ("window-named", S, "SELECT count(*) OVER w FROM shared_notes, private_ab_t WINDOW w AS ()", SV),
    # --- json_each / json_tree over foreign data
    ("json-each-foreign", S, "SELECT value FROM json_each((SELECT json_group_array(secretcol) FROM private_ab_t))", SV),
    ("json-tree-catalog", A, "SELECT * FROM json_tree((SELECT json_group_object(name, sql) FROM sqlite_master))", SV),
    (
        "json-each-lateral",
        S,
        "SELECT j.value FROM shared_notes, json_each((SELECT json_group_array(secretcol) FROM private_ab_t)) AS j",
        SV,
    ),
    # --- indexes
    ("index-on-foreign", S, "CREATE INDEX shared_i ON private_ab_t(secretcol)", SV),
    ("index-foreign-prefix", S, "CREATE INDEX private_ab_idx2 ON shared_notes(content)", SV),
    ("index-named-like-foreign-table", S, "CREATE INDEX private_ab_t ON shared_notes(content)", SV),
    ("index-unprefixed-private", A, "CREATE INDEX idx_a ON private_a_t(secretcol)", SV),
    ("index-shared-prefix-private", A, "CREATE INDEX shared_i ON private_a_t(secretcol)", SV),
    ("index-other-agent-prefix", A, 'CREATE INDEX "private_a-b_i" ON private_a_t(secretcol)', SV),
    ("index-engine-prefix", S, "CREATE INDEX engram_i ON shared_notes(content)", SV),
    ("index-sqlite-prefix", S, "CREATE INDEX sqlite_autoindex_evil ON shared_notes(content)", SV),
    (
        "partial-index-subquery",
        S,
        "CREATE INDEX shared_pi ON shared_notes(content) WHERE content IN (SELECT secretcol FROM private_ab_t)",
        SV,
    ),
    ("expression-index-extension", S, "CREATE INDEX shared_xi ON shared_notes(load_extension('x'))", SV),
    # --- ALTER TABLE
    ("add-column-foreign", S, "ALTER TABLE private_ab_t ADD COLUMN z", SV),
    ("add-column-engine", S, "ALTER TABLE engram_meta ADD COLUMN z", SV),
    ("add-column-catalog", S, "ALTER TABLE sqlite_master ADD COLUMN z", SV),
    ("rename-table", S, "ALTER TABLE shared_notes RENAME TO shared_n2", FD),
    ("rename-column-short", S, "ALTER TABLE shared_notes RENAME content TO c", FD),
    ("rename-column", S, "ALTER TABLE shared_notes RENAME COLUMN content TO c", FD),
    ("drop-column", S, "ALTER TABLE shared_notes DROP COLUMN content", FD),
    ("rename-foreign-into-own", S, "ALTER TABLE private_ab_t RENAME TO shared_stolen", FD),
    ("alter-view", S, "ALTER VIEW shared_v RENAME TO shared_w", FD),
    # --- everything else outside the DDL safelist
    ("drop-table", S, "DROP TABLE shared_notes", FD),
    ("drop-table-if-exists-foreign", A, "DROP TABLE IF EXISTS private_ab_t", FD),
    ("drop-index", S, "drop index idx_notes_ts", FD),
    ("reindex", S, "REINDEX", FD),
    ("reindex-table", S, "REINDEX shared_notes", FD),
    ("analyze", S, "ANALYZE", FD),
    ("analyze-table", A, "ANALYZE private_a_t", FD),
    ("virtual-fts5", S, "CREATE VIRTUAL TABLE shared_f USING fts5(x)", FD),
    ("virtual-rtree", S, "CREATE VIRTUAL TABLE shared_r USING rtree(id, a, b)", FD),
    ("table-on-conflict-rollback", S, "CREATE TABLE shared_oc (a UNIQUE ON CONFLICT ROLLBACK)", FD),
    # --- transaction control and EXPLAIN as SQL
    ("sql-begin", S, "BEGIN", SV),
    ("sql-commit", S, "COMMIT", SV),
    ("sql-rollback", S, "ROLLBACK", SV),
    ("sql-savepoint", S, "SAVEPOINT s", SV),
    ("sql-release", S, "RELEASE s", SV),
    ("sql-end", S, "END", SV),
    ("explain", S, "EXPLAIN SELECT * FROM private_ab_t", SV),
    ("explain-query-plan", A, "EXPLAIN QUERY PLAN SELECT * FROM shared_notes", SV),
]


@pytest.mark.parametrize(("actor", "sql", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_escape_is_refused(world: World, actor: str, sql: str, expected: tuple[type[BaseException], ...]) -> None:
    sql = sql.replace("{dir}", str(world.dir))
    expect_refusal(world, actor, sql, expected)
    # No file was attached or written.
    assert not (world.dir / "attached.db").exists()
    assert not (world.dir / "copy.db").exists()
    # The scope still works afterwards.
    own = "shared_notes" if actor == "shared" else agent_table(actor.split(":", 1)[1])
    assert world.scope(actor).query(f"SELECT count(*) FROM {q(own)}")[0][0] >= 1


def test_at_least_eighty_distinct_escape_cases() -> None:
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(ids) >= 80


DEFAULT_CALLS = [
    ("plain", "(sqlite_compileoption_get(0))"),
    ("nested", "(coalesce(NULL, sqlite_compileoption_get(0)))"),
    ("source-id", "(sqlite_source_id())"),
    ("double-quoted-name", '("sqlite_compileoption_get"(0))'),
    ("bracketed-name", "([sqlite_compileoption_get](0))"),
    ("backticked-name", "(`sqlite_compileoption_get`(0))"),
    ("quoted-upper-name", '("SQLITE_COMPILEOPTION_GET"(0))'),
    ("after-then", "(CASE WHEN 1 THEN sqlite_compileoption_get(0) END)"),
    ("after-not", "(NOT sqlite_compileoption_used(1))"),
    ("after-or", "(0 OR sqlite_compileoption_used(1))"),
    ("after-is", "(1 IS sqlite_compileoption_used(1))"),
]


@pytest.mark.parametrize("default", [d[1] for d in DEFAULT_CALLS], ids=[d[0] for d in DEFAULT_CALLS])
def test_function_allowlist_also_holds_for_column_defaults(world: World, default: str) -> None:
    """A column DEFAULT is compiled into the INSERT that uses it, out of the authorizer's sight;
    functions kept off the allowlist (sqlite_compileoption_*, sqlite_source_id: see
    policy.ALLOWED_FUNCTIONS) must not run through that door, however the call is spelt."""
    shared = world.scope(S)
    before = world.snap()
    try:
        shared.execute(f"CREATE TABLE shared_dflt (a DEFAULT {default}, b)")
    except ScopeViolation as exc:
        assert world.snap() == before
        assert_no_leak(world, S, str(exc))
        return  # refused when the schema is made: fine
    # Made: then the INSERT that compiles the DEFAULT must be refused (and change nothing).
    expect_refusal(world, S, "INSERT INTO shared_dflt (b) VALUES (1)", SV)


def test_function_allowlist_holds_for_added_column_default(world: World) -> None:
    shared = world.scope(S)
    before = world.snap()
    try:
        shared.execute('ALTER TABLE shared_notes ADD COLUMN opt TEXT DEFAULT ("sqlite_compileoption_get"(0))')
    except ScopeViolation:
        assert world.snap() == before
        return
    expect_refusal(world, S, "INSERT INTO shared_notes (content) VALUES ('x')", SV)


def test_load_extension_in_column_default_never_runs(world: World) -> None:
    shared = world.scope(S)
    try:
        shared.execute("CREATE TABLE shared_dflt_le (a DEFAULT (load_extension('/nonexistent/evil')), b)")
    except ScopeViolation:
        return
    # SQLite itself refuses it ("unsafe use of load_extension()") with trusted_schema=OFF.
    expect_refusal(world, S, "INSERT INTO shared_dflt_le (b) VALUES (1)", (ScopeViolation, SqlError))


# -- contained: runs, but only ever sees the scope's own data --------------------------------------

CONTAINED: list[tuple[str, str, str, list[tuple[Any, ...]] | None]] = [
    (
        "cte-named-like-foreign-table",
        S,
        "WITH private_ab_t AS (SELECT 'fake' AS secretcol) SELECT secretcol FROM private_ab_t",
        [("fake",)],
    ),
    (
        "cte-named-like-foreign-table-from-a",
        A,
        'WITH "private_a-b_t" AS (SELECT \'fake\' AS secretcol) SELECT secretcol FROM "private_a-b_t"',
        [("fake",)],
    ),
    (
        "cte-named-sqlite-master",
        S,
        "WITH sqlite_master AS (SELECT 'fake' AS name) SELECT name FROM sqlite_master",
        [("fake",)],
    ),
    (
        "recursive-cte-named-engram-meta",
        A,
        "WITH RECURSIVE engram_meta(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM engram_meta WHERE x < 3) "
        "SELECT x FROM engram_meta",
        [(1,), (2,), (3,)],
    ),
    ("alias-named-like-foreign", S, "SELECT id FROM shared_notes AS private_ab_t ORDER BY id", [(1,), (2,)]),
    ("double-quoted-string-fallback", S, 'SELECT "private_ab_t"', [("private_ab_t",)]),
    (
        "upsert-never-compiled",
        S,
        "INSERT INTO shared_notes (content) VALUES ('fresh') "
        "ON CONFLICT(id) DO UPDATE SET content = (SELECT secretcol FROM private_ab_t)",
        None,
    ),
]


@pytest.mark.parametrize(("actor", "sql", "rows"), [c[1:] for c in CONTAINED], ids=[c[0] for c in CONTAINED])
def test_contained_statement_sees_only_own_data(
    world: World, actor: str, sql: str, rows: list[tuple[Any, ...]] | None
) -> None:
    try:
        result = world.scope(actor).execute(sql)
    except (ScopeViolation, ForbiddenDDLError) as exc:  # refusing is also fine
        assert_no_leak(world, actor, str(exc))
        return
    if rows is not None:
        assert result.rows == rows
    # (names the caller typed may come back, e.g. as a string; foreign content never does)
    for secret in world.secrets(actor):
        assert secret not in repr(result.rows)
    # Nothing foreign was copied into the scope's own tables either.
    own = "shared_notes" if actor == "shared" else agent_table(actor.split(":", 1)[1])
    dump = repr(world.scope(actor).query(f"SELECT * FROM {q(own)}"))
    for secret in world.secrets(actor):
        assert secret not in dump


# -- refusals read the same whether or not the foreign object exists -------------------------------

#: (id, actor, template, existing substitution, missing substitution); {T} a table, {I} an index.
_T_SHARED = ({"T": "private_ab_t"}, {"T": "private_zz_t"})
_I_SHARED = ({"I": "private_ab_idx"}, {"I": "private_zz_idx"})

PAIRS: list[tuple[str, str, str, dict[str, str], dict[str, str]]] = [
    ("select-star", S, "SELECT * FROM {T}", *_T_SHARED),
    ("select-constant", S, "SELECT 1 FROM {T}", *_T_SHARED),
    ("select-count", S, "SELECT count(*) FROM {T}", *_T_SHARED),
    ("select-unknown-column", S, "SELECT nosuch FROM {T}", *_T_SHARED),
    ("select-where-unknown-column", S, "SELECT 1 FROM {T} WHERE nosuch = 1", *_T_SHARED),
    ("select-count-unknown-column", S, "SELECT count(nosuch) FROM {T}", *_T_SHARED),
    ("select-group-by-out-of-range", S, "SELECT 1 FROM {T} GROUP BY 5", *_T_SHARED),
    ("select-ambiguous-column", S, "SELECT id FROM shared_notes, {T}", *_T_SHARED),
    ("select-join-using", S, "SELECT 1 FROM shared_notes JOIN {T} USING (content)", *_T_SHARED),
    ("select-scalar-subquery-unknown-column", S, "SELECT (SELECT nosuch FROM {T})", *_T_SHARED),
    ("insert-values", S, "INSERT INTO {T} (secretcol) VALUES ('x')", *_T_SHARED),
    ("insert-unknown-column", S, "INSERT INTO {T} (nosuch) VALUES (1)", *_T_SHARED),
    ("insert-select", S, "INSERT INTO shared_notes (content) SELECT secretcol FROM {T}", *_T_SHARED),
    ("insert-select-unknown-column", S, "INSERT INTO shared_notes (content) SELECT nosuch FROM {T}", *_T_SHARED),
    ("update-set", S, "UPDATE {T} SET secretcol = 'x'", *_T_SHARED),
    ("update-set-unknown-column", S, "UPDATE {T} SET nosuch = 1", *_T_SHARED),
    ("update-from-unknown-column", S, "UPDATE shared_notes SET content = p.nosuch FROM {T} AS p", *_T_SHARED),
    ("delete", S, "DELETE FROM {T}", *_T_SHARED),
    ("delete-where-unknown-column", S, "DELETE FROM {T} WHERE nosuch = 1", *_T_SHARED),
    ("delete-subquery-unknown-column", S, "DELETE FROM shared_notes WHERE id IN (SELECT nosuch FROM {T})", *_T_SHARED),
    ("create-index-on-foreign", S, "CREATE INDEX shared_i ON {T}(secretcol)", *_T_SHARED),
    ("create-index-named-like-table", S, "CREATE INDEX {T} ON shared_notes(content)", *_T_SHARED),
    ("create-index-named-like-index", S, "CREATE INDEX {I} ON shared_notes(content)", *_I_SHARED),
    (
        "create-index-if-not-exists-named-like-index",
        S,
        "CREATE INDEX IF NOT EXISTS {I} ON shared_notes(content)",
        *_I_SHARED,
    ),
    ("indexed-by-foreign-index", S, "SELECT * FROM shared_notes INDEXED BY {I}", *_I_SHARED),
    ("drop-index", S, "DROP INDEX {I}", *_I_SHARED),
    ("alter-add-column", S, "ALTER TABLE {T} ADD COLUMN z", *_T_SHARED),
    ("alter-rename", S, "ALTER TABLE {T} RENAME TO shared_stolen", *_T_SHARED),
    ("ctas-from-foreign", S, "CREATE TABLE shared_copy AS SELECT * FROM {T}", *_T_SHARED),
    ("ctas-unknown-column", S, "CREATE TABLE shared_copy AS SELECT nosuch FROM {T}", *_T_SHARED),
    ("ctas-named-like-foreign", S, "CREATE TABLE {T} AS SELECT 1 AS x", *_T_SHARED),
    ("create-table-named-like-foreign", S, "CREATE TABLE {T} (x)", *_T_SHARED),
    ("create-table-if-not-exists-foreign", S, "CREATE TABLE IF NOT EXISTS {T} (x)", *_T_SHARED),
    ("fk-references", S, "CREATE TABLE shared_fk (x INTEGER REFERENCES {T}(id))", *_T_SHARED),
    ("fk-add-column", S, "ALTER TABLE shared_notes ADD COLUMN r INTEGER REFERENCES {T}(id)", *_T_SHARED),
    # from a private scope
    ("private-select-star", A, "SELECT * FROM {T}", *_T_SHARED),
    ("private-select-unknown-column", A, "SELECT nosuch FROM {T}", *_T_SHARED),
    ("private-insert-select", A, "INSERT INTO private_a_t (secretcol) SELECT secretcol FROM {T}", *_T_SHARED),
    ("private-shared-table", A, "SELECT * FROM {T}", {"T": "shared_notes"}, {"T": "shared_nothing"}),
    (
        "private-index-named-like-shared-index",
        A,
        "CREATE INDEX {I} ON private_a_t(secretcol)",
        {"I": "idx_notes_ts"},
        {"I": "idx_nothing"},
    ),
    # engine tables and catalogs
    ("engine-table", S, "SELECT * FROM {T}", {"T": "engram_meta"}, {"T": "engram_nothing"}),
    ("engine-table-unknown-column", S, "SELECT nosuch FROM {T}", {"T": "engram_meta"}, {"T": "engram_nothing"}),
    ("catalog-table", S, "SELECT * FROM {T}", {"T": "sqlite_sequence"}, {"T": "sqlite_stat1"}),
    # the same foreign table, an existing column versus a missing one
    ("foreign-column-select", S, "SELECT {C} FROM private_ab_t", {"C": "hidden_ab_col"}, {"C": "nosuch"}),
    ("foreign-column-update", S, "UPDATE private_ab_t SET {C} = 1", {"C": "hidden_ab_col"}, {"C": "nosuch"}),
    (
        "foreign-column-where",
        S,
        "SELECT 1 FROM private_ab_t WHERE {C} IS NULL",
        {"C": "hidden_ab_col"},
        {"C": "nosuch"},
    ),
    (
        "foreign-column-join-using",
        S,
        "SELECT 1 FROM shared_notes JOIN private_ab_t USING ({C})",
        {"C": "id"},
        {"C": "content"},
    ),
]


@pytest.mark.parametrize(
    ("actor", "template", "existing", "missing"), [p[1:] for p in PAIRS], ids=[p[0] for p in PAIRS]
)
def test_refusal_does_not_depend_on_existence(
    world: World, actor: str, template: str, existing: dict[str, str], missing: dict[str, str]
) -> None:
    outcomes = []
    for subst in (existing, missing):
        sql = template.format(**subst)
        before = world.snap()
        try:
            world.scope(actor).execute(sql)
        except EngramError as exc:
            outcomes.append((type(exc).__name__, str(exc)))
            assert_no_leak(world, actor, str(exc))
        else:
            outcomes.append(("no error", ""))
        assert world.snap() == before, f"{sql!r} changed the database"
    (kind_e, msg_e), (kind_m, msg_m) = outcomes
    assert (kind_e, msg_e) == (kind_m, msg_m), (
        f"existing {existing} → {kind_e}: {msg_e!r}; missing {missing} → {kind_m}: {msg_m!r}"
    )
    assert kind_e in ("ScopeViolation", "ForbiddenDDLError")


# -- positive controls -------------------------------------------------------------------------------


def test_own_table_crud(world: World) -> None:
    a = world.scope(A)
    a.execute("CREATE TABLE private_a_notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL, n INTEGER DEFAULT 0)")
    r = a.execute("INSERT INTO private_a_notes (body) VALUES (?)", ("hello",))
    assert r.rowcount == 1 and r.lastrowid == 1
    a.executemany("INSERT INTO private_a_notes (body, n) VALUES (?, ?)", [("x", 1), ("y", 2)])
    assert a.execute("UPDATE private_a_notes SET n = n + 10 WHERE body <> 'hello'").rowcount == 2
    assert a.execute("DELETE FROM private_a_notes WHERE body = 'x'").rowcount == 1
    assert a.query("SELECT body, n FROM private_a_notes ORDER BY id") == [("hello", 0), ("y", 12)]
    assert a.query("SELECT count(*) FROM PRIVATE_A_NOTES") == [(2,)]
    assert a.query('SELECT body FROM main."private_a_notes" WHERE id = :id', {"id": 1}) == [("hello",)]
    assert a.list_tables() == ["private_a_notes", "private_a_t"]


def test_cte_over_own_tables(world: World) -> None:
    shared = world.scope(S)
    rows = shared.query(
        "WITH recent AS (SELECT id, content FROM shared_notes WHERE created_ts >= 1) SELECT count(*) FROM recent"
    )
    assert rows == [(2,)]
    rows = shared.query(
        "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 5) SELECT sum(x) FROM n"
    )
    assert rows == [(15,)]
    shared.execute(
        "WITH src(c) AS (VALUES ('from cte')) INSERT INTO shared_notes (content, created_ts) SELECT c, 3 FROM src"
    )
    assert shared.query("SELECT content FROM shared_notes WHERE created_ts = 3") == [("from cte",)]


@pytest.mark.parametrize(
    ("sql", "changed"),
    [
        ("WITH src(c) AS (VALUES ('a'), ('b')) INSERT INTO shared_notes (content) SELECT c FROM src", 2),
        ("WITH k(id) AS (VALUES (1), (2)) UPDATE shared_notes SET created_ts = 7 WHERE id IN k", 2),
        ("WITH k(id) AS (VALUES (2)) DELETE FROM shared_notes WHERE id IN k", 1),
    ],
    ids=["insert", "update", "delete"],
)
def test_cte_dml_reports_rows_changed(world: World, sql: str, changed: int) -> None:
    """ExecResult.rowcount is "rows changed" for every write, also one that starts with WITH."""
    assert world.scope(S).execute(sql).rowcount == changed


@pytest.mark.parametrize(
    "literal",
    [
        "FROM private_x_t",
        "SELECT * FROM private_ab_t; DROP TABLE shared_notes",
        "/* not a comment */ -- nor this",
        "it''s [private_ab_t] and `sqlite_master`",
    ],
    ids=["from-foreign-name", "statements-inside", "comment-markers", "quotes-inside"],
)
def test_string_literals_are_never_altered(world: World, literal: str) -> None:
    shared = world.scope(S)
    sql_literal = "'" + literal.replace("'", "''") + "'"
    assert shared.query(f"SELECT {sql_literal}") == [(literal,)]
    shared.execute(f"INSERT INTO shared_notes (content, created_ts) VALUES ({sql_literal}, 9)")
    assert shared.query("SELECT content FROM shared_notes WHERE created_ts = 9") == [(literal,)]
    assert shared.query("SELECT ?", (literal,)) == [(literal,)]


def test_json_each_on_literal_and_own_data(world: World) -> None:
    shared = world.scope(S)
    assert shared.query("SELECT value FROM json_each('[1, 2, 3]')") == [(1,), (2,), (3,)]
    assert shared.query("SELECT count(*) FROM json_tree('{\"a\": [1, 2]}')") == [(4,)]
    rows = shared.query(
        "SELECT j.value FROM json_each((SELECT json_group_array(content) FROM shared_notes)) AS j ORDER BY 1"
    )
    assert rows == [(SHARED_SECRET,), ("second shared note",)]


def test_window_functions_on_own_table(world: World) -> None:
    shared = world.scope(S)
    rows = shared.query(
        "SELECT id, row_number() OVER (ORDER BY created_ts DESC), sum(created_ts) OVER () FROM shared_notes ORDER BY id"
    )
    assert rows == [(1, 2, 3.0), (2, 1, 3.0)]


def test_indexes_on_own_tables(world: World) -> None:
    shared = world.scope(S)
    a = world.scope(A)
    shared.execute("CREATE TABLE shared_log (id INTEGER PRIMARY KEY, ts REAL, body TEXT)")
    # spec 000: the shared scope may use unprefixed index names
    shared.execute("CREATE INDEX idx_log_ts ON shared_log(ts)")
    shared.execute("CREATE UNIQUE INDEX IF NOT EXISTS shared_log_body ON shared_log(body)")
    shared.execute("CREATE INDEX IF NOT EXISTS idx_log_ts ON shared_log(ts)")
    shared.execute("CREATE INDEX main.shared_log_both ON shared_log(ts, body) WHERE body IS NOT NULL")
    a.execute("CREATE INDEX private_a_t_secret2 ON private_a_t(secretcol, id)")
    a.execute("CREATE INDEX [private_a_lower] ON private_a_t(lower(secretcol))")
    assert shared.query("SELECT count(*) FROM shared_log INDEXED BY idx_log_ts WHERE ts > 0") == [(0,)]
    con = sqlite3.connect(f"file:{world.path}?mode=ro", uri=True)
    try:
        names = {r[0] for r in con.execute("SELECT name FROM sqlite_schema WHERE type = 'index'")}
    finally:
        con.close()
    assert {"idx_log_ts", "shared_log_body", "shared_log_both", "private_a_t_secret2", "private_a_lower"} <= names


def test_spec000_index_example(tmp_path: Path) -> None:
    with DynamicMemoryEngine(tmp_path / "spec.db") as engine:
        shared = engine.get_shared_scope()
        shared.execute(
            "CREATE TABLE IF NOT EXISTS shared_notes (id INTEGER PRIMARY KEY, agent_id TEXT, content TEXT, created_ts INTEGER)"
        )
        shared.execute("CREATE INDEX idx_notes_ts ON shared_notes(created_ts)")
        assert shared.list_tables() == ["shared_notes"]


SAFELISTED_DDL = [
    (
        "ctas-window-function",
        "CREATE TABLE shared_c AS SELECT id, row_number() OVER (ORDER BY id) AS rn FROM shared_notes",
    ),
    ("ctas-cast", "CREATE TABLE shared_c AS SELECT CAST(id AS TEXT) AS t FROM shared_notes"),
    ("ctas-json-each-literal", "CREATE TABLE shared_c AS SELECT value FROM json_each('[1, 2]')"),
    ("ctas-values-subquery", "CREATE TABLE shared_c AS SELECT * FROM (VALUES (1), (2))"),
    ("ctas-with-cte", "CREATE TABLE shared_c AS WITH c(x) AS (SELECT 1) SELECT x FROM c"),
    ("ctas-aggregate-filter", "CREATE TABLE shared_c AS SELECT count(*) FILTER (WHERE id > 0) AS n FROM shared_notes"),
    ("ctas-join-using", "CREATE TABLE shared_c AS SELECT n.id FROM shared_notes n JOIN shared_notes m USING (id)"),
    (
        "ctas-group-having",
        "CREATE TABLE shared_c AS SELECT content FROM shared_notes GROUP BY content HAVING count(*) > 0",
    ),
    (
        "ctas-case-exists",
        "CREATE TABLE shared_c AS SELECT EXISTS (SELECT 1 FROM shared_notes) AS e, CASE WHEN 1 THEN 2 END AS k",
    ),
    ("default-cast", "CREATE TABLE shared_c (a REAL DEFAULT (CAST(0 AS REAL)))"),
    (
        "column-constraints",
        "CREATE TABLE shared_c (a TEXT DEFAULT (datetime('now')), b INTEGER CHECK (b IN (1, 2)), "
        "c NUMERIC(10, 2), d VARCHAR(20), e TEXT COLLATE NOCASE CHECK (e IS NULL OR length(e) < 10))",
    ),
    (
        "generated-unique-check",
        "CREATE TABLE shared_c (a INTEGER, b INTEGER GENERATED ALWAYS AS (a * 2) STORED, UNIQUE (a, b), "
        "CHECK (a BETWEEN 0 AND 10))",
    ),
    (
        "fk-same-namespace",
        "CREATE TABLE shared_c (a INTEGER, FOREIGN KEY (a) REFERENCES shared_notes(id) ON DELETE CASCADE)",
    ),
    ("index-on-cast", "CREATE INDEX shared_c_idx ON shared_notes(CAST(created_ts AS INTEGER))"),
    ("partial-expression-index", "CREATE INDEX shared_c_idx ON shared_notes(lower(content)) WHERE content IS NOT NULL"),
    ("add-column-default-cast", "ALTER TABLE shared_notes ADD COLUMN extra REAL DEFAULT (CAST(1 AS REAL))"),
    ("add-column-check", "ALTER TABLE shared_notes ADD COLUMN extra TEXT DEFAULT 'x' CHECK (extra <> '')"),
    ("add-column-generated", "ALTER TABLE shared_notes ADD COLUMN twice INTEGER AS (id * 2)"),
]


@pytest.mark.parametrize("sql", [d[1] for d in SAFELISTED_DDL], ids=[d[0] for d in SAFELISTED_DDL])
def test_safelisted_ddl_forms_are_allowed(world: World, sql: str) -> None:
    """Ordinary CREATE TABLE / CREATE TABLE … AS SELECT / CREATE INDEX / ADD COLUMN over own tables,
    with only allowlisted functions: none of these may be refused."""
    world.scope(S).execute(sql)


def test_autoincrement_primary_key_is_allowed(tmp_path: Path) -> None:
    """CREATE TABLE of an own table is on the safelist, AUTOINCREMENT or not, and the answer must
    not depend on whether some other namespace already made SQLite create sqlite_sequence."""
    with DynamicMemoryEngine(tmp_path / "fresh.db") as engine:
        shared = engine.get_shared_scope()
        shared.execute("CREATE TABLE shared_auto (id INTEGER PRIMARY KEY AUTOINCREMENT, v TEXT)")
        shared.execute("INSERT INTO shared_auto (v) VALUES ('x')")
        assert shared.query("SELECT id, v FROM shared_auto") == [(1, "x")]
        private = engine.get_private_scope("researcher")
        private.execute("CREATE TABLE private_researcher_auto (id INTEGER PRIMARY KEY AUTOINCREMENT, v TEXT)")
        assert private.list_tables() == ["private_researcher_auto"]


def test_add_column_updated_at_and_is_deleted(world: World) -> None:
    shared = world.scope(S)
    shared.execute("ALTER TABLE shared_notes ADD COLUMN updated_at REAL")
    shared.execute("ALTER TABLE shared_notes ADD is_deleted INTEGER NOT NULL DEFAULT 0")
    shared.execute("CREATE TABLE shared_items (id INTEGER PRIMARY KEY, updated_at REAL, is_deleted INTEGER)")
    shared.execute("UPDATE shared_notes SET updated_at = 5, is_deleted = 1 WHERE id = 2")
    assert shared.query("SELECT id, updated_at, is_deleted FROM shared_notes ORDER BY id") == [
        (1, None, 0),
        (2, 5.0, 1),
    ]


def test_other_allowed_shapes(world: World) -> None:
    shared = world.scope(S)
    a = world.scope(A)
    # CTAS, FK and ADD COLUMN … REFERENCES inside the own namespace
    shared.execute("CREATE TABLE shared_copy AS SELECT id, content FROM shared_notes")
    assert shared.query("SELECT count(*) FROM shared_copy") == [(2,)]
    shared.execute("CREATE TABLE shared_parent (id INTEGER PRIMARY KEY)")
    shared.execute("CREATE TABLE shared_child (pid INTEGER REFERENCES shared_parent(id))")
    shared.execute("ALTER TABLE shared_notes ADD COLUMN parent INTEGER REFERENCES shared_parent(id)")
    with pytest.raises(ConstraintError):
        shared.execute("INSERT INTO shared_child (pid) VALUES (42)")
    # RETURNING, UPDATE … FROM, DELETE with a subquery, all over own tables
    assert shared.query("INSERT INTO shared_parent (id) VALUES (7) RETURNING id") == [(7,)]
    r = shared.execute("UPDATE shared_notes SET parent = p.id FROM shared_parent AS p WHERE shared_notes.id = 1")
    assert r.rowcount == 1
    r = shared.execute("DELETE FROM shared_copy WHERE id IN (SELECT id FROM shared_notes WHERE parent IS NULL)")
    assert r.rowcount == 1
    a.execute("CREATE TABLE private_a_copy AS SELECT secretcol FROM private_a_t")
    assert a.query("SELECT secretcol FROM private_a_copy") == [(agent_secret("a"),)]
    a.execute("CREATE TABLE private_a_b_looks_like_other_agent (x)")  # 'a' owns private_a_*
    assert "private_a_b_looks_like_other_agent" in a.list_tables()
    # a trailing semicolon is fine
    assert shared.query("SELECT 1;") == [(1,)]
    assert shared.query("SELECT ';' -- ;") == [(";",)]


def test_namespaces_are_invisible_to_each_other(world: World) -> None:
    eng = world.engine
    assert world.scope(S).list_tables() == ["shared_notes", "shared_seq"]
    assert world.scope(A).list_tables() == ["private_a_t"]
    assert world.scope(AB).list_tables() == ["private_ab_t"]
    assert world.scope(A_B).list_tables() == ["private_a-b_t"]
    everything = eng.list_all_tables()
    assert set(everything) == {"shared_notes", "shared_seq"} | {agent_table(x) for x in AGENTS}
    assert "engram_meta" in eng.list_all_tables(include_engine=True)
    # each agent reads its own secret and nobody else's
    for agent in AGENTS:
        scope = eng.get_private_scope(agent)
        assert scope.query(f"SELECT secretcol FROM {q(agent_table(agent))}") == [(agent_secret(agent),)]
        for other in AGENTS:
            if other != agent:
                with pytest.raises(ScopeViolation):
                    scope.query(f"SELECT secretcol FROM {q(agent_table(other))}")


# -- a refused or failed call changes nothing ----------------------------------------------------------


@pytest.fixture
def uniq(world: World) -> MemoryScope:
    shared = world.scope(S)
    shared.execute("CREATE TABLE shared_u (id INTEGER PRIMARY KEY, v TEXT UNIQUE)")
    return shared


def _values(scope: MemoryScope) -> list[str]:
    return [r[0] for r in scope.query("SELECT v FROM shared_u ORDER BY id")]


def test_or_fail_multi_row_insert_leaves_no_row_autocommit(world: World, uniq: MemoryScope) -> None:
    uniq.execute("INSERT INTO shared_u (v) VALUES ('dup')")
    before = world.snap()
    with pytest.raises(ConstraintError):
        uniq.execute("INSERT OR FAIL INTO shared_u (v) VALUES ('x1'), ('x2'), ('dup'), ('x4')")
    assert world.snap() == before
    assert _values(uniq) == ["dup"]


def test_or_fail_multi_row_insert_inside_transaction(uniq: MemoryScope) -> None:
    uniq.begin()
    uniq.execute("INSERT INTO shared_u (v) VALUES ('keep')")
    with pytest.raises(ConstraintError):
        uniq.execute("INSERT OR FAIL INTO shared_u (v) VALUES ('x1'), ('x2'), ('keep'), ('x4')")
    assert uniq.in_transaction
    assert _values(uniq) == ["keep"]
    uniq.commit()
    assert _values(uniq) == ["keep"]


def test_constraint_error_keeps_earlier_statements_of_transaction(uniq: MemoryScope) -> None:
    with uniq.transaction():
        uniq.execute("INSERT INTO shared_u (v) VALUES ('one')")
        uniq.execute("INSERT INTO shared_u (v) VALUES ('two')")
        with pytest.raises(ConstraintError):
            uniq.execute("INSERT INTO shared_u (v) VALUES ('one')")
        with pytest.raises(ConstraintError):
            uniq.execute("UPDATE shared_u SET v = 'one' WHERE v = 'two'")
        assert uniq.in_transaction
        uniq.execute("INSERT INTO shared_u (v) VALUES ('three')")
    assert _values(uniq) == ["one", "two", "three"]


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT OR ROLLBACK INTO shared_u (v) VALUES ('y1'), ('keep')",
        "UPDATE OR ROLLBACK shared_u SET v = 'keep' WHERE v = 'other'",
    ],
    ids=["insert-or-rollback", "update-or-rollback"],
)
def test_or_rollback_failure_keeps_earlier_statements_of_transaction(uniq: MemoryScope, statement: str) -> None:
    """OR ROLLBACK would end the caller's whole transaction; a failed call must change nothing
    (the package already refuses the table-level ON CONFLICT ROLLBACK for this reason)."""
    uniq.execute("INSERT INTO shared_u (v) VALUES ('other')")
    uniq.begin()
    uniq.execute("INSERT INTO shared_u (v) VALUES ('keep')")
    with pytest.raises(EngramError):
        uniq.execute(statement)
    assert uniq.in_transaction, "the failed statement ended the caller's transaction"
    assert _values(uniq) == ["other", "keep"], "the failed statement undid earlier writes of the transaction"
    uniq.commit()
    assert _values(uniq) == ["other", "keep"]


def test_refusals_inside_transaction_keep_it_intact(world: World, uniq: MemoryScope) -> None:
    uniq.begin()
    uniq.execute("INSERT INTO shared_u (v) VALUES ('kept')")
    with pytest.raises(ScopeViolation):
        uniq.execute("INSERT INTO shared_u (v) SELECT secretcol FROM private_ab_t")
    with pytest.raises(ForbiddenDDLError):
        uniq.execute("DROP TABLE shared_u")
    with pytest.raises(ScopeViolation):
        uniq.execute("CREATE TABLE shared_fk (x REFERENCES private_ab_t(id))")
    with pytest.raises(InvalidStatement):
        uniq.execute("SELECT 1; SELECT 2")
    with pytest.raises(SqlError):
        uniq.execute("INSERT INTO shared_u (nosuch) VALUES (1)")
    assert uniq.in_transaction
    assert "shared_fk" not in uniq.list_tables()
    uniq.commit()
    assert _values(uniq) == ["kept"]
    assert "shared_fk" not in world.engine.list_all_tables()


def test_executemany_is_all_or_nothing(world: World, uniq: MemoryScope) -> None:
    uniq.execute("INSERT INTO shared_u (v) VALUES ('dup')")
    before = world.snap()
    with pytest.raises(ConstraintError):
        uniq.executemany("INSERT INTO shared_u (v) VALUES (?)", [("m1",), ("m2",), ("dup",), ("m4",)])
    assert world.snap() == before
    # inside a transaction: the failed executemany leaves the earlier writes
    uniq.begin()
    uniq.execute("INSERT INTO shared_u (v) VALUES ('first')")
    with pytest.raises(ConstraintError):
        uniq.executemany("INSERT INTO shared_u (v) VALUES (?)", [("n1",), ("first",)])
    assert uniq.in_transaction
    uniq.commit()
    assert _values(uniq) == ["dup", "first"]
    r = uniq.executemany("INSERT INTO shared_u (v) VALUES (?)", [("ok1",), ("ok2",)])
    assert r.rowcount == 2


def test_executemany_refusals_change_nothing(world: World) -> None:
    shared = world.scope(S)
    before = world.snap()
    with pytest.raises(ScopeViolation):
        shared.executemany("INSERT INTO private_ab_t (secretcol) VALUES (?)", [("x",), ("y",)])
    with pytest.raises(ScopeViolation):
        shared.executemany("SELECT ?", [(1,), (2,)])
    with pytest.raises(ForbiddenDDLError):
        shared.executemany("DROP TABLE shared_notes", [()])
    with pytest.raises(ScopeViolation):
        shared.executemany(
            "INSERT INTO shared_notes (content) SELECT secretcol FROM private_ab_t WHERE id = ?", [(1,), (2,)]
        )
    assert world.snap() == before


# -- runaway statements ------------------------------------------------------------------------------


@pytest.fixture
def tight(template_db: Path, tmp_path: Path) -> Iterator[World]:
    w = world_from(template_db, tmp_path, statement_timeout=0.5, busy_timeout=5.0)
    shared = w.scope(S)
    shared.execute("CREATE TABLE shared_big (id INTEGER PRIMARY KEY, v INTEGER)")
    shared.execute(
        "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 2000) "
        "INSERT INTO shared_big (v) SELECT x FROM n"
    )
    yield w
    w.engine.close()


_REPLACE_NEST = "hex(zeroblob(1000000))"
for _ in range(4):
    _REPLACE_NEST = f"replace({_REPLACE_NEST}, '0', '00000000')"
_DEEP_NEST = "'x'"
for _ in range(300):
    _DEEP_NEST = f"replace({_DEEP_NEST}, 'x', 'xx')"

RUNAWAY = [
    (
        "unbounded-recursive-cte",
        "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r",
    ),
    (
        "recursive-cte-string-growth",
        "WITH RECURSIVE r(s) AS (SELECT 'x' UNION ALL SELECT s || s FROM r) SELECT length(s) FROM r",
    ),
    ("cross-join", "SELECT count(*) FROM shared_big a, shared_big b, shared_big c"),
    (
        "cross-join-order-by",
        "SELECT a.v + b.v + c.v AS s FROM shared_big a, shared_big b, shared_big c ORDER BY s LIMIT 1",
    ),
    ("randomblob", "SELECT length(randomblob(2000000000))"),
    ("zeroblob", "SELECT length(zeroblob(2000000000))"),
    ("zeroblob-concat", "SELECT length(zeroblob(10000000) || zeroblob(10000000))"),
    ("printf-precision-char", "SELECT length(printf('%.*c', 2000000000, 'x'))"),
    ("printf-width", "SELECT length(printf('%*d', 2000000000, 1))"),
    ("replace-growth", f"SELECT length({_REPLACE_NEST})"),
    ("hex-nesting", "SELECT length(hex(hex(hex(hex(hex(hex(zeroblob(1000000))))))))"),
    ("deep-replace-nesting", f"SELECT length({_DEEP_NEST})"),
    ("deep-expression-tree", "SELECT " + "+".join(["1"] * 1000)),
    (
        "group-concat-growth",
        "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 100000) "
        "SELECT length(group_concat(hex(randomblob(200)))) FROM n",
    ),
    (
        "insert-select-unbounded",
        "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) INSERT INTO shared_big (v) SELECT x FROM r",
    ),
]


@pytest.mark.parametrize("sql", [r[1] for r in RUNAWAY], ids=[r[0] for r in RUNAWAY])
def test_runaway_statement_is_stopped(tight: World, sql: str) -> None:
    shared = tight.scope(S)
    before = tight.snap()
    start = time.monotonic()
    with pytest.raises(ResourceLimitExceeded) as info:
        shared.execute(sql)
    elapsed = time.monotonic() - start
    assert elapsed < 3.0, f"took {elapsed:.1f} s"
    assert_no_leak(tight, S, str(info.value))
    assert tight.snap() == before
    # the engine stays usable
    assert shared.query("SELECT count(*) FROM shared_big") == [(2000,)]
    shared.execute("INSERT INTO shared_notes (content) VALUES ('after runaway')")
    assert shared.query("SELECT count(*) FROM shared_notes") == [(3,)]


def test_runaway_read_in_transaction_keeps_the_transaction(tight: World) -> None:
    shared = tight.scope(S)
    shared.begin()
    shared.execute("INSERT INTO shared_notes (content) VALUES ('in tx')")
    start = time.monotonic()
    with pytest.raises(ResourceLimitExceeded):
        shared.execute("SELECT count(*) FROM shared_big a, shared_big b, shared_big c")
    assert time.monotonic() - start < 3.0
    # an interrupted read is a failed call like any other: the transaction and its writes stay
    assert shared.in_transaction
    assert shared.query("SELECT count(*) FROM shared_notes WHERE content = 'in tx'") == [(1,)]
    shared.commit()
    assert shared.query("SELECT count(*) FROM shared_notes WHERE content = 'in tx'") == [(1,)]


def test_runaway_write_in_transaction_is_reported_and_engine_stays_usable(tight: World) -> None:
    """SQLite rolls back the whole transaction when it interrupts a write; the engine must say so
    (not pretend the transaction is still open) and stay usable."""
    shared = tight.scope(S)
    before = tight.snap()
    shared.begin()
    shared.execute("INSERT INTO shared_notes (content) VALUES ('in tx')")
    start = time.monotonic()
    with pytest.raises(ResourceLimitExceeded) as info:
        shared.execute(
            "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) INSERT INTO shared_big (v) SELECT x FROM r"
        )
    assert time.monotonic() - start < 3.0
    if not shared.in_transaction:
        assert "rolled back" in str(info.value)
        assert tight.snap() == before
        with pytest.raises(TransactionError):
            shared.commit()
    else:  # the transaction survived: its earlier write must have survived too
        assert shared.query("SELECT count(*) FROM shared_notes WHERE content = 'in tx'") == [(1,)]
        shared.rollback()
    shared.begin()
    shared.execute("INSERT INTO shared_notes (content) VALUES ('next tx')")
    shared.commit()
    assert shared.query("SELECT content FROM shared_notes WHERE id > 2") == [("next tx",)]


def test_no_sqlite3_exception_escapes(world: World) -> None:
    shared = world.scope(S)
    bad: list[Any] = [
        "SELECT * FROM shared_notes WHERE content = 'x'\x00",
        "SELECT ?",
        "SELEC 1",
        "SELECT 1 /* unterminated",
        "SELECT 'unterminated",
        "",
        ";",
        "   -- only a comment",
        "SELECT $a(;)",
        "\u017fELECT 1",
    ]
    for sql in bad:
        with pytest.raises(EngramError):
            shared.execute(sql)
    with pytest.raises(EngramError):
        shared.execute("SELECT ?", (object(),))
    with pytest.raises(EngramError):
        shared.execute(b"SELECT 1")  # type: ignore[arg-type]
    with pytest.raises(EngramError):
        shared.execute("SELECT :a", {"b": 1})
    with pytest.raises(TransactionError):
        shared.commit()
