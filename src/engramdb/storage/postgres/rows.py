"""`MemoryRows` on PostgreSQL: the ``engram.engram_memories`` table (see `migrations` for its columns).

Columns and their encodings match the SQLite adapter's (labels and refs as JSON text, the access
ring as bytes), so a row reads back into the same `Memory` (`row_to_memory` is shared).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import psycopg

from engramdb.memories.filters import context_of, metadata_json, read_metadata
from engramdb.memories.model import Confidentiality, Memory, MemoryRef, TodoStatus, Visibility
from engramdb.storage.memory_rows import (
    CALLER,
    MEMORY_COLUMNS,
    REFLECTION,
    SOURCE_CODES,
    TAGS_JSON,
    labels,
    listing_filter,
    row_to_memory,
)
from engramdb.storage.ports import (
    AccessState,
    AccessUpdate,
    ContentChange,
    ContentMatch,
    Fold,
    IndexRow,
    NewMemory,
    RescoreRow,
    Restored,
    Stored,
)
from engramdb.storage.postgres.connection import ALL_TENANTS, KEYS, PgStore, execute_rows
from engramdb.storage.postgres.vectors import _vec
from engramdb.storage.postgres.visibility import PLACEHOLDER, predicate

M = "engram.engram_memories"
_TAGS = TAGS_JSON.format(a="m")
_M_COLUMNS = ", ".join(f"m.{c.strip()}" for c in MEMORY_COLUMNS.split(","))
_TRIGGER = "trigger"  # the ref kind of intent triggers (engramdb.memories.prospective)
_INSERT = (
    f"INSERT INTO {M} (n, id, tenant, owner, author, type, title, content, tags, entities, n_chars, "  # noqa: S608 - engine table names and predicates, values bound
    "n_tokens, n_sentences, importance, salience, confidence, confidentiality, created_at, recorded_at, "
    "valid_from, valid_to, status, refs, content_hash, terms, ring, access_count, last_access, changed, imp_source, "
    "session, metadata) VALUES (" + ", ".join(["%s"] * 31) + ", %s::jsonb)"
)


def _row(n: int, item: NewMemory, change: int) -> tuple[Any, ...]:
    """`_INSERT`'s values for `item` at key `n`."""
    m = item.memory
    return (
        n, m.id, m.tenant, m.owner, m.author, m.type.value, m.title, m.content,
        json.dumps(list(m.tags)), json.dumps(list(m.entities)), m.n_chars, m.n_tokens,
        m.n_sentences, m.importance, m.salience, m.confidence, int(m.confidentiality),
        m.created_at, m.recorded_at, m.valid_from, m.valid_to,
        m.status.value if m.status else None, refs_json(m.refs), item.content_hash, item.terms,
        item.ring, m.access_count, m.last_access, change, SOURCE_CODES[m.importance_source],
        m.session, metadata_json(m.metadata),
    )  # fmt: skip


