"""A database written before the storage seam upgrades in place and reads back the same.

``tests/data/v9_fixture.db`` was written by engramdb at commit 26a857f (schema version 9, the code
of the last release before the storage ports) and ``v9_fixture.json`` holds what that code read back
from it (``tests/data/make_v9_fixture.py`` made both). Today's code opens a copy, migrates it, and
must return the same memories, edges, versions, accesses, explain replay, stats, tombstone and
raw-SQL tables — and then take writes.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engramdb import DynamicMemoryEngine, Forgotten, MemoryRetriever
from engramdb.testing import FixedClock, fake_embedder
from tests.rawsql import raw_query

pytestmark = pytest.mark.sqlite_only  # the fixture is a SQLite file

DATA = Path(__file__).resolve().parent.parent / "data"


def plain(value: Any) -> Any:
    """What the fixture's JSON holds for `value` (dataclasses as dicts, tuples as lists, enums as text)."""
    is_instance = dataclasses.is_dataclass(value) and not isinstance(value, type)
    return json.loads(json.dumps(dataclasses.asdict(value) if is_instance else value, default=str))


@pytest.fixture
def expect() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / "v9_fixture.json").read_text(encoding="utf-8"))
    return data


@pytest.fixture
def upgraded(tmp_path: Path, expect: dict[str, Any]) -> Iterator[DynamicMemoryEngine]:
    path = tmp_path / "v9.db"
    shutil.copy(DATA / "v9_fixture.db", path)
    eng = DynamicMemoryEngine(
        path,
        clock=FixedClock(expect["clock"]),
        memory_embedder=fake_embedder(64),
        vector_file=False,
        enable_embeddings=True,
        embedder=fake_embedder(64),
    )
    yield eng
    eng.close()


def test_the_fixture_is_the_old_schema() -> None:
    import sqlite3

    db = sqlite3.connect(DATA / "v9_fixture.db")
    try:
        assert max(v for (v,) in db.execute("SELECT version FROM engram_migrations")) == 9
    finally:
        db.close()


def test_every_memory_reads_back_the_same(upgraded: DynamicMemoryEngine, expect: dict[str, Any]) -> None:
    for who, tenant in (("ada", "default"), ("bob", "default"), ("globex", "globex")):
        agent = upgraded.agent("ada" if who == "globex" else who, tenant=tenant)
        got = [plain(m) for m in agent.memories(include_archived=True)]
        # who set each importance is new since the fixture: 5.0 (the default) reads as nobody's
        assert [m.pop("importance_source") for m in got] == [
            "default" if m["importance"] == 5.0 else "caller" for m in expect[who]
        ], who
        # sessions and metadata are new since the fixture too: none
        assert [(m.pop("session"), m.pop("metadata")) for m in got] == [(None, {})] * len(got), who
        assert got == expect[who], who


def test_edges_history_accesses_and_stats_read_back_the_same(
    upgraded: DynamicMemoryEngine, expect: dict[str, Any]
) -> None:
    ada = upgraded.agent("ada")
    assert {m.id: [plain(e) for e in ada.edges(m.id)] for m in ada.memories()} == expect["edges"]
    episode = next(m for m in expect["ada"] if m["type"] == "episode")
    updated = next(m for m in expect["ada"] if m["version"] == 2)
    assert [plain(v) for v in ada.history(updated["id"])] == expect["history"]
    # Components gained `dated` and `rerank` (0 by default) after the fixture was written: an old
    # record reads back with them
    accesses = [
        {**a, "components": {**a["components"], "dated": 0.0, "rerank": 0.0}} if a["components"] else a
        for a in expect["accesses"]
    ]
    assert [plain(r) for r in ada.accesses(episode["id"])] == accesses
    assert plain(ada.stats()) == expect["stats"]


def test_the_explain_replay_of_an_old_recall_is_the_same(upgraded: DynamicMemoryEngine, expect: dict[str, Any]) -> None:
    replay = plain(upgraded.agent("ada").explain(expect["recall_id"]))
    # Recalls logged before absolute relevance (and the `dated` component) existed replay with
    # relevance 0 (and dated 0); all else is the same.
    for part in ("hits", "near_misses"):
        for e in replay[part]:
            assert e.pop("relevance") == 0.0
            assert e["components"].pop("dated") == 0.0
            assert e["components"].pop("rerank") == 0.0
    assert replay.pop("origins") == {}  # no extractor made any of them
    assert replay == expect["explain"]


def test_the_tombstone_still_holds(upgraded: DynamicMemoryEngine, expect: dict[str, Any]) -> None:
    with pytest.raises(Forgotten):
        upgraded.agent("bob").remember(expect["forgotten"])
    assert raw_query(upgraded, "SELECT count(*) FROM engram_memories WHERE content = ?", (expect["forgotten"],)) == [
        (0,)
    ]


def test_raw_sql_tables_and_retrieval_survive(upgraded: DynamicMemoryEngine, expect: dict[str, Any]) -> None:
    shared = upgraded.get_shared_scope()
    assert [list(r) for r in shared.query("SELECT * FROM shared_notes ORDER BY id")] == expect["shared_notes"]
    scratch = upgraded.get_private_scope("ada").query("SELECT * FROM private_ada_scratch")
    assert [list(r) for r in scratch] == expect["scratch"]
    assert set(expect["tables"]) <= set(upgraded.list_all_tables(include_engine=True))
    text = MemoryRetriever(scope=shared, token_budget=256, table="shared_notes", content_column="content").retrieve(
        "X implies"
    )
    assert "Finding: X implies Y" in text


def test_the_upgraded_store_takes_writes_and_recalls_them(upgraded: DynamicMemoryEngine) -> None:
    ada = upgraded.agent("ada")
    m = ada.remember("The new pager rota starts on Monday", tags=["ops"])
    assert ada.recall("pager rota", k=1)[0].memory.id == m.id
    assert ada.recall("what took checkout down?", k=1)[0].memory.content.startswith("INC-42")
    upgraded.close()
    with DynamicMemoryEngine(upgraded.path, memory_embedder=fake_embedder(64), vector_file=False) as again:
        assert again.agent("ada").get(m.id, touch=False).content == m.content


def test_migrations_are_append_only() -> None:
    """Released migrations are never renamed, renumbered or dropped: a store records them by
    number and name, and an old file is brought up by running only those it lacks."""
    from engramdb.storage.sqlite.migrations import MIGRATIONS

    released = [
        (1, "meta"), (2, "row_vectors"), (3, "sqlite_sequence"), (4, "memories"), (5, "tombstones"),
        (6, "fts_per_tenant"), (7, "drop_fts"), (8, "instance_id"), (9, "snowball_terms"),
    ]  # fmt: skip
    assert [(m.version, m.name) for m in MIGRATIONS][: len(released)] == released
    assert [m.version for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))


def test_the_access_stream_keeps_only_its_memory_index(upgraded: DynamicMemoryEngine) -> None:
    """Migration 11 drops the recall-id and channel indexes no query read; the (n, ts) index that
    `explain` and the usage counts read stays, and the accesses are all still there."""
    import sqlite3

    db = sqlite3.connect(upgraded.path)
    try:
        names = {
            n
            for (n,) in db.execute("SELECT name FROM sqlite_schema WHERE tbl_name = 'engram_access' AND type = 'index'")
        }
        assert names == {"engram_access_memory"}
        assert db.execute("SELECT count(*) FROM engram_access").fetchone()[0] > 0
    finally:
        db.close()
