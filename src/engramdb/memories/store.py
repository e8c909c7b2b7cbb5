"""SQL over the memory tables: rows to records, visibility, writes, the access stream.

Every read that can reach a memory goes through `Visibility.sql`, a predicate placed *inside* the
query (before any ORDER BY / LIMIT), so nothing invisible is ever ranked, counted or relayed.
"""

from __future__ import annotations

import array
import hashlib
import json
import re
import sqlite3
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from engramdb.memories.model import (
    AccessRecord,
    Channel,
    Components,
    Confidentiality,
    Memory,
    MemoryRef,
    MemoryType,
    TodoStatus,
)

_NON_WORD = re.compile(r"[\W_]+")

MEMORY_COLUMNS = (
    "n, id, tenant, owner, author, type, title, content, tags, entities, n_chars, n_tokens, n_sentences, "
    "importance, salience, confidence, strength, confidentiality, created_at, recorded_at, valid_from, "
    "valid_to, archived, status, refs, version, ring, access_count, old_count, old_newest, old_oldest, last_access"
)


@dataclass(frozen=True, slots=True)
class Visibility:
    """Who is looking, and at what: the predicate every memory query carries.

    A memory is visible when it is in the reader's tenant, shared or owned by the reader (or the
    reader may read across the tenant's agents), at or below the confidentiality cap, not
    archived, and — at `as_of` — valid (``valid_from ≤ as_of < valid_to``).
    """

    tenant: str
    reader: str
    cap: Confidentiality = Confidentiality.RESTRICTED
    as_of: float | None = None
    cross_agent: bool = False
    include_archived: bool = False

    def sql(self, alias: str = "m") -> tuple[str, dict[str, Any]]:
        a = alias
        parts = [f"{a}.tenant = :v_tenant", f"{a}.confidentiality <= :v_cap"]
        params: dict[str, Any] = {"v_tenant": self.tenant, "v_cap": int(self.cap)}
        if not self.cross_agent:
            parts.append(f"({a}.owner = '' OR {a}.owner = :v_reader)")
            params["v_reader"] = self.reader
        if not self.include_archived:
            parts.append(f"{a}.archived = 0")
        if self.as_of is not None:
            parts.append(
                f"({a}.valid_from IS NULL OR {a}.valid_from <= :v_as_of) AND ({a}.valid_to IS NULL OR {a}.valid_to > :v_as_of)"
            )
            params["v_as_of"] = self.as_of
        return " AND ".join(parts), params


def content_hash(text: str) -> str:
    """A value-level fingerprint: NFKC, case-folded, white space and punctuation collapsed."""
    norm = _NON_WORD.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()
    return hashlib.blake2b(norm.encode(), digest_size=16).hexdigest()


_NAME = re.compile(r"\b[A-Z][\w-]*")


def says_nothing_new(new: str, old: str, *, containment: float = 0.9) -> bool:
    """True when `new` adds nothing `old` does not already say: at least `containment` of its
    content words appear in `old`, and every number or identifier and every capitalised name in
    it does too.

    Dedup on write uses this after the cosine test, because a static embedding puts distinct
    facts from one sentence pattern above cosine 0.92 (measured: 75% of same-pattern pairs in the
    benchmark corpus), and a merge would drop the new fact.
    """
    from engramdb.retrieval.keywords import STOPWORDS, words

    nw = {w for w in words(new) if w not in STOPWORDS}
    ow = set(words(old))
    if not nw:
        return False
    if len(nw & ow) / len(nw) < containment:
        return False
    if any(any(c.isdigit() for c in w) and w not in ow for w in nw):
        return False
    old_names = {m.group(0).lower() for m in _NAME.finditer(old)}
    return all(
        m.group(0).lower() in old_names or m.group(0).lower() in STOPWORDS for m in _NAME.finditer(new) if m.start() > 0
    )


def pack_times(times: Sequence[float]) -> bytes:
    return array.array("d", times).tobytes()


def unpack_times(blob: bytes | None) -> tuple[float, ...]:
    if not blob:
        return ()
    arr = array.array("d")
    arr.frombytes(bytes(blob))
    return tuple(arr)


def _labels(text: str) -> tuple[str, ...]:
    return tuple(json.loads(text)) if text else ()


def row_to_memory(row: Sequence[Any]) -> Memory:
    """A `Memory` from a row selected with `MEMORY_COLUMNS`."""
    (
        _n, mid, tenant, owner, author, mtype, title, content, tags, entities, n_chars, n_tokens, n_sent,
        imp, sal, conf, strength, level, created, recorded, vfrom, vto, archived, status, refs, version,
        ring, count, old_count, old_newest, old_oldest, last,
    ) = row  # fmt: skip
    return Memory(
        id=mid,
        tenant=tenant,
        owner=owner,
        author=author,
        type=MemoryType(mtype),
        title=title,
        content=content,
        tags=_labels(tags),
        entities=_labels(entities),
        n_chars=n_chars,
        n_tokens=n_tokens,
        n_sentences=n_sent,
        importance=imp,
        salience=sal,
        confidence=conf,
        strength=strength,
        confidentiality=Confidentiality(level),
        created_at=created,
        recorded_at=recorded,
        valid_from=vfrom,
        valid_to=vto,
        archived=bool(archived),
        status=TodoStatus(status) if status else None,
        refs=tuple(MemoryRef.from_json(r) for r in json.loads(refs)),
        version=version,
        last_access=last,
        access_count=count,
        recent_accesses=unpack_times(ring),
        older_count=old_count,
        older_newest=old_newest,
        older_oldest=old_oldest,
    )


