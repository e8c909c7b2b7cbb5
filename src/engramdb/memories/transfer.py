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
target store already forbids stays forgotten and is skipped, and so are its edges. Vectors are
not exported: import embeds with the target engine's memory embedder (stage ``"embed"``).

It reads the records twice: first it checks every one and decides every id, so any refusal comes
before the first write; then it writes. A memory keeps its id when it comes from the importing
tenant (a record naming none, in a file whose first line names none, counts as such) and no
memory the importer cannot see holds that id. Otherwise — an export of tenant ``acme`` imported into ``globex``, or an id held by
another agent's private memory — it gets a derived id, a digest of (importing tenant, old id), and
every edge and tombstone naming it follows. Being a function of the file and the tenant, the
derived id is found again by a rerun (nothing changes) without a mapping kept in the store, and is
the same on both backends; `ImportReport.reidentified` counts the memories written under one.

    with open("alice.jsonl", "w") as out:
        export_jsonl(me, out)
    report = import_jsonl(other_engine.agent("alice"), "alice.jsonl", progress=print)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

from engramdb.errors import BackendError, ConstraintError, ValidationError
from engramdb.memories import model as mm
from engramdb.memories.filters import check_metadata, check_session
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
_MAX_ID = 1_000  # characters; minted ids are an agent id, a colon and 24 hex digits
_SPOOL = 8 << 20  # bytes of a streamed import kept in memory before the rest goes to a temporary file

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
    #: of `memories`, how many were written under a new id: their own was held by another
    #: tenant's memory or by one this agent cannot see, or they come from another tenant
    reidentified: int = 0
    edges_forgotten: int = 0  # not written: one of their ends is in `memories_forgotten`


# -- export ------------------------------------------------------------------------------------


def export_records(agent: Acting) -> Iterator[dict[str, Any]]:
    """The lines of an export of everything `agent` can see, archived memories included."""
    rt, who = agent._runtime, agent._principal
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


def export_jsonl(agent: Acting, out: IO[str] | str | os.PathLike[str], *, progress: Progress | None = None) -> int:
    """Write `export_records(agent)` as JSON Lines to a text stream or a file path; lines written.
    `progress` hears stage ``export`` with (lines written, lines in the export)."""
    if isinstance(out, (str, os.PathLike)):
        mm.check_path("out", out)
        try:
            fp = open(out, "w", encoding="utf-8")  # noqa: SIM115 - closed below; only the open is the caller's path
        except OSError as exc:
            raise ValidationError(
                f"cannot write the export to {str(out)!r} ({exc.strerror}); pass a writable file path or a text stream"
            ) from None
        with fp:
            return export_jsonl(agent, fp, progress=progress)
    if not callable(getattr(out, "write", None)):
        raise ValidationError(f"out must be a file path or a text stream with write(), got {type(out).__name__}")
    n = 0
    total: int | None = None
    for record in export_records(agent):
        if total is None:  # the header counts what follows it
            total = 1 + sum(record["counts"].values())
            report(progress, "export", 0, total)
        out.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
        n += 1
        if n % _EXPORT_EVERY == 0 and n < total:
            report(progress, "export", n, total)
    report(progress, "export", n, n)
    return n


#: how many lines an export writes between two progress reports
_EXPORT_EVERY = 256


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
    if isinstance(source, (str, os.PathLike)):
        total = count_lines(source) if Path(source).is_file() else None
        return _run(agent, lambda: read_jsonl(source), progress, total)
    # A stream is read once: its lines are kept aside (in memory, then on disk past a few MB)
    # for the second pass, which writes what the first has checked.
    with tempfile.SpooledTemporaryFile(max_size=_SPOOL, mode="w+", encoding="utf-8", newline="\n") as spool:
        for i, line in enumerate(source, 1):
            if not isinstance(line, str):
                raise ValidationError(
                    f"line {i} is not text: read from a text stream or a file path, not {type(line).__name__}"
                )
            spool.write(line if line.endswith("\n") else line + "\n")

        def again() -> Iterator[dict[str, Any]]:
            spool.seek(0)
            return read_jsonl(spool)

        return _run(agent, again, progress, None)


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
    mm.check_text("a memory id", mid, _MAX_ID)
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
        session=None if r.get("session") is None else check_session(r["session"]),
        metadata=check_metadata(r.get("metadata"), limits.metadata_chars),
    )  # fmt: skip
    restored = Restored(
        strength=int(r.get("strength", 0)), version=int(r.get("version", 1)), archived=bool(r.get("archived", False)),
        old_count=int(r.get("older_count", 0)), old_newest=r.get("older_newest"), old_oldest=r.get("older_oldest"),
    )  # fmt: skip
    history = _history(mid, r.get("history") or (), restored.version)
    new = NewMemory(memory, content_hash(content), cue_terms(title, content, *tags), pack_times(recent))
    return new, restored, history


