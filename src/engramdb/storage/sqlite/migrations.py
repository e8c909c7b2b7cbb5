"""The SQLite schema of the engine's own tables: named, ordered, append-only migrations.

Each migration runs once, inside one transaction with its record in ``engram_migrations``. A file
whose recorded schema version is newer than the code refuses to open (`SchemaVersionError`) rather
than be misread. Append new migrations at the end; never edit, rename or reorder an applied one
(``tests/unit/test_migrations.py`` holds the names and order of every released one).

What the tables hold:

- ``engram_memories``: one row per memory (``n`` is the internal integer key, ``id`` the public one);
  ``terms`` holds the distinct stems of title, content and tags, computed once at write time for
  the cue-overlap feature;
  ``ring`` holds the most recent deliberate access times (float64, little-endian) and
  ``old_count / old_newest / old_oldest`` summarise the older ones for Petrov's approximation;
  ``changed`` is a write sequence so in-memory caches refresh only what changed.
- lexical search reads ``terms`` through an in-memory index (retrieval/lexical_channel.py); the
  FTS5 indexes of migrations 4 and 6 are dropped by migration 7.
- ``engram_vectors``: each memory's embedding (the truth; search matrices are caches).
- ``engram_edges``: typed, weighted edges; ``engram_access``: the full access stream (indexed by
  memory and time only: migration 11 drops the recall-id and channel indexes nothing read);
  ``engram_recalls``: one row per recall, for ``explain(recall_id)``; ``engram_versions``: earlier
  contents after an update.
- ``engram_meta`` key ``instance_id`` (migration 8): a random id given to the database once, so a
  cache kept outside the file (the vector side file) can tell the database it was made from.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from engramdb.errors import BackendError, SchemaVersionError
from engramdb.retrieval.keywords import cue_terms


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    apply: Callable[[sqlite3.Connection], None]


def _m0001_meta(db: sqlite3.Connection) -> None:
    db.execute("CREATE TABLE IF NOT EXISTS engram_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")


def _m0002_row_vectors(db: sqlite3.Connection) -> None:
    # Embeddings of scope-table rows for the retriever's semantic ranking. The vectors are the
    # truth; the in-memory search matrix is rebuilt from them.
    db.execute(
        """CREATE TABLE IF NOT EXISTS engram_row_vectors (
            tbl TEXT NOT NULL, col TEXT NOT NULL, row_id INTEGER NOT NULL,
            digest BLOB NOT NULL, model TEXT NOT NULL, vec BLOB NOT NULL,
            PRIMARY KEY (tbl, col, row_id)) WITHOUT ROWID"""
    )


def _m0003_sequence(db: sqlite3.Connection) -> None:
    # The first AUTOINCREMENT table makes SQLite create sqlite_sequence, a catalog shared by every
    # namespace that no scope may touch. Creating it here, once, means a scope's AUTOINCREMENT
    # table never has to, and whether it exists says nothing about other namespaces.
    db.execute("CREATE TABLE IF NOT EXISTS engram_autoincrement (id INTEGER PRIMARY KEY AUTOINCREMENT)")


# The FTS5 index of migrations 4 and 6 (dropped by 7; the spec is kept so old files replay).
FTS_SPEC = "fts5(title, content, tags, content='engram_memories', content_rowid='n', tokenize='porter unicode61 remove_diacritics 2')"

_DDL = [
    """CREATE TABLE engram_memories (
        n INTEGER PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        tenant TEXT NOT NULL,
        owner TEXT NOT NULL,
        author TEXT NOT NULL,
        type TEXT NOT NULL,
        title TEXT NOT NULL DEFAULT '',
        content TEXT NOT NULL,
        tags TEXT NOT NULL DEFAULT '',
        entities TEXT NOT NULL DEFAULT '',
        n_chars INTEGER NOT NULL,
        n_tokens INTEGER NOT NULL,
        n_sentences INTEGER NOT NULL,
        importance REAL NOT NULL,
        salience REAL NOT NULL,
        confidence REAL NOT NULL,
        strength INTEGER NOT NULL DEFAULT 0,
        confidentiality INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL,
        recorded_at REAL NOT NULL,
        valid_from REAL,
        valid_to REAL,
        archived INTEGER NOT NULL DEFAULT 0,
        status TEXT,
        refs TEXT NOT NULL DEFAULT '[]',
        version INTEGER NOT NULL DEFAULT 1,
        content_hash TEXT NOT NULL,
        terms TEXT NOT NULL DEFAULT '',
        ring BLOB NOT NULL DEFAULT x'',
        access_count INTEGER NOT NULL DEFAULT 0,
        old_count INTEGER NOT NULL DEFAULT 0,
        old_newest REAL,
        old_oldest REAL,
        last_access REAL,
        changed INTEGER NOT NULL
    )""",
    "CREATE INDEX engram_memories_visible ON engram_memories (tenant, owner, archived)",
    # Narrow and covering: joins from FTS matches and edges check visibility without reading the
    # wide row (measured at 10k memories: most of the join's cost per recall went).
    """CREATE INDEX engram_memories_cover ON engram_memories (
        n, tenant, owner, archived, confidentiality, valid_from, valid_to, type)""",
    "CREATE INDEX engram_memories_changed ON engram_memories (changed)",
    "CREATE INDEX engram_memories_hash ON engram_memories (tenant, content_hash)",
    """CREATE VIRTUAL TABLE engram_fts USING fts5(
        title, content, tags, content='engram_memories', content_rowid='n',
        tokenize='porter unicode61 remove_diacritics 2')""",
    "CREATE TABLE engram_vectors (n INTEGER PRIMARY KEY, model TEXT NOT NULL, vec BLOB NOT NULL)",
    """CREATE TABLE engram_edges (
        src INTEGER NOT NULL, dst INTEGER NOT NULL, type TEXT NOT NULL, weight REAL NOT NULL,
        tenant TEXT NOT NULL, created_at REAL NOT NULL, created_by TEXT NOT NULL,
        PRIMARY KEY (src, dst, type)) WITHOUT ROWID""",
    "CREATE INDEX engram_edges_dst ON engram_edges (dst)",
    """CREATE TABLE engram_access (
        id INTEGER PRIMARY KEY, ts REAL NOT NULL, n INTEGER NOT NULL, tenant TEXT NOT NULL,
        channel TEXT NOT NULL, reader TEXT NOT NULL, trace_ref TEXT, query TEXT, score REAL,
        rank INTEGER, rel REAL, rec REAL, imp REAL, spread REAL, recall_id TEXT)""",
    "CREATE INDEX engram_access_memory ON engram_access (n, ts)",
    "CREATE INDEX engram_access_recall ON engram_access (recall_id) WHERE recall_id IS NOT NULL",
    "CREATE INDEX engram_access_tenant ON engram_access (tenant, channel)",
    """CREATE TABLE engram_recalls (
        recall_id TEXT PRIMARY KEY, ts REAL NOT NULL, tenant TEXT NOT NULL, reader TEXT NOT NULL,
        query TEXT NOT NULL, params TEXT NOT NULL, near_misses TEXT NOT NULL)""",
    """CREATE TABLE engram_versions (
        n INTEGER NOT NULL, version INTEGER NOT NULL, title TEXT NOT NULL, content TEXT NOT NULL,
        changed_at REAL NOT NULL, changed_by TEXT NOT NULL, PRIMARY KEY (n, version))""",
    "CREATE TABLE engram_counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
    "INSERT INTO engram_counters VALUES ('memories', 0)",
]


def _m0004_memories(db: sqlite3.Connection) -> None:
    for statement in _DDL:
        db.execute(statement)


def _m0005_tombstones(db: sqlite3.Connection) -> None:
    db.execute(
        """CREATE TABLE engram_tombstones (
            id INTEGER PRIMARY KEY, memory_id TEXT NOT NULL, tenant TEXT NOT NULL, owner TEXT NOT NULL,
            content_hash TEXT NOT NULL, forgotten_by TEXT NOT NULL, forgotten_at REAL NOT NULL, reason TEXT NOT NULL)"""
    )
    db.execute("CREATE INDEX engram_tombstones_hash ON engram_tombstones (tenant, owner, content_hash)")


def _m0010_tombstone_levels(db: sqlite3.Connection) -> None:
    # The level of what a tombstone replaced; stones from before are treated as the highest, so
    # that none tells a capped writer about a memory it could not have seen.
    columns = {row[1] for row in db.execute("PRAGMA table_info(engram_tombstones)")}
    if "confidentiality" not in columns:  # re-run safely on a file whose record of it was lost
        db.execute("ALTER TABLE engram_tombstones ADD COLUMN confidentiality INTEGER NOT NULL DEFAULT 3")


def _m0006_fts_per_tenant(db: sqlite3.Connection) -> None:
    # BM25 statistics are per index, so one shared index let one tenant's writes move another's
    # scores and candidate cut. Each tenant gets its own index (see store.fts_table).
    db.execute(
        "CREATE TABLE engram_fts_tenants (tenant TEXT PRIMARY KEY, code INTEGER UNIQUE NOT NULL, tbl TEXT NOT NULL)"
    )
    tenants = [str(r[0]) for r in db.execute("SELECT DISTINCT tenant FROM engram_memories ORDER BY tenant")]
    for code, tenant in enumerate(tenants, start=1):
        tbl = f"engram_fts_{code}"
        db.execute(f"CREATE VIRTUAL TABLE {tbl} USING {FTS_SPEC}")
        db.execute("INSERT INTO engram_fts_tenants VALUES (?, ?, ?)", (tenant, code, tbl))
        rows = db.execute(
            "SELECT n, title, content, tags FROM engram_memories WHERE tenant = ? AND content <> ''", (tenant,)
        ).fetchall()
        db.executemany(
            f"INSERT INTO {tbl} (rowid, title, content, tags) VALUES (?, ?, ?, ?)",  # noqa: S608 - engine table name
            [(n, title, content, " ".join(json.loads(tags) if tags else [])) for n, title, content, tags in rows],
        )
    db.execute("DROP TABLE engram_fts")


def _m0007_drop_fts(db: sqlite3.Connection) -> None:
    # Lexical candidates come from an in-memory BM25 index over `terms` (retrieval/lexical_channel.py):
    # FTS5's OR query scores every matching row (no top-k pruning: its cost grows linearly with the
    # store, see the FTS5 baseline of benchmarks/results/scale.json), and keeping it in step cost a
    # large share of each write and a third of the file.
    for (tbl,) in db.execute("SELECT tbl FROM engram_fts_tenants ORDER BY code").fetchall():
        db.execute(f"DROP TABLE {tbl}")
    db.execute("DROP TABLE engram_fts_tenants")


def _m0008_instance_id(db: sqlite3.Connection) -> None:
    # The identity of this database for caches kept beside it (retrieval/vector_channel.py): random,
    # never changed. A copy of the file keeps it; a new database at the same path gets a new one.
    db.execute("INSERT OR IGNORE INTO engram_meta (key, value) VALUES ('instance_id', ?)", (uuid.uuid4().hex,))


def _m0009_snowball_terms(db: sqlite3.Connection) -> None:
    # Terms become Snowball (Porter2) stems (retrieval/keywords.py): re-stem every stored memory so
    # old and new rows match the same queries. Bumping `changed` makes every cache reload them.
    change = int(db.execute("SELECT value FROM engram_counters WHERE name = 'memories'").fetchone()[0]) + 1
    db.execute("UPDATE engram_counters SET value = ? WHERE name = 'memories'", (change,))
    rows = db.execute("SELECT n, title, content, tags FROM engram_memories WHERE content <> ''").fetchall()
    db.executemany(
        "UPDATE engram_memories SET terms = ?, changed = ? WHERE n = ?",
        [
            (cue_terms(title, content, *(json.loads(tags) if tags else [])), change, n)
            for n, title, content, tags in rows
        ],
    )


def _m0011_unused_access_indexes(db: sqlite3.Connection) -> None:
    # No query reads the access stream by recall id or by (tenant, channel) — by memory (n, ts)
    # only — yet every recall kept both up to date: 20 b-tree inserts and ~4 of its ~42 log
    # pages (recall p50 at 10k memories measurably lower without them, in alternating runs).
    db.execute("DROP INDEX IF EXISTS engram_access_recall")
    db.execute("DROP INDEX IF EXISTS engram_access_tenant")


def _m0012_wipe_table(db: sqlite3.Connection) -> None:
    # Always empty: a forget fills it with zeros over every free page of the file and deletes them
    # again (`SqliteBackend.erasing`), so copies of a text that earlier rewrites freed are gone too.
    db.execute("CREATE TABLE IF NOT EXISTS engram_wipe (b BLOB NOT NULL)")


def _m0013_hash_index_on_demand(db: sqlite3.Connection) -> None:
    # Built again the first time a lookup by text needs it (`rows._HASH_INDEX`); with an embedder
    # none does, and every write paid a random page of it.
    db.execute("DROP INDEX IF EXISTS engram_memories_hash")


def _m0014_importance_source(db: sqlite3.Connection) -> None:
    # Who set each importance (0 nobody, 1 a caller, 2 reflection), so that reflection rescores
    # only what no caller scored. A stored row cannot say: one at 5.0, the default, counts as
    # nobody's; any other value as a caller's, which reflection keeps.
    have = {r[1] for r in db.execute("PRAGMA table_info(engram_memories)")}
    if "imp_source" not in have:  # a file whose migration records were rewound replays this
        db.execute("ALTER TABLE engram_memories ADD COLUMN imp_source INTEGER NOT NULL DEFAULT 1")
        db.execute("UPDATE engram_memories SET imp_source = 0 WHERE importance = 5.0")


def _m0015_sessions_metadata(db: sqlite3.Connection) -> None:
    # The conversation a memory came from and the caller's JSON object, both filterable inside the
    # store's queries (engramdb.memories.filters). The session index serves "everything of this
    # session" (listing, bulk forget); rows without a session are not in it.
    have = {r[1] for r in db.execute("PRAGMA table_info(engram_memories)")}
    if "session" not in have:
        db.execute("ALTER TABLE engram_memories ADD COLUMN session TEXT")
    if "metadata" not in have:
        db.execute("ALTER TABLE engram_memories ADD COLUMN metadata TEXT NOT NULL DEFAULT '{}'")
    db.execute(
        "CREATE INDEX IF NOT EXISTS engram_memories_session ON engram_memories (tenant, session) "
        "WHERE session IS NOT NULL"
    )


def _m0016_extraction_jobs(db: sqlite3.Connection) -> None:
    # The durable queue of LLM extraction (engramdb.llm.worker): ids of turns only, never their
    # text. Workers look for due pending jobs; done and failed ones are listed by tenant.
    db.execute(
        """CREATE TABLE IF NOT EXISTS engram_jobs (
            tenant TEXT NOT NULL, job_id TEXT NOT NULL, agent TEXT NOT NULL, memory_ids TEXT NOT NULL,
            created_at REAL NOT NULL, status TEXT NOT NULL DEFAULT 'pending', attempts INTEGER NOT NULL DEFAULT 0,
            not_before REAL NOT NULL DEFAULT 0, lease_until REAL, worker TEXT, last_error TEXT, done_at REAL,
            decisions TEXT NOT NULL DEFAULT '[]', PRIMARY KEY (tenant, job_id))"""
    )
    db.execute(
        "CREATE INDEX IF NOT EXISTS engram_jobs_due ON engram_jobs (not_before, created_at) WHERE status = 'pending'"
    )
    db.execute("CREATE INDEX IF NOT EXISTS engram_jobs_listing ON engram_jobs (tenant, status, created_at)")


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "meta", _m0001_meta),
    Migration(2, "row_vectors", _m0002_row_vectors),
    Migration(3, "sqlite_sequence", _m0003_sequence),
    Migration(4, "memories", _m0004_memories),
    Migration(5, "tombstones", _m0005_tombstones),
    Migration(6, "fts_per_tenant", _m0006_fts_per_tenant),
    Migration(7, "drop_fts", _m0007_drop_fts),
    Migration(8, "instance_id", _m0008_instance_id),
    Migration(9, "snowball_terms", _m0009_snowball_terms),
    Migration(10, "tombstone_levels", _m0010_tombstone_levels),
    Migration(11, "unused_access_indexes", _m0011_unused_access_indexes),
    Migration(12, "wipe_table", _m0012_wipe_table),
    Migration(13, "hash_index_on_demand", _m0013_hash_index_on_demand),
    Migration(14, "importance_source", _m0014_importance_source),
    Migration(15, "sessions_metadata", _m0015_sessions_metadata),
    Migration(16, "extraction_jobs", _m0016_extraction_jobs),
)


def code_version() -> int:
    return MIGRATIONS[-1].version


def migrate(db: sqlite3.Connection, now: Callable[[], float] = time.time) -> int:
    """Bring the file up to this code's schema version; return the version in force."""
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute(
            "CREATE TABLE IF NOT EXISTS engram_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
        )
        row = db.execute(
            "SELECT max(version), count(DISTINCT CASE WHEN version BETWEEN 1 AND ? THEN version END) "
            "FROM engram_migrations",
            (code_version(),),
        ).fetchone()
        current = row[0] or 0
        # This code's migrations are recorded 1, 2, … with no gap, up to the file's version: a text
        # version or a gap among them is a damaged page read back, not a newer file.
        if not isinstance(current, int) or current < 0 or row[1] != min(current, code_version()):
            raise BackendError(
                f"the database file is damaged: its migration records have a gap or a bad version "
                f"(highest {current!r}); restore it from a backup"
            )
        if current > code_version():
            raise SchemaVersionError(
                f"this database has schema version {current}, newer than this engramdb knows ({code_version()}); "
                "upgrade engramdb to open it"
            )
        for m in MIGRATIONS:
            if m.version > current:
                m.apply(db)
                db.execute("INSERT INTO engram_migrations VALUES (?, ?, ?)", (m.version, m.name, now()))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return code_version()