# One new memory: its key drawn in the same statement (one round trip fewer than `nextval` first).
_INSERT_ONE = _INSERT.replace("VALUES (%s, ", "VALUES (nextval('engram.engram_memory_keys'), ", 1) + " RETURNING n"
# One new memory outside any unit of work, in one statement (one round trip, its own commit):
# the tenant's change sequence moved from `latest` to the next value only if it still stands at
# `latest` (a writer that committed since makes the UPDATE match nothing, so nothing is written and
# the caller takes the general path), the row with that change, its vector and its creation access.
# Data-modifying CTEs run once and to completion whether or not the outer query reads them.
_COLUMNS = _INSERT[_INSERT.index("(") + 1 : _INSERT.index(")")]
_VALUES = ", ".join(["%s"] * 27)
# The guard of `insert_fresh` without a `latest`: the sequence as this statement's snapshot reads
# it, and no tombstone of the item's owner and hash at or below the writer's cap in that snapshot.
# Both are uncorrelated subqueries, computed once from the snapshot: a writer committing after it
# (a forget that left a tombstone moves the sequence too) makes the UPDATE, which re-reads the
# sequence row it waited for, find another value and write nothing.
_READ_GUARD = (
    "(SELECT value FROM engram.engram_changes WHERE tenant = %s) AND NOT EXISTS (SELECT 1 FROM "
    "engram.engram_tombstones WHERE tenant = %s AND owner = %s AND content_hash = %s AND confidentiality <= %s)"
)
_FRESH_TAIL = (
    f"m AS (INSERT INTO {M} ({_COLUMNS}) SELECT nextval('engram.engram_memory_keys'), {_VALUES}, c.value, %s, %s, %s::jsonb "  # noqa: S608 - engine table names, values bound
    "FROM c RETURNING n, tenant, changed), "
    "v AS (INSERT INTO engram.engram_vectors (tenant, n, model, vec) SELECT m.tenant, m.n, %s, %s FROM m "
    "WHERE %s::text IS NOT NULL), "
    "a AS (INSERT INTO engram.engram_access (tenant, ts, n, channel, reader) SELECT m.tenant, %s, m.n, %s, %s FROM m) "
    "SELECT n, changed FROM m"
)
_FRESH = (
    "WITH c AS (UPDATE engram.engram_changes SET value = value + 1 WHERE tenant = %s AND value = %s RETURNING value), "  # noqa: S608 - engine table names, values bound
    + _FRESH_TAIL
)
_FRESH_READ = (
    "WITH c AS (UPDATE engram.engram_changes SET value = value + 1 WHERE tenant = %s AND value = "  # noqa: S608 - engine table names, values bound
    f"{_READ_GUARD} RETURNING value), " + _FRESH_TAIL
)
# A time trigger's epoch: the number after 'time:' (a key that is not one never matches).
_EPOCH = r"substring({k} from 'time:([-+]?[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)$')"


def _by_keys(cols: str, pred: str) -> str:
    """SELECT `cols` of the memories among %(keys)s that `pred` admits, each looked up by its
    primary key: the lateral lookup (OFFSET 0 keeps it one) holds the plan whatever the
    statistics say (before they existed the planner scanned every visible row)."""
    return (
        f"SELECT {cols} FROM unnest(%(keys)s::bigint[]) AS k(n) CROSS JOIN LATERAL "  # noqa: S608 - engine table names and predicates, values bound
        f"(SELECT * FROM {M} m WHERE m.tenant = %(v_tenant)s AND m.n = k.n AND {pred} OFFSET 0) m"
    )


def refs_json(refs: Iterable[MemoryRef]) -> str:
    return json.dumps([r.to_json() for r in refs])


def _stored(row: Sequence[Any] | None) -> Stored | None:
    return None if row is None else Stored(int(row[0]), row_to_memory(row))


def _rows(cur: psycopg.Cursor[Any]) -> list[tuple[Any, ...]]:
    return list(cur.fetchall())


