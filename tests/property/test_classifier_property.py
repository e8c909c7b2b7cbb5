"""Properties of the statement classifier (and of scopes fed what it lets through).

- arbitrary text never crashes it: the only exceptions are InvalidStatement, ForbiddenDDLError and
  ScopeViolation; through a scope, arbitrary token soup only ever raises engramdb errors, never
  reaches foreign data and never changes anything outside the namespace;
- statements built from a small grammar of safelisted DDL are classified as allowed (kind, table and
  index name right) whatever the keyword case, comments and white space — and the engine runs them;
- forbidden verbs are always forbidden, whatever the case, comments and white space;
- ``;`` inside strings, quoted identifiers and comments never splits a statement, and such literals
  come back unaltered;
- quoted identifiers (``"…"``, ``[…]``, ```…```) round-trip through the tokenizer.
"""

from __future__ import annotations

import itertools
import sqlite3
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engramdb import (
    DynamicMemoryEngine,
    EngramError,
    ForbiddenDDLError,
    InvalidStatement,
    MemoryScope,
    ScopeViolation,
)
from engramdb.scopes.classify import Kind, Token, TokenType, classify, tokenize

# Deterministic: the same examples on every run; no example database written to disk.
DETERMINISTIC = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=200,
    suppress_health_check=[HealthCheck.too_slow],
)
ENGINE_RUNS = settings(DETERMINISTIC, max_examples=100)

CLASSIFIER_ERRORS = (InvalidStatement, ForbiddenDDLError, ScopeViolation)


# -- strategies -----------------------------------------------------------------------------------

#: white space SQLite and the classifier agree on, and comments (a line comment ends its line)
_SPACE = st.sampled_from([" ", "  ", "\t", "\n", "\r\n", "\f", " \n\t "])
_COMMENT_TEXT = st.text(alphabet=string.ascii_letters + string.digits + " ;'\"[]`-", max_size=20)


@st.composite
def separators(draw: st.DrawFn) -> str:
    """One or more of: white space, a /* block comment */, a -- line comment (ended by a newline)."""
    parts = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["space", "space", "block", "line"]))
        if kind == "space":
            parts.append(draw(_SPACE))
        elif kind == "block":
            parts.append(" /*" + draw(_COMMENT_TEXT).replace("*/", "") + "*/ ")
        else:
            parts.append(" --" + draw(_COMMENT_TEXT) + "\n")
    return "".join(parts)


@st.composite
def keyword(draw: st.DrawFn, word: str) -> str:
    """`word` in random ASCII case."""
    flips = draw(st.lists(st.booleans(), min_size=len(word), max_size=len(word)))
    return "".join(c.upper() if f else c.lower() for c, f in zip(word, flips, strict=True))


def join(draw: st.DrawFn, parts: list[str]) -> str:
    out = draw(st.sampled_from(["", " ", "/* lead */ ", "-- lead\n"]))
    for i, part in enumerate(parts):
        out += part
        if i < len(parts) - 1:
            out += draw(separators())
    if draw(st.booleans()):
        out += draw(st.sampled_from([";", " ;", ";\n", "; -- done", "; /* done */"]))
    return out


def quote(name: str, style: str) -> str:
    if style == '"':
        return '"' + name.replace('"', '""') + '"'
    if style == "`":
        return "`" + name.replace("`", "``") + "`"
    if style == "[":
        return "[" + name + "]"
    if style == "'":
        return "'" + name.replace("'", "''") + "'"
    return name


_SUFFIX = st.text(alphabet=string.ascii_lowercase + string.digits + "_", min_size=1, max_size=12)


@st.composite
def name_ref(draw: st.DrawFn, name: str, *, allow_string: bool = True, qualify: bool = True) -> str:
    """`name` as SQL: bare, "quoted", [bracketed], `back-ticked` (or 'string'), maybe main.-qualified."""
    styles = ["", '"', "[", "`"] + (["'"] if allow_string else [])
    style = draw(st.sampled_from(styles))
    ref = quote(name, style)
    if qualify and draw(st.integers(0, 4)) == 0:
        ref = draw(st.sampled_from(["main.", "MAIN.", '"main".'])) + quote(name, '"' if style == "'" else style)
    return ref


