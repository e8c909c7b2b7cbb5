"""Builds ``v9_fixture.db`` and ``v9_fixture.json``: a database written by engramdb at commit 26a857f
(schema version 9, before the storage seam), and what that code read back from it.

`tests/integration/test_upgrade.py` opens a copy with the current code and checks that every memory,
edge, version, tombstone, recall record, access and scope table reads back the same, and that the
store takes writes. Kept for the record; it needs the engramdb of that commit to run::

    git worktree add /tmp/v9 26a857f && cd /tmp/v9 && python -m venv .venv && .venv/bin/pip install -e .
    .venv/bin/python /path/to/tests/data/make_v9_fixture.py /path/to/tests/data
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from engramdb import DynamicMemoryEngine, MemoryRef, MemoryRetriever
from engramdb.testing import FixedClock, fake_embedder


def main(out: Path) -> None:
    db = out / "v9_fixture.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    clock = FixedClock()
    eng = DynamicMemoryEngine(
        db,
        clock=clock,
        memory_embedder=fake_embedder(64),
        vector_file=False,
        enable_embeddings=True,
        embedder=fake_embedder(64),
    )
    ada = eng.agent("ada")
    bob = eng.agent("bob")
    other = eng.agent("ada", tenant="globex")
    a1 = ada.remember("INC-42 took checkout down for 20 minutes", type="episode", importance=8, tags=["ops"])
    clock.advance(60)
    a2 = ada.remember("The cause of INC-42 was an expired TLS certificate", importance=7, entities=["INC-42"])
    ada.link(a1.id, a2.id, "causes")
    s1 = ada.remember("Renew the shop certificate before March 3", type="todo", shared=True)
    ada.remember(
        "Ask about the offsite budget",
        type="intent",
        refs=[MemoryRef("trigger", "cue:offsite", "when the offsite comes up", clock())],
    )
    b1 = bob.remember("Bob prefers aisle seats on long flights", confidentiality=2)
    b2 = bob.remember("Bob's phone number is 555-0100")
    bob.forget(b2.id, reason="user asked")
    clock.advance(3600)
    old = ada.remember("Ada leads the payments team", valid_from=1_700_000_000)
    new = ada.remember("Grace leads the payments team", valid_from=1_760_000_000)
    ada.supersede(old.id, new.id)
    ada.update(a2.id, content="The cause of INC-42 was an expired TLS certificate on the shop", importance=9)
    other.remember("Globex keeps its secrets in tenant globex")
    clock.advance(60)
    hits = ada.recall("what took checkout down?", k=3)
    assert hits.recall_id is not None
    ada.recall("payments team lead", k=2, channel="injected")
    bob.get(b1.id)
    ada.complete(s1.id)
    shared = eng.get_shared_scope()
    shared.execute(
        "CREATE TABLE shared_notes (id INTEGER PRIMARY KEY, agent_id TEXT, content TEXT, created_ts INTEGER)"
    )
    shared.execute("CREATE INDEX idx_notes_ts ON shared_notes(created_ts)")
    shared.executemany(
        "INSERT INTO shared_notes (agent_id, content, created_ts) VALUES (?, ?, ?)",
        [("ada", "Finding: X implies Y", 1), ("bob", "Draft the summary", 2)],
    )
    eng.get_private_scope("ada").execute("CREATE TABLE private_ada_scratch (key TEXT PRIMARY KEY, value TEXT)")
    eng.get_private_scope("ada").execute("INSERT INTO private_ada_scratch VALUES ('k', 'v')")
    MemoryRetriever(scope=shared, token_budget=256, table="shared_notes", content_column="content").retrieve(
        "X implies"
    )
    expect = {
        "clock": clock(),
        "recall_id": hits.recall_id,
        "ada": [dataclasses.asdict(m) for m in ada.memories(include_archived=True)],
        "bob": [dataclasses.asdict(m) for m in bob.memories(include_archived=True)],
        "globex": [dataclasses.asdict(m) for m in other.memories(include_archived=True)],
        "edges": {m.id: [dataclasses.asdict(e) for e in ada.edges(m.id)] for m in ada.memories()},
        "history": [dataclasses.asdict(v) for v in ada.history(a2.id)],
        "accesses": [dataclasses.asdict(r) for r in ada.accesses(a1.id)],
        "explain": dataclasses.asdict(ada.explain(hits.recall_id)),
        "stats": dataclasses.asdict(ada.stats()),
        "forgotten": b2.content,
        "shared_notes": shared.query("SELECT * FROM shared_notes ORDER BY id"),
        "scratch": eng.get_private_scope("ada").query("SELECT * FROM private_ada_scratch"),
        "tables": eng.list_all_tables(include_engine=True),
    }
    eng.close()
    (out / "v9_fixture.json").write_text(json.dumps(expect, indent=1, default=str, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
