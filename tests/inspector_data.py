"""A small store for the inspector's tests: what agent ``alice`` (cap INTERNAL) may see, and what
she may not — agent bob's private memory and table, a shared memory above her cap, bob's query
text — each carrying a marker string that must appear in no page and no JSON answer."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from engramdb import Agent, DynamicMemoryEngine
from engramdb.memories.model import Confidentiality
from engramdb.testing import FixedClock, fake_embedder

if TYPE_CHECKING:
    import httpx2 as httpx  # what starlette's TestClient answers with (it falls back to httpx at run time)
    from starlette.testclient import TestClient

#: one marker per thing alice must never see
HIDDEN = {
    "private": "Bob-only: the zebra vault code is Qx7Private",
    "capped": "Confidential zebra budget is Qx7Capped dollars",
    "query": "Qx7Query zebra rotation",
    "table": "Qx7Table zebra row",
    "title": "Qx7Title",
}
#: content that would run if a page did not escape it
MARKUP = 'Pasted from a chat: </script><script>alert(1)</script><img src=x onerror="alert(2)">'
MARKERS = ("Qx7Private", "Qx7Capped", "Qx7Query", "Qx7Table", "Qx7Title")
DAY = 86_400.0


@dataclass
class Store:
    path: Path | None
    ids: dict[str, str] = field(default_factory=dict)
    hidden_ids: list[str] = field(default_factory=list)


def open_engine(path: Path, clock: FixedClock) -> DynamicMemoryEngine:
    return DynamicMemoryEngine(path, clock=clock, memory_embedder=fake_embedder())


def build(path: Path, clock: FixedClock) -> Store:
    """Write the store at `path` and close it."""
    st = Store(path)
    with open_engine(path, clock) as engine:
        populate(engine, clock, st)
    return st


def populate(engine: DynamicMemoryEngine, clock: FixedClock, st: Store) -> None:
    """Write the memories and tables into `engine` (any backend), their ids into `st`."""
    alice = engine.agent("alice")
    bob = engine.agent("bob")
    ids = st.ids
    # first, a note left to fade for two months: prune() archives it at the end
    ids["old"] = alice.remember("Scratch: try batch size 512", type="scratch", importance=1).id
    clock.advance(60 * DAY)
    ids["deploy"] = alice.remember(
        "The deploy key rotates every Monday at 09:00 UTC", importance=7, tags=["ops", "security"],
        entities=["deploy key"],
    ).id  # fmt: skip
    ids["postgres"] = alice.remember(
        "Payments run on PostgreSQL 16 with pgvector", shared=True, tags=["infra"], title="Payments database"
    ).id
    ids["oncall"] = alice.remember("Grace is on call for payments this week", shared=True, tags=["ops"]).id
    ids["todo"] = alice.remember("Write the postmortem for the fsync stall", type="todo", status="open").id
    ids["markup"] = alice.remember(MARKUP, type="scratch", title="<b>bold?</b>", tags=["<i>tag</i>"]).id
    ids["skill"] = alice.remember("To rotate a key: vault write -f transit/keys/deploy/rotate", type="skill").id
    alice.link(ids["deploy"], ids["skill"], "causes")
    alice.link(ids["postgres"], ids["oncall"], "related")
    alice.link(ids["oncall"], ids["todo"], "part_of")
    clock.advance(3600)
    alice.update(ids["deploy"], content="The deploy key rotates every Monday at 10:00 UTC")
    gone = alice.remember("Bob's phone number is 555-0100", tags=["people"]).id
    alice.forget(gone, reason="asked to")
    # what alice may not see: bob's own memory, a shared one above her cap, bob's query text
    private = bob.remember(HIDDEN["private"], title=HIDDEN["title"], tags=["Qx7Tag"])
    capped = bob.remember(HIDDEN["capped"], shared=True, confidentiality=Confidentiality.CONFIDENTIAL)
    st.hidden_ids += [private.id, capped.id]
    bob.link(private.id, ids["oncall"], "related")  # an edge into what alice sees, from what she cannot
    bob.recall(HIDDEN["query"] + " payments on call", k=3)
    for day in range(5):
        clock.advance(DAY)
        alice.recall("when does the deploy key rotate?", k=3)
        if day % 2:
            alice.recall("who is on call for payments", k=2)
    alice.ride_along("payments database", max_todos=2)
    alice.prune()  # archives the old scratch note
    # raw-SQL tables in both of alice's scopes, and one of bob's she must not read
    alice.shared.execute("CREATE TABLE shared_notes (id INTEGER PRIMARY KEY, agent_id TEXT, content TEXT)")
    for i in range(60):
        alice.shared.execute(
            "INSERT INTO shared_notes (id, agent_id, content) VALUES (?, ?, ?)", (i + 1, "alice", f"note number {i}")
        )
    alice.private.execute("CREATE TABLE private_alice_scratch (key TEXT PRIMARY KEY, value TEXT)")
    alice.private.execute("INSERT INTO private_alice_scratch (key, value) VALUES ('hunch', 'fsync, not the cache')")
    bob.private.execute("CREATE TABLE private_bob_secret (body TEXT)")
    bob.private.execute("INSERT INTO private_bob_secret (body) VALUES (?)", (HIDDEN["table"],))


def viewer(engine: DynamicMemoryEngine) -> Agent:
    """Alice's handle, capped at INTERNAL: what the inspector views as."""
    return engine.agent("alice", cap=Confidentiality.INTERNAL)


def crawl(c: TestClient, store: Store) -> dict[str, httpx.Response]:
    """Every page and JSON answer: from the list, every link found (same origin), depth 2 graphs,
    the playground on queries that match the hidden memories, and the hidden ids themselves. No
    address carries a marker (pages echo their query)."""
    seeds = [
        "/", "/?status=archived", "/?status=forgotten", "/?status=all", "/?q=zebra", "/?q=vault+code", "/?q=budget",
        "/?type=todo", "/recall?q=zebra+vault+code", "/recall?q=Confidential+zebra+budget&k=10&hops=2",
        "/recall?q=who+is+on+call+for+payments&hops=2", "/stats", "/tables", "/tables?table=shared_notes&page=2",
        "/tables?sql=SELECT+*+FROM+private_bob_secret", "/tables?table=private_bob_secret",
        "/api/memories?status=all", "/api/memories?q=zebra", "/api/recall?q=zebra+vault&k=20&hops=3",
        "/api/recall?q=zebra+rotation+payments", "/api/stats", "/api/tables?sql=SELECT+body+FROM+private_bob_secret",
    ]  # fmt: skip
    for mid in [*store.ids.values(), *store.hidden_ids]:
        seeds += [f"/memory/{mid}", f"/api/memory/{mid}", f"/graph/{mid}?depth=2", f"/api/graph/{mid}?depth=2"]
    seen: dict[str, httpx.Response] = {}
    todo = list(seeds)
    while todo:
        url = todo.pop()
        if url in seen:
            continue
        r = c.get(url)
        seen[url] = r
        if r.headers.get("content-type", "").startswith("text/html"):
            for link in re.findall(r'(?:href|data-src)="(/[^"]*)"', r.text):
                link = link.replace("&amp;", "&")
                if not link.startswith("/static/") and link not in seen:
                    todo.append(link)
    return seen
