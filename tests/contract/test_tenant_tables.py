"""Two tenants of one store never meet in their raw-SQL tables, on either backend.

Tenants ``acme`` and ``globex`` share one store, and each has an agent ``alice`` (the same private
namespace name). ``acme`` builds tables with a marker in every row; every statement ``globex``
can write about them — read, count, insert, update, delete, DDL, an index, the catalogs — must
neither see nor change them, and must be refused the way a missing table is. The same names in
``globex`` are its own, unrelated tables.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from engramdb import CallerError, ConfigError, DynamicMemoryEngine, SqlError
from engramdb.agent import Agent
from engramdb.retrieval.retriever import MemoryRetriever
from engramdb.testing import fake_embedder
from engramdb.tools import list_memory_tables, memory_schema

MARK = "acme-ledger-zq81"
ONLY = "shared_acme_only_ledger"  # a name only acme uses: it must not appear in anything globex reads


@pytest.fixture
def eng(make_engine: Callable[..., DynamicMemoryEngine]) -> DynamicMemoryEngine:
    return make_engine(memory_embedder=None)


def _world(eng: DynamicMemoryEngine) -> tuple[Agent, Agent]:
    acme, globex = eng.agent("alice", tenant="acme"), eng.agent("alice", tenant="globex")
    acme.shared.execute("CREATE TABLE shared_notes (id INTEGER PRIMARY KEY, content TEXT)")
    acme.shared.execute("CREATE INDEX shared_notes_content ON shared_notes (content)")
    acme.shared.execute(f"CREATE TABLE {ONLY} (id INTEGER PRIMARY KEY, content TEXT)")
    acme.private.execute("CREATE TABLE private_alice_diary (id INTEGER PRIMARY KEY, content TEXT)")
    for table, scope in (("shared_notes", acme.shared), (ONLY, acme.shared), ("private_alice_diary", acme.private)):
        scope.executemany(
            f"INSERT INTO {table} (id, content) VALUES (?, ?)", [(i, f"{MARK} row {i}") for i in range(1, 4)]
        )
    return acme, globex


def _acme_rows(acme: Agent) -> list[object]:
    return [
        acme.shared.query("SELECT id, content FROM shared_notes ORDER BY id"),
        acme.shared.query(f"SELECT id, content FROM {ONLY} ORDER BY id"),
        acme.private.query("SELECT id, content FROM private_alice_diary ORDER BY id"),
    ]


FOREIGN = [
    ("shared", "SELECT content FROM shared_notes"),
    ("shared", "SELECT count(*) FROM shared_notes"),
    ("shared", f"SELECT count(*) FROM {ONLY}"),
    ("shared", "INSERT INTO shared_notes (id, content) VALUES (9, 'from globex')"),
    ("shared", "UPDATE shared_notes SET content = 'globex was here'"),
    ("shared", "DELETE FROM shared_notes"),
    ("shared", "ALTER TABLE shared_notes ADD COLUMN spy TEXT"),
    ("shared", "CREATE INDEX shared_notes_spy ON shared_notes (content)"),
    ("shared", "SELECT n.content FROM shared_notes n JOIN shared_notes m ON m.id = n.id"),
    ("private", "SELECT content FROM private_alice_diary"),
    ("private", "INSERT INTO private_alice_diary (id, content) VALUES (9, 'from globex')"),
    ("private", "DELETE FROM private_alice_diary"),
]


@pytest.mark.parametrize(
    ("which", "sql"), FOREIGN, ids=[f"{w}-{s.split()[0].lower()}-{i}" for i, (w, s) in enumerate(FOREIGN)]
)
def test_another_tenants_tables_answer_like_missing_ones(eng: DynamicMemoryEngine, which: str, sql: str) -> None:
    acme, globex = _world(eng)
    before = _acme_rows(acme)
    scope = globex.shared if which == "shared" else globex.private
    with pytest.raises(SqlError) as err:
        scope.execute(sql)
    assert "no such table" in str(err.value) or "does not exist" in str(err.value)
    assert MARK not in str(err.value)
    assert _acme_rows(acme) == before


def test_the_same_names_are_each_tenants_own_tables(eng: DynamicMemoryEngine) -> None:
    acme, globex = _world(eng)
    before = _acme_rows(acme)
    # globex makes tables, an index and an unprefixed shared index of the very same names
    globex.shared.execute("CREATE TABLE shared_notes (id INTEGER PRIMARY KEY, content TEXT, extra TEXT)")
    globex.shared.execute("CREATE INDEX shared_notes_content ON shared_notes (content)")
    globex.shared.execute("CREATE INDEX idx_notes_extra ON shared_notes (extra)")
    acme.shared.execute("CREATE INDEX idx_notes_extra ON shared_notes (content)")
    globex.private.execute("CREATE TABLE private_alice_diary (id INTEGER PRIMARY KEY, content TEXT)")
    assert globex.shared.query("SELECT count(*) FROM shared_notes") == [(0,)]
    assert globex.shared.columns("shared_notes") == ["id", "content", "extra"]
    assert acme.shared.columns("shared_notes") == ["id", "content"]
    globex.shared.execute("INSERT INTO shared_notes (id, content, extra) VALUES (1, 'globex note', 'x')")
    globex.private.execute("INSERT INTO private_alice_diary (id, content) VALUES (1, 'globex diary')")
    assert globex.shared.query("SELECT id, content FROM shared_notes") == [(1, "globex note")]
    assert globex.private.query("SELECT content FROM private_alice_diary") == [("globex diary",)]
    assert _acme_rows(acme) == before
    assert globex.shared.list_tables() == ["shared_notes"]
    assert acme.shared.list_tables() == sorted([ONLY, "shared_notes"])
    assert globex.private.list_tables() == ["private_alice_diary"] == acme.private.list_tables()


def test_a_second_engine_on_the_store_finds_each_tenants_tables_where_they_were(
    make_engine: Callable[..., DynamicMemoryEngine],
) -> None:
    first = make_engine()
    acme, _ = _world(first)
    before = _acme_rows(acme)
    first.close()
    again = make_engine()
    assert _acme_rows(again.agent("alice", tenant="acme")) == before
    assert ONLY not in again.agent("alice", tenant="globex").shared.list_tables()
    assert ONLY not in again.agent("alice").shared.list_tables()  # nor the default tenant's


def test_the_agent_tools_list_and_shape_only_the_callers_tenant(eng: DynamicMemoryEngine) -> None:
    acme, globex = _world(eng)
    listing = list_memory_tables(globex)
    assert "shared_notes" not in listing and ONLY not in listing and "private_alice_diary" not in listing
    reply = memory_schema("CREATE TABLE shared_notes (id INTEGER PRIMARY KEY, content TEXT)", ctx=globex)
    assert reply.startswith("OK"), reply
    assert "already exists" not in reply
    assert list_memory_tables(globex).count("shared_notes") == 1
    assert ONLY in list_memory_tables(acme)


def test_a_tenants_retriever_ranks_only_its_own_rows(make_engine: Callable[..., DynamicMemoryEngine]) -> None:
    eng = make_engine(enable_embeddings=True, embedder=fake_embedder())
    acme, globex = _world(eng)
    globex.shared.execute("CREATE TABLE shared_notes (id INTEGER PRIMARY KEY, content TEXT)")
    globex.shared.execute("INSERT INTO shared_notes (id, content) VALUES (1, 'globex row about the ledger')")
    for semantic in (False, True):
        mine = MemoryRetriever(scope=globex.shared, table="shared_notes", semantic=semantic).retrieve("ledger row")
        theirs = MemoryRetriever(scope=acme.shared, table="shared_notes", semantic=semantic).retrieve("ledger row")
        assert "globex row" in mine and MARK not in mine
        assert MARK in theirs and "globex row" not in theirs


def _probes(backend: str) -> list[str]:
    if backend == "sqlite":
        return [
            "SELECT name FROM sqlite_schema",
            "SELECT name FROM sqlite_master",
            "SELECT name FROM pragma_table_list",
            f"SELECT name FROM pragma_table_info('{ONLY}')",
            f"SELECT name FROM pragma_index_list('{ONLY}')",
            "SELECT name, seq FROM sqlite_sequence",
        ]
    return [
        "SELECT table_schema, table_name FROM information_schema.tables",
        "SELECT table_name, column_name FROM information_schema.columns",
        "SELECT relname FROM pg_class",
        "SELECT tablename FROM pg_tables",
        "SELECT indexname FROM pg_indexes",
        f"SELECT to_regclass('{ONLY}')::text",
        "SELECT relname, n_live_tup FROM pg_stat_user_tables",
    ]


def test_the_catalogs_show_a_tenant_nothing_of_another(eng: DynamicMemoryEngine, backend_name: str) -> None:
    _, globex = _world(eng)
    for sql in _probes(backend_name):
        for scope in (globex.shared, globex.private):
            try:
                shown = repr(scope.query(sql))
            except CallerError as exc:  # refused outright: also nothing shown
                shown = str(exc)
            assert ONLY not in shown and MARK not in shown and "private_alice_diary" not in shown, (sql, shown)


def test_transactions_of_two_tenants_on_one_thread_are_their_own(eng: DynamicMemoryEngine) -> None:
    acme, globex = _world(eng)
    globex.shared.execute("CREATE TABLE shared_notes (id INTEGER PRIMARY KEY, content TEXT)")
    acme.shared.begin()
    acme.shared.execute("INSERT INTO shared_notes (id, content) VALUES (7, 'acme, rolled back')")
    globex.shared.execute("INSERT INTO shared_notes (id, content) VALUES (1, 'globex, kept')")
    acme.shared.rollback()
    assert globex.shared.query("SELECT content FROM shared_notes") == [("globex, kept",)]
    assert acme.shared.query("SELECT count(*) FROM shared_notes") == [(3,)]


@pytest.mark.postgres_only
def test_postgres_has_no_tables_to_hand_over(eng: DynamicMemoryEngine) -> None:
    _world(eng)
    with pytest.raises(ConfigError, match="nothing to move"):
        eng.move_tables(["shared_notes"], to_tenant="globex", from_tenant="acme")
