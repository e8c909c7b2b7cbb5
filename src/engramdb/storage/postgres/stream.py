"""The access stream, recall log, tombstones, versions and change sequence on PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import psycopg

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
from engramdb.storage.postgres.connection import KEYS, PgStore, execute_rows
from engramdb.storage.postgres.visibility import predicate

_READS = "('recalled', 'searched', 'deref')"
#: the tenant of the memory with key %s (rows of key-only calls are found under their own tenant)
_TENANT_OF = "(SELECT t.tenant FROM engram.engram_memories t WHERE t.n = %s)"


class _Port:
    def __init__(self, store: PgStore) -> None:
        self._store = store

    def _fetch(self, tenant: str, query: str, params: Any = None) -> list[tuple[Any, ...]]:
        def go(db: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            return list(db.execute(query, params).fetchall())

        return self._store.run(tenant, go)

    def _exec(self, tenant: str, query: str, params: Any = None) -> None:
        def go(db: psycopg.Connection[Any]) -> None:
            db.execute(query, params)

        self._store.run(tenant, go)


class PgAccessStream(_Port):
    """`engramdb.storage.ports.AccessStream` over ``engram.engram_access``."""

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
        if not touches:
            return
        q = None if query is None else query[:200]
        rows = [
            (
                tenant, now, t.key, t.channel.value, reader, trace_ref, q, t.score, t.rank,
                *((t.components.rel, t.components.rec, t.components.imp, t.components.spread) if t.components else (None,) * 4),
                recall_id,
            )
            for t in touches
        ]  # fmt: skip

        def go(db: psycopg.Connection[Any]) -> None:
            with db.cursor() as cur:
                execute_rows(
                    cur,
                    "INSERT INTO engram.engram_access (tenant, ts, n, channel, reader, trace_ref, query, score, rank, "
                    "rel, rec, imp, spread, recall_id) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    rows,
                )

        self._store.run(tenant, go)

    def records(self, key: int) -> list[AccessRecord]:
        rows = self._fetch(
            KEYS,
            "SELECT a.ts, a.channel, a.reader, m.id, a.trace_ref, a.query, a.score, a.rank, a.rel, a.rec, a.imp, "  # noqa: S608 - engine table names and predicates, values bound
            "a.spread, a.recall_id FROM engram.engram_access a JOIN engram.engram_memories m "
            f"ON m.tenant = a.tenant AND m.n = a.n WHERE a.tenant = {_TENANT_OF} AND a.n = %s ORDER BY a.id",
            (key, key),
        )
        out = []
        for ts, ch, reader, mid, trace, query, score, rank, rel, rec, imp, spread, rid in rows:
            comps = None if rel is None else Components(rel=rel, rec=rec, imp=imp, spread=spread)
            out.append(AccessRecord(ts, Channel(ch), reader, mid, trace, query, score, rank, comps, rid))
        return out

    def usage(self, vis: Visibility) -> Usage:
        pred, params = predicate(vis)
        # One statement: the visible memories once (a CTE referenced several times is computed
        # once), every count over them; a forgotten memory's husk is not a memory any more.
        query = (
            "WITH v AS MATERIALIZED (SELECT m.tenant, m.n, m.type, m.archived, m.author FROM engram.engram_memories m "  # noqa: S608 - engine table names and predicates, values bound
            f"WHERE {pred} AND m.id NOT LIKE 'forgotten:%%'), "
            "a AS MATERIALIZED (SELECT a.n, a.ts, a.channel, a.reader, v.archived, v.type, v.author "
            "FROM engram.engram_access a JOIN v ON v.tenant = a.tenant AND v.n = a.n) "
            "SELECT (SELECT count(*) FROM v), (SELECT coalesce(sum(archived), 0) FROM v), "
            "(SELECT coalesce(json_agg(json_build_array(type, c) ORDER BY type), '[]') FROM "
            " (SELECT type, count(*) AS c FROM v WHERE archived = 0 GROUP BY type) t), "
            f"(SELECT coalesce(json_agg(c ORDER BY c DESC), '[]') FROM (SELECT count(*) AS c FROM a WHERE channel IN {_READS} GROUP BY n) r), "
            f"(SELECT count(DISTINCT n) FROM a WHERE archived = 0 AND channel IN {_READS}), "
            "(SELECT count(*) FROM a WHERE channel = 'injected'), "
            "(SELECT count(DISTINCT n) FROM a WHERE channel = 'injected'), "
            "(SELECT count(DISTINCT i.n) FROM a i WHERE i.channel = 'injected' AND EXISTS "
            f" (SELECT 1 FROM a b WHERE b.n = i.n AND b.channel IN {_READS} AND b.ts >= i.ts)), "
            f"(SELECT count(*) FROM a WHERE channel IN {_READS} AND reader <> author), "
            f"(SELECT count(*) FROM a WHERE channel IN {_READS} AND type = 'reflection'), "
            "(SELECT count(*) FROM engram.engram_recalls WHERE tenant = %(v_tenant)s AND reader = %(u_reader)s)"
        )
        row = self._fetch(vis.tenant, query, dict(params, u_reader=vis.reader))[0]
        total, archived, by_type, per_memory, read_live, injected, inj_mem, used, cross, refl, recalls = row
        return Usage(
            memories=int(total),
            archived=int(archived),
            by_type={str(t): int(c) for t, c in by_type},
            reads_per_memory=[int(c) for c in per_memory],
            read_live=int(read_live),
            injected=int(injected),
            injected_memories=int(inj_mem),
            injected_then_used=int(used),
            cross_owner_reads=int(cross),
            reflection_reads=int(refl),
            recalls=int(recalls),
        )


class PgRecallLog(_Port):
    """`engramdb.storage.ports.RecallLog` over ``engram.engram_recalls`` (params and near misses as JSON text)."""

    def add(self, record: RecallRecord) -> None:
        r = record
        self._exec(
            r.tenant,
            "INSERT INTO engram.engram_recalls (tenant, recall_id, ts, reader, query, params, near_misses) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (r.tenant, r.recall_id, r.ts, r.reader, r.query, json.dumps(r.params), json.dumps(r.near_misses)),
        )

    def get(self, tenant: str, reader: str, recall_id: str) -> RecallRecord | None:
        rows = self._fetch(
            tenant,
            "SELECT ts, query, params, near_misses FROM engram.engram_recalls "
            "WHERE tenant = %s AND recall_id = %s AND reader = %s",
            (tenant, recall_id, reader),
        )
        if not rows:
            return None
        ts, query, params, near = rows[0]
        return RecallRecord(recall_id, ts, tenant, reader, query, json.loads(params), json.loads(near))

    def mentioning(self, tenant: str, memory_id: str) -> list[RecallRecord]:
        # strpos, not LIKE: an id holds no wildcard, but nothing needs escaping this way either.
        needle = f'"{memory_id}"'
        rows = self._fetch(
            tenant,
            "SELECT recall_id, ts, reader, query, params, near_misses FROM engram.engram_recalls "
            "WHERE tenant = %s AND (strpos(params, %s) > 0 OR strpos(near_misses, %s) > 0) ORDER BY ts, recall_id",
            (tenant, needle, needle),
        )
        return [
            RecallRecord(rid, ts, tenant, reader, query, json.loads(params), json.loads(near))
            for rid, ts, reader, query, params, near in rows
        ]

    def rewrite(self, record: RecallRecord) -> None:
        self._exec(
            record.tenant,
            "UPDATE engram.engram_recalls SET params = %s, near_misses = %s WHERE tenant = %s AND recall_id = %s",
            (json.dumps(record.params), json.dumps(record.near_misses), record.tenant, record.recall_id),
        )


_STONE = "memory_id, tenant, owner, content_hash, forgotten_by, forgotten_at, reason, confidentiality"


def _stone(row: Sequence[Any]) -> Tombstone:
    memory_id, tenant, owner, content_hash, by, at, reason, level = row
    return Tombstone(memory_id, tenant, owner, content_hash, by, at, reason, Confidentiality(level))


class PgTombstones(_Port):
    """`engramdb.storage.ports.Tombstones` over ``engram.engram_tombstones``."""

    def add(self, stone: Tombstone) -> None:
        s = stone
        self._exec(
            s.tenant,
            "INSERT INTO engram.engram_tombstones (tenant, memory_id, owner, content_hash, forgotten_by, forgotten_at, "
            "reason, confidentiality) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            (
                s.tenant, s.memory_id, s.owner, s.content_hash, s.forgotten_by, s.forgotten_at, s.reason,
                int(s.confidentiality),
            ),
        )  # fmt: skip

    def listing(self, tenant: str, owners: Sequence[str]) -> list[Tombstone]:
        owners = sorted(set(owners))
        if not owners:
            return []
        rows = self._fetch(
            tenant,
            f"SELECT {_STONE} FROM engram.engram_tombstones WHERE tenant = %s AND owner = ANY(%s) ORDER BY id",  # noqa: S608 - constant column list
            (tenant, owners),
        )
        return [_stone(row) for row in rows]

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
        rows = self._fetch(
            tenant,
            f"SELECT {_STONE} FROM engram.engram_tombstones "  # noqa: S608 - constant column list
            "WHERE tenant = %s AND owner = ANY(%s) AND content_hash = ANY(%s) AND confidentiality <= %s ORDER BY id",
            (tenant, owners, hashes, int(max_level)),
        )
        for row in rows:
            stones[(row[2], row[3])] = _stone(row)  # the latest stone of each value wins
        return stones

    def find_at(
        self,
        tenant: str,
        owners: Sequence[str],
        hashes: Sequence[str],
        max_level: Confidentiality = Confidentiality.RESTRICTED,
    ) -> tuple[int, dict[tuple[str, str], Tombstone]]:
        owners, hashes = sorted(set(owners)), sorted(set(hashes))
        # The sequence beside the stones, in one statement: one snapshot, one round trip.
        rows = self._fetch(
            tenant,
            f"SELECT (SELECT value FROM engram.engram_changes WHERE tenant = %s), s.* FROM (SELECT 1) one "  # noqa: S608 - constant column list
            f"LEFT JOIN LATERAL (SELECT id, {_STONE} FROM engram.engram_tombstones WHERE tenant = %s "
            "AND owner = ANY(%s) AND content_hash = ANY(%s) AND confidentiality <= %s) s ON true ORDER BY s.id",
            (tenant, tenant, owners, hashes, int(max_level)),
        )
        latest = int(rows[0][0]) if rows and rows[0][0] is not None else 0
        stones: dict[tuple[str, str], Tombstone] = {}
        for row in rows:
            if row[1] is not None:
                stones[(row[4], row[5])] = _stone(row[2:])  # the latest stone of each value wins
        return latest, stones


class PgVersions(_Port):
    """`engramdb.storage.ports.Versions` over ``engram.engram_versions``."""

    def add(self, key: int, version: MemoryVersion) -> None:
        v = version
        self._exec(
            KEYS,
            "INSERT INTO engram.engram_versions (tenant, n, version, title, content, changed_at, changed_by) "
            "SELECT t.tenant, t.n, %s, %s, %s, %s, %s FROM engram.engram_memories t WHERE t.n = %s",
            (v.version, v.title, v.content, v.changed_at, v.changed_by, key),
        )

    def history(self, key: int) -> list[MemoryVersion]:
        rows = self._fetch(
            KEYS,
            "SELECT version, title, content, changed_at, changed_by FROM engram.engram_versions "  # noqa: S608 - engine table names and predicates, values bound
            f"WHERE tenant = {_TENANT_OF} AND n = %s ORDER BY version",
            (key, key),
        )
        return [MemoryVersion(*r) for r in rows]

    def delete(self, key: int) -> None:
        self._exec(
            KEYS,
            f"DELETE FROM engram.engram_versions WHERE tenant = {_TENANT_OF} AND n = %s",  # noqa: S608 - engine table names and predicates, values bound
            (key, key),
        )


class PgChangeSequence(_Port):
    """`engramdb.storage.ports.ChangeSequence` over ``engram.engram_changes``: one counter row per tenant.

    A counter row, not a SEQUENCE: taking a number locks the tenant's row until the write's
    transaction ends, so a tenant's numbers commit in order. With a sequence a reader could see
    number 6 committed while 5 is still open, move past 5, and never load that write. One row per
    tenant, not one for the store: writers of different tenants do not wait for each other, and
    a cache reads only the rows of the tenant it holds.
    """

    def next(self, tenant: str) -> int:
        rows = self._fetch(
            tenant,
            "INSERT INTO engram.engram_changes AS c (tenant, value) VALUES (%s, 1) "
            "ON CONFLICT (tenant) DO UPDATE SET value = c.value + 1 RETURNING c.value",
            (tenant,),
        )
        return int(rows[0][0])

    def current(self, tenant: str | None = None) -> int:
        if tenant is None:
            raise ValueError("PostgreSQL keeps one change sequence per tenant: name the tenant")
        rows = self._fetch(tenant, "SELECT value FROM engram.engram_changes WHERE tenant = %s", (tenant,))
        return int(rows[0][0]) if rows else 0