@st.composite
def allowed_ddl(draw: st.DrawFn, unique: str = "") -> tuple[str, Kind, str, str | None]:
    """(sql, kind, table, index) of a safelisted DDL statement on shared_<suffix> names.

    The table (if any) has a column ``v``; `unique` is appended to every name drawn.
    """
    table = "shared_" + draw(_SUFFIX) + unique
    which = draw(st.sampled_from(["table", "index", "add"]))

    def kw(word: str) -> str:
        return draw(keyword(word))

    if which == "table":
        parts = [kw("CREATE"), kw("TABLE")]
        if draw(st.booleans()):
            parts += [kw("IF"), kw("NOT"), kw("EXISTS")]
        parts += [draw(name_ref(table)), "(id INTEGER PRIMARY KEY, updated_at REAL, is_deleted INTEGER DEFAULT 0)"]
        return join(draw, parts), Kind.CREATE_TABLE, table, None
    if which == "index":
        index = draw(st.sampled_from(["shared_", "idx_", "ix"])) + draw(_SUFFIX) + "_i" + unique
        parts = [kw("CREATE")]
        if draw(st.booleans()):
            parts.append(kw("UNIQUE"))
        parts.append(kw("INDEX"))
        if draw(st.booleans()):
            parts += [kw("IF"), kw("NOT"), kw("EXISTS")]
        parts += [
            draw(name_ref(index, allow_string=False)),
            kw("ON"),
            draw(name_ref(table, allow_string=False, qualify=False)),
            "(v)",
        ]
        return join(draw, parts), Kind.CREATE_INDEX, table, index
    parts = [kw("ALTER"), kw("TABLE"), draw(name_ref(table, allow_string=False)), kw("ADD")]
    if draw(st.booleans()):
        parts.append(kw("COLUMN"))
    parts += [draw(st.sampled_from(["updated_at", "is_deleted", "extra_" + draw(_SUFFIX)])), "TEXT"]
    return join(draw, parts), Kind.ADD_COLUMN, table, None


FORBIDDEN_SHAPES: list[list[str]] = [
    ["DROP", "TABLE", "shared_victim"],
    ["DROP", "TABLE", "IF", "EXISTS", "private_a_t"],
    ["DROP", "INDEX", "shared_victim_idx"],
    ["DROP", "VIEW", "shared_v"],
    ["DROP", "TRIGGER", "shared_tr"],
    ["ALTER", "TABLE", "shared_victim", "RENAME", "TO", "shared_renamed"],
    ["ALTER", "TABLE", "shared_victim", "RENAME", "COLUMN", "v", "TO", "w"],
    ["ALTER", "TABLE", "shared_victim", "RENAME", "v", "TO", "w"],
    ["ALTER", "TABLE", "shared_victim", "DROP", "COLUMN", "v"],
    ["ALTER", "TABLE", "shared_victim", "DROP", "v"],
    ["CREATE", "VIEW", "shared_v", "AS", "SELECT", "1"],
    ["CREATE", "TEMP", "VIEW", "shared_v", "AS", "SELECT", "1"],
    [
        "CREATE",
        "TRIGGER",
        "shared_tr",
        "AFTER",
        "INSERT",
        "ON",
        "shared_victim",
        "BEGIN",
        "DELETE",
        "FROM",
        "shared_victim",
        ";",
        "END",
    ],
    [
        "CREATE",
        "TEMP",
        "TRIGGER",
        "IF",
        "NOT",
        "EXISTS",
        "shared_tr",
        "BEFORE",
        "DELETE",
        "ON",
        "shared_victim",
        "BEGIN",
        "SELECT",
        "1",
        ";",
        "SELECT",
        "2",
        ";",
        "END",
    ],
    ["CREATE", "VIRTUAL", "TABLE", "shared_f", "USING", "fts5(x)"],
    ["CREATE", "TEMP", "TABLE", "shared_victim", "(x)"],
    ["CREATE", "TEMPORARY", "TABLE", "shared_tmp", "(x)"],
    ["REINDEX"],
    ["REINDEX", "shared_victim"],
    ["VACUUM"],
    ["VACUUM", "INTO", "'/nonexistent/copy.db'"],
    ["ANALYZE"],
    ["ANALYZE", "shared_victim"],
    ["CREATE", "TABLE", "shared_oc", "(a", "UNIQUE", "ON", "CONFLICT", "ROLLBACK)"],
]

NOT_IN_A_SCOPE: list[list[str]] = [
    ["PRAGMA", "table_info(shared_victim)"],
    ["PRAGMA", "writable_schema", "=", "ON"],
    ["ATTACH", "DATABASE", "':memory:'", "AS", "x"],
    ["DETACH", "x"],
    ["EXPLAIN", "SELECT", "1"],
    ["BEGIN"],
    ["BEGIN", "IMMEDIATE"],
    ["COMMIT"],
    ["END"],
    ["ROLLBACK"],
    ["SAVEPOINT", "s"],
    ["RELEASE", "s"],
]

