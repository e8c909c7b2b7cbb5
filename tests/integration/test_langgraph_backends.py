"""The LangGraph store ranks and scores one query the same on PostgreSQL as on SQLite.

Run with ``--backend=postgres`` this compares a PostgreSQL store with a SQLite file holding the
same items (on SQLite it compares two files, which must agree too)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import pytest

from engramdb import DynamicMemoryEngine
from engramdb.testing import fake_embedder

pytest.importorskip("langgraph.store.base", reason="needs the langgraph extra")
from engramdb.adapters.langgraph import EngramStore

#: (namespace, key, value[, index])
Put = tuple[tuple[str, ...], str, dict[str, str]] | tuple[tuple[str, ...], str, dict[str, str], Literal[False]]
ITEMS: list[Put] = [
    (("users", "john"), "theme", {"text": "John prefers dark mode in every editor"}),
    (("users", "john"), "food", {"text": "John likes ramen and dumplings"}),
    (("users", "jane"), "theme", {"text": "Jane prefers light mode"}),
    (("users", "jane"), "work", {"text": "Jane works on the billing service, in Go"}),
    (("docs",), "fsync", {"text": "fsync in the write-ahead log dominates p99 latency"}),
    (("docs",), "cache", {"text": "the cache miss rate doubles past batch size 512"}),
    (("docs",), "note", {"text": "an unindexed note"}, False),
]
QUERIES = ["which mode does John prefer?", "what does Jane work on", "p99 latency", "dark mode", "ramen"]


def _fill(store: EngramStore) -> None:
    for ns, key, value, *index in ITEMS:
        store.put(ns, key, value, index=index[0] if index else None)


def _answers(store: EngramStore) -> list[list[tuple[tuple[str, ...], str, float | None]]]:
    return [
        [
            (h.namespace, h.key, None if h.score is None else round(h.score, 4))
            for h in store.search(prefix, query=q, limit=10)
        ]
        for q in QUERIES
        for prefix in [(), ("users",)]
    ]


def test_both_backends_rank_and_score_a_query_alike(
    make_engine: Callable[..., DynamicMemoryEngine], clock: Any, tmp_path: Path
) -> None:
    here = EngramStore(make_engine(memory_embedder=fake_embedder()), tenant="acme")
    with DynamicMemoryEngine(tmp_path / "reference.db", clock=clock, memory_embedder=fake_embedder()) as sqlite:
        reference = EngramStore(sqlite, tenant="acme")
        _fill(here)
        _fill(reference)
        ours, theirs = _answers(here), _answers(reference)
    assert ours == theirs
    assert all(0.0 <= s <= 1.0 for answer in ours for *_, s in answer if s is not None)
