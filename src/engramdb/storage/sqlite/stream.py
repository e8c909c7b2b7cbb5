"""The access stream, recall log, tombstones, versions and change sequence on SQLite."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from engramdb.memories.model import (
    AccessRecord,
    Channel,
    Components,
    Confidentiality,
    MemoryVersion,
    Tombstone,
    Visibility,
)
from engramdb.storage.ports import RecallRecord, Touch, Usage
from engramdb.storage.sqlite.connection import SqliteStore, translated
from engramdb.storage.sqlite.visibility import predicate

_READS = "('recalled', 'searched', 'deref')"


class _Engine:
    def __init__(self, store: SqliteStore) -> None:
        self._store = store

    def _db(self) -> sqlite3.Connection:
        return self._store.connection("engine").raw


class SqliteAccessStream(_Engine):
    """`engramdb.storage.ports.AccessStream` over ``engram_access``."""

    @translated
    def append(
        self,
        touches: Sequence[Touch],
        *,
        now: float,
        tenant: str,
        reader: str,
        query: str | None = None,
        trace_ref: str | None = None,
        recall_id: str | None = None,
    ) -> None:
        q = None if query is None else query[:200]
        self._db().executemany(
            "INSERT INTO engram_access (ts, n, tenant, channel, reader, trace_ref, query, score, rank, rel, rec, imp, spread, recall_id) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    now, t.key, tenant, t.channel.value, reader, trace_ref, q, t.score, t.rank,
                    *((t.components.rel, t.components.rec, t.components.imp, t.components.spread) if t.components else (None,) * 4),
                    recall_id,
                )
                for t in touches
            ],
        )  # fmt: skip

    @translated
    def records(self, key: int) -> list[AccessRecord]:
        rows = (
            self._db()
            .execute(
                "SELECT a.ts, a.channel, a.reader, m.id, a.trace_ref, a.query, a.score, a.rank, a.rel, a.rec, a.imp, "
                "a.spread, a.recall_id FROM engram_access a JOIN engram_memories m ON m.n = a.n WHERE a.n = ? ORDER BY a.id",
                (key,),
            )
            .fetchall()
        )
        out = []
        for ts, ch, reader, mid, trace, query, score, rank, rel, rec, imp, spread, rid in rows:
            comps = None if rel is None else Components(rel=rel, rec=rec, imp=imp, spread=spread)
            out.append(AccessRecord(ts, Channel(ch), reader, mid, trace, query, score, rank, comps, rid))
        return out

    @translated
    def usage(self, vis: Visibility) -> Usage:
        db = self._db()
        pred, params = predicate(vis)
        db.execute("DROP TABLE IF EXISTS temp.engram_visible")
        db.execute(
            # A forgotten memory's husk (kept for the access stream's keys) is not a memory any more.
            "CREATE TEMP TABLE engram_visible AS SELECT m.n, m.type, m.archived, m.author FROM engram_memories m "  # noqa: S608
            f"WHERE {pred} AND m.id NOT LIKE 'forgotten:%'",
            params,
        )
        try:
            total, archived = db.execute(
                "SELECT count(*), coalesce(sum(archived), 0) FROM temp.engram_visible"
            ).fetchone()
            by_type = {
                str(t): int(c)
                for t, c in db.execute(
                    "SELECT type, count(*) FROM temp.engram_visible WHERE archived = 0 GROUP BY type ORDER BY type"
                )
            }
            per_memory = [
                int(r[0])
                for r in db.execute(
                    f"SELECT count(*) FROM engram_access a JOIN temp.engram_visible v ON v.n = a.n WHERE a.channel IN {_READS} GROUP BY a.n ORDER BY 1 DESC"  # noqa: S608
                )
            ]
            read_live = db.execute(
                f"SELECT count(DISTINCT a.n) FROM engram_access a JOIN temp.engram_visible v ON v.n = a.n WHERE v.archived = 0 AND a.channel IN {_READS}"  # noqa: S608
            ).fetchone()[0]
            injected, injected_memories, used_after = db.execute(
                "SELECT count(*), count(DISTINCT a.n), count(DISTINCT CASE WHEN EXISTS (SELECT 1 FROM engram_access b WHERE b.n = a.n "  # noqa: S608 - engine-built fragments, values bound
                f"AND b.channel IN {_READS} AND b.ts >= a.ts) THEN a.n END) "
                "FROM engram_access a JOIN temp.engram_visible v ON v.n = a.n WHERE a.channel = 'injected'"
            ).fetchone()
            cross = db.execute(
                f"SELECT count(*) FROM engram_access a JOIN temp.engram_visible v ON v.n = a.n WHERE a.channel IN {_READS} AND a.reader <> v.author"  # noqa: S608
            ).fetchone()[0]
            refl_reads = db.execute(
                f"SELECT count(*) FROM engram_access a JOIN temp.engram_visible v ON v.n = a.n WHERE a.channel IN {_READS} AND v.type = 'reflection'"  # noqa: S608
            ).fetchone()[0]
            recalls = db.execute(
                "SELECT count(*) FROM engram_recalls WHERE tenant = ? AND reader = ?", (vis.tenant, vis.reader)
            ).fetchone()[0]
        finally:
            db.execute("DROP TABLE IF EXISTS temp.engram_visible")
        return Usage(
            memories=int(total),
            archived=int(archived),
            by_type=by_type,
            reads_per_memory=per_memory,
            read_live=int(read_live),
            injected=int(injected),
            injected_memories=int(injected_memories),
            injected_then_used=int(used_after),
            cross_owner_reads=int(cross),
            reflection_reads=int(refl_reads),
            recalls=int(recalls),
        )


class SqliteRecallLog(_Engine):
    """`engramdb.storage.ports.RecallLog` over ``engram_recalls`` (params and near misses as JSON text)."""

    @translated
    def add(self, record: RecallRecord) -> None:
        r = record
        self._db().execute(
            "INSERT INTO engram_recalls VALUES (?, ?, ?, ?, ?, ?, ?)",
            (r.recall_id, r.ts, r.tenant, r.reader, r.query, json.dumps(r.params), json.dumps(r.near_misses)),
        )

    @translated
    def get(self, tenant: str, reader: str, recall_id: str) -> RecallRecord | None:
        row = (
            self._db()
            .execute(
                "SELECT ts, query, params, near_misses FROM engram_recalls WHERE recall_id = ? AND tenant = ? AND reader = ?",
                (recall_id, tenant, reader),
            )
            .fetchone()
        )
        if row is None:
            return None
        ts, query, params, near = row
        return RecallRecord(recall_id, ts, tenant, reader, query, json.loads(params), json.loads(near))

    @translated
    def mentioning(self, tenant: str, memory_id: str) -> list[RecallRecord]:
        pattern = f'%"{memory_id}"%'
        rows = self._db().execute(
            "SELECT recall_id, ts, reader, query, params, near_misses FROM engram_recalls "
            "WHERE tenant = ? AND (params LIKE ? OR near_misses LIKE ?)",
            (tenant, pattern, pattern),
        )
        return [
            RecallRecord(rid, ts, tenant, reader, query, json.loads(params), json.loads(near))
            for rid, ts, reader, query, params, near in rows
        ]

    @translated
    def rewrite(self, record: RecallRecord) -> None:
        self._db().execute(
            "UPDATE engram_recalls SET params = ?, near_misses = ? WHERE recall_id = ?",
            (json.dumps(record.params), json.dumps(record.near_misses), record.recall_id),
        )


def _stone(row: Sequence[Any]) -> Tombstone:
    memory_id, tenant, owner, content_hash, by, at, reason, level = row
    return Tombstone(memory_id, tenant, owner, content_hash, by, at, reason, Confidentiality(level))


class SqliteTombstones(_Engine):
    """`engramdb.storage.ports.Tombstones` over ``engram_tombstones``."""

    @translated
    def add(self, stone: Tombstone) -> None:
        s = stone
        self._db().execute(
            "INSERT INTO engram_tombstones (memory_id, tenant, owner, content_hash, forgotten_by, forgotten_at, reason, "
            "confidentiality) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                s.memory_id,
                s.tenant,
                s.owner,
                s.content_hash,
                s.forgotten_by,
                s.forgotten_at,
                s.reason,
                int(s.confidentiality),
            ),
        )

    @translated
    def listing(self, tenant: str, owners: Sequence[str]) -> list[Tombstone]:
        owners = sorted(set(owners))
        if not owners:
            return []
        rows = self._db().execute(
            "SELECT memory_id, tenant, owner, content_hash, forgotten_by, forgotten_at, reason, confidentiality FROM engram_tombstones "  # noqa: S608 - placeholders only
            f"WHERE tenant = ? AND owner IN ({','.join('?' * len(owners))}) ORDER BY id",
            [tenant, *owners],
        )
        return [_stone(row) for row in rows]

    @translated
    def find(
        self,
        tenant: str,
        owners: Sequence[str],
        hashes: Sequence[str],
        max_level: Confidentiality = Confidentiality.RESTRICTED,
    ) -> dict[tuple[str, str], Tombstone]:
        owners, hashes = sorted(set(owners)), sorted(set(hashes))
        stones: dict[tuple[str, str], Tombstone] = {}
        if not owners or not hashes:
            return stones
        db = self._db()
        # owner IN (…) AND content_hash IN (…): index lookups on (tenant, owner, content_hash) for
        # every pair, one statement per 500 values; pairs that were not asked about are ignored.
        for start in range(0, len(hashes), 500):
            chunk = hashes[start : start + 500]
            for row in db.execute(
                "SELECT memory_id, tenant, owner, content_hash, forgotten_by, forgotten_at, reason, confidentiality FROM engram_tombstones "  # noqa: S608 - placeholders only
                f"WHERE tenant = ? AND owner IN ({','.join('?' * len(owners))}) "
                f"AND content_hash IN ({','.join('?' * len(chunk))}) AND confidentiality <= ? ORDER BY id",
                [tenant, *owners, *chunk, int(max_level)],
            ):
                stones[(row[2], row[3])] = _stone(row)  # the latest stone of each value wins
        return stones

    def find_at(
        self,
        tenant: str,
        owners: Sequence[str],
        hashes: Sequence[str],
        max_level: Confidentiality = Confidentiality.RESTRICTED,
    ) -> tuple[int, dict[tuple[str, str], Tombstone]]:
        latest = int(self._db().execute("SELECT value FROM engram_counters WHERE name = 'memories'").fetchone()[0])
        return latest, self.find(tenant, owners, hashes, max_level)


class SqliteVersions(_Engine):
    """`engramdb.storage.ports.Versions` over ``engram_versions``."""

    @translated
    def add(self, key: int, version: MemoryVersion) -> None:
        v = version
        self._db().execute(
            "INSERT INTO engram_versions VALUES (?, ?, ?, ?, ?, ?)",
            (key, v.version, v.title, v.content, v.changed_at, v.changed_by),
        )

    @translated
    def history(self, key: int) -> list[MemoryVersion]:
        rows = self._db().execute(
            "SELECT version, title, content, changed_at, changed_by FROM engram_versions WHERE n = ? ORDER BY version",
            (key,),
        )
        return [MemoryVersion(*r) for r in rows]

    @translated
    def delete(self, key: int) -> None:
        self._db().execute("DELETE FROM engram_versions WHERE n = ?", (key,))


class SqliteChangeSequence(_Engine):
    """`engramdb.storage.ports.ChangeSequence` over the ``memories`` row of ``engram_counters``."""

    @translated
    def next(self, tenant: str) -> int:  # one sequence per file: SQLite's write lock is the file's anyway
        row = (
            self._db()
            .execute("UPDATE engram_counters SET value = value + 1 WHERE name = 'memories' RETURNING value")
            .fetchone()
        )
        return int(row[0])

    @translated
    def current(self, tenant: str | None = None) -> int:
        return int(self._db().execute("SELECT value FROM engram_counters WHERE name = 'memories'").fetchone()[0])