#: (an id as the file names it, whether it comes from another tenant than the importer's)
_Key = tuple[str, bool]
_TOKEN = re.compile(r"[0-9a-f]{24}")


def _derived_id(tenant: str, old: str, attempt: int) -> str:
    """The id the memory `old` is given in `tenant` when it cannot keep its own.

    A digest of (tenant, old id, attempt), so a rerun of the same import finds the same id again
    without any mapping kept in the store, and two tenants importing one file get different ids.
    The author prefix and the token's second (`text.id_tokens`) are kept: the id still says who
    wrote it and when it was minted, and sorts where the original did.
    """
    prefix, sep, token = old.rpartition(":")
    digest = hashlib.sha256(f"{tenant}\0{old}\0{attempt}".encode("utf-8", "surrogatepass")).hexdigest()
    second = token[:8] if sep and _TOKEN.fullmatch(token) else digest[16:24]
    return f"{prefix if sep else old}:{second}{digest[:16]}"


def _tenant_of(record: Mapping[str, Any], default: str | None, what: str) -> str | None:
    tenant = record.get("tenant", default)
    if tenant is not None and not isinstance(tenant, str):
        raise ValidationError(f"{what} names its tenant as {tenant!r}; a tenant is a str")
    return tenant


@dataclass(slots=True)
class _PlannedEdge:
    #: the ends as the file names them, then (after the whole file is read) their keys
    source: _Key
    target: _Key
    type: str
    weight: float
    created_at: float
    tenant: str | None


def _history(mid: str, raw: object, version: int) -> list[MemoryVersion]:
    """A record's earlier versions, each numbered once and below the record's own `version`."""
    if not isinstance(raw, (list, tuple)):
        raise ValidationError(f"memory {mid}: history must be a list of earlier versions")
    out: list[MemoryVersion] = []
    for v in raw:
        if not isinstance(v, Mapping):
            raise ValidationError(f"memory {mid}: each earlier version must be an object, got {type(v).__name__}")
        out.append(MemoryVersion(
            version=int(v["version"]), title=str(v.get("title") or ""), content=str(v["content"]),
            changed_at=float(v["changed_at"]), changed_by=str(v.get("changed_by") or ""),
        ))  # fmt: skip
    numbers = [v.version for v in out]
    if len(set(numbers)) < len(numbers) or any(not 1 <= n < version for n in numbers):
        raise ValidationError(
            f"memory {mid} is version {version} with earlier versions numbered {numbers}: each earlier "
            "version needs its own number from 1 to the memory's version minus one"
        )
    return out


