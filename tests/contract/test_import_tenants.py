"""An export imported into another tenant of the same store: new ids, every link kept, A untouched.

Ids are unique across a SQLite file's tenants, so on main the import into tenant B failed with
``ConstraintError: UNIQUE constraint failed: engram_memories.id`` (on PostgreSQL it kept A's ids).
Now a memory coming from another tenant, or whose id a memory the importer cannot see holds,
is given an id derived from (target tenant, old id): edges, versions, tombstones and triggers
follow it, a rerun finds it again, and both backends give the same ids.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import pytest

from engramdb import CallerError, Confidentiality, DynamicMemoryEngine, Forgotten
from engramdb.agent import Agent
from engramdb.errors import ValidationError
from engramdb.memories import transfer
from engramdb.memories.transfer import ImportReport
from engramdb.testing import FixedClock, fake_embedder

MemoryFactory = Callable[..., DynamicMemoryEngine]


def _fill(me: Agent, clock: FixedClock) -> dict[str, str]:
    """Every kind of id an export carries: edges (typed, a supersede), versions, a trigger, a todo,
    a shared memory, an archived one and a tombstone."""
    ids: dict[str, str] = {}
    ids["fact"] = me.remember("Ada leads the payments team", valid_from=1_700_000_000, entities=["Ada"]).id
    ids["new"] = me.remember("Grace leads the payments team", valid_from=1_760_000_000).id
    me.supersede(ids["fact"], ids["new"])
    ids["episode"] = me.remember("INC-42 took checkout down", type="episode", importance=8).id
    ids["secret"] = me.remember("The vault code is 1234", confidentiality=Confidentiality.CONFIDENTIAL).id
    ids["shared"] = me.remember("Stand-up is at 9:30", shared=True, title="stand-up").id
    ids["todo"] = me.remember("Renew the TLS certificate", type="todo").id
    ids["intent"] = me.intend("Ask about the offsite budget", cue="offsite").id
    me.link(ids["episode"], ids["secret"], "causes", weight=0.5)
    me.link(ids["shared"], ids["todo"], "related")
    me.update(ids["shared"], content="Stand-up is at 9:45")
    clock.now += 600
    me.recall("payments team lead", k=3)
    gone = me.remember("Bob's phone number is 555-0100")
    me.forget(gone.id, reason="user asked")
    ids["gone"] = gone.id
    scratch = me.remember("scratch note to archive", type="scratch")
    me._runtime.store.memories.archive(me.tenant, [scratch.id], me._runtime.store.changes.next(me.tenant))
    ids["archived"] = scratch.id
    return ids


def _lines(me: Agent) -> list[dict[str, Any]]:
    buf = io.StringIO()
    me.export_jsonl(buf)
    return [json.loads(x) for x in buf.getvalue().splitlines()]


def _export(me: Agent) -> str:
    buf = io.StringIO()
    me.export_jsonl(buf)
    return buf.getvalue()


def _by_content(lines: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {x["content"]: x for x in lines if x["kind"] == "memory"}


def _without_ids(line: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in line.items() if k not in ("id", "tenant")}


def test_an_export_imports_into_another_tenant_under_new_ids_with_every_link(
    make_engine: MemoryFactory, clock: FixedClock
) -> None:
    eng = make_engine(memory_embedder=fake_embedder())
    a = eng.agent("alice", tenant="acme")
    ids = _fill(a, clock)
    text = _export(a)
    before = _lines(a)
    b = eng.agent("alice", tenant="globex")

    report = b.import_jsonl(io.StringIO(text))

    kinds = [x["kind"] for x in before[1:]]
    n_mem, n_edges = kinds.count("memory"), kinds.count("edge")
    assert n_mem == 8 and n_edges >= 3
    assert report == ImportReport(memories=n_mem, edges=n_edges, tombstones=1, reidentified=n_mem)
    assert _lines(a)[1:] == before[1:]  # A unchanged

    got = _lines(b)
    old, new = _by_content(before), _by_content(got)
    assert set(new) == set(old)
    remap = {old[c]["id"]: new[c]["id"] for c in old}
    assert not set(remap) & set(remap.values())  # every memory has a new id
    assert {m.tenant for m in b.memories(include_archived=True)} == {"globex"}
    for c, line in old.items():
        assert _without_ids(new[c]) == _without_ids(line), c  # every other field, history and refs too
    edges_a = {(x["source"], x["target"], x["type"], x["weight"]) for x in before if x["kind"] == "edge"}
    edges_b = {(x["source"], x["target"], x["type"], x["weight"]) for x in got if x["kind"] == "edge"}
    assert edges_b == {(remap[s], remap[t], ty, w) for s, t, ty, w in edges_a}
    assert b.history(remap[ids["shared"]]) == a.history(ids["shared"]) != []
    assert b.get(remap[ids["fact"]], touch=False).valid_to == 1_760_000_000
    assert b.get(remap[ids["archived"]], touch=False).archived

    (stone_a,) = [x for x in before if x["kind"] == "tombstone"]
    (stone_b,) = [x for x in got if x["kind"] == "tombstone"]
    assert stone_a["memory_id"] == ids["gone"] != stone_b["memory_id"]
    assert {k: v for k, v in stone_b.items() if k not in ("memory_id", "tenant")} == {
        k: v for k, v in stone_a.items() if k not in ("memory_id", "tenant")
    }

    # B works on its own: recall finds by meaning, the cue fires, forgotten stays forgotten.
    assert b.recall("who leads payments?", k=2)[0].memory.id in (remap[ids["fact"]], remap[ids["new"]])
    assert [m.id for m in b.due(text="news on the offsite?")] == [remap[ids["intent"]]]
    with pytest.raises(Forgotten):
        b.remember("Bob's phone number is 555-0100")
    assert eng.agent("bob", tenant="globex").recall("stand-up time", k=1)[0].memory.id == remap[ids["shared"]]
    assert _lines(a)[1:] == before[1:]  # and A still unchanged

    # A rerun finds the new ids again and changes nothing.
    after = _lines(b)
    again = b.import_jsonl(io.StringIO(text))
    assert again == ImportReport(memories_present=n_mem, edges_present=n_edges, tombstones_present=1)
    assert _lines(b)[1:] == after[1:]

    # Back into A, as before this change: everything is already there.
    home = a.import_jsonl(io.StringIO(text))
    assert home == ImportReport(memories_present=n_mem, edges_present=n_edges, tombstones_present=1)
    assert _lines(a)[1:] == before[1:]


def test_the_export_of_the_copy_imports_into_a_fresh_store(make_engine: MemoryFactory, clock: FixedClock) -> None:
    eng = make_engine(memory_embedder=fake_embedder())
    a = eng.agent("alice", tenant="acme")
    _fill(a, clock)
    b = eng.agent("alice", tenant="globex")
    b.import_jsonl(io.StringIO(_export(a)))
    copy = _lines(b)

    fresh = make_engine(name="fresh", memory_embedder=fake_embedder()).agent("alice", tenant="globex")
    report = fresh.import_records(copy)
    assert report.memories == 8 and report.reidentified == 0  # the same tenant: the ids stay
    assert _lines(fresh)[1:] == copy[1:]
    assert fresh.import_records(copy).memories == 0


def test_two_tenants_importing_one_file_get_different_ids(make_engine: MemoryFactory, clock: FixedClock) -> None:
    eng = make_engine(memory_embedder=fake_embedder())
    a = eng.agent("alice", tenant="acme")
    _fill(a, clock)
    text = _export(a)
    got = {}
    for tenant in ("globex", "initech"):
        assert eng.agent("alice", tenant=tenant).import_jsonl(io.StringIO(text)).memories == 8
        got[tenant] = {m.id for m in eng.agent("alice", tenant=tenant).memories(include_archived=True)}
    assert not got["globex"] & got["initech"]
    assert len(got["globex"]) == len(got["initech"]) == 8


def test_an_id_held_by_a_memory_the_importer_cannot_see_is_replaced(make_engine: MemoryFactory) -> None:
    eng = make_engine(memory_embedder=fake_embedder())
    mine = eng.agent("bob", tenant="acme")
    mine.import_records([{"kind": "memory", "id": "x:1", "owner": "bob", "content": "Bob's private plan"}])
    alice = eng.agent("alice", tenant="acme")
    records = [
        {"kind": "memory", "id": "x:1", "owner": "alice", "content": "Alice's own note"},
        {"kind": "memory", "id": "x:2", "owner": "alice", "content": "Alice's other note"},
        {"kind": "edge", "source": "x:1", "target": "x:2", "type": "supports"},
    ]
    report = alice.import_records(records)
    assert report.memories == 2 and report.reidentified == 1 and report.edges == 1
    (note,) = [m for m in alice.memories() if m.content == "Alice's own note"]
    assert note.id != "x:1"
    assert [(e.source, e.target) for e in alice.edges(note.id)] == [(note.id, "x:2")]
    assert mine.get("x:1", touch=False).content == "Bob's private plan"  # untouched
    assert alice.import_records(records) == ImportReport(memories_present=2, edges_present=1)


def test_a_record_without_a_tenant_imports_into_a_second_tenant(make_engine: MemoryFactory) -> None:
    """A hand-written record names no tenant; once tenant acme holds its id, globex still imports it."""
    eng = make_engine(memory_embedder=fake_embedder())
    record = {"kind": "memory", "id": "alice:1", "content": "the vendor list"}
    eng.agent("alice", tenant="acme").import_records([record])
    g = eng.agent("alice", tenant="globex")
    assert g.import_records([record]).memories == 1
    assert [m.content for m in g.memories()] == ["the vendor list"]
    assert g.import_records([record]) == ImportReport(memories_present=1)
    assert eng.agent("alice", tenant="acme").get("alice:1", touch=False).tenant == "acme"


_V1 = {"version": 1, "title": "", "content": "first words", "changed_at": 1.0, "changed_by": "alice"}


def _many(n: int) -> list[dict[str, Any]]:
    return [{"kind": "memory", "id": f"alice:{i}", "content": f"fact number {i}"} for i in range(n)]


@pytest.mark.parametrize(
    ("last", "says"),
    [
        (
            {"kind": "edge", "source": "alice:0", "target": "alice:nowhere"},
            "names a memory that is not in the (import nor in the )?store",
        ),
        ({"kind": "edge", "source": "alice:0", "target": "alice:1", "type": "likes"}, "unknown edge type"),
        ({"kind": "edge", "source": "alice:0", "target": "alice:1", "weight": "heavy"}, "not a valid export"),
        ({"kind": "tombstone", "memory_id": "alice:9", "content_hash": "ab", "owner": "bob"}, "belongs to agent"),
        ({"kind": "tombstone", "memory_id": "alice:9", "content_hash": "ab"}, "above this handle's cap"),
        ({"kind": "memory", "id": "alice:z", "content": "x", "confidentiality": 3}, "above this handle's cap"),
        ({"kind": "memory", "id": "alice:z", "content": "x", "owner": "bob"}, "belongs to agent"),
        ({"kind": "memory", "id": "alice:z", "content": ""}, "content is empty"),
        ({"kind": "nonsense"}, "unknown record kind"),
        ({"kind": "edge", "source": "alice:0", "target": "alice:1", "weight": float("nan")}, "finite numbers"),
        (
            {"kind": "memory", "id": "alice:z", "content": "x", "version": 2, "history": [_V1, _V1]},
            "earlier versions numbered",
        ),
    ],
)
def test_a_refusal_anywhere_in_the_file_writes_nothing(
    make_engine: MemoryFactory, monkeypatch: pytest.MonkeyPatch, last: dict[str, Any], says: str
) -> None:
    """On main the chunks before the bad record stayed written (and edges refused after every memory)."""
    monkeypatch.setattr(transfer, "CHUNK", 2)
    me = make_engine(memory_embedder=fake_embedder()).agent("alice", tenant="globex", cap=Confidentiality.INTERNAL)
    with pytest.raises(ValidationError, match=says):
        me.import_records([*_many(5), last])
    assert me.memories(include_archived=True) == []
    with pytest.raises(ValidationError, match=says):
        me.import_jsonl(io.StringIO("".join(json.dumps(x) + "\n" for x in [*_many(5), last])))
    assert me.memories(include_archived=True) == []


def test_no_engine_table_in_the_error_of_a_cross_tenant_import(make_engine: MemoryFactory, clock: FixedClock) -> None:
    eng = make_engine(memory_embedder=fake_embedder())
    a = eng.agent("alice", tenant="acme")
    _fill(a, clock)
    text = _export(a)
    try:
        eng.agent("alice", tenant="globex").import_jsonl(io.StringIO(text))
    except CallerError as exc:  # pragma: no cover - the assertion says what went wrong
        pytest.fail(f"the import refused: {exc}")


def test_an_edge_to_a_memory_the_target_has_forgotten_is_skipped(make_engine: MemoryFactory) -> None:
    """On main: every memory written, then 'edges were not imported' for the one skipped memory."""
    eng = make_engine(memory_embedder=fake_embedder())
    a = eng.agent("alice", tenant="acme")
    x, y = a.remember("Carol's address is 12 Elm Street"), a.remember("Carol moved in March")
    a.link(y.id, x.id, "related")
    b = eng.agent("alice", tenant="globex")
    b.forget(b.remember("carol's address is 12 elm street").id, reason="GDPR request")
    report = b.import_jsonl(io.StringIO(_export(a)))
    assert report == ImportReport(memories=1, memories_forgotten=1, edges_forgotten=1, reidentified=1)
    assert [m.content for m in b.memories()] == ["Carol moved in March"]


def test_a_copy_already_in_the_tenant_is_found_again(make_engine: MemoryFactory, clock: FixedClock) -> None:
    """Records stripped of their tenant went in first (on PostgreSQL main kept their ids, on SQLite
    they now get the derived ones): the full export afterwards finds every one of them."""
    eng = make_engine(memory_embedder=fake_embedder())
    a = eng.agent("alice", tenant="acme")
    _fill(a, clock)
    lines = _lines(a)
    b = eng.agent("alice", tenant="globex")
    first = b.import_records([{k: v for k, v in x.items() if k != "tenant"} for x in lines[1:]])
    assert first.memories == 8
    copy = _lines(b)
    assert b.import_records(lines) == ImportReport(memories_present=8, edges_present=first.edges, tombstones_present=1)
    assert _lines(b)[1:] == copy[1:]


@pytest.mark.parametrize("meanwhile", ["another agent's private memory", "the same import"])
def test_an_id_stored_by_another_writer_between_check_and_write(make_engine: MemoryFactory, meanwhile: str) -> None:
    """The ids are decided again inside the write transaction, so a writer between the check and
    the write neither breaks the insert on a unique index nor makes the import skip a memory.
    (On main the first case wrote alice:2, then refused the edge as naming an invisible memory.)"""
    eng = make_engine(memory_embedder=fake_embedder())
    records = [
        {"kind": "memory", "id": "alice:1", "owner": "alice", "content": "the vendor list"},
        {"kind": "memory", "id": "alice:2", "owner": "alice", "content": "the vendor contacts"},
        {"kind": "edge", "source": "alice:1", "target": "alice:2", "type": "supports"},
    ]
    me = eng.agent("alice", tenant="globex")

    def writer(stage: str, done: int, total: int | None) -> None:
        if done == 0:  # after the records were checked, before anything is written
            if meanwhile == "the same import":
                eng.agent("alice", tenant="globex").import_records(records)
            else:
                theirs = {"kind": "memory", "id": "alice:1", "owner": "bob", "content": "Bob's plan"}
                eng.agent("bob", tenant="globex").import_records([theirs])

    report = me.import_records(records, progress=writer)
    if meanwhile == "the same import":
        assert report == ImportReport(memories_present=2, edges_present=1)
    else:
        assert report == ImportReport(memories=2, edges=1, reidentified=1)
        assert eng.agent("bob", tenant="globex").get("alice:1", touch=False).content == "Bob's plan"
    (mine,) = [m for m in me.memories() if m.content == "the vendor list"]
    assert [e.target for e in me.edges(mine.id)] == ["alice:2"]
