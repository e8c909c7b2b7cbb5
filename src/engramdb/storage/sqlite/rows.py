"""`MemoryRows` on SQLite: the ``engram_memories`` table (see `migrations` for its columns)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from engramdb.memories.filters import context_of, metadata_json, read_metadata
from engramdb.memories.model import (
    Confidentiality,
    Memory,
    MemoryRef,
    TodoStatus,
    Visibility,
)
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
from engramdb.storage.sqlite.connection import SqliteStore, translate, translated
from engramdb.storage.sqlite.visibility import PLACEHOLDER, predicate

_M_COLUMNS = ", ".join(f"m.{c.strip()}" for c in MEMORY_COLUMNS.split(","))
#: statements of at most this many bound values per IN (…) list
_CHUNK = 500
_TRIGGER = "trigger"  # the ref kind of intent triggers (engramdb.memories.prospective)


def _refs_json(refs: Iterable[MemoryRef]) -> str:
    return json.dumps([r.to_json() for r in refs])


def _stored(row: Sequence[Any] | None) -> Stored | None:
    return None if row is None else Stored(int(row[0]), row_to_memory(row))


def _named(prefix: str, values: Sequence[Any]) -> tuple[str, dict[str, Any]]:
    """``:p0, :p1, …`` placeholders and their values, for an IN (…) list beside named parameters."""
    return ",".join(f":{prefix}{i}" for i in range(len(values))), {f"{prefix}{i}": v for i, v in enumerate(values)}


_TAGS = TAGS_JSON.format(a="m")

_INDEX_ROWS = (
    "SELECT n, tenant, owner, confidentiality, archived, valid_from, valid_to, type, terms, n_tokens, "
    "importance, ring, old_count, old_newest, old_oldest, created_at, entities FROM engram_memories "
)


#: Only lookups by text read it (dedup and reflection without an embedder), so it is built the
#: first time one runs (`SqliteMemoryRows._hash_index`) and not kept up to date for nothing: its
#: keys are hashes, so each new memory lands on a random page of it (at 1M memories ~820 of the
#: ~2,200 pages a batch of 1,000 wrote).
_HASH_INDEX = "CREATE INDEX IF NOT EXISTS engram_memories_hash ON engram_memories (tenant, content_hash)"


class SqliteMemoryRows:
    """`engramdb.storage.ports.MemoryRows` over ``engram_memories``."""

    def __init__(self, store: SqliteStore) -> None:
        self._store = store
        self._hashed = False  # the (tenant, content_hash) index is known to exist, committed

    def _hash_index(self) -> None:
        """Build the ``(tenant, content_hash)`` index if the file has none yet (`_HASH_INDEX`):
        the first lookup by text on a file pays for it once (a pass over every row); from
        then on every writer keeps it. Inside a caller's transaction it is built in that
        transaction, and looked for again next time (a rollback takes it away)."""
        if self._hashed:
            return
        conn = self._store.connection("engine")
        raw = conn.raw
        found = raw.execute("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = 'engram_memories_hash'")
        if found.fetchone() is None:
            with self._store.atomic(conn):
                raw.execute(_HASH_INDEX)
        self._hashed = not raw.in_transaction

    def _db(self) -> sqlite3.Connection:
        return self._store.connection("engine").raw

    # -- writing -------------------------------------------------------------------------------

    @property
    def has_fresh_step(self) -> bool:
        return False

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
        """No one-step path here: the general one is a local transaction with no round trips."""
        return None

    @translated
    def insert(self, items: Sequence[NewMemory], change: int) -> list[int]:
        db = self._db()
        # Keys are assigned here, under the write lock the caller's transaction holds, so rows go in
        # with one executemany instead of one call per memory.
        base = int(db.execute("SELECT coalesce(max(n), 0) FROM engram_memories").fetchone()[0])
        keys = list(range(base + 1, base + 1 + len(items)))
        rows = []
        for n, item in zip(keys, items, strict=True):
            m = item.memory
            rows.append(
                (
                    n, m.id, m.tenant, m.owner, m.author, m.type.value, m.title, m.content, json.dumps(list(m.tags)),
                    json.dumps(list(m.entities)), m.n_chars, m.n_tokens, m.n_sentences, m.importance, m.salience,
                    m.confidence, int(m.confidentiality), m.created_at, m.recorded_at, m.valid_from, m.valid_to,
                    m.status.value if m.status else None, _refs_json(m.refs), item.content_hash, item.terms,
                    item.ring, m.access_count, m.last_access, change, SOURCE_CODES[m.importance_source],
                    m.session, metadata_json(m.metadata),
                )
            )  # fmt: skip
        db.executemany(
            "INSERT INTO engram_memories (n, id, tenant, owner, author, type, title, content, tags, entities, n_chars, "
            "n_tokens, n_sentences, importance, salience, confidence, confidentiality, created_at, recorded_at, "
            "valid_from, valid_to, status, refs, content_hash, terms, ring, access_count, last_access, changed, "
            "imp_source, session, metadata) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            rows,
        )
        return keys

    @translated
    def update(self, key: int, change: ContentChange, stamp: int) -> None:
        c = change
        self._db().execute(
            "UPDATE engram_memories SET content = ?, title = ?, tags = ?, importance = ?, salience = ?, confidence = ?, "
            "imp_source = ?, status = ?, version = ?, n_chars = ?, n_tokens = ?, n_sentences = ?, content_hash = ?, "
            "terms = ?, metadata = ?, changed = ?, confidentiality = max(confidentiality, ?) WHERE n = ?",  # never lowered, whatever raced
            (
                c.content, c.title, json.dumps(list(c.tags)), c.importance, c.salience, c.confidence,
                SOURCE_CODES[c.importance_source],
                c.status.value if c.status else None, c.version, c.n_chars, c.n_tokens, c.n_sentences,
                c.content_hash, c.terms, metadata_json(c.metadata), stamp, int(c.confidentiality), key,
            ),
        )  # fmt: skip

    @translated
    def archive(self, tenant: str, ids: Sequence[str], stamp: int) -> int:
        db = self._db()
        before = db.total_changes
        db.executemany(
            "UPDATE engram_memories SET archived = 1, changed = ? WHERE id = ? AND tenant = ? AND archived = 0",
            [(stamp, mid, tenant) for mid in ids],
        )
        return db.total_changes - before

    @translated
    def unarchive(self, tenant: str, ids: Sequence[str], stamp: int) -> int:
        db = self._db()
        before = db.total_changes
        db.executemany(
            "UPDATE engram_memories SET archived = 0, changed = ? WHERE id = ? AND tenant = ? AND archived = 1 "
            "AND id NOT LIKE 'forgotten:%'",
            [(stamp, mid, tenant) for mid in ids],
        )
        return db.total_changes - before

    @translated
    def archive_keys(self, keys: Sequence[int], stamp: int) -> int:
        db = self._db()
        before = db.total_changes
        db.executemany("UPDATE engram_memories SET archived = 1, changed = ? WHERE n = ?", [(stamp, n) for n in keys])
        return db.total_changes - before

    @translated
    def close_validity(self, tenant: str, memory_id: str, until: float | None, stamp: int) -> None:
        self._db().execute(
            "UPDATE engram_memories SET valid_to = ?, changed = ? WHERE id = ? AND tenant = ?",
            (until, stamp, memory_id, tenant),
        )

    @translated
    def raise_level(self, keys: Sequence[int], level: Confidentiality, stamp: int) -> None:
        marks = ",".join("?" * len(keys))
        self._db().execute(
            f"UPDATE engram_memories SET confidentiality = ?, changed = ? WHERE n IN ({marks}) AND confidentiality < ?",  # noqa: S608 - placeholders only
            (int(level), stamp, *keys, int(level)),
        )

    @translated
    def retire(self, key: int, retired_id: str, stamp: int) -> None:
        self._db().execute(
            "UPDATE engram_memories SET archived = 1, id = ?, content = '', title = '', tags = '[]', entities = '[]', "
            "refs = '[]', terms = '', content_hash = '', session = NULL, metadata = '{}', changed = ? WHERE n = ?",
            (retired_id, stamp, key),
        )

    @translated
    def restore(self, key: int, state: Restored, stamp: int) -> None:
        r = state
        self._db().execute(
            "UPDATE engram_memories SET strength = ?, version = ?, archived = ?, old_count = ?, old_newest = ?, "
            "old_oldest = ?, changed = ? WHERE n = ?",
            (r.strength, r.version, int(r.archived), r.old_count, r.old_newest, r.old_oldest, stamp, key),
        )

    @translated
    def fold(self, keep: int, fold: Fold, dup: int, stamp: int) -> None:
        f = fold
        db = self._db()
        db.execute(
            "UPDATE engram_memories SET importance = ?, imp_source = ?, salience = ?, confidence = ?, strength = ?, "
            "access_count = ?, ring = ?, old_count = ?, old_newest = ?, old_oldest = ?, last_access = ?, "
            "confidentiality = ?, tags = ?, entities = ?, refs = ?, terms = ?, changed = ? WHERE n = ?",
            (
                f.importance, SOURCE_CODES[f.importance_source], f.salience, f.confidence, f.strength, f.access_count, f.ring, f.old_count, f.old_newest,
                f.old_oldest, f.last_access, int(f.confidentiality), json.dumps(list(f.tags)),
                json.dumps(list(f.entities)), _refs_json(f.refs), f.terms, stamp, keep,
            ),
        )  # fmt: skip
        db.execute("UPDATE engram_memories SET archived = 1, changed = ? WHERE n = ?", (stamp, dup))

    @translated
    def set_importance(self, updates: Sequence[tuple[float, int]], stamp: int) -> None:
        self._db().executemany(
            # never a caller's, whatever raced: reflection rescores only what no caller scored
            f"UPDATE engram_memories SET importance = ?, imp_source = {REFLECTION}, changed = ? "  # noqa: S608 - constants
            f"WHERE n = ? AND imp_source <> {CALLER}",
            [(imp, stamp, n) for imp, n in updates],
        )

    @translated
    def access_state(self, keys: Sequence[int]) -> list[AccessState]:
        marks = ",".join("?" * len(keys))
        return (
            self._db()
            .execute(
                f"SELECT n, ring, old_count, old_newest, old_oldest FROM engram_memories WHERE n IN ({marks})",  # noqa: S608 - placeholders only
                tuple(keys),
            )
            .fetchall()
        )

    @translated
    def set_access_state(self, updates: Sequence[AccessUpdate], stamp: int) -> None:
        self._db().executemany(
            "UPDATE engram_memories SET ring = ?, old_count = ?, old_newest = ?, old_oldest = ?, last_access = ?, "
            "access_count = access_count + 1, strength = strength + ?, changed = ? WHERE n = ?",
            [(*u[:6], stamp, u[6]) for u in updates],
        )

    @translated
    def set_refs(
        self, key: int, expected: tuple[MemoryRef, ...], refs: tuple[MemoryRef, ...], stamp: int, *, archive: bool
    ) -> bool:
        sql = (
            "UPDATE engram_memories SET archived = 1, refs = ?, changed = ? WHERE n = ? AND refs = ? AND archived = 0"
            if archive
            else "UPDATE engram_memories SET refs = ?, changed = ? WHERE n = ? AND refs = ? AND archived = 0"
        )
        cur = self._db().execute(sql, (_refs_json(refs), stamp, key, _refs_json(expected)))
        return cur.rowcount == 1

    # -- reading -------------------------------------------------------------------------------

    @translated
    def get(self, vis: Visibility, memory_id: str) -> Stored | None:
        pred, params = predicate(vis)
        row = (
            self._db()
            .execute(
                f"SELECT {_M_COLUMNS} FROM engram_memories m WHERE m.id = :id AND {pred}",  # noqa: S608 - engine-built fragments, values bound
                dict(params, id=memory_id),
            )
            .fetchone()
        )
        return _stored(row)

    @translated
    def get_key(self, key: int) -> Stored | None:
        row = self._db().execute(f"SELECT {MEMORY_COLUMNS} FROM engram_memories WHERE n = ?", (key,)).fetchone()  # noqa: S608 - constant
        return _stored(row)

    @translated
    def many(self, vis: Visibility, keys: Sequence[int]) -> dict[int, Memory]:
        if not keys:
            return {}
        pred, params = predicate(vis)
        db = self._db()
        out: dict[int, Memory] = {}
        for start in range(0, len(keys), _CHUNK):
            marks, named = _named("n", list(keys[start : start + _CHUNK]))
            # NOT INDEXED: each key by rowid, the predicate on the row read anyway; the planner took the
            # covering index, two probes a key for the owner test's OR (slower, measured for ten keys).
            sql = f"SELECT {_M_COLUMNS} FROM engram_memories m NOT INDEXED WHERE m.n IN ({marks}) AND {pred}"  # noqa: S608
            for row in db.execute(sql, dict(params, **named)):
                out[int(row[0])] = row_to_memory(row)
        return out

    @translated
    def names(self, keys: Sequence[int]) -> dict[int, tuple[str, str]]:
        if not keys:
            return {}
        marks = ",".join("?" * len(keys))
        sql = f"SELECT n, id, title FROM engram_memories WHERE n IN ({marks})"  # noqa: S608 - placeholders only
        return {int(n): (str(mid), str(title)) for n, mid, title in self._db().execute(sql, tuple(keys))}

    @translated
    def contents(self, keys: Sequence[int]) -> dict[int, tuple[str, tuple[str, ...], str]]:
        if not keys:
            return {}
        marks = ",".join("?" * len(keys))
        sql = f"SELECT n, content, entities, session, metadata FROM engram_memories WHERE n IN ({marks})"  # noqa: S608 - placeholders only
        return {
            int(n): (str(c), labels(e), context_of(s, read_metadata(md)))
            for n, c, e, s, md in self._db().execute(sql, tuple(keys))
        }

    @translated
    def retired_since(self, change: int) -> bool:
        sql = "SELECT 1 FROM engram_memories WHERE changed > ? AND id LIKE 'forgotten:%' LIMIT 1"
        return self._db().execute(sql, (change,)).fetchone() is not None

    @translated
    def same_content(self, vis: Visibility, hashes: Sequence[str]) -> list[ContentMatch]:
        self._hash_index()
        pred, params = predicate(vis)
        db = self._db()
        out: list[ContentMatch] = []
        unique = sorted(set(hashes))
        for start in range(0, len(unique), _CHUNK):
            marks, named = _named("h", unique[start : start + _CHUNK])
            sql = (
                "SELECT m.n, m.content_hash, m.type, m.owner, m.confidentiality, m.content, m.entities, m.session, "  # noqa: S608 - engine-built fragments, values bound
                f"m.metadata FROM engram_memories m WHERE m.content_hash IN ({marks}) AND {pred}"
            )
            out.extend(
                (int(n), str(h), str(t), str(o), int(c), str(text), labels(e), context_of(s, read_metadata(md)))
                for n, h, t, o, c, text, e, s, md in db.execute(sql, dict(params, **named))
            )
        return sorted(out)

    @translated
    def repeated_content(self, vis: Visibility) -> list[tuple[int, str, str, str]]:
        self._hash_index()
        pred, params = predicate(vis)
        sql = (
            "SELECT m.n, m.content_hash, m.owner, m.type FROM engram_memories m "  # noqa: S608 - engine-built fragments, values bound
            f"WHERE {pred} AND m.content_hash IN (SELECT m.content_hash FROM engram_memories m WHERE {pred} "
            "GROUP BY m.content_hash HAVING count(*) > 1) ORDER BY m.n"
        )
        return [(int(n), str(h), str(o), str(t)) for n, h, o, t in self._db().execute(sql, params)]

    @translated
    def listing(self, vis: Visibility) -> list[Memory]:
        pred, params = predicate(vis)
        rows = (
            self._db()
            .execute(
                f"SELECT {_M_COLUMNS} FROM engram_memories m WHERE {pred} AND m.id NOT LIKE 'forgotten:%' ORDER BY m.n",  # noqa: S608 - engine-built fragments, values bound
                params,
            )
            .fetchall()
        )
        return [row_to_memory(r) for r in rows]

    @translated
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
            position="instr",
            tag_test="EXISTS (SELECT 1 FROM json_each({tags}) j WHERE j.value = {tag})",
        )
        cond = f"{found} AND m.id NOT LIKE 'forgotten:%'"
        db = self._db()
        # one statement: the count and the page from one snapshot
        rows = db.execute(
            f"SELECT {_M_COLUMNS}, count(*) OVER () FROM engram_memories m WHERE {cond} "  # noqa: S608 - engine-built fragments, values bound
            "ORDER BY m.n DESC LIMIT :l_limit OFFSET :l_offset",
            dict(args, l_limit=limit, l_offset=offset),
        ).fetchall()
        if rows:
            return [row_to_memory(r[:-1]) for r in rows], int(rows[0][-1])
        total = db.execute(f"SELECT count(*) FROM engram_memories m WHERE {cond}", args).fetchone()  # noqa: S608 - engine-built fragments, values bound
        return [], int(total[0])

    @translated
    def tag_counts(self, vis: Visibility) -> dict[str, int]:
        pred, params = predicate(vis)
        rows = self._db().execute(
            f"SELECT j.value, count(*) FROM engram_memories m, json_each({_TAGS}) j "  # noqa: S608 - engine-built fragments, values bound
            f"WHERE {pred} AND m.id NOT LIKE 'forgotten:%' GROUP BY j.value ORDER BY j.value",
            params,
        )
        return {str(t): int(c) for t, c in rows}

    @translated
    def visible_ids(self, vis: Visibility, ids: Sequence[str]) -> dict[str, int]:
        if not ids:
            return {}
        pred, params = predicate(vis)
        out: dict[str, int] = {}
        db = self._db()
        for start in range(0, len(ids), _CHUNK):
            marks, named = _named("i", list(ids[start : start + _CHUNK]))
            # The ids first, by their unique index, then each row by key (CROSS JOIN keeps that
            # order): left to itself the planner scanned the (tenant, owner, archived) index
            # instead — far slower at 10k memories, for the ten ids of a conversation.
            for mid, n in db.execute(
                f"SELECT m.id, m.n FROM engram_memories c CROSS JOIN engram_memories m ON m.n = c.n "  # noqa: S608 - engine-built fragments, values bound
                f"WHERE c.id IN ({marks}) AND {pred}",
                dict(params, **named),
            ):
                out[str(mid)] = int(n)
        return out

    @translated
    def visible_keys(
        self, vis: Visibility, types: Iterable[str] | None = None, keys: Sequence[int] | None = None
    ) -> list[int]:
        pred, params = predicate(vis)
        if types is not None:
            marks, named = _named("t", sorted(set(types)))
            pred += f" AND m.type IN ({marks})"
            params.update(named)
        db = self._db()
        if keys is None:
            sql = f"SELECT m.n FROM engram_memories m WHERE {pred} ORDER BY m.n"  # noqa: S608 - engine-built fragments, values bound
            return [int(r[0]) for r in db.execute(sql, params)]
        out: list[int] = []
        for start in range(0, len(keys), _CHUNK):
            marks, named = _named("k", list(keys[start : start + _CHUNK]))
            sql = f"SELECT m.n FROM engram_memories m WHERE m.n IN ({marks}) AND {pred}"  # noqa: S608 - engine-built fragments, values bound
            out += [int(r[0]) for r in db.execute(sql, dict(params, **named))]
        return sorted(out)

    @translated
    def admitted(self, vis: Visibility, since: int) -> list[tuple[int, bool]]:
        pred, params = predicate(vis)
        rows = self._db().execute(
            f"SELECT m.n, CASE WHEN {pred} THEN 1 ELSE 0 END FROM engram_memories m "  # noqa: S608 - engine-built fragments, values bound
            "WHERE m.changed > :a_since AND m.tenant = :a_tenant",
            dict(params, a_since=since, a_tenant=vis.tenant),
        )
        return [(int(n), bool(ok)) for n, ok in rows]

    @translated
    def key_of(self, tenant: str, memory_id: str) -> int | None:
        row = (
            self._db()
            .execute("SELECT n FROM engram_memories WHERE id = ? AND tenant = ?", (memory_id, tenant))
            .fetchone()
        )
        return None if row is None else int(row[0])

    @translated
    def taken_ids(self, tenant: str, ids: Sequence[str]) -> set[str]:
        # One file's ids are unique across its tenants (the id column's UNIQUE index), so an id
        # another tenant holds is taken here too; only the id itself is read, never the row.
        del tenant
        out: set[str] = set()
        db = self._db()
        for start in range(0, len(ids), _CHUNK):
            marks, named = _named("i", list(ids[start : start + _CHUNK]))
            sql = f"SELECT id FROM engram_memories WHERE id IN ({marks})"  # noqa: S608 - engine-built fragments, values bound
            out.update(str(r[0]) for r in db.execute(sql, named))
        return out

    @translated
    def scan(self, vis: Visibility, after: int, limit: int) -> list[RescoreRow]:
        pred, params = predicate(vis)
        return (
            self._db()
            .execute(
                "SELECT m.n, m.importance, m.salience, m.ring, m.old_count, m.old_newest, m.old_oldest "  # noqa: S608
                f"FROM engram_memories m WHERE m.n > :r_after AND {pred} AND m.imp_source <> {CALLER} "
                "ORDER BY m.n LIMIT :r_limit",
                dict(params, r_after=after, r_limit=limit),
            )
            .fetchall()
        )

    @translated
    def todo_ids(self, vis: Visibility, status: TodoStatus | None, *, by_importance: bool) -> list[str]:
        pred, params = predicate(vis)
        where = f"m.type = 'todo' AND {pred}" + (" AND m.status = :t_status" if status is not None else "")
        order = "m.importance DESC, m.created_at, m.n" if by_importance else "m.created_at, m.n"
        rows = self._db().execute(
            f"SELECT m.id FROM engram_memories m WHERE {where} ORDER BY {order}",  # noqa: S608 - engine-built fragments, values bound
            dict(params, t_status=None if status is None else status.value),
        )
        return [str(r[0]) for r in rows]

    @translated
    def intents(
        self, vis: Visibility, owner: str, *, now: float, event: str | None, cues: bool
    ) -> list[tuple[int, str, tuple[MemoryRef, ...]]]:
        pred, params = predicate(vis)
        k = "json_extract(j.value, '$.key')"
        kinds = [
            f"(({k} LIKE 'time:%' OR {k} LIKE 'every % time:%') AND CAST(substr({k}, instr({k}, 'time:') + 5) AS REAL) <= :f_now)"
        ]
        params = dict(params, f_now=now, f_me=owner)
        if event is not None:
            kinds.append(f"{k} IN (:f_ev1, :f_ev2)")
            params.update(f_ev1=f"event:{event}", f_ev2=f"repeat event:{event}")
        if cues:
            kinds.append(f"({k} LIKE 'cue:%' OR {k} LIKE 'repeat cue:%')")
        rows = self._db().execute(
            f"SELECT m.n, m.id, m.refs FROM engram_memories m WHERE m.type = 'intent' AND m.owner = :f_me AND {pred} "  # noqa: S608 - engine-built fragments, values bound
            f"AND EXISTS (SELECT 1 FROM json_each(m.refs) j WHERE json_extract(j.value, '$.kind') = '{_TRIGGER}' "
            f"AND ({' OR '.join(kinds)})) ORDER BY m.n",
            params,
        )
        return [(int(n), str(mid), tuple(MemoryRef.from_json(r) for r in json.loads(refs))) for n, mid, refs in rows]

    @translated
    def weak(self, vis: Visibility, owner: str, *, below_strength: float, now: float, min_age: float) -> list[int]:
        pred, params = predicate(vis)
        rows = self._db().execute(
            "SELECT m.n FROM engram_memories m WHERE m.owner = :w_me AND m.type <> 'skill' "  # noqa: S608 - engine-built fragments, values bound
            f"AND m.strength < :w_strength AND :w_now - m.created_at > :w_age AND {pred}",
            dict(params, w_me=owner, w_strength=below_strength, w_now=now, w_age=min_age),
        )
        return [int(r[0]) for r in rows]

    @translated
    def undistilled_episodes(self, vis: Visibility, max_level: Confidentiality) -> list[tuple[int, str]]:
        pred, params = predicate(vis)
        rows = self._db().execute(
            "SELECT m.n, m.owner FROM engram_memories m "  # noqa: S608 - engine-built fragments, values bound
            f"WHERE m.type = 'episode' AND m.confidentiality <= :r_llm AND {pred} AND NOT EXISTS ("
            "SELECT 1 FROM engram_edges e JOIN engram_memories g ON g.n = e.src WHERE e.dst = m.n "
            "AND e.type = 'derived_from' AND g.type = 'reflection' AND g.owner = m.owner AND g.archived = 0) "
            "ORDER BY m.owner, m.created_at, m.n",
            dict(params, r_llm=int(max_level)),
        )
        return [(int(n), str(owner)) for n, owner in rows]

    @translated
    def levels_by_age(self, vis: Visibility) -> list[tuple[int, int]]:
        pred, params = predicate(vis)
        rows = self._db().execute(
            f"SELECT m.n, m.confidentiality FROM engram_memories m WHERE {pred} ORDER BY m.created_at, m.n",  # noqa: S608
            params,
        )
        return [(int(n), int(c)) for n, c in rows]

    @translated
    def index_rows(self, since: int, tenant: str | None = None) -> list[IndexRow]:
        if tenant is None:
            return self._db().execute(_INDEX_ROWS + "WHERE changed > ?", (since,)).fetchall()
        return self._db().execute(_INDEX_ROWS + "WHERE changed > ? AND tenant = ?", (since, tenant)).fetchall()

    def index_row_batches(self, since: int, size: int, tenant: str | None = None) -> Iterator[list[IndexRow]]:
        # One statement read in pieces: SQLite keeps its snapshot until the cursor is exhausted.
        conn = self._store.connection("engine")
        with translate(conn):
            cur = (
                conn.raw.execute(_INDEX_ROWS + "WHERE changed > ?", (since,))
                if tenant is None
                else conn.raw.execute(_INDEX_ROWS + "WHERE changed > ? AND tenant = ?", (since, tenant))
            )
        while True:
            with translate(conn):
                rows = cur.fetchmany(size)
            if not rows:
                return
            yield rows

    @translated
    def term_tip(self, upto: int, limit: int) -> list[tuple[int, int, str, str]]:
        return (
            self._db()
            .execute(
                "SELECT n, changed, terms, entities FROM engram_memories WHERE changed <= ? "
                "ORDER BY changed DESC, n DESC LIMIT ?",
                (upto, limit),
            )
            .fetchall()
        )

    @translated
    def visibility_rows(self) -> list[tuple[int, str, str, int, int, float | None, float | None, str]]:
        return (
            self._db()
            .execute(
                "SELECT n, tenant, owner, confidentiality, archived, valid_from, valid_to, type "
                "FROM engram_memories ORDER BY n"
            )
            .fetchall()
        )

    @translated
    def changed_upto(self, stamp: int) -> list[tuple[int, int]]:
        return self._db().execute("SELECT n, changed FROM engram_memories WHERE changed <= ?", (stamp,)).fetchall()
