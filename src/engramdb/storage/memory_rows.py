"""A memory row as both SQL backends store it: its columns, the `Memory` a row reads back as, and
the `Visibility` rule as a SQL condition over it.

Shared by the SQLite and PostgreSQL adapters (the tables have the same columns; JSON text for
tags, entities and refs, the packed access ring as bytes)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from engramdb.memories.filters import read_metadata
from engramdb.memories.model import (
    IMPORTANCE_SOURCES,
    Confidentiality,
    Memory,
    MemoryRef,
    MemoryType,
    TodoStatus,
    Visibility,
)
from engramdb.memories.text import unpack_times
from engramdb.storage.ports import Job

MEMORY_COLUMNS = (
    "n, id, tenant, owner, author, type, title, content, tags, entities, n_chars, n_tokens, n_sentences, "
    "importance, salience, confidence, strength, confidentiality, created_at, recorded_at, valid_from, "
    "valid_to, archived, status, refs, version, ring, access_count, old_count, old_newest, old_oldest, last_access, "
    "imp_source, session, metadata"
)


# Members by stored value: a dict lookup, cheaper than an enum call (two a row); a value
# no member has still raises the enum's own ValueError (`_member`).
_TYPES = {t.value: t for t in MemoryType}
_LEVELS = {c.value: c for c in Confidentiality}


def _member(members: dict[Any, Any], enum: Any, value: Any) -> Any:
    found = members.get(value)
    return enum(value) if found is None else found


#: the number a store keeps for each `Memory.importance_source`
SOURCE_CODES = {name: i for i, name in enumerate(IMPORTANCE_SOURCES)}
#: `imp_source` of a caller's importance: reflection never rescores these
CALLER = SOURCE_CODES["caller"]
REFLECTION = SOURCE_CODES["reflection"]


def labels(text: str) -> tuple[str, ...]:
    """Tags or entities as stored (JSON text) as a tuple."""
    return tuple(json.loads(text)) if text and text != "[]" else ()  # most have none: no parse


def row_to_memory(row: Sequence[Any]) -> Memory:
    """A `Memory` from a row selected with `MEMORY_COLUMNS`."""
    (
        _n, mid, tenant, owner, author, mtype, title, content, tags, entities, n_chars, n_tokens, n_sent,
        imp, sal, conf, strength, level, created, recorded, vfrom, vto, archived, status, refs, version,
        ring, count, old_count, old_newest, old_oldest, last, imp_source, session, metadata,
    ) = row  # fmt: skip
    return Memory(
        id=mid,
        tenant=tenant,
        owner=owner,
        author=author,
        type=_member(_TYPES, MemoryType, mtype),
        title=title,
        content=content,
        tags=labels(tags),
        entities=labels(entities),
        n_chars=n_chars,
        n_tokens=n_tokens,
        n_sentences=n_sent,
        importance=imp,
        salience=sal,
        confidence=conf,
        strength=strength,
        confidentiality=_member(_LEVELS, Confidentiality, level),
        created_at=created,
        recorded_at=recorded,
        valid_from=vfrom,
        valid_to=vto,
        archived=bool(archived),
        status=TodoStatus(status) if status else None,
        refs=tuple(MemoryRef.from_json(r) for r in json.loads(refs)) if refs != "[]" else (),
        version=version,
        last_access=last,
        access_count=count,
        recent_accesses=unpack_times(ring),
        older_count=old_count,
        older_newest=old_newest,
        older_oldest=old_oldest,
        importance_source=IMPORTANCE_SOURCES[imp_source],
        session=session,
        metadata=read_metadata(metadata),
    )


#: a memory's tags as a JSON array text (stored as '' when it has none), for alias `{a}`
TAGS_JSON = "CASE WHEN {a}.tags = '' THEN '[]' ELSE {a}.tags END"


def listing_filter(
    vis: Visibility,
    *,
    types: Sequence[str] | None,
    tag: str | None,
    contains: str | None,
    archived_only: bool,
    placeholder: str,
    position: str,
    tag_test: str,
    alias: str = "m",
) -> tuple[str, dict[str, Any]]:
    """`vis` and a listing's filters (see `MemoryRows.page`) as one SQL condition and its
    parameters. The dialect gives its named `placeholder`, its substring `position` function
    (``instr`` / ``strpos``: both take the haystack first) and `tag_test`, a condition over
    ``{tags}`` (the JSON array text) and ``{tag}`` (the parameter)."""
    cond, params = visibility_predicate(vis, alias, placeholder)
    a, p = alias, placeholder.format
    parts = [cond]
    if types:
        names = [f"l_t{i}" for i in range(len(types))]
        parts.append(f"{a}.type IN ({', '.join(p(n) for n in names)})")
        params.update(zip(names, types, strict=True))
    if tag is not None:
        parts.append(tag_test.format(tags=TAGS_JSON.format(a=a), tag=p("l_tag")))
        params["l_tag"] = tag
    if contains:
        q = p("l_q")
        parts.append(
            "(" + " OR ".join(f"{position}(lower({a}.{c}), lower({q})) > 0" for c in ("title", "content", "tags")) + ")"
        )
        params["l_q"] = contains
    if archived_only:
        parts.append(f"{a}.archived = 1")
    return " AND ".join(parts), params


def visibility_predicate(vis: Visibility, alias: str, placeholder: str) -> tuple[str, dict[str, Any]]:
    """`vis` as a SQL condition over the memory table (to AND into a WHERE) and its parameters,
    whose names start ``v_``. `placeholder` is the dialect's form of a named parameter, with
    ``{}`` for the name (SQLite ``:{}``, psycopg ``%({})s``); everything else is standard SQL."""
    a, p = alias, placeholder.format
    parts = [f"{a}.tenant = {p('v_tenant')}", f"{a}.confidentiality <= {p('v_cap')}"]
    params: dict[str, Any] = {"v_tenant": vis.tenant, "v_cap": int(vis.cap)}
    if vis.own_only:
        parts.append(f"{a}.owner = {p('v_reader')}")
        params["v_reader"] = vis.reader
    elif not vis.cross_agent:
        parts.append(f"({a}.owner = '' OR {a}.owner = {p('v_reader')})")
        params["v_reader"] = vis.reader
    if not vis.include_archived:
        parts.append(f"{a}.archived = 0")
    if vis.as_of is not None:
        parts.append(
            f"({a}.valid_from IS NULL OR {a}.valid_from <= {p('v_as_of')}) "
            f"AND ({a}.valid_to IS NULL OR {a}.valid_to > {p('v_as_of')})"
        )
        params["v_as_of"] = vis.as_of
    if vis.where is not None:
        cond, named = vis.where.sql(a, placeholder, "sqlite" if placeholder == ":{}" else "postgres")
        parts.append(cond)
        params.update(named)
    return " AND ".join(parts), params


#: the columns of ``engram_jobs`` a `Job` reads back from, in `job_of`'s order
JOB_COLUMNS = (
    "job_id, tenant, agent, memory_ids, created_at, status, attempts, not_before, lease_until, worker, "
    "last_error, done_at, decisions"
)


def job_of(row: Sequence[Any]) -> Job:
    """The `Job` of one ``engram_jobs`` row selected as `JOB_COLUMNS`."""
    job_id, tenant, agent, ids, created, status, attempts, not_before, lease, worker, error, done, decisions = row
    return Job(
        job_id, tenant, agent, tuple(json.loads(ids)), float(created), status, int(attempts), float(not_before),
        None if lease is None else float(lease), worker, error, None if done is None else float(done),
        tuple(json.loads(decisions)),
    )  # fmt: skip
