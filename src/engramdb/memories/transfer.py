"""Export and import as JSON Lines: what one agent can see, losslessly, and back again.

One JSON object per line, each with a ``kind``:

- ``engramdb-export`` (the first line): format version, tenant, agent, export time, counts.
- ``memory``: every field of the memory — id, type, owner, author, scores, strength,
  confidentiality, creation and record times, validity, archival, todo status, references (an
  intent's trigger among them), version — with its access history summary (the recent access
  times, and the count, newest and oldest of the older ones) and its earlier versions
  (``history``).
- ``edge``: a typed, weighted edge whose two ends the agent can see.
- ``tombstone``: what is left of a forgotten memory (fingerprint, who, when, why — no text), so a
  forgotten text stays forgotten in the store it is imported into.

Import writes through the storage ports as the importing agent (its tenant; records owned by it or
shared): into an empty store it restores every field; on a second run it changes nothing
(memories, edges and tombstones already there are skipped). A memory whose text a tombstone of the
target store already forbids stays forgotten and is skipped. Vectors are not exported: import
embeds with the target engine's memory embedder (stage ``"embed"``).

    with open("alice.jsonl", "w") as out:
        export_jsonl(me, out)
    report = import_jsonl(other_engine.agent("alice"), "alice.jsonl", progress=print)
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

from engramdb.errors import ValidationError
from engramdb.memories import model as mm
from engramdb.memories.model import Confidentiality, Edge, Memory, MemoryRef, MemoryVersion, Principal, Tombstone
from engramdb.memories.runtime import Acting, Runtime
from engramdb.memories.text import content_hash, pack_times
from engramdb.memories.writing import check_level, embed_texts
from engramdb.progress import Progress, report
from engramdb.retrieval.budget import approx_tokens
from engramdb.retrieval.keywords import cue_terms
from engramdb.storage.ports import NewMemory, Restored

_T = TypeVar("_T")

FORMAT = "engramdb-export"
VERSION = 1
#: memories written per transaction (an interrupted import keeps whole chunks; a rerun completes it)
CHUNK = 500

_MEMORY_FIELDS = frozenset(f.name for f in dataclasses.fields(Memory))
_KNOWN = _MEMORY_FIELDS | {"kind", "history", "edges"}


@dataclass(frozen=True, slots=True)
class ImportReport:
    """What an import did: counts of what it wrote and what it skipped, and why."""

    memories: int = 0
    memories_present: int = 0  # already in the store (a second run)
    memories_forgotten: int = 0  # a tombstone of the target store forbids their text
    edges: int = 0
    edges_present: int = 0
    tombstones: int = 0
    tombstones_present: int = 0


# -- export ------------------------------------------------------------------------------------


def export_records(agent: Acting) -> Iterator[dict[str, Any]]:
    """The lines of an export of everything `agent` can see, archived memories included."""
    rt, who = agent.runtime, agent.principal
    store = rt.store
    vis = who.visibility(include_archived=True)
    with store.snapshot():
        listed = store.memories.listing(vis)
        keys = store.memories.visible_ids(vis, [m.id for m in listed]) if listed else {}
        edges: list[Edge] = []
        for m in listed:
            edges.extend(e for e in store.edges.touching(vis, keys[m.id]) if e.source == m.id)
        stones = [s for s in store.tombstones.listing(who.tenant, ["", who.agent_id]) if s.confidentiality <= who.cap]
        histories = {m.id: store.versions.history(keys[m.id]) for m in listed if m.version > 1}
    yield {
        "kind": FORMAT, "version": VERSION, "tenant": who.tenant, "agent": who.agent_id, "exported_at": rt.clock(),
        "counts": {"memories": len(listed), "edges": len(edges), "tombstones": len(stones)},
    }  # fmt: skip
    for m in listed:
        record = dataclasses.asdict(m)
        for derived in ("retention", "prune_at"):
            record.pop(derived)
        record["refs"] = [r.to_json() for r in m.refs]
        record["history"] = [dataclasses.asdict(v) for v in histories.get(m.id, ())]
        yield {"kind": "memory", **record}
    for e in edges:
        yield {"kind": "edge", **dataclasses.asdict(e)}
    for s in stones:
        yield {"kind": "tombstone", **dataclasses.asdict(s)}


def export_jsonl(agent: Acting, out: IO[str] | str | os.PathLike[str]) -> int:
    """Write `export_records(agent)` as JSON Lines to a text stream or a file path; lines written."""
    if isinstance(out, (str, os.PathLike)):
        mm.check_path("out", out)
        try:
            fp = open(out, "w", encoding="utf-8")  # noqa: SIM115 - closed below; only the open is the caller's path
        except OSError as exc:
            raise ValidationError(
                f"cannot write the export to {str(out)!r} ({exc.strerror}); pass a writable file path or a text stream"
            ) from None
        with fp:
            return export_jsonl(agent, fp)
    if not callable(getattr(out, "write", None)):
        raise ValidationError(f"out must be a file path or a text stream with write(), got {type(out).__name__}")
    n = 0
    for record in export_records(agent):
        out.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
        n += 1
    return n


# -- import ------------------------------------------------------------------------------------


def read_jsonl(source: IO[str] | str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """The records of a JSON Lines file or stream; `ValidationError` naming a bad line."""
    if isinstance(source, (str, os.PathLike)):
        with _open_source(source) as fp:
            yield from read_jsonl(fp)
        return
    for i, line in enumerate(source, 1):
        if not isinstance(line, str):
            raise ValidationError(
                f"line {i} is not text: read from a text stream or a file path, not {type(line).__name__}"
            )
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValidationError(f"line {i} is not JSON ({exc.msg}); nothing after it was imported") from None
        if not isinstance(record, dict):
            raise ValidationError(f"line {i} is not a JSON object")
        yield record


def count_lines(path: str | os.PathLike[str]) -> int:
    """Non-empty lines of a file (the total an import's progress counts towards)."""
    with open(path, encoding="utf-8") as fp:
        return sum(1 for line in fp if line.strip())


def _open_source(source: str | os.PathLike[str]) -> IO[str]:
    mm.check_path("source", source)
    try:
        return open(source, encoding="utf-8")
    except OSError as exc:
        raise ValidationError(
            f"cannot read the import file {str(source)!r} ({exc.strerror}); pass a readable JSON Lines file or a text stream"
        ) from None


def _check_source(source: object) -> None:
    if isinstance(source, (str, os.PathLike)):
        _open_source(source).close()
    elif isinstance(source, (bytes, bytearray)) or not isinstance(source, Iterable):
        raise ValidationError(f"source must be a file path or a text stream, got {type(source).__name__}")


def import_jsonl(
    agent: Acting, source: IO[str] | str | os.PathLike[str], *, progress: Progress | None = None
) -> ImportReport:
    """Import a JSON Lines export (a path or a text stream) as `agent`; see the module docstring."""
    _check_source(source)  # before any record is read, so a bad path changes nothing
    total = count_lines(source) if isinstance(source, (str, os.PathLike)) and Path(source).is_file() else None
    return import_records(agent, read_jsonl(source), progress=progress, total=total)


def _level(value: object, what: str) -> Confidentiality:
    """A record's confidentiality: 0–3 or a level's name ("internal"), else `ValidationError`."""
    if isinstance(value, str):
        try:
            return Confidentiality[value.strip().upper()]
        except KeyError:
            names = ", ".join(c.name.lower() for c in Confidentiality)
            raise ValidationError(f"{what}: unknown confidentiality {value!r}; use 0–3 or one of {names}") from None
    return check_level(value)


def _checked(what: str, build: Callable[[], _T]) -> _T:
    """`build()`, with a field of the wrong type or form reported as a `ValidationError` naming
    the record, instead of the `KeyError` / `TypeError` / `ValueError` of the conversion."""
    try:
        return build()
    except (KeyError, TypeError, ValueError) as exc:
        detail = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
        raise ValidationError(f"{what} is not a valid export record ({detail}); nothing of it was imported") from None


def _memory(
    who: Principal, r: Mapping[str, Any], limits: mm.Limits = mm.DEFAULT_LIMITS
) -> tuple[NewMemory, Restored, list[MemoryVersion]]:
    """One memory record checked and turned into what the ports store."""
    unknown = set(r) - _KNOWN
    if unknown:
        raise ValidationError(f"memory {r.get('id')!r} has unknown field(s): {', '.join(sorted(unknown))}")
    mid = r.get("id")
    if not isinstance(mid, str) or not mid:
        raise ValidationError(f"a memory record needs an id, got {mid!r}")
    owner = r.get("owner", "")
    if owner not in ("", who.agent_id):
        raise ValidationError(
            f"memory {mid} belongs to agent {owner!r}; import it as that agent (this import acts as {who.agent_id})"
        )
    level = _level(r.get("confidentiality", 0), f"memory {mid}")
    if level > who.cap:
        raise ValidationError(
            f"memory {mid} is {level.name}, above this handle's cap {who.cap.name}; import with a higher cap"
        )
    content = mm.check_content(r.get("content"), limits)
    mtype = mm.check_type(r.get("type", "info"))
    imp, sal, conf = mm.check_scores(r.get("importance", 5.0), r.get("salience", 0.0), r.get("confidence", 1.0))
    # An export from before the field was kept says nothing: as the stores' migration reads old rows.
    source = r.get("importance_source", "default" if imp == 5.0 else "caller")
    if source not in mm.IMPORTANCE_SOURCES:
        raise ValidationError(
            f"memory {mid}: importance_source must be one of {', '.join(mm.IMPORTANCE_SOURCES)}, got {source!r}"
        )
    vfrom, vto = mm.check_validity(r.get("valid_from"), r.get("valid_to"))
    title = str(r.get("title") or "")
    tags = mm.check_labels("tags", r.get("tags"))
    recent = tuple(float(t) for t in r.get("recent_accesses") or ())
    created = float(r.get("created_at", 0.0))
    memory = Memory(
        id=mid, tenant=who.tenant, owner=owner, author=str(r.get("author") or owner or who.agent_id), type=mtype,
        title=title, content=content, tags=tags, entities=mm.check_labels("entities", r.get("entities")),
        n_chars=len(content), n_tokens=approx_tokens(content), n_sentences=mm.count_sentences(content),
        importance=imp, salience=sal, confidence=conf, confidentiality=max(level, who.floor), created_at=created,
        recorded_at=float(r.get("recorded_at", created)), valid_from=vfrom, valid_to=vto,
        status=mm.check_status(mtype, r.get("status")), refs=tuple(MemoryRef.from_json(x) for x in r.get("refs") or ()),
        last_access=None if r.get("last_access") is None else float(r["last_access"]),
        access_count=int(r.get("access_count", len(recent))), recent_accesses=recent, importance_source=source,
    )  # fmt: skip
    restored = Restored(
        strength=int(r.get("strength", 0)), version=int(r.get("version", 1)), archived=bool(r.get("archived", False)),
        old_count=int(r.get("older_count", 0)), old_newest=r.get("older_newest"), old_oldest=r.get("older_oldest"),
    )  # fmt: skip
    history = [MemoryVersion(**v) for v in r.get("history") or ()]
    new = NewMemory(memory, content_hash(content), cue_terms(title, content, *tags), pack_times(recent))
    return new, restored, history


class _Importer:
    def __init__(self, agent: Acting, progress: Progress | None, total: int | None) -> None:
        self.rt: Runtime = agent.runtime
        self.who: Principal = agent.principal
        self.progress = progress
        self.total = total
        self.done = 0
        self.counts = {f.name: 0 for f in dataclasses.fields(ImportReport)}
        self.edge_lines = 0
        self.pending: list[dict[str, Any]] = []
        self.edges: list[Mapping[str, Any]] = []
        store = self.rt.store
        self.stones_before = {
            (s.memory_id, s.forgotten_at) for s in store.tombstones.listing(self.who.tenant, ["", self.who.agent_id])
        }

    def tick(self, n: int = 1) -> None:
        self.done += n
        report(self.progress, "import", self.done, self.total)

    def memory(self, record: dict[str, Any]) -> None:
        self.pending.append(record)
        self.edges.extend({"kind": "edge", **e} for e in record.get("edges") or ())
        if len(self.pending) >= CHUNK:
            self.flush()

    def flush(self) -> None:
        records, self.pending = self.pending, []
        if not records:
            return
        rt, who, store = self.rt, self.who, self.rt.store
        parsed = [
            _checked(
                f"memory record {r.get('id')!r}",
                lambda r=r: _memory(who, {k: v for k, v in r.items() if k not in ("kind", "edges")}, rt.limits),  # type: ignore[misc]
            )
            for r in records
        ]
        fresh = [p for p in parsed if store.memories.key_of(who.tenant, p[0].memory.id) is None]
        self.counts["memories_present"] += len(parsed) - len(fresh)
        stones = store.tombstones.find(
            who.tenant, [p[0].memory.owner for p in fresh], [p[0].content_hash for p in fresh]
        )
        kept = [p for p in fresh if (p[0].memory.owner, p[0].content_hash) not in stones]
        self.counts["memories_forgotten"] += len(fresh) - len(kept)
        embedder = rt.embedder
        vectors = embed_texts(
            rt,
            [f"{p[0].memory.title}. {p[0].memory.content}" if p[0].memory.title else p[0].memory.content for p in kept],
        )
        if kept:
            with store.atomic():
                keys = store.memories.insert([p[0] for p in kept], store.changes.next())
                stamp = store.changes.next()
                for key, (_, restored, history) in zip(keys, kept, strict=True):
                    store.memories.restore(key, restored, stamp)
                    for v in history:
                        store.versions.add(key, v)
                if vectors is not None and embedder is not None:
                    store.vectors.put([(n, embedder.name, vectors[i].tobytes()) for i, n in enumerate(keys)])
        self.counts["memories"] += len(kept)
        self.tick(len(records))

    def finish_edges(self) -> None:
        rt, who, store = self.rt, self.who, self.rt.store
        if not self.edges:
            self.tick(self.edge_lines)
            return
        vis = who.visibility(include_archived=True)
        ids = sorted({str(e.get(end)) for e in self.edges for end in ("source", "target")})
        keys = store.memories.visible_ids(vis, ids)
        rows: dict[float, list[tuple[int, int, str, float]]] = {}
        for e in self.edges:
            src, dst = keys.get(str(e.get("source"))), keys.get(str(e.get("target")))
            if src is None or dst is None:
                raise ValidationError(
                    f"edge {e.get('source')!r} → {e.get('target')!r} names a memory that is not in the store "
                    "(or not visible to this agent); edges were not imported"
                )
            etype = mm.check_edge_type(e.get("type", "related"))
            rows.setdefault(float(e.get("created_at", rt.clock())), []).append(
                (src, dst, etype.value, float(e.get("weight", 1.0)))
            )
        written = 0
        with store.atomic():
            for created, batch in rows.items():
                written += store.edges.put(who.tenant, batch, now=created, by=who.agent_id, replace=False)
        self.counts["edges"] += written
        self.counts["edges_present"] += len(self.edges) - written
        self.tick(self.edge_lines)

    def tombstone(self, record: Mapping[str, Any]) -> None:
        who = self.who
        owner = record.get("owner", "")
        if owner not in ("", who.agent_id):
            raise ValidationError(
                f"tombstone of {record.get('memory_id')!r} belongs to agent {owner!r}; import as that agent"
            )
        what = f"tombstone record {record.get('memory_id')!r}"
        stone = _checked(what, lambda: Tombstone(
            memory_id=str(record["memory_id"]), tenant=who.tenant, owner=owner, content_hash=str(record["content_hash"]),
            forgotten_by=str(record.get("forgotten_by", "")), forgotten_at=float(record.get("forgotten_at", 0.0)),
            reason=str(record.get("reason", "")),
            confidentiality=_level(record.get("confidentiality", int(Confidentiality.RESTRICTED)), what),
        ))  # fmt: skip
        if stone.confidentiality > who.cap:
            raise ValidationError(
                f"tombstone of {stone.memory_id!r} is {stone.confidentiality.name}, above this handle's cap "
                f"{who.cap.name}; import with a higher cap"
            )
        if (stone.memory_id, stone.forgotten_at) in self.stones_before:
            self.counts["tombstones_present"] += 1
        else:
            self.rt.store.tombstones.add(stone)
            self.stones_before.add((stone.memory_id, stone.forgotten_at))
            self.counts["tombstones"] += 1
        self.tick()


def import_records(
    agent: Acting, records: Iterable[Mapping[str, Any]], *, progress: Progress | None = None, total: int | None = None
) -> ImportReport:
    """Import export lines (or the dicts `Agent.export` gives) as `agent`; an `ImportReport`.

    `total` is the number of records, for `progress` (stage ``"import"``, records done).
    """
    imp = _Importer(agent, progress, total)
    report(progress, "import", 0, total)
    first = True
    tombstones: list[Mapping[str, Any]] = []
    for record in records:
        if not isinstance(record, Mapping):
            raise ValidationError(f"each record must be a JSON object, got {type(record).__name__}")
        kind = record.get("kind", "memory")
        if first and kind == FORMAT:
            if record.get("version") != VERSION:
                raise ValidationError(
                    f"this file is export format version {record.get('version')!r}; this engramdb reads version {VERSION}"
                )
            imp.tick()
        elif kind == "memory":
            imp.memory(dict(record))
        elif kind == "edge":
            imp.edges.append(record)
            imp.edge_lines += 1
        elif kind == "tombstone":
            tombstones.append(record)
        else:
            raise ValidationError(f"unknown record kind {kind!r}; expected memory, edge or tombstone")
        first = False
    imp.flush()
    imp.finish_edges()
    # Tombstones last: a memory of this very file is checked only against the stones the store
    # held before (the file's own live memories were there in the store it came from).
    with imp.rt.store.atomic():
        for stone in tombstones:
            imp.tombstone(stone)
    if total is None:
        report(progress, "import", imp.done, imp.done)
    return ImportReport(**imp.counts)


__all__ = [
    "CHUNK",
    "FORMAT",
    "VERSION",
    "ImportReport",
    "count_lines",
    "export_jsonl",
    "export_records",
    "import_jsonl",
    "import_records",
    "read_jsonl",
]
