"""`Agent.browse` and `Agent.tags`: paging and filters inside the query, through the public API."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from engramdb import DynamicMemoryEngine, MemoryPage, ValidationError
from engramdb.memories.model import Confidentiality


@pytest.fixture
def eng(make_engine: Callable[..., DynamicMemoryEngine]) -> DynamicMemoryEngine:
    return make_engine()


def test_pages_newest_first_with_a_total(eng: DynamicMemoryEngine) -> None:
    alice = eng.agent("alice")
    ids = [
        alice.remember(content=f"note number {i}", tags=["even" if i % 2 == 0 else "odd"], dedup=False)
        for i in range(25)
    ]
    first = alice.browse(limit=10)
    assert isinstance(first, MemoryPage)
    assert first.total == 25 and first.has_more
    assert [m.id for m in first.memories] == [m.id for m in ids[::-1][:10]]
    last = alice.browse(offset=20, limit=10)
    assert [m.id for m in last.memories] == [m.id for m in ids[4::-1]] and not last.has_more
    assert alice.browse(tag="even").total == 13
    assert alice.tags() == {"even": 13, "odd": 12}
    assert alice.browse(contains="NUMBER 1").total == 11  # 1, 10-19
    alice.forget(ids[0].id)
    assert alice.browse().total == 24
    assert ids[0].id not in {m.id for m in alice.browse(status="all", limit=1000).memories}  # the husk is no memory


def test_never_shows_what_the_agent_cannot_see(eng: DynamicMemoryEngine) -> None:
    eng.agent("bob").remember(content="bob's private plan zebra", tags=["bobtag"])
    eng.agent("alice").remember(content="restricted zebra", confidentiality=Confidentiality.RESTRICTED, shared=True)
    alice = eng.agent("alice", cap=Confidentiality.CONFIDENTIAL)
    assert alice.browse(contains="zebra").total == 0
    assert alice.browse(status="all").total == 0
    assert "bobtag" not in alice.tags()


def test_archived_status(eng: DynamicMemoryEngine) -> None:
    alice = eng.agent("alice")
    kept = alice.remember(content="kept")
    gone = alice.remember(content="archived one")
    eng._backend.memories.archive("default", [gone.id], eng._backend.changes.next("default"))
    assert [m.id for m in alice.browse(status="archived").memories] == [gone.id]
    assert {m.id for m in alice.browse(status="all").memories} == {kept.id, gone.id}
    assert [m.id for m in alice.browse().memories] == [kept.id]


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"limit": 0}, "limit must be a whole number from 1 to 1000"),
        ({"limit": 1001}, "limit"),
        ({"offset": -1}, "offset must be a whole number of 0 or more"),
        ({"offset": True}, "offset"),
        ({"status": "deleted"}, "status must be one of active, archived, all"),
        ({"types": ["nope"]}, "unknown memory type"),
        ({"contains": 5}, "contains must be a str"),
        ({"tag": "x" * 5000}, "tag is 5,000 characters"),
    ],
)
def test_bad_arguments_are_typed_errors(eng: DynamicMemoryEngine, kwargs: dict[str, object], words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        eng.agent("alice").browse(**kwargs)  # type: ignore[arg-type]


def test_tombstones_are_this_agents_and_shared_ones_under_its_cap(eng: DynamicMemoryEngine) -> None:
    alice, bob = eng.agent("alice"), eng.agent("bob")
    mine = alice.remember(content="alice's own note to forget")
    shared = alice.remember(content="a shared note to forget", shared=True)
    secret = alice.remember(content="a restricted note", confidentiality=Confidentiality.RESTRICTED)
    bobs = bob.remember(content="bob's private note")
    for agent, m in ((alice, mine), (alice, shared), (alice, secret), (bob, bobs)):
        agent.forget(m.id, reason="test")
    assert [s.memory_id for s in alice.tombstones()] == [mine.id, shared.id, secret.id]
    capped = eng.agent("alice", cap=Confidentiality.CONFIDENTIAL)
    assert [s.memory_id for s in capped.tombstones()] == [mine.id, shared.id]
    assert [s.memory_id for s in bob.tombstones()] == [shared.id, bobs.id]
    assert all("note" not in s.content_hash for s in alice.tombstones())