def next_change(db: sqlite3.Connection) -> int:
    """The next write-sequence number; call inside the write transaction."""
    row = db.execute("UPDATE engram_counters SET value = value + 1 WHERE name = 'memories' RETURNING value").fetchone()
    return int(row[0])


def current_change(db: sqlite3.Connection) -> int:
    return int(db.execute("SELECT value FROM engram_counters WHERE name = 'memories'").fetchone()[0])


def instance_id(db: sqlite3.Connection) -> str | None:
    """The database's random identity (migration 8), or None in a file that has none."""
    row = db.execute("SELECT value FROM engram_meta WHERE key = 'instance_id'").fetchone()
    return None if row is None else str(row[0])


@dataclass(frozen=True, slots=True)
class Touch:
    """One access to log: which memory, how, and (for recalls) its rank and components."""

    n: int
    channel: Channel
    score: float | None = None
    rank: int | None = None
    components: Components | None = None


def log_accesses(
    db: sqlite3.Connection,
    touches: Iterable[Touch],
    *,
    now: float,
    tenant: str,
    reader: str,
    ring_size: int,
    query: str | None = None,
    trace_ref: str | None = None,
    recall_id: str | None = None,
) -> None:
    """Append to the access stream; deliberate channels also update the ring and strength.

    Injected (and reflected) accesses are logged but never reinforce: what the harness chose to
    show must not count as use.
    """
    touches = list(touches)
    append_stream(
        db, touches, now=now, tenant=tenant, reader=reader, query=query, trace_ref=trace_ref, recall_id=recall_id
    )
    deliberate = [t.n for t in touches if t.channel.deliberate]
    if not deliberate:
        return
    bumps = [
        t.n for t in touches if t.channel in (Channel.RECALLED, Channel.SEARCHED, Channel.DEREF, Channel.REINFORCED)
    ]
    marks = ",".join("?" * len(deliberate))
    rows = db.execute(
        f"SELECT n, ring, old_count, old_newest, old_oldest FROM engram_memories WHERE n IN ({marks})",  # noqa: S608 - engine-built fragments, values bound
        deliberate,
    ).fetchall()
    change = next_change(db)
    updates = []
    for n, ring, old_count, old_newest, old_oldest in rows:
        times = [*unpack_times(ring), now]
        while len(times) > ring_size:
            evicted = times.pop(0)
            old_count += 1
            old_newest = evicted if old_newest is None else max(old_newest, evicted)
            old_oldest = evicted if old_oldest is None else min(old_oldest, evicted)
        updates.append((pack_times(times), old_count, old_newest, old_oldest, now, 1 if n in bumps else 0, change, n))
    db.executemany(
        "UPDATE engram_memories SET ring = ?, old_count = ?, old_newest = ?, old_oldest = ?, last_access = ?, "
        "access_count = access_count + 1, strength = strength + ?, changed = ? WHERE n = ?",
        updates,
    )


def append_stream(
    db: sqlite3.Connection,
    touches: Sequence[Touch],
    *,
    now: float,
    tenant: str,
    reader: str,
    query: str | None = None,
    trace_ref: str | None = None,
    recall_id: str | None = None,
) -> None:
    """Append access records to the stream only (no change to the memories themselves)."""
    q = None if query is None else query[:200]
    db.executemany(
        "INSERT INTO engram_access (ts, n, tenant, channel, reader, trace_ref, query, score, rank, rel, rec, imp, spread, recall_id) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                now, t.n, tenant, t.channel.value, reader, trace_ref, q, t.score, t.rank,
                *((t.components.rel, t.components.rec, t.components.imp, t.components.spread) if t.components else (None,) * 4),
                recall_id,
            )
            for t in touches
        ],
    )  # fmt: skip


def access_records(db: sqlite3.Connection, where: str, params: Sequence[Any]) -> list[AccessRecord]:
    rows = db.execute(
        "SELECT a.ts, a.channel, a.reader, m.id, a.trace_ref, a.query, a.score, a.rank, a.rel, a.rec, a.imp, a.spread, a.recall_id "  # noqa: S608 - engine-built fragments, values bound
        f"FROM engram_access a JOIN engram_memories m ON m.n = a.n WHERE {where} ORDER BY a.id",
        params,
    ).fetchall()
    out = []
    for ts, ch, reader, mid, trace, query, score, rank, rel, rec, imp, spread, rid in rows:
        comps = None if rel is None else Components(rel=rel, rec=rec, imp=imp, spread=spread)
        out.append(AccessRecord(ts, Channel(ch), reader, mid, trace, query, score, rank, comps, rid))
    return out
