"""Every code example of spec 000 (NAQSHA's memory docs), run with only the imports changed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engramdb import DynamicMemoryEngine, ForbiddenDDLError, MemoryRetriever, TeamMemoryConfig, open_team_memory_engine
from engramdb.tools import memory_schema


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_overview_and_scopes(workdir: Path) -> None:
    engine = DynamicMemoryEngine(".naqsha/memory.db")
    shared = engine.get_shared_scope()
    private = engine.get_private_scope("my-agent")
    assert (workdir / ".naqsha" / "memory.db").exists()
    assert shared.list_tables() == [] and private.list_tables() == []
    engine.close()


def test_shared_memory_example(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    engine = DynamicMemoryEngine(".naqsha/memory.db")
    shared = engine.get_shared_scope()
    shared.execute("""
        CREATE TABLE IF NOT EXISTS shared_notes (
            id         INTEGER PRIMARY KEY,
            agent_id   TEXT NOT NULL,
            content    TEXT NOT NULL,
            created_ts INTEGER NOT NULL DEFAULT (strftime('%s','now'))
        )
    """)
    shared.execute(
        "INSERT INTO shared_notes (agent_id, content) VALUES (?, ?)",
        ("researcher", "Finding: X implies Y"),
    )
    rows = shared.query("SELECT agent_id, content FROM shared_notes ORDER BY created_ts DESC")
    for agent_id, content in rows:
        print(f"[{agent_id}] {content}")
    assert capsys.readouterr().out == "[researcher] Finding: X implies Y\n"
    engine.close()


def test_private_memory_example(workdir: Path) -> None:
    engine = DynamicMemoryEngine(".naqsha/memory.db")
    private = engine.get_private_scope("researcher")
    private.execute("""
        CREATE TABLE IF NOT EXISTS private_researcher_scratch (
            id      INTEGER PRIMARY KEY,
            key     TEXT NOT NULL,
            value   TEXT NOT NULL
        )
    """)
    private.execute("INSERT INTO private_researcher_scratch (key, value) VALUES (?, ?)", ("plan", "..."))
    # "If researcher tries to access private_orch_* tables via the orch scope, the scope raises ValueError"
    orch = engine.get_private_scope("orch")
    with pytest.raises(ValueError):
        orch.query("SELECT * FROM private_researcher_scratch")
    engine.close()


def test_ddl_safelist_example(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    engine = DynamicMemoryEngine(".naqsha/memory.db")
    shared = engine.get_shared_scope()
    shared.execute("CREATE TABLE IF NOT EXISTS shared_notes (id INTEGER PRIMARY KEY, content TEXT, created_ts INTEGER)")
    # The safelist table's own examples.
    shared.execute("CREATE INDEX idx_notes_ts ON shared_notes(created_ts)")
    shared.execute("ALTER TABLE shared_notes ADD COLUMN tags TEXT")
    try:
        shared.execute("DROP TABLE shared_notes")
    except ForbiddenDDLError as e:
        print(e)
    assert capsys.readouterr().out.startswith("DROP TABLE is not permitted by the DDL safelist")
    assert shared.list_tables() == ["shared_notes"]
    engine.close()


def test_transactions_example(workdir: Path) -> None:
    engine = DynamicMemoryEngine(".naqsha/memory.db")
    scope = engine.get_shared_scope()
    scope.execute("CREATE TABLE shared_notes (id INTEGER PRIMARY KEY, agent_id TEXT, content TEXT)")
    scope.begin()
    try:
        scope.execute("INSERT INTO shared_notes (agent_id, content) VALUES (?, ?)", ("orch", "a"))
        scope.execute("INSERT INTO shared_notes (agent_id, content) VALUES (?, ?)", ("orch", "b"))
        scope.commit()
    except Exception:
        scope.rollback()
        raise
    assert scope.query("SELECT content FROM shared_notes ORDER BY id") == [("a",), ("b",)]
    # The same pattern rolls back as a whole when a statement fails.
    with pytest.raises(Exception):  # noqa: B017 - the spec's own pattern re-raises whatever failed
        scope.begin()
        try:
            scope.execute("INSERT INTO shared_notes (agent_id, content) VALUES (?, ?)", ("orch", "c"))
            scope.execute("INSERT INTO shared_notes (no_such_column) VALUES (1)")
            scope.commit()
        except Exception:
            scope.rollback()
            raise
    assert scope.query("SELECT count(*) FROM shared_notes") == [(2,)]
    engine.close()


def test_retrieval_example(workdir: Path) -> None:
    engine = DynamicMemoryEngine(".naqsha/memory.db")
    shared = engine.get_shared_scope()
    shared.execute(
        "CREATE TABLE shared_notes (id INTEGER PRIMARY KEY, agent_id TEXT, content TEXT, created_ts INTEGER)"
    )
    shared.execute("INSERT INTO shared_notes (agent_id, content, created_ts) VALUES ('a', 'Unrelated', 1)")
    shared.execute("INSERT INTO shared_notes (agent_id, content, created_ts) VALUES ('a', 'Also unrelated', 2)")
    shared.execute("INSERT INTO shared_notes (agent_id, content, created_ts) VALUES ('r', 'Finding: X implies Y', 3)")

    retriever = MemoryRetriever(
        scope=shared,
        token_budget=512,  # approximate; ~4 chars per token
        table="shared_notes",
        content_column="content",
    )
    results = retriever.retrieve("what implies Y")
    lines = results.splitlines()
    assert lines[0].startswith("--- UNTRUSTED EVIDENCE START")
    assert lines[1] == "[shared_notes row 3] Finding: X implies Y"
    assert lines[-1].startswith("--- UNTRUSTED EVIDENCE END")
    engine.close()


def test_memory_schema_tool_example(workdir: Path) -> None:
    engine = DynamicMemoryEngine(".naqsha/memory.db")
    ctx = engine.get_shared_scope()
    reply = memory_schema(
        sql="CREATE TABLE IF NOT EXISTS shared_research (id INTEGER PRIMARY KEY, topic TEXT, summary TEXT, created_ts INTEGER)",
        ctx=ctx,
    )
    assert reply.startswith("OK") and "shared_research" in ctx.list_tables()
    engine.close()


def test_team_config_example(workdir: Path) -> None:
    config = TeamMemoryConfig(db_path=Path(".naqsha/memory.db"))
    engine = open_team_memory_engine(config)
    assert engine.path == Path(".naqsha/memory.db")
    engine.close()


def test_toml_memory_section(workdir: Path) -> None:
    from engramdb import load_config

    (workdir / "naqsha.toml").write_text(
        '[memory]\ndb_path           = ".naqsha/memory.db"\nenable_embeddings = true\n'
    )
    config = load_config("naqsha.toml", env={})
    assert config.enable_embeddings is True
    assert os.path.normpath(config.db_path) == os.path.normpath(".naqsha/memory.db")


def test_optional_embeddings_example(workdir: Path) -> None:
    pytest.importorskip("engramdb.embeddings.static")
    engine = DynamicMemoryEngine(".naqsha/memory.db", enable_embeddings=True)
    assert engine.embedder is not None
    engine.close()


def test_listing_tables_example(workdir: Path) -> None:
    engine = DynamicMemoryEngine(".naqsha/memory.db")
    shared = engine.get_shared_scope()
    shared.execute("CREATE TABLE shared_notes (id INTEGER PRIMARY KEY)")
    shared.execute("CREATE TABLE shared_research (id INTEGER PRIMARY KEY)")
    engine.get_private_scope("researcher").execute("CREATE TABLE private_researcher_scratch (id INTEGER PRIMARY KEY)")
    tables = shared.list_tables()
    assert tables == ["shared_notes", "shared_research"]
    all_tables = engine.list_all_tables()
    assert all_tables == ["private_researcher_scratch", "shared_notes", "shared_research"]
    engine.close()
