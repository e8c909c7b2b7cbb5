"""SQLite's file of tables per tenant: where the files are, how files made before read, and how
tables another tenant made in the store's file back then are handed over (`move_tables`)."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from engramdb import ConfigError, DynamicMemoryEngine, SqlError, TransactionError, ValidationError
from engramdb.errors import CallerError
from engramdb.retrieval.retriever import MemoryRetriever
from engramdb.storage.sqlite.tenant_tables import TABLES_TENANT_KEY
from engramdb.tenancy.ids import tenant_file_name
from engramdb.tenancy.namespaced import TenantFiles
from engramdb.testing import FixedClock, fake_embedder

pytestmark = pytest.mark.sqlite_only


def _engine(path: Path, clock: FixedClock, **options: object) -> DynamicMemoryEngine:
    return DynamicMemoryEngine(path, clock=clock, memory_embedder=None, **options)  # type: ignore[arg-type]


def _old_tables(path: Path) -> None:
    """Tables as a release before this one left them: in the store's own file, whoever made them."""
    db = sqlite3.connect(path)
    try:
        db.execute("CREATE TABLE shared_ledger (id INTEGER PRIMARY KEY AUTOINCREMENT, content TEXT)")
        db.execute("CREATE INDEX shared_ledger_content ON shared_ledger (content)")
        db.executemany("INSERT INTO shared_ledger (content) VALUES (?)", [(f"entry {i}",) for i in range(5)])
        db.execute("DELETE FROM shared_ledger WHERE id = 5")  # the counter stays at 5
        db.execute("CREATE TABLE private_alice_notes (id INTEGER PRIMARY KEY, content TEXT)")
        db.execute("INSERT INTO private_alice_notes VALUES (1, 'alice wrote this')")
        db.commit()
    finally:
        db.close()


def test_each_tenant_gets_a_file_beside_the_store_and_the_store_keeps_the_default_tenants(
    tmp_path: Path, clock: FixedClock
) -> None:
    path = tmp_path / "memory.db"
    with _engine(path, clock) as eng:
        eng.get_shared_scope().execute("CREATE TABLE shared_home (x INTEGER)")
        eng.get_shared_scope(tenant="acme").execute("CREATE TABLE shared_away (x INTEGER)")
    acme_file = tmp_path / "memory.db.tenants" / tenant_file_name("acme")
    assert acme_file.is_file()
    main = sqlite3.connect(path)
    side = sqlite3.connect(acme_file)
    try:
        assert main.execute("SELECT name FROM sqlite_schema WHERE name LIKE 'shared_%'").fetchall() == [
            ("shared_home",)
        ]
        assert side.execute("SELECT name FROM sqlite_schema WHERE name LIKE 'shared_%'").fetchall() == [
            ("shared_away",)
        ]
        assert side.execute("SELECT value FROM engram_meta WHERE key = ?", (TABLES_TENANT_KEY,)).fetchone() == ("acme",)
    finally:
        main.close()
        side.close()


