"""The contract suites run on whichever backend ``pytest --backend=NAME`` picks (default sqlite).

`backend` is the storage of an engine built by the shared `make_engine` fixture, migrated and ready;
`put` stores memories through the ports alone, as the services do.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from engramdb import DynamicMemoryEngine
from engramdb.memories.model import Confidentiality, Memory, MemoryType
from engramdb.memories.text import content_hash, pack_times
from engramdb.retrieval.keywords import cue_terms
from engramdb.storage.ports import Backend, NewMemory

_ids = itertools.count(1)


@pytest.fixture
def backend(engine: DynamicMemoryEngine) -> Backend:
    return engine._backend


def memory(**fields: Any) -> Memory:
    """A memory record with defaults a test can override (`id` unique unless given)."""
    owner = fields.pop("owner", "alice")
    values: dict[str, Any] = {
        "id": f"{owner or 'shared'}:{next(_ids):012x}",
        "tenant": "default",
        "owner": owner,
        "author": owner or "alice",
        "type": MemoryType.INFO,
        "title": "",
        "content": "a memory",
        "created_at": 1_000.0,
        "recorded_at": 1_000.0,
        "confidentiality": Confidentiality.PUBLIC,
        "last_access": 1_000.0,
        "access_count": 1,
        "importance_source": "default",  # as `remember` without an importance: reflection may rescore it
    }
    values.update(fields)
    return Memory(**values)


def put(backend: Backend, memories: Sequence[Memory]) -> list[int]:
    """Insert `memories` through the ports in one unit of work; their keys."""
    items = [
        NewMemory(m, content_hash(m.content), cue_terms(m.title, m.content, *m.tags), pack_times([m.created_at]))
        for m in memories
    ]
    with backend.atomic():
        return backend.memories.insert(items, backend.changes.next("default"))


@pytest.fixture
def store(backend: Backend) -> Callable[..., list[int]]:
    """``store(memory(...), ...)`` → keys."""
    return lambda *ms: put(backend, ms)
