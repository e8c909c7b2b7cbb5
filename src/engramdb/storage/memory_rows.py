"""A memory row as both SQL backends store it: its columns, and the `Memory` a row reads back as.

Shared by the SQLite and PostgreSQL adapters (the tables have the same columns; JSON text for
tags, entities and refs, the packed access ring as bytes)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from engramdb.memories.model import Confidentiality, Memory, MemoryRef, MemoryType, TodoStatus
from engramdb.memories.text import unpack_times

MEMORY_COLUMNS = (
    "n, id, tenant, owner, author, type, title, content, tags, entities, n_chars, n_tokens, n_sentences, "
    "importance, salience, confidence, strength, confidentiality, created_at, recorded_at, valid_from, "
    "valid_to, archived, status, refs, version, ring, access_count, old_count, old_newest, old_oldest, last_access"
)


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