class PgMemoryRows:
    """`engramdb.storage.ports.MemoryRows` over ``engram.engram_memories``."""

    def __init__(self, store: PgStore) -> None:
        self._store = store

    # -- writing -------------------------------------------------------------------------------

    def insert(self, items: Sequence[NewMemory], change: int) -> list[int]:
        if not items:
            return []
        tenants = {item.memory.tenant for item in items}
        tenant = next(iter(tenants)) if len(tenants) == 1 else ALL_TENANTS

        def go(db: psycopg.Connection[Any]) -> list[int]:
            if len(items) == 1:
                row = _row(0, items[0], change)[1:]
                return [int(db.execute(_INSERT_ONE, row).fetchone()[0])]  # type: ignore[index]
            # Keys from the store-wide sequence: unique across processes, never reused.
            got = db.execute(f"SELECT nextval('engram.engram_memory_keys') FROM generate_series(1, {len(items)})")  # noqa: S608 - engine table names and predicates, values bound
            keys = sorted(int(r[0]) for r in got.fetchall())
            rows = [_row(n, item, change) for n, item in zip(keys, items, strict=True)]
            with db.cursor() as cur:
                cur.executemany(_INSERT, rows)
            return keys

        return self._store.run(tenant, go)

    @property
    def has_fresh_step(self) -> bool:
        # (a multi-table modifying statement is not what Citus routes: the general path)
        return not self._store.citus

    def insert_fresh(
        self,
        item: NewMemory,
        latest: int | None,
        vector: tuple[str, bytes] | None,
        now: float,
        reader: str,
        channel: str,
        *,
        unless_forgotten: Confidentiality | None = None,
    ) -> tuple[int, int] | None:
        m = item.memory
        if not self.has_fresh_step:
            return None
        model, vec = (vector[0], _vec(vector[1])) if vector is not None else (None, None)
        row = _row(0, item, 0)
        tail = (*row[1:28], *row[29:], model, vec, model, now, channel, reader)
        if latest is not None:
            query, params = _FRESH, (m.tenant, latest, *tail)
        else:
            # no tombstone check asked: a level below every stone's, so none matches
            cap = -1 if unless_forgotten is None else int(unless_forgotten)
            query = _FRESH_READ
            params = (m.tenant, m.tenant, m.tenant, m.owner, item.content_hash, cap, *tail)

        def go(db: psycopg.Connection[Any]) -> tuple[int, int] | None:
            row = db.execute(query, params).fetchone()
            return None if row is None else (int(row[0]), int(row[1]))

        return self._store.run(m.tenant, go)

    def _exec(self, tenant: str, query: str, params: Any = None) -> int:
        def go(db: psycopg.Connection[Any]) -> int:
            return db.execute(query, params).rowcount

        return self._store.run(tenant, go)

    def _many(self, tenant: str, query: str, rows: Sequence[Sequence[Any]]) -> int:
        def go(db: psycopg.Connection[Any]) -> int:
            with db.cursor() as cur:
                return execute_rows(cur, query, rows)

        return self._store.run(tenant, go) if rows else 0

    def _fetch(self, tenant: str, query: str, params: Any = None) -> list[tuple[Any, ...]]:
        def go(db: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            return _rows(db.execute(query, params))

        return self._store.run(tenant, go)

    def update(self, key: int, change: ContentChange, stamp: int) -> None:
        c = change
        self._exec(
            KEYS,
            f"UPDATE {M} SET content = %s, title = %s, tags = %s, importance = %s, salience = %s, confidence = %s, "  # noqa: S608 - engine table names and predicates, values bound
            "imp_source = %s, status = %s, version = %s, n_chars = %s, n_tokens = %s, n_sentences = %s, "
            "content_hash = %s, terms = %s, metadata = %s::jsonb, changed = %s, "
            "confidentiality = GREATEST(confidentiality, %s) WHERE n = %s",
            (
                c.content, c.title, json.dumps(list(c.tags)), c.importance, c.salience, c.confidence,
                SOURCE_CODES[c.importance_source],
                c.status.value if c.status else None, c.version, c.n_chars, c.n_tokens, c.n_sentences,
                c.content_hash, c.terms, metadata_json(c.metadata), stamp, int(c.confidentiality), key,
            ),
        )  # fmt: skip

    def archive(self, tenant: str, ids: Sequence[str], stamp: int) -> int:
        if not ids:
            return 0
        return self._exec(
            tenant,
            f"UPDATE {M} SET archived = 1, changed = %s WHERE tenant = %s AND id = ANY(%s) AND archived = 0",  # noqa: S608 - engine table names and predicates, values bound
            (stamp, tenant, list(ids)),
        )

    def unarchive(self, tenant: str, ids: Sequence[str], stamp: int) -> int:
        if not ids:
            return 0
        return self._exec(
            tenant,
            f"UPDATE {M} SET archived = 0, changed = %s WHERE tenant = %s AND id = ANY(%s) AND archived = 1 "  # noqa: S608 - engine table names and predicates, values bound
            "AND id NOT LIKE 'forgotten:%%'",
            (stamp, tenant, list(ids)),
        )

    def restore(self, key: int, state: Restored, stamp: int) -> None:
        r = state
        self._exec(
            KEYS,
            f"UPDATE {M} SET strength = %s, version = %s, archived = %s, old_count = %s, old_newest = %s, "  # noqa: S608 - engine table names and predicates, values bound
            "old_oldest = %s, changed = %s WHERE n = %s",
            (r.strength, r.version, int(r.archived), r.old_count, r.old_newest, r.old_oldest, stamp, key),
        )

    def archive_keys(self, keys: Sequence[int], stamp: int) -> int:
        if not keys:
            return 0
        return self._exec(
            KEYS,
            f"UPDATE {M} SET archived = 1, changed = %s WHERE n = ANY(%s)",  # noqa: S608 - engine table names and predicates, values bound
            (stamp, list(keys)),
        )

    def close_validity(self, tenant: str, memory_id: str, until: float | None, stamp: int) -> None:
        self._exec(
            tenant,
            f"UPDATE {M} SET valid_to = %s, changed = %s WHERE tenant = %s AND id = %s",  # noqa: S608 - engine table names and predicates, values bound
            (until, stamp, tenant, memory_id),
        )

    def raise_level(self, keys: Sequence[int], level: Confidentiality, stamp: int) -> None:
        if keys:
            self._exec(
                KEYS,
                f"UPDATE {M} SET confidentiality = %s, changed = %s WHERE n = ANY(%s) AND confidentiality < %s",  # noqa: S608 - engine table names and predicates, values bound
                (int(level), stamp, list(keys), int(level)),
            )

    def retire(self, key: int, retired_id: str, stamp: int) -> None:
        self._exec(
            KEYS,
            f"UPDATE {M} SET archived = 1, id = %s, content = '', title = '', tags = '[]', entities = '[]', "  # noqa: S608 - engine table names and predicates, values bound
            "refs = '[]', terms = '', content_hash = '', session = NULL, metadata = '{}', changed = %s WHERE n = %s",
            (retired_id, stamp, key),
        )

    def fold(self, keep: int, fold: Fold, dup: int, stamp: int) -> None:
        f = fold

        def go(db: psycopg.Connection[Any]) -> None:
            db.execute(
                f"UPDATE {M} SET importance = %s, imp_source = %s, salience = %s, confidence = %s, strength = %s, "  # noqa: S608 - engine table names and predicates, values bound
                "access_count = %s, ring = %s, old_count = %s, old_newest = %s, old_oldest = %s, last_access = %s, "
                "confidentiality = %s, tags = %s, entities = %s, refs = %s, terms = %s, changed = %s WHERE n = %s",
                (
                    f.importance, SOURCE_CODES[f.importance_source], f.salience, f.confidence, f.strength, f.access_count, f.ring, f.old_count,
                    f.old_newest, f.old_oldest, f.last_access, int(f.confidentiality), json.dumps(list(f.tags)),
                    json.dumps(list(f.entities)), refs_json(f.refs), f.terms, stamp, keep,
                ),
            )  # fmt: skip
            db.execute(f"UPDATE {M} SET archived = 1, changed = %s WHERE n = %s", (stamp, dup))  # noqa: S608 - engine table names and predicates, values bound

        self._store.run(KEYS, go)

    def set_importance(self, updates: Sequence[tuple[float, int]], stamp: int) -> None:
        self._many(
            KEYS,
            # never a caller's, whatever raced: reflection rescores only what no caller scored
            f"UPDATE {M} SET importance = %s, imp_source = {REFLECTION}, changed = %s "  # noqa: S608 - engine table names and predicates, values bound
            f"WHERE n = %s AND imp_source <> {CALLER}",
            [(imp, stamp, n) for imp, n in updates],
        )

    def access_state(self, keys: Sequence[int]) -> list[AccessState]:
        if not keys:
            return []
        rows = self._fetch(
            KEYS,
            f"SELECT n, ring, old_count, old_newest, old_oldest FROM {M} WHERE n = ANY(%s)",  # noqa: S608 - engine table names and predicates, values bound
            (list(keys),),
        )
        return [(int(n), bytes(ring), oc, on, oo) for n, ring, oc, on, oo in rows]

    def set_access_state(self, updates: Sequence[AccessUpdate], stamp: int) -> None:
        self._many(
            KEYS,
            f"UPDATE {M} SET ring = %s, old_count = %s, old_newest = %s, old_oldest = %s, last_access = %s, "  # noqa: S608 - engine table names and predicates, values bound
            "access_count = access_count + 1, strength = strength + %s, changed = %s WHERE n = %s",
            [(*u[:6], stamp, u[6]) for u in updates],
        )

    def set_refs(
        self, key: int, expected: tuple[MemoryRef, ...], refs: tuple[MemoryRef, ...], stamp: int, *, archive: bool
    ) -> bool:
        query = (
            f"UPDATE {M} SET archived = 1, refs = %s, changed = %s WHERE n = %s AND refs = %s AND archived = 0"  # noqa: S608 - engine table names and predicates, values bound
            if archive
            else f"UPDATE {M} SET refs = %s, changed = %s WHERE n = %s AND refs = %s AND archived = 0"  # noqa: S608 - engine table names and predicates, values bound
        )
        return self._exec(KEYS, query, (refs_json(refs), stamp, key, refs_json(expected))) == 1

    # -- reading -------------------------------------------------------------------------------

    def get(self, vis: Visibility, memory_id: str) -> Stored | None:
        pred, params = predicate(vis)
        rows = self._fetch(
            vis.tenant,
            f"SELECT {_M_COLUMNS} FROM {M} m WHERE m.id = %(id)s AND {pred}",  # noqa: S608 - engine table names and predicates, values bound
            dict(params, id=memory_id),
        )
        return _stored(rows[0] if rows else None)

    def get_key(self, key: int) -> Stored | None:
        rows = self._fetch(KEYS, f"SELECT {MEMORY_COLUMNS} FROM {M} WHERE n = %s", (key,))  # noqa: S608 - engine table names and predicates, values bound
        return _stored(rows[0] if rows else None)

    def many(self, vis: Visibility, keys: Sequence[int]) -> dict[int, Memory]:
        if not keys:
            return {}
        pred, params = predicate(vis)
        rows = self._fetch(vis.tenant, _by_keys(_M_COLUMNS, pred), dict(params, keys=list(keys)))
        return {int(r[0]): row_to_memory(r) for r in rows}

    def names(self, keys: Sequence[int]) -> dict[int, tuple[str, str]]:
        if not keys:
            return {}
        rows = self._fetch(KEYS, f"SELECT n, id, title FROM {M} WHERE n = ANY(%s)", (list(keys),))  # noqa: S608 - engine table names and predicates, values bound
        return {int(n): (str(mid), str(title)) for n, mid, title in rows}

    def contents(self, keys: Sequence[int]) -> dict[int, tuple[str, tuple[str, ...], str]]:
        if not keys:
            return {}
        rows = self._fetch(
            KEYS,
            f"SELECT n, content, entities, session, metadata FROM {M} WHERE n = ANY(%s)",  # noqa: S608 - engine table name, values bound
            (list(keys),),
        )
        return {int(n): (str(c), labels(e), context_of(s, read_metadata(md))) for n, c, e, s, md in rows}

    def retired_since(self, change: int) -> bool:
        sql = f"SELECT 1 FROM {M} WHERE changed > %s AND id LIKE 'forgotten:%%' LIMIT 1"  # noqa: S608 - engine table name, values bound
        return bool(self._fetch(KEYS, sql, (change,)))

    def same_content(self, vis: Visibility, hashes: Sequence[str]) -> list[ContentMatch]:
        if not hashes:
            return []
        pred, params = predicate(vis)
        rows = self._fetch(
            vis.tenant,
            f"SELECT m.n, m.content_hash, m.type, m.owner, m.confidentiality, m.content, m.entities, m.session, "  # noqa: S608 - engine table names and predicates, values bound
            f"m.metadata FROM {M} m WHERE m.content_hash = ANY(%(hashes)s) AND {pred} ORDER BY m.n",
            dict(params, hashes=sorted(set(hashes))),
        )
        return [
            (int(n), str(h), str(t), str(o), int(c), str(text), labels(e), context_of(s, read_metadata(md)))
            for n, h, t, o, c, text, e, s, md in rows
        ]

    def repeated_content(self, vis: Visibility) -> list[tuple[int, str, str, str]]:
        pred, params = predicate(vis)
        rows = self._fetch(
            vis.tenant,
            f"SELECT m.n, m.content_hash, m.owner, m.type FROM {M} m WHERE {pred} AND m.content_hash IN "  # noqa: S608 - engine table names and predicates, values bound
            f"(SELECT m.content_hash FROM {M} m WHERE {pred} GROUP BY m.content_hash HAVING count(*) > 1) ORDER BY m.n",
            params,
        )
        return [(int(n), str(h), str(o), str(t)) for n, h, o, t in rows]

    def listing(self, vis: Visibility) -> list[Memory]:
        pred, params = predicate(vis)
        rows = self._fetch(
            vis.tenant,
            f"SELECT {_M_COLUMNS} FROM {M} m WHERE {pred} AND m.id NOT LIKE 'forgotten:%%' ORDER BY m.n",  # noqa: S608 - engine table names and predicates, values bound
            params,
        )
        return [row_to_memory(r) for r in rows]

    def page(
        self,
        vis: Visibility,
        *,
        types: Sequence[str] | None = None,
        tag: str | None = None,
        contains: str | None = None,
        archived_only: bool = False,
        offset: int = 0,
        limit: int = 50,
    ) -> tuple[list[Memory], int]:
        found, args = listing_filter(
            vis,
            types=types,
            tag=tag,
            contains=contains,
            archived_only=archived_only,
            placeholder=PLACEHOLDER,
            position="strpos",
            tag_test="({tags})::jsonb ? {tag}",
        )
        cond = f"{found} AND m.id NOT LIKE 'forgotten:%%'"

        def go(db: psycopg.Connection[Any]) -> tuple[list[Memory], int]:
            # one statement: the count and the page from one snapshot
            rows = _rows(
                db.execute(
                    f"SELECT {_M_COLUMNS}, count(*) OVER () FROM {M} m WHERE {cond} "  # noqa: S608 - engine table names and predicates, values bound
                    "ORDER BY m.n DESC LIMIT %(l_limit)s OFFSET %(l_offset)s",
                    dict(args, l_limit=limit, l_offset=offset),
                )
            )
            if rows:
                return [row_to_memory(r[:-1]) for r in rows], int(rows[0][-1])
            total = db.execute(f"SELECT count(*) FROM {M} m WHERE {cond}", args).fetchone()  # noqa: S608 - engine table names and predicates, values bound
            return [], int(total[0]) if total else 0

        return self._store.run(vis.tenant, go)

    def tag_counts(self, vis: Visibility) -> dict[str, int]:
        pred, params = predicate(vis)
        rows = self._fetch(
            vis.tenant,
            f"SELECT t, count(*) FROM {M} m CROSS JOIN LATERAL jsonb_array_elements_text(({_TAGS})::jsonb) t "  # noqa: S608 - engine table names and predicates, values bound
            f"WHERE {pred} AND m.id NOT LIKE 'forgotten:%%' GROUP BY t ORDER BY t",
            params,
        )
        return {str(t): int(c) for t, c in rows}

    def visible_ids(self, vis: Visibility, ids: Sequence[str]) -> dict[str, int]:
        if not ids:
            return {}
        pred, params = predicate(vis)
        rows = self._fetch(
            vis.tenant,
            f"SELECT m.id, m.n FROM {M} m WHERE m.id = ANY(%(ids)s) AND {pred}",  # noqa: S608 - engine table names and predicates, values bound
            dict(params, ids=list(ids)),
        )
        return {str(mid): int(n) for mid, n in rows}

    def visible_keys(
        self, vis: Visibility, types: Iterable[str] | None = None, keys: Sequence[int] | None = None
    ) -> list[int]:
        pred, params = predicate(vis)
        if types is not None:
            pred += " AND m.type = ANY(%(types)s)"
            params["types"] = sorted(set(types))
        if keys is not None:
            params["keys"] = list(keys)
            return [int(r[0]) for r in self._fetch(vis.tenant, _by_keys("m.n", pred) + " ORDER BY m.n", params)]
        rows = self._fetch(vis.tenant, f"SELECT m.n FROM {M} m WHERE {pred} ORDER BY m.n", params)  # noqa: S608 - engine table names and predicates, values bound
        return [int(r[0]) for r in rows]

    def admitted(self, vis: Visibility, since: int) -> list[tuple[int, bool]]:
        pred, params = predicate(vis)
        rows = self._fetch(
            vis.tenant,
            f"SELECT m.n, coalesce({pred}, false) FROM {M} m WHERE m.tenant = %(a_tenant)s AND m.changed > %(a_since)s",  # noqa: S608 - engine table names and predicates, values bound
            dict(params, a_since=since, a_tenant=vis.tenant),
        )
        return [(int(n), bool(ok)) for n, ok in rows]

    def key_of(self, tenant: str, memory_id: str) -> int | None:
        rows = self._fetch(tenant, f"SELECT n FROM {M} WHERE tenant = %s AND id = %s", (tenant, memory_id))  # noqa: S608 - engine table names and predicates, values bound
        return int(rows[0][0]) if rows else None

    def taken_ids(self, tenant: str, ids: Sequence[str]) -> set[str]:
        # Ids are unique per tenant here (UNIQUE (tenant, id)): another tenant's are no obstacle,
        # and row-level security keeps them out of reach anyway.
        if not ids:
            return set()
        rows = self._fetch(tenant, f"SELECT id FROM {M} WHERE tenant = %s AND id = ANY(%s)", (tenant, list(ids)))  # noqa: S608 - engine table names and predicates, values bound
        return {str(r[0]) for r in rows}

    def scan(self, vis: Visibility, after: int, limit: int) -> list[RescoreRow]:
        pred, params = predicate(vis)
        rows = self._fetch(
            vis.tenant,
            "SELECT m.n, m.importance, m.salience, m.ring, m.old_count, m.old_newest, m.old_oldest "  # noqa: S608 - engine table names and predicates, values bound
            f"FROM {M} m WHERE m.n > %(r_after)s AND {pred} AND m.imp_source <> {CALLER} ORDER BY m.n LIMIT %(r_limit)s",
            dict(params, r_after=after, r_limit=limit),
        )
        return [
            (int(n), imp, sal, None if ring is None else bytes(ring), oc, on, oo)
            for n, imp, sal, ring, oc, on, oo in rows
        ]

    def todo_ids(self, vis: Visibility, status: TodoStatus | None, *, by_importance: bool) -> list[str]:
        pred, params = predicate(vis)
        where = f"m.type = 'todo' AND {pred}" + (" AND m.status = %(t_status)s" if status is not None else "")
        order = "m.importance DESC, m.created_at, m.n" if by_importance else "m.created_at, m.n"
        rows = self._fetch(
            vis.tenant,
            f"SELECT m.id FROM {M} m WHERE {where} ORDER BY {order}",  # noqa: S608 - engine table names and predicates, values bound
            dict(params, t_status=None if status is None else status.value),
        )
        return [str(r[0]) for r in rows]

    def intents(
        self, vis: Visibility, owner: str, *, now: float, event: str | None, cues: bool
    ) -> list[tuple[int, str, tuple[MemoryRef, ...]]]:
        pred, params = predicate(vis)
        k = "(j.value ->> 'key')"
        epoch = _EPOCH.format(k=k)
        kinds = [f"(({k} LIKE 'time:%%' OR {k} LIKE 'every %% time:%%') AND ({epoch})::double precision <= %(f_now)s)"]
        params = dict(params, f_now=now, f_me=owner)
        if event is not None:
            kinds.append(f"{k} IN (%(f_ev1)s, %(f_ev2)s)")
            params.update(f_ev1=f"event:{event}", f_ev2=f"repeat event:{event}")
        if cues:
            kinds.append(f"({k} LIKE 'cue:%%' OR {k} LIKE 'repeat cue:%%')")
        rows = self._fetch(
            vis.tenant,
            f"SELECT m.n, m.id, m.refs FROM {M} m WHERE m.type = 'intent' AND m.owner = %(f_me)s AND {pred} "  # noqa: S608 - engine table names and predicates, values bound
            f"AND EXISTS (SELECT 1 FROM jsonb_array_elements(m.refs::jsonb) j WHERE (j.value ->> 'kind') = '{_TRIGGER}' "
            f"AND ({' OR '.join(kinds)})) ORDER BY m.n",
            params,
        )
        return [(int(n), str(mid), tuple(MemoryRef.from_json(r) for r in json.loads(refs))) for n, mid, refs in rows]

    def weak(self, vis: Visibility, owner: str, *, below_strength: float, now: float, min_age: float) -> list[int]:
        pred, params = predicate(vis)
        rows = self._fetch(
            vis.tenant,
            f"SELECT m.n FROM {M} m WHERE m.owner = %(w_me)s AND m.type <> 'skill' "  # noqa: S608 - engine table names and predicates, values bound
            f"AND m.strength < %(w_strength)s AND %(w_now)s - m.created_at > %(w_age)s AND {pred} ORDER BY m.n",
            dict(params, w_me=owner, w_strength=below_strength, w_now=now, w_age=min_age),
        )
        return [int(r[0]) for r in rows]

    def undistilled_episodes(self, vis: Visibility, max_level: Confidentiality) -> list[tuple[int, str]]:
        pred, params = predicate(vis)
        rows = self._fetch(
            vis.tenant,
            f"SELECT m.n, m.owner FROM {M} m "  # noqa: S608 - engine table names and predicates, values bound
            f"WHERE m.type = 'episode' AND m.confidentiality <= %(r_llm)s AND {pred} AND NOT EXISTS ("
            f"SELECT 1 FROM engram.engram_edges e JOIN {M} g ON g.tenant = e.tenant AND g.n = e.src "
            "WHERE e.tenant = m.tenant AND e.dst = m.n AND e.type = 'derived_from' AND g.type = 'reflection' "
            "AND g.owner = m.owner AND g.archived = 0) ORDER BY m.owner, m.created_at, m.n",
            dict(params, r_llm=int(max_level)),
        )
        return [(int(n), str(owner)) for n, owner in rows]

    def levels_by_age(self, vis: Visibility) -> list[tuple[int, int]]:
        pred, params = predicate(vis)
        rows = self._fetch(
            vis.tenant,
            f"SELECT m.n, m.confidentiality FROM {M} m WHERE {pred} ORDER BY m.created_at, m.n",  # noqa: S608 - engine table names and predicates, values bound
            params,
        )
        return [(int(n), int(c)) for n, c in rows]

    def index_rows(self, since: int, tenant: str | None = None) -> list[IndexRow]:
        if tenant is None:
            raise ValueError("PostgreSQL keeps one change sequence per tenant: name the tenant")
        rows = self._fetch(
            tenant,
            "SELECT n, tenant, owner, confidentiality, archived, valid_from, valid_to, type, terms, n_tokens, "  # noqa: S608 - engine table names and predicates, values bound
            f"importance, ring, old_count, old_newest, old_oldest, created_at, entities FROM {M} "
            "WHERE tenant = %s AND changed > %s",
            (tenant, since),
        )
        return [(*r[:11], None if r[11] is None else bytes(r[11]), *r[12:]) for r in rows]

    def index_row_batches(self, since: int, size: int, tenant: str | None = None) -> Iterator[list[IndexRow]]:
        # PostgreSQL keeps no side files, and its caches hold one tenant each: one batch.
        rows = self.index_rows(since, tenant)
        if rows:
            yield rows

    def term_tip(self, upto: int, limit: int) -> list[tuple[int, int, str, str]]:
        rows = self._fetch(
            ALL_TENANTS,
            f"SELECT n, changed, terms, entities FROM {M} WHERE changed <= %s "  # noqa: S608 - engine table names, values bound
            "ORDER BY changed DESC, n DESC LIMIT %s",
            (upto, limit),
        )
        return [(int(n), int(c), str(t), str(e)) for n, c, t, e in rows]

    def visibility_rows(self) -> list[tuple[int, str, str, int, int, float | None, float | None, str]]:
        return self._fetch(
            ALL_TENANTS,
            f"SELECT n, tenant, owner, confidentiality, archived, valid_from, valid_to, type FROM {M} ORDER BY n",  # noqa: S608 - engine table names and predicates, values bound
        )

    def changed_upto(self, stamp: int) -> list[tuple[int, int]]:
        return self._fetch(ALL_TENANTS, f"SELECT n, changed FROM {M} WHERE changed <= %s", (stamp,))  # noqa: S608 - engine table names and predicates, values bound
