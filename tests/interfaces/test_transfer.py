"""Export / import as JSON Lines: lossless, idempotent, forgotten stays forgotten; progress callbacks."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engramdb import Confidentiality, DynamicMemoryEngine, Forgotten
from engramdb.agent import Agent
from engramdb.errors import ValidationError
from engramdb.memories.transfer import ImportReport
from engramdb.testing import FixedClock, fake_embedder


def _fill(me: Agent, clock: FixedClock) -> dict[str, str]:
    ids: dict[str, str] = {}
    ids["fact"] = me.remember(
        "Ada leads the payments team", valid_from=1_700_000_000, tags=["org"], entities=["Ada"]
    ).id
    ids["new"] = me.remember("Grace leads the payments team", valid_from=1_760_000_000).id
    me.supersede(ids["fact"], ids["new"])
    ids["episode"] = me.remember("INC-42 took checkout down", type="episode", importance=8, salience=0.7).id
    ids["secret"] = me.remember("The vault code is 1234", confidentiality=Confidentiality.CONFIDENTIAL).id
    ids["shared"] = me.remember("Stand-up is at 9:30", shared=True, title="stand-up").id
    ids["todo"] = me.remember("Renew the TLS certificate", type="todo").id
    me.complete(ids["todo"])
    ids["intent"] = me.intend("Ask about the offsite budget", cue="offsite").id
    ids["timed"] = me.intend("Post the summary", when=clock.now + 3600).id
    me.link(ids["episode"], ids["secret"], "causes", weight=0.5)
    me.update(ids["shared"], content="Stand-up is at 9:45")
    for _ in range(3):
        clock.now += 600
        me.recall("payments team lead", k=3)
    gone = me.remember("Bob's phone number is 555-0100")
    me.forget(gone.id, reason="user asked")
    scratch = me.remember("scratch note to archive", type="scratch")
    me._runtime.store.memories.archive(me.tenant, [scratch.id], me._runtime.store.changes.next(me.tenant))
    ids["archived"] = scratch.id
    return ids


def _lines(me: Agent) -> list[dict[str, Any]]:
    buf = io.StringIO()
    me.export_jsonl(buf)
    return [json.loads(x) for x in buf.getvalue().splitlines()]


def test_round_trip_is_lossless_and_idempotent(
    make_engine: Callable[..., DynamicMemoryEngine], clock: FixedClock, tmp_path: Path
) -> None:
    src = make_engine(name="src", memory_embedder=fake_embedder())
    me = src.agent("alice")
    ids = _fill(me, clock)
    path = tmp_path / "alice.jsonl"
    n = me.export_jsonl(path)
    lines = _lines(me)
    assert n == len(lines) and lines[0]["kind"] == "engramdb-export"
    kinds = [x["kind"] for x in lines[1:]]
    assert kinds.count("memory") == 9 and kinds.count("tombstone") == 1 and "edge" in kinds
    assert "555-0100" not in path.read_text()  # a forgotten text is not exported

    dst = make_engine(name="dst", memory_embedder=fake_embedder())
    you = dst.agent("alice")
    seen: list[tuple[str, int, int | None]] = []
    report = you.import_jsonl(path, progress=lambda s, d, t: seen.append((s, d, t)))
    assert report == ImportReport(memories=9, edges=len([k for k in kinds if k == "edge"]), tombstones=1)
    assert seen[0] == ("import", 0, n) and seen[-1][1:] == (n, n)
    assert any(s == "embed" for s, _, _ in seen) is False  # import reports its own stage only

    # Every field of every memory, edges and tombstones come back as they were.
    assert _lines(you)[1:] == lines[1:]
    assert you.memories(include_archived=True) == me.memories(include_archived=True)
    assert you.history(ids["shared"]) == me.history(ids["shared"])
    assert you.get(ids["fact"], touch=False).valid_to == 1_760_000_000
    assert you.get(ids["todo"], touch=False).status == me.get(ids["todo"], touch=False).status
    assert you.get(ids["new"], touch=False).strength == me.get(ids["new"], touch=False).strength > 0

    # A second run changes nothing.
    again = you.import_jsonl(path)
    assert again.memories == again.edges == again.tombstones == 0
    assert again.memories_present == 9 and again.tombstones_present == 1
    assert _lines(you)[1:] == lines[1:]

    # The imported store works: forgotten stays forgotten, cues fire, recall finds by meaning.
    with pytest.raises(Forgotten):
        you.remember("Bob's phone number is 555-0100")
    assert [m.id for m in you.due(text="news on the offsite?")] == [ids["intent"]]
    assert you.recall("who leads payments?", k=2)[0].memory.id in (ids["fact"], ids["new"])
    assert dst.agent("bob").recall("stand-up time", k=1)[0].memory.id == ids["shared"]


def test_import_refuses_what_the_importer_may_not_hold(
    make_engine: Callable[..., DynamicMemoryEngine], clock: FixedClock, tmp_path: Path
) -> None:
    src = make_engine(name="src", memory_embedder=fake_embedder())
    _fill(src.agent("alice"), clock)
    path = tmp_path / "a.jsonl"
    src.agent("alice").export_jsonl(path)
    dst = make_engine(name="dst", memory_embedder=fake_embedder())
    with pytest.raises(ValidationError, match="belongs to agent 'alice'; import it as that agent"):
        dst.agent("bob").import_jsonl(path)
    with pytest.raises(ValidationError, match="above this handle's cap INTERNAL"):
        dst.agent("alice", cap=Confidentiality.INTERNAL).import_jsonl(path)
    with pytest.raises(ValidationError, match="line 1 is not JSON"):
        dst.agent("alice").import_jsonl(io.StringIO("{nope\n"))
    with pytest.raises(ValidationError, match="format version 99"):
        dst.agent("alice").import_records([{"kind": "engramdb-export", "version": 99}])


def test_export_dicts_import_too(make_engine: Callable[..., DynamicMemoryEngine], clock: FixedClock) -> None:
    """Issue 13: ``remember_many(agent.export())`` failed on 16 fields; `import_records` takes them."""
    src = make_engine(name="src", memory_embedder=fake_embedder())
    me = src.agent("alice")
    a = me.remember("The deploy key rotates on Mondays")
    b = me.remember("Rotation is automated by the ops bot")
    me.link(a.id, b.id, "supports")
    dst = make_engine(name="dst", memory_embedder=fake_embedder())
    report = dst.agent("alice").import_records(me.export())
    assert report.memories == 2 and report.edges == 1
    assert dst.agent("alice").edges(a.id) == me.edges(a.id)


def test_progress_of_remember_many_and_reflect(
    make_engine: Callable[..., DynamicMemoryEngine], clock: FixedClock
) -> None:
    eng = make_engine(memory_embedder=fake_embedder())
    me = eng.agent("alice")
    seen: list[tuple[str, int, int | None]] = []
    items = [{"content": f"fact number {i} about topic {i % 7}"} for i in range(1200)]
    out = me.remember_many(items, dedup=False, progress=lambda s, d, t: seen.append((s, d, t)))
    assert len(out) == 1200
    embeds = [d for s, d, _ in seen if s == "embed"]
    assert embeds == [0, 512, 1024, 1200]
    assert seen[-2:] == [("store", 0, 1200), ("store", 1200, 1200)]
    steps: list[tuple[str, int, int | None]] = []
    me.reflect(steps=["merge", "rescore"], progress=lambda s, d, t: steps.append((s, d, t)))
    assert [s for s in steps if s[0].startswith("reflect:")] == [
        ("reflect:merge", 0, 2),
        ("reflect:merge", 1, 2),
        ("reflect:rescore", 1, 2),
        ("reflect:rescore", 2, 2),
    ]
    # and each step's items: from 0, every 64, to all it examined (rescore examines every memory)
    rescore = [(d, t) for s, d, t in steps if s == "rescore"]
    assert rescore[0] == (0, None) and rescore[-1] == (1200, 1200)
    assert [d for d, _ in rescore[1:-1]] == list(range(64, 1200, 64))
    assert next(s for s, _, _ in steps if not s.startswith("reflect:")) == "merge"
    lines: list[tuple[str, int, int | None]] = []
    n = me.export_jsonl(io.StringIO(), progress=lambda s, d, t: lines.append((s, d, t)))
    assert lines[0] == ("export", 0, n) and lines[-1] == ("export", n, n)
    assert [d for _, d, _ in lines[1:-1]] == list(range(256, n, 256))

    def boom(stage: str, done: int, total: int | None) -> None:
        if stage == "store":
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError):
        me.remember_many([{"content": "never stored"}], progress=boom)
    assert not [m for m in me.memories() if m.content == "never stored"]


def test_a_text_forgotten_in_the_target_stays_forgotten(
    make_engine: Callable[..., DynamicMemoryEngine], clock: FixedClock
) -> None:
    src = make_engine(name="src", memory_embedder=fake_embedder())
    src.agent("alice").remember("Carol's address is 12 Elm Street")
    dst = make_engine(name="dst", memory_embedder=fake_embedder())
    you = dst.agent("alice")
    you.forget(you.remember("carol's address is 12 elm street").id, reason="GDPR request")
    report = you.import_records(_lines(src.agent("alice")))
    assert report.memories == 0 and report.memories_forgotten == 1
    assert not you.memories()


def test_reembed_gives_vectors_to_a_store_written_without(
    make_engine: Callable[..., DynamicMemoryEngine], clock: FixedClock
) -> None:
    plain = make_engine(name="s", memory_embedder=None)
    for text in ("The deploy key rotates on Mondays", "Payments are settled nightly", "Ada leads search"):
        plain.agent("alice").remember(text)
    plain.close()
    eng = make_engine(name="s", memory_embedder=fake_embedder())
    me = eng.agent("alice")
    assert {h.source for h in me.recall("deploy key rotation", k=3)} <= {"lexical", "spread"}
    seen: list[tuple[str, int, int | None]] = []
    assert me.reembed(progress=lambda s, d, t: seen.append((s, d, t))) == 3
    assert seen == [("embed", 0, 3), ("embed", 3, 3)]
    assert me.reembed() == 0 and me.reembed(missing_only=False) == 3
    assert me.recall("deploy key rotation", k=1)[0].source in ("vector", "both")


@pytest.mark.parametrize(
    ("record", "says"),
    [
        ({"kind": "tombstone", "content_hash": "ab" * 16}, "missing field 'memory_id'"),
        ({"kind": "tombstone", "memory_id": "alice:1"}, "missing field 'content_hash'"),
        (
            {"kind": "memory", "id": "alice:1", "content": "x", "confidentiality": "topsecret"},
            "unknown confidentiality",
        ),
        ({"kind": "memory", "id": "alice:1", "content": "x", "created_at": "yesterday"}, "not a valid export record"),
        ({"kind": "memory", "id": "alice:1", "content": "x", "recent_accesses": ["soon"]}, "not a valid export record"),
        ({"kind": "memory", "id": "alice:1", "content": "x", "strength": "lots"}, "not a valid export record"),
        ({"kind": "tombstone", "memory_id": "alice:1", "content_hash": "x", "forgotten_at": "then"}, "alice:1"),
    ],
)
def test_a_malformed_record_is_a_validation_error_naming_it_and_imports_nothing_of_it(
    make_engine: Callable[..., DynamicMemoryEngine], record: dict[str, Any], says: str
) -> None:
    """`KeyError: 'memory_id'` and the `ValueError`s of int()/float() left import_records."""
    me = make_engine(memory_embedder=None).agent("alice")
    with pytest.raises(ValidationError, match=says):
        me.import_records([record])
    assert me.memories(include_archived=True) == []


def test_a_confidentiality_may_be_given_by_its_name(make_engine: Callable[..., DynamicMemoryEngine]) -> None:
    me = make_engine(memory_embedder=None).agent("alice")
    me.import_records(
        [{"kind": "memory", "id": "alice:1", "content": "the vendor list", "confidentiality": "internal"}]
    )
    assert me.get("alice:1", touch=False).confidentiality is Confidentiality.INTERNAL