_KEYWORDS = {
    "DROP",
    "TABLE",
    "IF",
    "EXISTS",
    "INDEX",
    "VIEW",
    "TRIGGER",
    "ALTER",
    "RENAME",
    "TO",
    "COLUMN",
    "CREATE",
    "AS",
    "SELECT",
    "TEMP",
    "TEMPORARY",
    "AFTER",
    "BEFORE",
    "INSERT",
    "DELETE",
    "ON",
    "BEGIN",
    "FROM",
    "END",
    "VIRTUAL",
    "USING",
    "REINDEX",
    "VACUUM",
    "INTO",
    "ANALYZE",
    "NOT",
    "UNIQUE",
    "CONFLICT",
    "PRAGMA",
    "ATTACH",
    "DATABASE",
    "DETACH",
    "EXPLAIN",
    "IMMEDIATE",
    "COMMIT",
    "ROLLBACK",
    "SAVEPOINT",
    "RELEASE",
}


@st.composite
def dressed(draw: st.DrawFn, shapes: list[list[str]]) -> str:
    parts = [draw(keyword(p)) if p in _KEYWORDS else p for p in draw(st.sampled_from(shapes))]
    return join(draw, parts)


# -- a small engine for the properties that run SQL --------------------------------------------------

SECRET = "SECRET-property-9e4d"


def _make_env(directory: Path) -> tuple[DynamicMemoryEngine, Path]:
    path = directory / "prop.db"
    engine = DynamicMemoryEngine(path, statement_timeout=0.5, busy_timeout=5.0)
    shared = engine.get_shared_scope()
    shared.execute("CREATE TABLE shared_victim (id INTEGER PRIMARY KEY, v TEXT)")
    shared.execute("CREATE INDEX shared_victim_idx ON shared_victim(v)")
    shared.execute("INSERT INTO shared_victim (v) VALUES ('shared row')")
    for agent in ("a", "ab"):
        private = engine.get_private_scope(agent)
        private.execute(f"CREATE TABLE private_{agent}_t (id INTEGER PRIMARY KEY, secretcol TEXT)")
        private.execute(f"INSERT INTO private_{agent}_t (secretcol) VALUES (?)", (f"{SECRET}-{agent}",))
    return engine, path


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DynamicMemoryEngine, Path]]:
    """For properties that compare whole-database dumps: nothing here grows much."""
    engine, path = _make_env(tmp_path_factory.mktemp("classifier"))
    yield engine, path
    engine.close()


@pytest.fixture(scope="module")
def ddl_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DynamicMemoryEngine, Path]]:
    """For properties that create many tables (kept apart so that the dumps above stay small)."""
    engine, path = _make_env(tmp_path_factory.mktemp("classifier-ddl"))
    yield engine, path
    engine.close()


