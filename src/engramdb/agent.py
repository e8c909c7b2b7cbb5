"""The agent handle: what one agent may do with memories and tables in its tenant.

``engine.agent("researcher")`` bundles the agent's private and shared table scopes with its typed
memories: remember / get / update / link / recall / search / explain / stats, all filtered by
what the agent may see (tenant, owner, confidentiality cap, validity, archival) inside the queries.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engramdb.agent_extras import AgentExtras
from engramdb.errors import Forgotten, NotFound, ValidationError
from engramdb.memories import model as mm
from engramdb.memories.forgetting import prunable, with_lifecycle
from engramdb.memories.model import (
    AccessRecord,
    Channel,
    Confidentiality,
    Edge,
    EdgeType,
    Memory,
    MemoryRef,
    MemoryType,
    Tombstone,
)
from engramdb.memories.store import (
    MEMORY_COLUMNS,
    Touch,
    Visibility,
    access_records,
    append_stream,
    content_hash,
    log_accesses,
    next_change,
    pack_times,
    row_to_memory,
    says_nothing_new,
)
from engramdb.observability.stats import Stats, compute_stats
from engramdb.retrieval.budget import approx_tokens
from engramdb.retrieval.keywords import cue_terms
from engramdb.retrieval.recall import explained_from_json
from engramdb.retrieval.results import Explanation, Recall
from engramdb.retrieval.when import When
from engramdb.storage.sqlite import translate
from engramdb.tenancy.ids import check_agent_id

if TYPE_CHECKING:
    from engramdb.engine import DynamicMemoryEngine
    from engramdb.scopes.scope import MemoryScope


@dataclass(frozen=True, slots=True)
class MemoryVersion:
    """An earlier content of a memory, kept when an update replaced it."""

    version: int
    title: str
    content: str
    changed_at: float
    changed_by: str


def _tenant_ok(tenant: object) -> str:
    if not isinstance(tenant, str) or not tenant or len(tenant) > 128 or not tenant.isprintable():
        raise ValidationError(f"tenant must be a non-empty printable string of at most 128 characters, got {tenant!r}")
    return tenant


class Agent(AgentExtras):
    """One agent's view of the engine: its table scopes and the memories it may see.

    Example::

        me = engine.agent("researcher")
        m = me.remember("The deploy key rotates every Monday", type="info", importance=7, tags=["ops"])
        hits = me.recall("when does the key rotate?", k=5)
        print(hits.as_evidence(token_budget=300))
        print(me.explain(hits.recall_id))
    """

    def __init__(self, engine: DynamicMemoryEngine, agent_id: str, *, tenant: str = "default") -> None:
        self.engine = engine
        self.agent_id = check_agent_id(agent_id)
        self.tenant = _tenant_ok(tenant)
        self.shared: MemoryScope = engine.get_shared_scope()
        self.private: MemoryScope = engine.get_private_scope(agent_id)
        self.cap = Confidentiality.RESTRICTED
        self.floor = Confidentiality.PUBLIC

    def __repr__(self) -> str:
        return f"Agent({self.agent_id!r}, tenant={self.tenant!r})"

    # -- helpers ------------------------------------------------------------------------------

    def _db(self) -> Any:
        return self.engine.store.connection("engine")

    def _vis(self, *, as_of: float | None = None, include_archived: bool = False) -> Visibility:
        return Visibility(self.tenant, self.agent_id, self.cap, as_of, include_archived=include_archived)

    def _row(self, db: sqlite3.Connection, memory_id: object, vis: Visibility | None = None) -> tuple[Any, ...]:
        """The visible row of `memory_id`, or `NotFound` — the same for missing and invisible ids."""
        if not isinstance(memory_id, str):
            raise NotFound(f"no memory {memory_id!r} is visible to agent {self.agent_id}")
        vis = vis or self._vis(include_archived=True)
        pred, params = vis.sql("m")
        row = db.execute(
            f"SELECT {MEMORY_COLUMNS} FROM engram_memories m WHERE m.id = :id AND {pred}",  # noqa: S608
            dict(params, id=memory_id),
        ).fetchone()
        if row is None:
            raise NotFound(f"no memory {memory_id!r} is visible to agent {self.agent_id}")
        return tuple(row)

    # -- writing ------------------------------------------------------------------------------

    def remember(
        self,
        content: str,
        *,
        type: MemoryType | str = MemoryType.INFO,
        importance: float = 5.0,
        salience: float = 0.0,
        confidence: float = 1.0,
        tags: Iterable[str] | None = None,
        entities: Iterable[str] | None = None,
        title: str = "",
        refs: Iterable[MemoryRef] | None = None,
        valid_from: float | None = None,
        valid_to: float | None = None,
        shared: bool = False,
        status: str | None = None,
        created_at: float | None = None,
        confidentiality: Confidentiality | int | None = None,
        dedup: bool = True,
        force: bool = False,
    ) -> Memory:
        """Store one memory and return it. Private to this agent unless `shared`.

        With `dedup` (default), a memory within cosine `engine.dedup_threshold` (0.92) of a visible
        one of the same type, owner and tenant, at or above its confidentiality, *that adds nothing
        to it* (its words, numbers and names are already there), reinforces that one (logged
        ``reinforced``) and that one is returned. Content that was deliberately forgotten
        raises `Forgotten` unless `force`.

        Raises `ValidationError` (nothing written) for empty content, an unknown type, scores out
        of range, a status on a non-todo, or validity that ends before it starts.
        """
        return self.remember_many(
            [
                dict(
                    content=content, type=type, importance=importance, salience=salience, confidence=confidence, tags=tags,
                    entities=entities, title=title, refs=refs, valid_from=valid_from, valid_to=valid_to, shared=shared,
                    status=status, created_at=created_at, confidentiality=confidentiality,
                )
            ],
            dedup=dedup,
            force=force,
        )[0]  # fmt: skip

    def _prepare(self, item: Mapping[str, Any], now: float) -> dict[str, Any]:
        known = {
            "content", "type", "importance", "salience", "confidence", "tags", "entities", "title", "refs",
            "valid_from", "valid_to", "shared", "status", "created_at", "confidentiality",
        }  # fmt: skip
        unknown = set(item) - known
        if unknown:
            raise ValidationError(f"unknown memory field(s): {', '.join(sorted(unknown))}")
        content = mm.check_content(item.get("content"))
        mtype = mm.check_type(item.get("type", MemoryType.INFO))
        imp, sal, conf = mm.check_scores(
            item.get("importance", 5.0), item.get("salience", 0.0), item.get("confidence", 1.0)
        )
        status = mm.check_status(mtype, item.get("status"))
        vfrom, vto = mm.check_validity(item.get("valid_from"), item.get("valid_to"))
        title = item.get("title") or ""
        if not isinstance(title, str):
            raise ValidationError(f"title must be a str, got {type(title).__name__}")
        refs = tuple(item.get("refs") or ())
        if any(not isinstance(r, MemoryRef) for r in refs):
            raise ValidationError("refs must be MemoryRef values")
        if any(r.kind == "trigger" for r in refs):
            if mtype is not MemoryType.INTENT:
                raise ValidationError("a trigger belongs on an intent memory")
            from engramdb.memories.prospective import parse_trigger

            for r in refs:
                if r.kind == "trigger":
                    parse_trigger(r.key)
        created = item.get("created_at")
        if created is None:
            created = now
        elif isinstance(created, bool) or not isinstance(created, (int, float)):
            raise ValidationError(f"created_at must be epoch seconds, got {created!r}")
        level = item.get("confidentiality")
        level = self.floor if level is None else self._level(level)
        return {
            "content": content,
            "type": mtype,
            "scores": (imp, sal, conf),
            "status": status,
            "validity": (vfrom, vto),
            "title": title,
            "tags": mm.check_labels("tags", item.get("tags")),
            "entities": mm.check_labels("entities", item.get("entities")),
            "refs": refs,
            "owner": "" if item.get("shared") else self.agent_id,
            "created_at": float(created),
            "level": max(level, self.floor),
        }

    @staticmethod
    def _level(value: object) -> Confidentiality:
        try:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError
            return Confidentiality(value)
        except ValueError:
            raise ValidationError(f"unknown confidentiality level {value!r}; use 0–3 or a Confidentiality") from None

    def remember_many(
        self, items: Iterable[Mapping[str, Any]], *, dedup: bool = True, force: bool = False
    ) -> list[Memory]:
        """Store many memories in one transaction (all or nothing); each item takes `remember`'s
        arguments. Dedup and tombstones apply per item as in `remember`; the result keeps the
        order of `items` (a deduplicated item returns the memory it reinforced)."""
        now = self.engine.clock()
        prepared = [self._prepare(item, now) for item in items]
        if not prepared:
            return []
        embedder = self.engine.memory_embedder
        vectors = (
            embedder.embed([p["content"] if not p["title"] else f"{p['title']}. {p['content']}" for p in prepared])
            if embedder
            else None
        )
        conn = self._db()
        if not force:
            self._refuse_forgotten(conn.raw, prepared)
        reinforced = self._duplicates(conn.raw, prepared, vectors) if dedup and vectors is not None else {}
        if reinforced:
            with self.engine.store.atomic(conn), translate(conn):
                log_accesses(
                    conn.raw, [Touch(n, Channel.REINFORCED) for n in set(reinforced.values())], now=now,
                    tenant=self.tenant, reader=self.agent_id, ring_size=self.engine.scoring.ring_size,
                )  # fmt: skip
            kept = [i for i in range(len(prepared)) if i not in reinforced]
            fresh = (
                self._insert([prepared[i] for i in kept], None if vectors is None else vectors[kept], now)
                if kept
                else []
            )
            by_index = dict(zip(kept, fresh, strict=True))
            with translate(conn):
                again = {n: self._annotated(self._row_by_n(conn.raw, n)) for n in set(reinforced.values())}
            return [by_index[i] if i in by_index else again[reinforced[i]] for i in range(len(prepared))]
        return self._insert(prepared, vectors, now)

    def _refuse_forgotten(self, db: sqlite3.Connection, prepared: list[dict[str, Any]]) -> None:
        for p in prepared:
            p["hash"] = content_hash(p["content"])
        owners = sorted({p["owner"] for p in prepared})
        hashes = sorted({p["hash"] for p in prepared})
        stones: dict[tuple[str, str], tuple[Any, ...]] = {}
        # owner IN (…) AND content_hash IN (…): index lookups on (tenant, owner, content_hash) for
        # every pair, one statement per 500 values; pairs that were not asked about are ignored.
        for start in range(0, len(hashes), 500):
            chunk = hashes[start : start + 500]
            for row in db.execute(
                "SELECT memory_id, tenant, owner, content_hash, forgotten_by, forgotten_at, reason FROM engram_tombstones "  # noqa: S608 - placeholders only
                f"WHERE tenant = ? AND owner IN ({','.join('?' * len(owners))}) "
                f"AND content_hash IN ({','.join('?' * len(chunk))}) ORDER BY id",
                [self.tenant, *owners, *chunk],
            ):
                stones[(row[2], row[3])] = row  # the latest stone of each value wins
        for p in prepared:
            row = stones.get((p["owner"], p["hash"]))
            if row is not None:
                stone = Tombstone(*row)
                raise Forgotten(
                    f"this content was forgotten by {stone.forgotten_by} (memory {stone.memory_id}, reason: "
                    f"{stone.reason or 'none given'}); pass force=True to store it again",
                    stone,
                )

    def _duplicates(self, db: sqlite3.Connection, prepared: list[dict[str, Any]], vectors: Any) -> dict[int, int]:
        """{item index: n of the visible memory it duplicates} (same type, owner, tenant; level ≥ the item's)."""
        channel = self.engine.vectors
        if channel is None:
            return {}
        channel.refresh(db)
        filters = [(p["type"].value, p["owner"], int(p["level"])) for p in prepared]
        # A todo or an intent is a commitment: stating it again is a new one (the old may be done).
        vis = self._vis()
        if len(prepared) <= 4 or channel.approximate:
            # A few items, or a trained IVF: one filtered k-NN each, without a full scan (at 1M
            # memories a block product costs ~11 ms per item, an IVF search ~3 ms).
            nearest: list[tuple[int, float] | None] = []
            for i, (mtype, owner, level) in enumerate(filters):
                hit = channel.search(vectors[i], 1, vis, types=frozenset({mtype}), owner=owner, min_level=level)
                nearest.append(next(iter(hit.items()), None))
        else:
            nearest = channel.best_matches(vectors, vis, filters)  # one matrix product for the batch
        candidates = {
            i: best
            for i, best in enumerate(nearest)
            if best is not None
            and best[1] >= self.engine.dedup_threshold
            and prepared[i]["type"] not in (MemoryType.TODO, MemoryType.INTENT)
        }
        if not candidates:
            return {}
        ns = sorted({n for n, _ in candidates.values()})
        marks = ",".join("?" * len(ns))
        texts = dict(db.execute(f"SELECT n, content FROM engram_memories WHERE n IN ({marks})", ns).fetchall())  # noqa: S608 - placeholders only
        found: dict[int, int] = {}
        for i, (n, _cos) in candidates.items():
            if n in texts and says_nothing_new(prepared[i]["content"], texts[n]):
                found[i] = n
        return found

    def _insert(self, prepared: list[dict[str, Any]], vectors: Any, now: float) -> list[Memory]:
        embedder = self.engine.memory_embedder
        conn = self._db()
        out: list[Memory] = []
        ns: list[int] = []
        ring = pack_times([now])  # creation is the first deliberate access
        with self.engine.store.atomic(conn), translate(conn):
            db = conn.raw
            change = next_change(db)
            # Keys are assigned here, under the write lock this transaction holds, so rows, index
            # entries and vectors go in with one executemany each instead of three calls per memory.
            base = int(db.execute("SELECT coalesce(max(n), 0) FROM engram_memories").fetchone()[0])
            rows: list[tuple[Any, ...]] = []
            vecs: list[tuple[int, str, bytes]] = []
            for i, p in enumerate(prepared):
                n = base + 1 + i
                memory = Memory(
                    id=f"{self.agent_id}:{secrets.token_hex(8)}", tenant=self.tenant, owner=p["owner"], author=self.agent_id,
                    type=p["type"], title=p["title"], content=p["content"], tags=p["tags"], entities=p["entities"],
                    n_chars=len(p["content"]), n_tokens=approx_tokens(p["content"]), n_sentences=mm.count_sentences(p["content"]),
                    importance=p["scores"][0], salience=p["scores"][1], confidence=p["scores"][2],
                    confidentiality=p["level"], created_at=p["created_at"], recorded_at=now, valid_from=p["validity"][0],
                    valid_to=p["validity"][1], status=p["status"], refs=p["refs"], last_access=now, access_count=1,
                    recent_accesses=(now,),
                )  # fmt: skip
                rows.append(
                    (
                        n, memory.id, memory.tenant, memory.owner, memory.author, memory.type.value, memory.title,
                        memory.content, json.dumps(list(memory.tags)), json.dumps(list(memory.entities)), memory.n_chars,
                        memory.n_tokens, memory.n_sentences, memory.importance, memory.salience, memory.confidence,
                        int(memory.confidentiality), memory.created_at, now, memory.valid_from, memory.valid_to,
                        memory.status.value if memory.status else None, json.dumps([r.to_json() for r in memory.refs]),
                        p.get("hash") or content_hash(memory.content), cue_terms(memory.title, memory.content, *memory.tags), ring, 1, now,
                        change,
                    )
                )  # fmt: skip
                if vectors is not None and embedder is not None:
                    vecs.append((n, embedder.name, vectors[i].tobytes()))
                out.append(memory)
                ns.append(n)
            db.executemany(
                "INSERT INTO engram_memories (n, id, tenant, owner, author, type, title, content, tags, entities, n_chars, "
                "n_tokens, n_sentences, importance, salience, confidence, confidentiality, created_at, recorded_at, "
                "valid_from, valid_to, status, refs, content_hash, terms, ring, access_count, last_access, changed) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                rows,
            )
            if vecs:
                db.executemany("INSERT INTO engram_vectors VALUES (?, ?, ?)", vecs)
            append_stream(
                db, [Touch(n, Channel.CREATED) for n in ns], now=now, tenant=self.tenant, reader=self.agent_id
            )
        return [self._annotated(m, now) for m in out]

    def _annotated(self, memory: Memory | tuple[Any, ...], now: float | None = None) -> Memory:
        """A memory (or row) with its read-time retention and projected prune time."""
        m = memory if isinstance(memory, Memory) else row_to_memory(memory)
        return with_lifecycle(m, self.engine.clock() if now is None else now, self.engine.forgetting)

    def _row_by_n(self, db: sqlite3.Connection, n: int) -> tuple[Any, ...]:
        return tuple(db.execute(f"SELECT {MEMORY_COLUMNS} FROM engram_memories WHERE n = ?", (n,)).fetchone())  # noqa: S608 - constant

    def get(self, memory_id: str, *, touch: bool = True) -> Memory:
        """The memory `memory_id` if this agent may see it, else `NotFound`.

        A get is a deliberate read (channel ``deref``): it is logged and reinforces the memory,
        unless `touch` is False.
        """
        conn = self._db()
        with translate(conn):
            row = self._row(conn.raw, memory_id)
            if not touch:
                return self._annotated(row)
            with self.engine.store.atomic(conn):
                log_accesses(
                    conn.raw, [Touch(int(row[0]), Channel.DEREF)], now=self.engine.clock(), tenant=self.tenant,
                    reader=self.agent_id, ring_size=self.engine.scoring.ring_size,
                )  # fmt: skip
            return self._annotated(self._row(conn.raw, memory_id))

    def update(
        self,
        memory_id: str,
        *,
        content: str | None = None,
        title: str | None = None,
        importance: float | None = None,
        salience: float | None = None,
        confidence: float | None = None,
        status: str | None = None,
        tags: Iterable[str] | None = None,
        confidentiality: Confidentiality | int | None = None,
    ) -> Memory:
        """Change a memory this agent may write (its own, or a shared one of its tenant).

        A content or title change keeps the previous version reachable through `history`. A new
        confidentiality may never be below this agent's floor (`ValidationError`).
        """
        conn = self._db()
        now = self.engine.clock()
        with translate(conn):
            current = row_to_memory(self._row(conn.raw, memory_id))
        if current.owner not in ("", self.agent_id):
            raise NotFound(f"no memory {memory_id!r} is visible to agent {self.agent_id}")
        imp, sal, conf = mm.check_scores(
            current.importance if importance is None else importance,
            current.salience if salience is None else salience,
            current.confidence if confidence is None else confidence,
        )
        new_status = current.status if status is None else mm.check_status(current.type, status)
        level = current.confidentiality if confidentiality is None else self._level(confidentiality)
        if level < max(self.floor, current.confidentiality):
            # Lowering would expose what the memory held (its earlier versions too) to lower caps.
            raise ValidationError(
                f"confidentiality {level.name} is below the memory's {current.confidentiality.name} "
                f"(or this agent's floor {self.floor.name}); an update can raise a level, never lower it"
            )
        if status is not None and current.type is not MemoryType.TODO:
            mm.check_status(current.type, status)
        new_content = current.content if content is None else mm.check_content(content)
        new_title = current.title if title is None else title
        new_tags = current.tags if tags is None else mm.check_labels("tags", tags)
        embedder = self.engine.memory_embedder
        vec = None
        if embedder is not None and (new_content != current.content or new_title != current.title):
            vec = embedder.embed([new_content if not new_title else f"{new_title}. {new_content}"])[0]
        with self.engine.store.atomic(conn), translate(conn):
            db = conn.raw
            n = int(self._row(db, memory_id)[0])
            change = next_change(db)
            version = current.version
            if new_content != current.content or new_title != current.title:
                db.execute(
                    "INSERT INTO engram_versions VALUES (?, ?, ?, ?, ?, ?)",
                    (n, current.version, current.title, current.content, now, self.agent_id),
                )
                version += 1
            db.execute(
                "UPDATE engram_memories SET content = ?, title = ?, tags = ?, importance = ?, salience = ?, confidence = ?, "
                "status = ?, version = ?, n_chars = ?, n_tokens = ?, n_sentences = ?, content_hash = ?, terms = ?, changed = ?, "
                "confidentiality = ? WHERE n = ?",
                (
                    new_content, new_title, json.dumps(list(new_tags)), imp, sal, conf,
                    new_status.value if new_status else None, version, len(new_content), approx_tokens(new_content),
                    mm.count_sentences(new_content), content_hash(new_content), cue_terms(new_title, new_content, *new_tags),
                    change, int(level), n,
                ),
            )  # fmt: skip
            if vec is not None and embedder is not None:
                db.execute("INSERT OR REPLACE INTO engram_vectors VALUES (?, ?, ?)", (n, embedder.name, vec.tobytes()))
            return self._annotated(self._row(db, memory_id), now)

    def history(self, memory_id: str) -> list[MemoryVersion]:
        """Earlier versions of a memory, oldest first (the current one is `get`)."""
        conn = self._db()
        with translate(conn):
            n = int(self._row(conn.raw, memory_id)[0])
            rows = conn.raw.execute(
                "SELECT version, title, content, changed_at, changed_by FROM engram_versions WHERE n = ? ORDER BY version",
                (n,),
            ).fetchall()
        return [MemoryVersion(*r) for r in rows]

    def link(self, source: str, target: str, edge_type: EdgeType | str = EdgeType.RELATED, weight: float = 1.0) -> Edge:
        """Add a typed edge between two memories this agent can see (same tenant)."""
        etype = mm.check_edge_type(edge_type)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 < weight <= 1:
            raise ValidationError(f"weight must be a number in (0, 1], got {weight!r}")
        if source == target:
            raise ValidationError("a memory cannot be linked to itself")
        conn = self._db()
        now = self.engine.clock()
        with self.engine.store.atomic(conn), translate(conn):
            ra, rb = self._row(conn.raw, source), self._row(conn.raw, target)
            a, b = int(ra[0]), int(rb[0])
            conn.raw.execute(
                "INSERT OR REPLACE INTO engram_edges VALUES (?, ?, ?, ?, ?, ?, ?)",
                (a, b, etype.value, float(weight), self.tenant, now, self.agent_id),
            )
            # Confidentiality travels: what is linked into a more confidential memory rises to its level.
            level = max(int(ra[17]), int(rb[17]))
            conn.raw.execute(
                "UPDATE engram_memories SET confidentiality = ?, changed = ? WHERE n IN (?, ?) AND confidentiality < ?",
                (level, next_change(conn.raw), a, b, level),
            )
        return Edge(source, target, etype, float(weight), now)

    def edges(self, memory_id: str) -> list[Edge]:
        """The edges touching a memory whose other end this agent can also see."""
        conn = self._db()
        pred, params = self._vis(include_archived=True).sql("o")
        with translate(conn):
            n = int(self._row(conn.raw, memory_id)[0])
            rows = conn.raw.execute(
                "SELECT s.id, d.id, e.type, e.weight, e.created_at FROM engram_edges e "  # noqa: S608
                "JOIN engram_memories s ON s.n = e.src JOIN engram_memories d ON d.n = e.dst "
                f"JOIN engram_memories o ON o.n = CASE WHEN e.src = :n THEN e.dst ELSE e.src END "
                f"WHERE (e.src = :n OR e.dst = :n) AND {pred} ORDER BY e.created_at",
                dict(params, n=n),
            ).fetchall()
        return [Edge(s, d, EdgeType(t), w, c) for s, d, t, w, c in rows]

    # -- lifecycle ----------------------------------------------------------------------------

    def forget(self, memory_id: str, *, reason: str = "") -> Tombstone:
        """Remove a memory for good and leave a value-level tombstone (fingerprint, who, when, why).

        The text, its vector, index entries, versions and edges are deleted (archival alone is not
        forgetting); the access stream keeps its records. Remembering the same content again
        raises `Forgotten` unless forced. Forgetting an id that is gone (or invisible) is `NotFound`.
        """
        if not isinstance(reason, str):
            raise ValidationError("reason must be a str")
        conn = self._db()
        now = self.engine.clock()
        with self.engine.store.atomic(conn), translate(conn):
            db = conn.raw
            row = self._row(db, memory_id, self._vis())
            memory, n = row_to_memory(row), int(row[0])
            if memory.owner not in ("", self.agent_id):
                raise NotFound(f"no memory {memory_id!r} is visible to agent {self.agent_id}")
            stone = Tombstone(
                memory.id, memory.tenant, memory.owner, content_hash(memory.content), self.agent_id, now, reason
            )
            db.execute(
                "INSERT INTO engram_tombstones (memory_id, tenant, owner, content_hash, forgotten_by, forgotten_at, reason) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (stone.memory_id, stone.tenant, stone.owner, stone.content_hash, stone.forgotten_by, now, reason),
            )
            db.execute("DELETE FROM engram_edges WHERE src = ? OR dst = ?", (n, n))
            db.execute("DELETE FROM engram_vectors WHERE n = ?", (n,))
            db.execute("DELETE FROM engram_versions WHERE n = ?", (n,))
            _scrub_recall_log(db, memory.tenant, memory.id, f"forgotten:{n}")
            # An archived husk without text stays, so the access stream keeps its key and caches
            # see the change; its id is retired so the old id answers NotFound from now on.
            db.execute(
                "UPDATE engram_memories SET archived = 1, id = ?, content = '', title = '', tags = '[]', entities = '[]', "
                "refs = '[]', terms = '', content_hash = '', changed = ? WHERE n = ?",
                (f"forgotten:{n}", next_change(db), n),
            )
        self._scrub(conn)
        return stone

    def _scrub(self, conn: Any) -> None:
        """After a forget: drop the vector side file and move the write-ahead log into the database
        (secure_delete has zeroed the freed space there), so older copies of the text in the log
        are overwritten. Best effort, waiting at most 0.1 s: a checkpoint that another process's
        open read blocks is left to SQLite's later ones (the log is reused from its start once
        every reader has moved on)."""
        self.engine.drop_vector_file()
        raw = conn.raw
        if raw.in_transaction:
            return
        waited = raw.execute("PRAGMA busy_timeout").fetchone()[0]
        try:
            with translate(conn):
                raw.execute("PRAGMA busy_timeout=100")
                raw.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        finally:
            raw.execute(f"PRAGMA busy_timeout={int(waited)}")

    def prune(self, *, include_shared: bool = False) -> list[str]:
        """Archive this agent's memories whose retention fell below the threshold; return their ids.

        Guarded, whatever the clock says: never younger than the minimum age, never a protected
        type (skill), never an open todo, never importance ≥ 8 (see `ForgettingPolicy`). Prunes
        only this agent's own namespace unless `include_shared`.
        """
        policy = self.engine.forgetting
        now = self.engine.clock()
        owners = ("", self.agent_id) if include_shared else (self.agent_id,)
        doomed = [m for m in self.memories() if m.owner in owners and prunable(m, now, policy)]
        if not doomed:
            return []
        conn = self._db()
        with self.engine.store.atomic(conn), translate(conn):
            change = next_change(conn.raw)
            conn.raw.executemany(
                "UPDATE engram_memories SET archived = 1, changed = ? WHERE id = ? AND tenant = ? AND archived = 0",
                [(change, m.id, self.tenant) for m in doomed],
            )
        return [m.id for m in doomed]

    def supersede(self, old_id: str, new_id: str) -> Edge:
        """Close the old fact (its `valid_to` becomes the new one's `valid_from`, or now) and link the
        new one to it with `refines`. Both must belong to the same owner."""
        conn = self._db()
        now = self.engine.clock()
        with translate(conn):
            old = row_to_memory(self._row(conn.raw, old_id))
            new = row_to_memory(self._row(conn.raw, new_id))
        if old.id == new.id:
            raise ValidationError("a memory cannot supersede itself")
        if old.owner != new.owner or old.owner not in ("", self.agent_id):
            raise ValidationError("supersede works within one owner: both memories must be yours, or both shared")
        until = new.valid_from if new.valid_from is not None else now
        if old.valid_from is not None and until < old.valid_from:
            raise ValidationError("the new fact starts before the old one did; nothing to supersede")
        with self.engine.store.atomic(conn), translate(conn):
            conn.raw.execute(
                "UPDATE engram_memories SET valid_to = ?, changed = ? WHERE id = ? AND tenant = ?",
                (until, next_change(conn.raw), old.id, self.tenant),
            )
        return self.link(new.id, old.id, EdgeType.REFINES)

    # -- reading ------------------------------------------------------------------------------

    def _types(self, types: Iterable[MemoryType | str] | None) -> frozenset[MemoryType] | None:
        if types is None:
            return None
        if isinstance(types, str):
            types = [types]
        return frozenset(mm.check_type(t) for t in types)

    def _check_k(self, k: object, hops: object) -> None:
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 1000:
            raise ValidationError(f"k must be an integer from 1 to 1000, got {k!r}")
        if isinstance(hops, bool) or not isinstance(hops, int) or not 0 <= hops <= 5:
            raise ValidationError(f"hops must be an integer from 0 to 5, got {hops!r}")

    def recall(
        self,
        query: str,
        *,
        k: int = 5,
        hops: int = 1,
        types: Iterable[MemoryType | str] | None = None,
        channel: Channel | str = Channel.RECALLED,
        trace_ref: str | None = None,
        as_of: float | None = None,
        when: When = "auto",
    ) -> Recall:
        """The `k` memories most worth recalling for `query`, with spreading over `hops` edges.

        Deliberate channels (``recalled``, ``searched``) log the access and reinforce the hits;
        ``injected`` logs without reinforcing. `as_of` recalls what was valid at that time.
        `when` lifts memories made inside a time window (``ScoringConfig.w_when``; a lift, not a
        filter): ``"auto"`` reads the dates the query names ("on 13 March, 2023", "in May 2023"),
        None reads none, and ``(start, end)`` — epoch seconds, dates or aware datetimes — or a
        list of such pairs is used as given. A memory one of whose ``entities`` the query names
        (whole words, any case) is lifted by ``ScoringConfig.w_entity``, and one made close in
        time to a strong candidate by ``w_ctx`` (temporal context); ``explain`` shows both.
        """
        if not isinstance(query, str):
            raise ValidationError(f"query must be a str, got {type(query).__name__}")
        self._check_k(k, hops)
        try:
            ch = Channel(channel)
        except ValueError:
            raise ValidationError(f"unknown channel {channel!r}; use recalled, searched or injected") from None
        if ch not in (Channel.RECALLED, Channel.SEARCHED, Channel.INJECTED):
            raise ValidationError(f"recall logs on recalled, searched or injected, not {ch.value}")
        recall, _ = self.engine.recaller.run(
            query, vis=self._vis(as_of=as_of), k=k, hops=hops, types=self._types(types), channel=ch,
            trace_ref=trace_ref, dry_run=False, when=when,
        )  # fmt: skip
        return recall

    def search(
        self,
        query: str,
        *,
        k: int = 5,
        types: Iterable[MemoryType | str] | None = None,
        trace_ref: str | None = None,
        as_of: float | None = None,
        when: When = "auto",
    ) -> Recall:
        """Like `recall` without spreading activation, logged on the ``searched`` channel."""
        return self.recall(
            query, k=k, hops=0, types=types, channel=Channel.SEARCHED, trace_ref=trace_ref, as_of=as_of, when=when
        )

    def explain(
        self,
        recall_or_query: Recall | str,
        *,
        k: int = 5,
        hops: int = 1,
        types: Iterable[MemoryType | str] | None = None,
        as_of: float | None = None,
        when: When = "auto",
    ) -> Explanation:
        """Why a recall ranked what it did.

        Given a `Recall` or a recall id (``"rc_…"``) made by this agent, replays it from the
        access stream. Given any other text, runs a dry recall for it that touches nothing.
        Both include the best candidates just below the cut.
        """
        if not isinstance(recall_or_query, (Recall, str)):
            raise ValidationError(
                f"explain() takes a Recall or a str (recall id or query), got {type(recall_or_query).__name__}"
            )
        rid = recall_or_query.recall_id if isinstance(recall_or_query, Recall) else recall_or_query
        if isinstance(rid, str) and rid.startswith("rc_"):
            found = self._replay(rid)
            if found is not None:
                return found
        if isinstance(recall_or_query, Recall):
            raise NotFound("that recall was a dry run or belongs to another agent; nothing to replay")
        self._check_k(k, hops)
        _, explanation = self.engine.recaller.run(
            recall_or_query, vis=self._vis(as_of=as_of), k=k, hops=hops, types=self._types(types),
            channel=Channel.RECALLED, trace_ref=None, dry_run=True, when=when,
        )  # fmt: skip
        return explanation

    def _replay(self, recall_id: str) -> Explanation | None:
        conn = self._db()
        with translate(conn):
            row = conn.raw.execute(
                "SELECT ts, query, params, near_misses FROM engram_recalls WHERE recall_id = ? AND tenant = ? AND reader = ?",
                (recall_id, self.tenant, self.agent_id),
            ).fetchone()
        if row is None:
            return None
        ts, query, params_json, near_json = row
        params = json.loads(params_json)
        hits = [explained_from_json(h) for h in params["hits"]]
        near = [explained_from_json(h) for h in json.loads(near_json)]
        # Replay only what this handle may see now: a recall made under a higher cap (or before a
        # memory was forgotten or hidden) must not name it to a handle that cannot see it.
        ids = sorted({e.memory_id for e in (*hits, *near)})
        visible: set[str] = set()
        if ids:
            pred, vparams = self._vis(include_archived=True).sql("m")
            marks = ",".join(f":i{i}" for i in range(len(ids)))
            with translate(conn):
                visible = {
                    str(r[0])
                    for r in conn.raw.execute(
                        f"SELECT m.id FROM engram_memories m WHERE m.id IN ({marks}) AND {pred}",  # noqa: S608 - engine-built fragments, values bound
                        dict(vparams, **{f"i{i}": v for i, v in enumerate(ids)}),
                    )
                }
        return Explanation(
            recall_id=recall_id,
            query=query,
            reader=self.agent_id,
            ts=ts,
            k=params["k"],
            hops=params["hops"],
            hits=tuple(e for e in hits if e.memory_id in visible),
            near_misses=tuple(e for e in near if e.memory_id in visible),
            weights=params["weights"],
        )

    def accesses(self, memory_id: str) -> list[AccessRecord]:
        """The full access stream of a memory, oldest first.

        Another agent's accesses to a shared memory show who, when, how and how it scored, but not
        that agent's query text or trace reference: a query can say more than the memory it found.
        """
        conn = self._db()
        with translate(conn):
            n = int(self._row(conn.raw, memory_id)[0])
            records = access_records(conn.raw, "a.n = ?", (n,))
        return [r if r.reader == self.agent_id else dataclasses.replace(r, query=None, trace_ref=None) for r in records]

    def stats(self) -> Stats:
        """Usage statistics over the memories this agent can see (see `Stats`)."""
        conn = self._db()
        with translate(conn):
            return compute_stats(conn.raw, self._vis(include_archived=True))

    def export(self, *, include_archived: bool = False) -> list[dict[str, Any]]:
        """Every memory this agent can see, as JSON-ready dicts, with the edges whose two ends it
        can also see (oldest first; no access is logged). Suitable for backup or migration."""
        out = []
        for m in self.memories(include_archived=include_archived):
            record = dataclasses.asdict(m)
            (
                record.pop("recent_accesses"),
                record.pop("older_count"),
                record.pop("older_newest"),
                record.pop("older_oldest"),
            )
            record["edges"] = [dataclasses.asdict(e) for e in self.edges(m.id) if e.source == m.id]
            out.append(record)
        return out

    def memories(
        self, *, types: Sequence[MemoryType | str] | None = None, include_archived: bool = False
    ) -> list[Memory]:
        """Every memory this agent can see, oldest first (no access is logged). The archived husk a
        `forget` leaves (for the access stream's sake) is not a memory and is never listed."""
        vis = self._vis(include_archived=include_archived)
        pred, params = vis.sql("m")
        wanted = self._types(types)
        conn = self._db()
        with translate(conn):
            rows = conn.raw.execute(
                f"SELECT {MEMORY_COLUMNS} FROM engram_memories m WHERE {pred} AND m.id NOT LIKE 'forgotten:%' "  # noqa: S608 - engine-built fragments, values bound
                "ORDER BY m.n",
                params,
            ).fetchall()
        now = self.engine.clock()
        out = [self._annotated(r, now) for r in rows]
        return [m for m in out if wanted is None or m.type in wanted]


def _scrub_recall_log(db: sqlite3.Connection, tenant: str, memory_id: str, retired: str) -> None:
    """Rewrite the recall log's mentions of a forgotten memory (as a hit or a near miss): its
    title goes and its id becomes the retired one, so `explain(recall_id)` still shows that
    something ranked there, but not what it said. One scan of the tenant's recall records."""
    pattern = f'%"{memory_id}"%'
    rows = db.execute(
        "SELECT recall_id, params, near_misses FROM engram_recalls WHERE tenant = ? AND (params LIKE ? OR near_misses LIKE ?)",
        (tenant, pattern, pattern),
    ).fetchall()

    def scrub(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [dict(e, memory_id=retired, title="") if e.get("memory_id") == memory_id else e for e in entries]

    for recall_id, params, near in rows:
        p = json.loads(params)
        p["hits"] = scrub(p.get("hits", []))
        db.execute(
            "UPDATE engram_recalls SET params = ?, near_misses = ? WHERE recall_id = ?",
            (json.dumps(p), json.dumps(scrub(json.loads(near))), recall_id),
        )