def test_a_file_made_before_reads_as_it_did_and_a_new_tenant_is_told_where_old_tables_are(
    tmp_path: Path, clock: FixedClock, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "memory.db"
    _engine(path, clock).close()
    _old_tables(path)
    with _engine(path, clock) as eng, caplog.at_level(logging.WARNING, "engramdb"):
        default = eng.agent("alice")
        assert default.shared.query("SELECT count(*) FROM shared_ledger") == [(4,)]
        assert default.private.query("SELECT content FROM private_alice_notes") == [("alice wrote this",)]
        assert caplog.records == []
        acme = eng.agent("alice", tenant="acme")
        assert acme.shared.list_tables() == []
        (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert "move_tables" in warning.getMessage() and "shared_ledger" in warning.getMessage()
        eng.agent("bob", tenant="globex").shared.list_tables()
        assert len(caplog.records) == 1  # said once


def test_a_tenant_files_database_keeps_its_tables_in_itself_old_and_new(tmp_path: Path, clock: FixedClock) -> None:
    root = tmp_path / "tenants"
    with TenantFiles(root, clock=clock, memory_embedder=None) as files:
        files.engine("acme")
        path = files.path_for("acme")
    _old_tables(path)  # what acme's scopes made in its own file before
    with TenantFiles(root, clock=clock, memory_embedder=None) as files:
        acme = files.agent("alice", tenant="acme")
        assert acme.shared.query("SELECT count(*) FROM shared_ledger") == [(4,)]
        acme.shared.execute("CREATE TABLE shared_new (x INTEGER)")
    assert not (root / (path.name + ".tenants")).exists()
    db = sqlite3.connect(path)
    try:
        assert ("shared_new",) in db.execute("SELECT name FROM sqlite_schema").fetchall()
    finally:
        db.close()


def test_a_file_kept_for_one_tenant_is_not_taken_for_another(tmp_path: Path, clock: FixedClock) -> None:
    path = tmp_path / "memory.db"
    with _engine(path, clock) as eng:
        eng._keep_tables_of("acme")
        eng._keep_tables_of("acme")  # again: nothing to do
        with pytest.raises(ConfigError, match="acme"):
            eng._keep_tables_of("globex")
        eng.get_shared_scope(tenant="acme").execute("CREATE TABLE shared_here (x INTEGER)")
    assert not (tmp_path / "memory.db.tenants").exists()


def test_move_tables_hands_old_tables_to_their_tenant_whole(tmp_path: Path, clock: FixedClock) -> None:
    path = tmp_path / "memory.db"
    _engine(path, clock).close()
    _old_tables(path)
    with _engine(path, clock, enable_embeddings=True, embedder=fake_embedder()) as eng:
        default = eng.agent("alice")
        # row embeddings the retriever made in the store's file move with the rows
        before = MemoryRetriever(scope=default.shared, table="shared_ledger", semantic=True).retrieve("entry 3")
        assert eng.move_tables(["SHARED_LEDGER", "private_alice_notes"], to_tenant="acme") == [
            "shared_ledger",
            "private_alice_notes",
        ]
        acme = eng.agent("alice", tenant="acme")
        assert acme.shared.query("SELECT id, content FROM shared_ledger ORDER BY id") == [
            (i, f"entry {i - 1}") for i in range(1, 5)
        ]
        acme.shared.execute("INSERT INTO shared_ledger (content) VALUES ('next')")
        assert acme.shared.query("SELECT max(id) FROM shared_ledger") == [(6,)]  # AUTOINCREMENT went on
        assert acme.private.query("SELECT content FROM private_alice_notes") == [("alice wrote this",)]
        assert default.shared.list_tables() == [] and default.private.list_tables() == []
        with pytest.raises(SqlError, match="no such table"):
            default.shared.query("SELECT * FROM shared_ledger")
        acme_file = tmp_path / "memory.db.tenants" / tenant_file_name("acme")
        db = sqlite3.connect(acme_file)
        try:
            indexes = {r[0] for r in db.execute("SELECT name FROM sqlite_schema WHERE type = 'index'")}
            vectors = db.execute("SELECT count(*) FROM engram_row_vectors WHERE tbl = 'shared_ledger'").fetchone()[0]
        finally:
            db.close()
        assert "shared_ledger_content" in indexes
        assert vectors == 4
        after = MemoryRetriever(scope=acme.shared, table="shared_ledger", semantic=True).retrieve("entry 3")
        assert after.replace("next", "").count("entry 3") == before.count("entry 3") == 1
    main = sqlite3.connect(path)
    try:
        assert main.execute("SELECT count(*) FROM engram_row_vectors WHERE tbl = 'shared_ledger'").fetchone() == (0,)
    finally:
        main.close()


def _dump(path: Path) -> list[object]:
    out: list[object] = []
    for file in sorted(p for p in [path, *path.parent.glob("*.tenants/*.db")] if p.exists()):
        db = sqlite3.connect(file)
        try:
            out.append(sorted(db.execute("SELECT type, name, sql FROM sqlite_schema").fetchall(), key=repr))
            for (name,) in db.execute("SELECT name FROM sqlite_schema WHERE type = 'table' AND name LIKE 'shared_%'"):
                out.append(db.execute(f'SELECT * FROM "{name}"').fetchall())
        finally:
            db.close()
    return out


@pytest.mark.parametrize(
    ("tables", "to", "source", "error"),
    [
        (["shared_missing"], "acme", "default", ValidationError),
        (["shared_ledger", "shared_missing"], "acme", "default", ValidationError),
        (["shared_clash"], "acme", "default", ValidationError),
        (["shared_child"], "acme", "default", ValidationError),  # its parent stays behind
        (["shared_parent"], "acme", "default", ValidationError),  # its child stays behind
        (["engram_memories"], "acme", "default", ValidationError),
        ("shared_ledger", "acme", "default", ValidationError),
        ([], "acme", "default", ValidationError),
        (["shared_ledger"], "default", "default", ValidationError),
        (["shared_ledger"], "", "default", ValidationError),
    ],
)
def test_a_refused_move_changes_nothing(
    tmp_path: Path, clock: FixedClock, tables: object, to: str, source: str, error: type[CallerError]
) -> None:
    path = tmp_path / "memory.db"
    _engine(path, clock).close()
    _old_tables(path)
    with _engine(path, clock) as eng:
        shared = eng.get_shared_scope()
        shared.execute("CREATE TABLE shared_clash (x INTEGER)")
        shared.execute("CREATE TABLE shared_parent (id INTEGER PRIMARY KEY)")
        shared.execute("CREATE TABLE shared_child (id INTEGER PRIMARY KEY, p INTEGER REFERENCES shared_parent (id))")
        eng.get_shared_scope(tenant="acme").execute("CREATE TABLE shared_clash (y TEXT)")
        before = _dump(path)
        with pytest.raises(error):
            eng.move_tables(tables, to_tenant=to, from_tenant=source)  # type: ignore[arg-type]
        assert _dump(path) == before
        shared.begin()
        try:
            with pytest.raises(TransactionError):
                eng.move_tables(["shared_ledger"], to_tenant="acme")
        finally:
            shared.rollback()
        assert _dump(path) == before
        # the pair a foreign key joins moves together
        assert eng.move_tables(["shared_child", "shared_parent"], to_tenant="acme") == ["shared_child", "shared_parent"]


def test_a_scope_cannot_attach_another_tenants_file(tmp_path: Path, clock: FixedClock) -> None:
    path = tmp_path / "memory.db"
    with _engine(path, clock) as eng:
        eng.get_shared_scope(tenant="acme").execute("CREATE TABLE shared_secret (x TEXT)")
        acme_file = tmp_path / "memory.db.tenants" / tenant_file_name("acme")
        for scope in (eng.get_shared_scope(tenant="globex"), eng.get_shared_scope()):
            with pytest.raises(CallerError):
                scope.execute(f"ATTACH DATABASE '{acme_file}' AS other")
            with pytest.raises(CallerError):
                scope.query(f"SELECT * FROM '{acme_file}'.shared_secret")


def test_an_in_memory_store_keeps_tenants_tables_apart_and_leaves_nothing(clock: FixedClock) -> None:
    eng = DynamicMemoryEngine(":memory:", clock=clock, memory_embedder=None)
    acme = eng.get_shared_scope(tenant="acme")
    acme.execute("CREATE TABLE shared_x (v TEXT)")
    acme.execute("INSERT INTO shared_x VALUES ('acme')")
    globex = eng.get_shared_scope(tenant="globex")
    assert globex.list_tables() == []
    globex.execute("CREATE TABLE shared_x (v TEXT)")
    assert globex.query("SELECT * FROM shared_x") == []
    files = [acme.store.path, globex.store.path]  # type: ignore[attr-defined]
    eng.close()
    assert not any(f.exists() for f in files)