class _Importer:
    """Two passes over the records: `plan` checks every record and decides every id before the
    first write (so a refusal changes nothing), `write` stores what the plan kept."""

    def __init__(self, agent: Acting, progress: Progress | None, total: int | None) -> None:
        self.rt: Runtime = agent._runtime
        self.who: Principal = agent._principal
        self.progress = progress
        self.total = total
        self.done = 0
        self.counts = {f.name: 0 for f in dataclasses.fields(ImportReport)}
        self.header_tenant: str | None = None
        self.keys: list[_Key] = []  # of the file's memory records, in order
        self.first_key: dict[str, _Key] = {}  # a file id → the key of its first memory record
        self.edges: list[_PlannedEdge] = []
        self.edge_lines = 0
        self.named_stones: list[tuple[Tombstone, tuple[str, str | None]]] = []
        self.stones: list[tuple[Tombstone, _Key]] = []
        self.ids: dict[_Key, tuple[str, bool]] = {}  # → (its id here, already held by a memory the importer sees)
        self.forbidden: set[_Key] = set()  # a tombstone of the target store forbids their text
        self.written: set[str] = set()
        store = self.rt.store
        self.stones_before = {
            (s.memory_id, s.forgotten_at) for s in store.tombstones.listing(self.who.tenant, ["", self.who.agent_id])
        }

    def tick(self, n: int = 1) -> None:
        self.done += n
        report(self.progress, "import", self.done, self.total)

    def key(self, memory_id: str, tenant: str | None) -> _Key:
        return memory_id, tenant is not None and tenant != self.who.tenant

    def named(self, memory_id: str, tenant: str | None) -> _Key:
        """The key of a memory an edge or a tombstone names: that of the file's memory record of
        this id if there is one, else the id as from the tenant the naming record comes from."""
        return self.first_key.get(memory_id) or self.key(memory_id, tenant)

    # -- pass 1 --------------------------------------------------------------------------------

    def plan(self, records: Iterable[object]) -> None:
        first = True
        hashes: dict[_Key, tuple[str, str]] = {}
        for record in records:
            if not isinstance(record, Mapping):
                raise ValidationError(f"each record must be a JSON object, got {type(record).__name__}")
            kind = record.get("kind", "memory")
            if first and kind == FORMAT:
                if record.get("version") != VERSION:
                    raise ValidationError(
                        f"this file is export format version {record.get('version')!r}; this engramdb reads version {VERSION}"
                    )
                self.header_tenant = _tenant_of(record, None, "the export's first line")
            elif kind == "memory":
                new, _, _ = self.parse(record)
                mid = new.memory.id
                tenant = _tenant_of(record, self.header_tenant, f"memory {mid}")
                key = self.key(mid, tenant)
                self.keys.append(key)
                self.first_key.setdefault(mid, key)
                hashes.setdefault(key, (new.memory.owner, new.content_hash))
                nested = record.get("edges") or ()
                if not isinstance(nested, (list, tuple)):
                    raise ValidationError(f"memory {mid}: edges must be a list of edge records")
                for e in nested:
                    if not isinstance(e, Mapping):
                        raise ValidationError(f"memory {mid}: each edge must be an object, got {type(e).__name__}")
                    self.edge({"source": mid, **e}, tenant)
            elif kind == "edge":
                self.edge(record, self.header_tenant)
                self.edge_lines += 1
            elif kind == "tombstone":
                self.tombstone(record)
            else:
                raise ValidationError(f"unknown record kind {kind!r}; expected memory, edge or tombstone")
            first = False
        for e in self.edges:
            e.source, e.target = self.named(e.source[0], e.tenant), self.named(e.target[0], e.tenant)
        self.stones = [(stone, self.named(stone.memory_id, tenant)) for stone, (_, tenant) in self.named_stones]
        self.resolve([*hashes, *(k for e in self.edges for k in (e.source, e.target)), *(k for _, k in self.stones)])
        fresh = [k for k in hashes if not self.ids[k][1]]
        store, tenant = self.rt.store, self.who.tenant
        for start in range(0, len(fresh), CHUNK):
            part = fresh[start : start + CHUNK]
            stones = store.tombstones.find(tenant, [hashes[k][0] for k in part], [hashes[k][1] for k in part])
            self.forbidden.update(k for k in part if hashes[k] in stones)
        for e in self.edges:
            for k in (e.source, e.target):
                if k not in hashes and not self.ids[k][1]:
                    raise ValidationError(
                        f"edge {e.source[0]!r} → {e.target[0]!r} names a memory that is not in the import nor "
                        "in the store (or not visible to this agent); nothing was imported"
                    )

    def parse(self, record: Mapping[str, Any]) -> tuple[NewMemory, Restored, list[MemoryVersion]]:
        rt, who = self.rt, self.who
        fields = {k: v for k, v in record.items() if k not in ("kind", "edges")}
        return _checked(f"memory record {record.get('id')!r}", lambda: _memory(who, fields, rt.limits))

    def edge(self, e: Mapping[str, Any], tenant: str | None) -> None:
        what = f"edge {e.get('source')!r} → {e.get('target')!r}"
        tenant = _tenant_of(e, tenant, what)
        ends = e.get("source"), e.get("target")
        if not all(isinstance(x, str) and x for x in ends):
            raise ValidationError(f"{what} needs the ids of both its memories")
        etype = mm.check_edge_type(e.get("type", "related"))
        weight, created = _checked(
            f"{what} record", lambda: (float(e.get("weight", 1.0)), float(e.get("created_at", self.rt.clock())))
        )
        if not (math.isfinite(weight) and math.isfinite(created)):
            raise ValidationError(f"{what}: weight and created_at must be finite numbers")
        self.edges.append(
            _PlannedEdge((str(ends[0]), False), (str(ends[1]), False), etype.value, weight, created, tenant)
        )

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
        tenant = _tenant_of(record, self.header_tenant, what)
        self.named_stones.append((stone, (stone.memory_id, tenant)))

    def candidate(self, key: _Key, attempt: int) -> str:
        old, foreign = key
        if not foreign:
            if attempt == 0:
                return old
            attempt -= 1
        return _derived_id(self.who.tenant, old, attempt)

    def resolve(self, keys: Iterable[_Key]) -> None:
        """Decide the id of every memory the import names: its own when it comes from this tenant
        and no memory the importer cannot see holds it; else the first derived id that is free or
        held by a memory the importer sees (the same memory, from an earlier run of this import)."""
        store, who = self.rt.store, self.who
        vis = who.visibility(include_archived=True)
        attempts = dict.fromkeys(keys, 0)
        # A memory of another tenant that this tenant already holds under its own id is that
        # memory: so were copies made before imports re-identified (PostgreSQL kept the id).
        foreign = sorted({k[0] for k in attempts if k[1]})
        for mid in store.memories.visible_ids(vis, foreign):
            self.ids[mid, True] = (mid, True)
            del attempts[mid, True]
        while attempts:
            wanted = {k: self.candidate(k, n) for k, n in attempts.items()}
            ids = sorted(set(wanted.values()))
            seen = store.memories.visible_ids(vis, ids)
            taken = store.memories.taken_ids(who.tenant, [i for i in ids if i not in seen])
            retry: dict[_Key, int] = {}
            for k, mid in wanted.items():
                if mid in taken:
                    retry[k] = attempts[k] + 1
                else:
                    self.ids[k] = (mid, mid in seen)
            attempts = retry

    # -- pass 2 --------------------------------------------------------------------------------

    def write(self, records: Iterable[Mapping[str, Any]]) -> None:
        pending: list[tuple[_Key, Mapping[str, Any]]] = []
        planned = iter(self.keys)
        first = True
        for record in records:
            kind = record.get("kind", "memory")
            if first and kind == FORMAT:
                self.tick()
            elif kind == "memory":
                key = next(planned, None)
                if key is None or key[0] != record.get("id"):
                    raise ValidationError(self.changed())
                pending.append((key, record))
                if len(pending) >= CHUNK:
                    self.flush(pending)
                    pending = []
            first = False
        if next(planned, None) is not None:
            raise ValidationError(self.changed())
        self.flush(pending)
        self.write_edges()
        self.write_tombstones()

    def changed(self) -> str:
        return (
            "the import source changed while it was read (its memory records differ from the first reading); "
            f"written so far: {self.report()}; import a file nobody writes to meanwhile, a rerun completes it"
        )

    def flush(self, records: list[tuple[_Key, Mapping[str, Any]]]) -> None:
        if not records:
            return
        rt, store = self.rt, self.rt.store
        todo: list[tuple[_Key, NewMemory, Restored, list[MemoryVersion]]] = []
        for key, record in records:
            mid, present = self.ids[key]
            if present or mid in self.written:
                self.counts["memories_present"] += 1
                continue
            if key in self.forbidden:
                self.counts["memories_forgotten"] += 1
                continue
            try:
                new, restored, history = self.parse(record)
            except ValidationError:
                raise ValidationError(self.changed()) from None
            self.written.add(mid)
            todo.append((key, new, restored, history))
        if not todo:
            self.tick(len(records))
            return
        embedder = rt.embedder
        texts = [f"{m.title}. {m.content}" if m.title else m.content for m in (t[1].memory for t in todo)]
        vectors = embed_texts(rt, texts)
        with store.atomic():
            # Decided again under the write lock: another writer may have stored one of these ids
            # since the plan (a concurrent run of this import, or another tenant's on SQLite).
            self.resolve(k for k, *_ in todo)
            kept: list[tuple[int, NewMemory, Restored, list[MemoryVersion]]] = []
            renamed = 0
            for i, (key, new, restored, history) in enumerate(todo):
                mid, present = self.ids[key]
                if present:
                    self.counts["memories_present"] += 1
                    continue
                if mid != new.memory.id:
                    new = dataclasses.replace(new, memory=dataclasses.replace(new.memory, id=mid))
                    renamed += 1
                self.written.add(mid)
                kept.append((i, new, restored, history))
            if not kept:
                self.tick(len(records))
                return
            try:
                rows = store.memories.insert([t[1] for t in kept], store.changes.next(self.who.tenant))
            except ConstraintError:
                raise BackendError(
                    "another writer stored one of these memories while this import wrote them; written so far: "
                    f"{self.report()}; run the import again, it skips what is already there"
                ) from None
            stamp = store.changes.next(self.who.tenant)
            for n, (_, _, restored, history) in zip(rows, kept, strict=True):
                store.memories.restore(n, restored, stamp)
                for v in history:
                    store.versions.add(n, v)
            if vectors is not None and embedder is not None:
                store.vectors.put(
                    [(n, embedder.name, vectors[t[0]].tobytes()) for n, t in zip(rows, kept, strict=True)]
                )
        self.counts["memories"] += len(kept)
        self.counts["reidentified"] += renamed
        self.tick(len(records))

    def write_edges(self) -> None:
        who, store = self.who, self.rt.store
        live = [e for e in self.edges if e.source not in self.forbidden and e.target not in self.forbidden]
        self.counts["edges_forgotten"] += len(self.edges) - len(live)
        if not live:
            self.tick(self.edge_lines)
            return
        vis = who.visibility(include_archived=True)
        keys = store.memories.visible_ids(vis, sorted({self.ids[k][0] for e in live for k in (e.source, e.target)}))
        rows: dict[float, list[tuple[int, int, str, float]]] = {}
        for e in live:
            src, dst = keys.get(self.ids[e.source][0]), keys.get(self.ids[e.target][0])
            if src is None or dst is None:  # hidden or removed since the plan by another writer
                raise ValidationError(
                    f"edge {e.source[0]!r} → {e.target[0]!r} names a memory no longer visible to this agent; "
                    f"written so far: {self.report()}; edges were not imported"
                )
            rows.setdefault(e.created_at, []).append((src, dst, e.type, e.weight))
        written = 0
        with store.atomic():
            for created, batch in rows.items():
                written += store.edges.put(who.tenant, batch, now=created, by=who.agent_id, replace=False)
        self.counts["edges"] += written
        self.counts["edges_present"] += len(live) - written
        self.tick(self.edge_lines)

    def write_tombstones(self) -> None:
        # Tombstones last: a memory of this very file is checked only against the stones the store
        # held before (the file's own live memories were there in the store it came from).
        with self.rt.store.atomic():
            for stone, key in self.stones:
                mid = self.ids[key][0]
                if mid != stone.memory_id:
                    stone = dataclasses.replace(stone, memory_id=mid)
                if {(mid, stone.forgotten_at), (key[0], stone.forgotten_at)} & self.stones_before:
                    self.counts["tombstones_present"] += 1
                else:
                    self.rt.store.tombstones.add(stone)
                    self.stones_before.add((stone.memory_id, stone.forgotten_at))
                    self.counts["tombstones"] += 1
                self.tick()

    def report(self) -> ImportReport:
        return ImportReport(**self.counts)


def import_records(
    agent: Acting, records: Iterable[Mapping[str, Any]], *, progress: Progress | None = None, total: int | None = None
) -> ImportReport:
    """Import export lines (or the dicts `Agent.export` gives) as `agent`; an `ImportReport`.

    `total` is the number of records, for `progress` (stage ``"import"``, records done). The
    records are read twice (checked, then written); an iterator is held in a list for that.
    """
    again = records if isinstance(records, Sequence) else list(records)
    return _run(agent, lambda: again, progress, total)


def _run(
    agent: Acting,
    records: Callable[[], Iterable[Mapping[str, Any]]],
    progress: Progress | None,
    total: int | None,
) -> ImportReport:
    imp = _Importer(agent, progress, total)
    imp.plan(records())
    report(progress, "import", 0, total)
    imp.write(records())
    if total is None:
        report(progress, "import", imp.done, imp.done)
    return imp.report()


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