def dump(path: Path, *, skip_prefix: str | None = None) -> tuple[Any, ...]:
    """Schema and contents of every table, leaving out objects whose name starts with `skip_prefix`."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        schema = sorted(
            (
                r
                for r in con.execute("SELECT type, name, tbl_name, sql FROM sqlite_schema")
                if skip_prefix is None or not str(r[2]).lower().startswith(skip_prefix)
            ),
            key=repr,
        )
        data = []
        for kind, name, *_ in schema:
            if kind == "table":
                rows = con.execute('SELECT * FROM "' + name.replace('"', '""') + '"').fetchall()
                data.append((name, sorted(rows, key=repr)))
        return tuple(schema), tuple(data)
    finally:
        con.close()


# -- 1. arbitrary text ------------------------------------------------------------------------------

_SQLISH = st.text(
    alphabet=st.sampled_from([*"SELECTFROMDROPcreatwhn ;'\"[]`/*-\n\t().,?:@$xX0123_", "\u212a", "\u017f", "\u00a0"]),
    max_size=120,
)


@DETERMINISTIC
@given(st.one_of(st.text(max_size=200), _SQLISH))
def test_classifier_only_raises_its_own_errors(sql: str) -> None:
    try:
        stmt = classify(sql)
    except CLASSIFIER_ERRORS:
        return
    assert isinstance(stmt.kind, Kind)
    if stmt.kind.is_ddl:
        assert stmt.table is not None


@DETERMINISTIC
@given(st.one_of(st.binary(max_size=20), st.integers(), st.none(), st.lists(st.text(max_size=5), max_size=3)))
def test_classifier_refuses_non_strings(value: object) -> None:
    with pytest.raises(InvalidStatement):
        classify(value)  # type: ignore[arg-type]


_SOUP_TOKENS = [
    "SELECT",
    "select",
    "*",
    "FROM",
    "WHERE",
    "INSERT",
    "INTO",
    "VALUES",
    "UPDATE",
    "SET",
    "DELETE",
    "CREATE",
    "TABLE",
    "INDEX",
    "ON",
    "ALTER",
    "ADD",
    "COLUMN",
    "DROP",
    "WITH",
    "RECURSIVE",
    "AS",
    "UNION",
    "ALL",
    "JOIN",
    "PRAGMA",
    "ATTACH",
    "RETURNING",
    "OVER",
    "(",
    ")",
    ",",
    ";",
    "=",
    ".",
    "1",
    "'x'",
    "'; DROP TABLE shared_victim'",
    '"private_ab_t"',
    "[private_ab_t]",
    "`private_ab_t`",
    "private_ab_t",
    "PRIVATE_AB_T",
    "private_a_t",
    "sqlite_master",
    "sqlite_schema",
    "engram_meta",
    "pragma_table_info('private_ab_t')",
    "dbstat",
    "json_each",
    "shared_victim",
    "shared_soup",
    "main",
    "temp",
    "secretcol",
    "v",
    "id",
    "count(*)",
    "/* c */",
    "-- c\n",
    "load_extension('x')",
    "group_concat(secretcol)",
]


@ENGINE_RUNS
@given(st.lists(st.sampled_from(_SOUP_TOKENS), min_size=1, max_size=14))
def test_token_soup_through_a_private_scope_stays_inside(
    env: tuple[DynamicMemoryEngine, Path], tokens: list[str]
) -> None:
    engine, path = env
    scope = engine.get_private_scope("a")
    sql = " ".join(tokens)
    before = dump(path, skip_prefix="private_a_")
    try:
        result = scope.execute(sql)
    except EngramError as exc:
        assert SECRET + "-ab" not in str(exc)
        assert "shared row" not in str(exc)
    else:
        assert SECRET + "-ab" not in repr(result.rows)
        assert "shared row" not in repr(result.rows)
    assert dump(path, skip_prefix="private_a_") == before, sql


# -- 2. safelisted DDL is allowed, in any dress -------------------------------------------------------


def _strip_main(name: str | None) -> str | None:
    if name is not None and name.lower().startswith("main."):
        return name[5:]
    return name


@DETERMINISTIC
@given(allowed_ddl())
def test_safelisted_ddl_is_classified_as_allowed(case: tuple[str, Kind, str, str | None]) -> None:
    sql, kind, table, index = case
    stmt = classify(sql)
    assert stmt.kind is kind
    assert _strip_main(stmt.table) == table
    assert _strip_main(stmt.index) == index


_counter = itertools.count()


@ENGINE_RUNS
@given(st.data())
def test_safelisted_ddl_runs_through_the_shared_scope(
    ddl_env: tuple[DynamicMemoryEngine, Path], data: st.DataObject
) -> None:
    engine, path = ddl_env
    scope = engine.get_shared_scope()
    # fresh names per example, so that every statement really creates something
    sql, kind, table, _index = data.draw(allowed_ddl(unique=f"_{next(_counter)}"))
    if kind is not Kind.CREATE_TABLE:
        scope.execute(f'CREATE TABLE "{table}" (id INTEGER PRIMARY KEY, v TEXT)')
    foreign_before = dump(path, skip_prefix="shared_")
    scope.execute(sql)
    assert dump(path, skip_prefix="shared_") == foreign_before
    assert table in scope.list_tables()


# -- 3. forbidden verbs are always forbidden ----------------------------------------------------------


@DETERMINISTIC
@given(dressed(FORBIDDEN_SHAPES))
def test_forbidden_ddl_is_always_forbidden(sql: str) -> None:
    with pytest.raises(ForbiddenDDLError) as info:
        classify(sql)
    assert "not permitted by the DDL safelist" in str(info.value)


@DETERMINISTIC
@given(dressed(NOT_IN_A_SCOPE))
def test_statements_a_scope_never_runs_are_refused(sql: str) -> None:
    with pytest.raises(ScopeViolation):
        classify(sql)


@ENGINE_RUNS
@given(st.one_of(dressed(FORBIDDEN_SHAPES), dressed(NOT_IN_A_SCOPE)))
def test_forbidden_statements_change_nothing(env: tuple[DynamicMemoryEngine, Path], sql: str) -> None:
    engine, path = env
    before = dump(path)
    with pytest.raises((ForbiddenDDLError, ScopeViolation)):
        engine.get_shared_scope().execute(sql)
    assert dump(path) == before


# -- 4. semicolons inside strings, quoted names and comments ------------------------------------------

_LITERAL = st.text(alphabet=st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=40)


@st.composite
def literal_with_semicolons(draw: st.DrawFn) -> str:
    text = draw(_LITERAL)
    pos = draw(st.integers(0, len(text)))
    return text[:pos] + ";" + text[pos:]


@DETERMINISTIC
@given(literal_with_semicolons(), separators(), st.sampled_from(["", ";", " ; -- ;", ";/* ; */"]))
def test_semicolons_in_strings_and_comments_do_not_split(literal: str, sep: str, tail: str) -> None:
    sql = f"SELECT {quote(literal, chr(39))}{sep}AS {quote(literal, chr(34))} /* ; */ -- ;\n{tail}"
    stmt = classify(sql)
    assert stmt.kind is Kind.READ


@ENGINE_RUNS
@given(literal_with_semicolons(), separators())
def test_literals_with_semicolons_come_back_unaltered(
    env: tuple[DynamicMemoryEngine, Path], literal: str, sep: str
) -> None:
    engine, _ = env
    scope = engine.get_shared_scope()
    sql = f"SELECT {quote(literal, chr(39))}{sep}AS {quote('c;' + literal, chr(34))}"
    assert scope.query(sql) == [(literal,)]
    assert scope.query(f"SELECT ?{sep}AS c", (literal,)) == [(literal,)]


@DETERMINISTIC
@given(
    st.sampled_from(["SELECT 1", "SELECT ';'", "VALUES (1)", "DELETE FROM shared_victim"]),
    separators(),
    st.sampled_from(["SELECT 2", "DROP TABLE shared_victim", "PRAGMA writable_schema=ON", "SELECT ';'"]),
)
def test_two_statements_are_always_refused(first: str, sep: str, second: str) -> None:
    with pytest.raises(InvalidStatement):
        classify(f"{first}{sep};{sep}{second}")


# -- 5. quoted identifiers round-trip -----------------------------------------------------------------

_IDENT = st.text(alphabet=st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), min_size=1, max_size=30)


@DETERMINISTIC
@given(_IDENT, st.sampled_from(['"', "`", "["]))
def test_quoted_identifiers_round_trip(name: str, style: str) -> None:
    if style == "[" and "]" in name:
        style = '"'
    quoted = quote(name, style)
    assert list(tokenize(quoted)) == [Token(TokenType.QUOTED, name)]
    stmt = classify(f"CREATE TABLE {quoted} (x)")
    assert stmt.kind is Kind.CREATE_TABLE and stmt.table == name
    stmt = classify(f"CREATE INDEX {quoted} ON {quoted} (x)")
    assert stmt.index == name and stmt.table == name
    stmt = classify(f"ALTER TABLE {quoted} ADD COLUMN y")
    assert stmt.kind is Kind.ADD_COLUMN and stmt.table == name


@DETERMINISTIC
@given(_LITERAL)
def test_string_literals_round_trip(text: str) -> None:
    assert list(tokenize(quote(text, "'"))) == [Token(TokenType.STRING, text)]


@ENGINE_RUNS
@given(
    st.text(alphabet=string.ascii_lowercase + string.digits + "_-", min_size=1, max_size=20),
    st.sampled_from(['"', "`", "["]),
    st.sampled_from(['"', "`", "["]),
    st.booleans(),
)
def test_quoted_own_names_work_in_any_quoting(
    ddl_env: tuple[DynamicMemoryEngine, Path], suffix: str, create_style: str, use_style: str, upper: bool
) -> None:
    engine, _ = ddl_env
    scope: MemoryScope = engine.get_shared_scope()
    name = f"shared_q{next(_counter)}_{suffix}"
    scope.execute(f"CREATE TABLE {quote(name, create_style)} (v TEXT)")
    used = name.upper() if upper else name
    scope.execute(f"INSERT INTO {quote(used, use_style)} (v) VALUES ('r')")
    assert scope.query(f"SELECT v FROM {quote(used, use_style)}") == [("r",)]
    assert name in scope.list_tables()


@ENGINE_RUNS
@given(_IDENT)
def test_names_outside_the_namespace_rule_are_refused(env: tuple[DynamicMemoryEngine, Path], tail: str) -> None:
    """A table name is the scope's own only if it is shared_ + ASCII letters, digits, _ and -."""
    engine, path = env
    scope = engine.get_shared_scope()
    name = "shared_" + tail
    folded = name.encode("utf-8").lower().decode("utf-8")
    own = all(c in string.ascii_lowercase + string.digits + "_-" for c in folded)
    if own:
        return  # covered by the test above
    before = dump(path)
    with pytest.raises(ScopeViolation):
        scope.execute(f"CREATE TABLE {quote(name, chr(34))} (x)")
    assert dump(path) == before
