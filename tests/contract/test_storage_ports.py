"""The storage ports' contract (`engramdb.storage.ports`), on whichever backend runs the suite.

Each test states one promise a port's docstring makes and that the services rely on; a second
backend is done when this file passes on it (``pytest --backend=postgres tests/contract``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from engramdb.errors import BackendError, EngramError, TransactionError
from engramdb.memories.model import (
    Channel,
    Components,
    Confidentiality,
    MemoryRef,
    MemoryType,
    MemoryVersion,
    TodoStatus,
    Tombstone,
    Visibility,
)
from engramdb.memories.text import content_hash, pack_times
from engramdb.storage.ports import Backend, ContentChange, RecallRecord, Touch
from tests.contract.conftest import memory, put

Store = Callable[..., list[int]]
ALICE = Visibility("default", "alice")


# -- MemoryRows ---------------------------------------------------------------------------------


def test_insert_assigns_increasing_keys_and_reads_back_every_field(backend: Backend, store: Store) -> None:
    ref = MemoryRef("file", "notes/a.md", "preview", 5.0)
    m = memory(
        content="Renew the TLS certificate",
        title="cert",
        tags=("ops", "tls"),
        entities=("Shop",),
        importance=7.5,
        salience=0.25,
        confidence=0.75,
        confidentiality=Confidentiality.INTERNAL,
        type=MemoryType.TODO,
        status=TodoStatus.OPEN,
        valid_from=10.0,
        valid_to=20.0,
        refs=(ref,),
        n_chars=25,
        n_tokens=4,
        n_sentences=1,
    )
    first, second = store(m, memory())
    assert second > first
    got = backend.memories.get(ALICE, m.id)
    assert got is not None and got.key == first
    back = got.memory
    for field in (
        "id", "tenant", "owner", "author", "type", "title", "content", "tags", "entities", "importance", "salience",
        "confidence", "confidentiality", "created_at", "valid_from", "valid_to", "status", "refs", "n_chars",
        "n_tokens", "n_sentences", "access_count",
    ):  # fmt: skip
        assert getattr(back, field) == getattr(m, field), field
    assert back.recent_accesses == (m.created_at,)
    assert backend.memories.get_key(first) == got


def test_keys_are_never_reused(backend: Backend, store: Store) -> None:
    (a,) = store(memory())
    backend.memories.retire(a, "forgotten:x", backend.changes.next("default"))
    (b,) = store(memory())
    assert b > a


def test_get_applies_visibility(backend: Backend, store: Store) -> None:
    own, shared, other, secret = (
        memory(owner="alice"),
        memory(owner=""),
        memory(owner="bob"),
        memory(owner="alice", confidentiality=Confidentiality.RESTRICTED),
    )
    store(own, shared, other, secret)
    capped = Visibility("default", "alice", Confidentiality.INTERNAL)
    assert backend.memories.get(capped, own.id) is not None
    assert backend.memories.get(capped, shared.id) is not None
    assert backend.memories.get(capped, other.id) is None  # another agent's private memory
    assert backend.memories.get(capped, secret.id) is None  # above the cap
    assert backend.memories.get(Visibility("other", "alice"), own.id) is None  # another tenant
    assert backend.memories.get(Visibility("default", "alice", cross_agent=True), other.id) is not None


def test_many_listing_and_visible_ids(backend: Backend, store: Store) -> None:
    ms = [memory(owner="alice"), memory(owner="bob"), memory(owner="")]
    keys = store(*ms)
    assert set(backend.memories.many(ALICE, keys)) == {keys[0], keys[2]}
    assert [m.id for m in backend.memories.listing(ALICE)] == [ms[0].id, ms[2].id]
    assert backend.memories.visible_ids(ALICE, [m.id for m in ms] + ["nope"]) == {
        ms[0].id: keys[0],
        ms[2].id: keys[2],
    }
    assert backend.memories.visible_keys(ALICE) == [keys[0], keys[2]]
    assert backend.memories.visible_keys(ALICE, keys=[keys[1], keys[2]]) == [keys[2]]
    assert backend.memories.visible_keys(ALICE, types=["skill"]) == []
    assert backend.memories.names(keys[:1]) == {keys[0]: (ms[0].id, "")}
    assert backend.memories.contents(keys[1:2]) == {
        keys[1]: (ms[1].content, (), "[null,{}]")
    }  # (no session, no metadata)
    assert backend.memories.key_of("default", ms[1].id) == keys[1]
    assert backend.memories.key_of("other", ms[1].id) is None


def test_taken_ids_are_what_a_new_memory_of_the_tenant_may_not_be_given(
    backend: Backend, store: Store, backend_name: str
) -> None:
    mine, theirs = memory(owner="bob"), memory(owner="alice", tenant="other")
    store(mine, theirs)
    ids = [mine.id, theirs.id, "alice:nope"]
    assert backend.memories.taken_ids("default", ids) == (
        {mine.id, theirs.id} if backend_name == "sqlite" else {mine.id}  # SQLite's id index spans the file
    )
    assert backend.memories.taken_ids("default", []) == set()


def test_same_content_finds_only_visible_memories_of_the_text(backend: Backend, store: Store) -> None:
    text = "The Deploy key rotates weekly."
    ms = [
        memory(content=text, entities=("Dana",)),  # alice's own
        memory(content="the deploy key rotates weekly", owner="", type=MemoryType.SKILL),  # shared: same hash
        memory(content=text, owner="bob"),  # another agent's private memory
        memory(content=text, confidentiality=Confidentiality.RESTRICTED),  # above the cap
        memory(content=text, tenant="other"),  # another tenant
        memory(content="the deploy key rotates monthly"),  # another text
        memory(content=text),  # archived below
    ]
    keys = store(*ms)
    backend.memories.archive("default", [ms[6].id], backend.changes.next("default"))
    digest = content_hash(text)
    seen = Visibility("default", "alice", Confidentiality.INTERNAL)
    got = backend.memories.same_content(seen, [digest, digest, content_hash("nothing like it")])
    assert got == [
        (keys[0], digest, "info", "alice", 0, text, ("Dana",), "[null,{}]"),
        (keys[1], digest, "skill", "", 0, "the deploy key rotates weekly", (), "[null,{}]"),
    ]  # lowest key first; the visibility is inside the query (no session, no metadata: "[null,{}]")
    assert [r[0] for r in backend.memories.same_content(Visibility("default", "bob"), [digest])] == [keys[1], keys[2]]
    assert backend.memories.same_content(seen, []) == []
    # The memories whose text another visible one repeats (the archived and the hidden never count).
    assert backend.memories.repeated_content(seen) == [
        (keys[0], digest, "alice", "info"),
        (keys[1], digest, "", "skill"),
    ]
    assert [r[0] for r in backend.memories.repeated_content(Visibility("default", "bob"))] == [keys[1], keys[2]]
    assert (
        backend.memories.repeated_content(Visibility("default", "carol", Confidentiality.PUBLIC, own_only=True)) == []
    )


def test_retired_since_tells_whether_a_memory_was_forgotten_after_a_change(backend: Backend, store: Store) -> None:
    keys = store(memory(content="one"), memory(content="two"))
    before = backend.changes.current("default")
    backend.memories.archive("default", [], backend.changes.next("default"))  # a change that forgets nothing
    assert not backend.memories.retired_since(before)
    backend.memories.retire(keys[1], f"forgotten:{keys[1]}", backend.changes.next("default"))
    assert backend.memories.retired_since(before)
    assert not backend.memories.retired_since(backend.changes.current("default"))


def test_page_filters_counts_and_pages_inside_the_query(backend: Backend, store: Store) -> None:
    ms = [
        memory(content="fsync dominates p99", tags=("latency", "disk")),
        memory(content="lunch at noon", tags=("team",)),
        memory(content="FSYNC again", title="disk", type=MemoryType.SKILL),
        memory(owner="bob", content="bob's private fsync secret", tags=("latency", "hidden-tag")),
        memory(content="raise the fsync budget", tags=("latency",), confidentiality=Confidentiality.RESTRICTED),
        memory(owner="", content="shared note about fsync", tags=("latency",)),
    ]
    keys = store(*ms)
    seen = Visibility("default", "alice", cap=Confidentiality.CONFIDENTIAL)
    rows, total = backend.memories.page(seen, contains="FSync", limit=2)
    assert total == 3 and [m.id for m in rows] == [
        ms[5].id,
        ms[2].id,
    ]  # newest first; bob's and the restricted one never counted
    rows, total = backend.memories.page(seen, contains="fsync", offset=2, limit=2)
    assert total == 3 and [m.id for m in rows] == [ms[0].id]
    rows, total = backend.memories.page(seen, contains="fsync", offset=10, limit=2)
    assert (rows, total) == ([], 3)  # past the end: no rows, the count still right
    assert backend.memories.page(seen, tag="latency")[1] == 2
    assert backend.memories.page(seen, tag="hidden-tag") == ([], 0)
    assert [m.id for m in backend.memories.page(seen, types=["skill"])[0]] == [ms[2].id]
    assert backend.memories.page(seen, contains="disk")[1] == 2  # a title and a tag
    assert backend.memories.page(seen, contains="100%")[1] == 0  # a LIKE metacharacter is a plain character
    backend.memories.archive("default", [ms[1].id], backend.changes.next("default"))
    assert backend.memories.page(seen)[1] == 3
    archived = Visibility("default", "alice", cap=Confidentiality.CONFIDENTIAL, include_archived=True)
    assert [m.id for m in backend.memories.page(archived, archived_only=True)[0]] == [ms[1].id]
    assert backend.memories.page(archived)[1] == 4
    assert backend.memories.tag_counts(seen) == {"disk": 1, "latency": 2}  # bob's tags and the archived one's unseen
    assert keys


def test_archive_hides_unless_asked_for(backend: Backend, store: Store) -> None:
    a, b = memory(), memory()
    ka, _ = store(a, b)
    assert backend.memories.archive("default", [a.id, "missing"], backend.changes.next("default")) == 1
    assert backend.memories.archive("default", [a.id], backend.changes.next("default")) == 0  # already archived
    assert backend.memories.get(ALICE, a.id) is None
    got = backend.memories.get(Visibility("default", "alice", include_archived=True), a.id)
    assert got is not None and got.memory.archived and got.key == ka
    assert backend.memories.archive("other", [b.id], backend.changes.next("default")) == 0  # not in that tenant


def test_update_replaces_editable_fields(backend: Backend, store: Store) -> None:
    m = memory(content="old text")
    (k,) = store(m)
    change = ContentChange(
        "new text", "t", ("x",), 9.0, 0.5, 0.5, None, 2, 8, 2, 1, "h", "new text", Confidentiality.CONFIDENTIAL
    )
    backend.memories.update(k, change, backend.changes.next("default"))
    got = backend.memories.get_key(k)
    assert got is not None
    assert (got.memory.content, got.memory.title, got.memory.tags, got.memory.version) == ("new text", "t", ("x",), 2)
    assert got.memory.confidentiality is Confidentiality.CONFIDENTIAL


def test_raise_level_never_lowers(backend: Backend, store: Store) -> None:
    low, high = memory(), memory(confidentiality=Confidentiality.RESTRICTED)
    kl, kh = store(low, high)
    backend.memories.raise_level([kl, kh], Confidentiality.CONFIDENTIAL, backend.changes.next("default"))
    levels = {k: backend.memories.get_key(k).memory.confidentiality for k in (kl, kh)}  # type: ignore[union-attr]
    assert levels == {kl: Confidentiality.CONFIDENTIAL, kh: Confidentiality.RESTRICTED}


def test_retire_leaves_no_text(backend: Backend, store: Store) -> None:
    m = memory(content="Bob's phone is 555-0100", title="phone", tags=("contact",))
    (k,) = store(m)
    backend.memories.retire(k, "forgotten:1", backend.changes.next("default"))
    got = backend.memories.get_key(k)
    assert got is not None
    assert got.memory.archived and got.memory.id == "forgotten:1"
    assert (got.memory.content, got.memory.title, got.memory.tags) == ("", "", ())
    assert backend.memories.get(ALICE, m.id) is None
    assert all(m.id != x.id for x in backend.memories.listing(Visibility("default", "alice", include_archived=True)))


def test_access_state_round_trips(backend: Backend, store: Store) -> None:
    (k,) = store(memory())
    ring = pack_times([1.0, 2.0, 3.0])
    backend.memories.set_access_state([(ring, 4, 0.5, 0.1, 3.0, 1, k)], backend.changes.next("default"))
    assert backend.memories.access_state([k]) == [(k, ring, 4, 0.5, 0.1)]
    got = backend.memories.get_key(k)
    assert got is not None and (got.memory.strength, got.memory.access_count, got.memory.last_access) == (1, 2, 3.0)


def test_set_refs_is_compare_and_set(backend: Backend, store: Store) -> None:
    before = (MemoryRef("trigger", "cue:offsite"),)
    (k,) = store(memory(type=MemoryType.INTENT, refs=before))
    after = (MemoryRef("trigger", "cue:offsite", "fired"),)
    assert backend.memories.set_refs(k, before, after, backend.changes.next("default"), archive=False)
    assert not backend.memories.set_refs(k, before, (), backend.changes.next("default"), archive=True)  # lost the race
    got = backend.memories.get_key(k)
    assert got is not None and got.memory.refs == after and not got.memory.archived


def test_todo_ids_and_scan(backend: Backend, store: Store) -> None:
    ms = [
        memory(type=MemoryType.TODO, status=TodoStatus.OPEN, importance=2),
        memory(type=MemoryType.TODO, status=TodoStatus.DONE),
        memory(type=MemoryType.TODO, status=TodoStatus.OPEN, importance=9),
    ]
    keys = store(*ms)
    assert backend.memories.todo_ids(ALICE, TodoStatus.OPEN, by_importance=False) == [ms[0].id, ms[2].id]
    assert backend.memories.todo_ids(ALICE, TodoStatus.OPEN, by_importance=True) == [ms[2].id, ms[0].id]
    assert len(backend.memories.todo_ids(ALICE, None, by_importance=False)) == 3
    rows = backend.memories.scan(ALICE, keys[0], 1)
    assert [r[0] for r in rows] == [keys[1]]


def test_change_stamps_drive_the_index_rows(backend: Backend, store: Store) -> None:
    before = backend.changes.current("default")
    (k,) = store(memory(content="alpha beta"))
    assert backend.changes.current("default") > before
    rows = backend.memories.index_rows(before, "default")
    assert [r[0] for r in rows] == [k]
    assert "alpha" in rows[0][8]
    now = backend.changes.current("default")
    assert backend.memories.index_rows(now, "default") == []
    backend.memories.archive_keys([k], backend.changes.next("default"))
    assert [r[0] for r in backend.memories.index_rows(now, "default")] == [k]
    assert dict(backend.memories.changed_upto(backend.changes.current("default")))[k] > now


def test_change_sequence_is_monotonic_across_threads(backend: Backend) -> None:
    seen: list[int] = []
    lock = threading.Lock()

    def draw() -> None:
        for _ in range(20):
            with backend.atomic():
                n = backend.changes.next("default")
            with lock:
                seen.append(n)

    threads = [threading.Thread(target=draw) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(seen)) == len(seen) == 80
    assert backend.changes.current("default") >= max(seen)


# -- Edges ----------------------------------------------------------------------------------------


def test_edges_put_replace_and_neighbours(backend: Backend, store: Store) -> None:
    a, b, c = memory(), memory(), memory(owner="bob")
    ka, kb, kc = store(a, b, c)
    assert (
        backend.edges.put(
            "default", [(ka, kb, "causes", 1.0), (ka, kc, "related", 0.5)], now=5.0, by="alice", replace=False
        )
        == 2
    )
    assert backend.edges.put("default", [(ka, kb, "causes", 0.3)], now=6.0, by="alice", replace=False) == 0
    near = backend.edges.neighbours(ALICE, [ka, kb])
    assert near[ka] == [(kb, "causes", 1.0)]  # bob's private memory is not visible to alice
    assert near[kb] == [(ka, "causes", 1.0)]  # edges spread both ways
    backend.edges.put("default", [(ka, kb, "causes", 0.3)], now=7.0, by="alice", replace=True)
    assert backend.edges.neighbours(ALICE, [ka])[ka] == [(kb, "causes", 0.3)]
    assert [(e.source, e.target) for e in backend.edges.touching(ALICE, ka)] == [(a.id, b.id)]
    assert backend.edges.pairs("default") == {(ka, kb), (ka, kc)}
    backend.edges.delete_touching(ka)
    assert backend.edges.pairs("default") == set()


def test_contradictions_either_way(backend: Backend, store: Store) -> None:
    a, b = memory(content="Ada leads payments"), memory(content="Grace leads payments")
    ka, kb = store(a, b)
    backend.edges.put("default", [(kb, ka, "contradicts", 1.0)], now=1.0, by="alice", replace=False)
    found = backend.edges.contradictions(ALICE, [ka, kb])
    assert found[ka] == [(b.id, b.content)] and found[kb] == [(a.id, a.content)]
    assert backend.edges.contradicting(ALICE) == [(kb, ka)]


def test_move_keeps_the_higher_weight(backend: Backend, store: Store) -> None:
    keep, dup, other = store(memory(), memory(), memory())
    backend.edges.put(
        "default", [(keep, other, "related", 0.2), (dup, other, "related", 0.9)], now=1.0, by="a", replace=False
    )
    backend.edges.move(dup, keep)
    assert backend.edges.neighbours(ALICE, [keep])[keep] == [(other, "related", 0.9)]


# -- the access stream, tombstones, recall log, versions -------------------------------------------


def test_access_stream_keeps_every_record(backend: Backend, store: Store) -> None:
    m = memory()
    (k,) = store(m)
    comps = Components(1.0, 0.5, 0.5, 0.0, 0.9, 0.1, 0.3, 0.0, 0.0, 0.0)
    for i in range(70):  # more than the 64-entry ring of the record
        backend.accesses.append(
            [Touch(k, Channel.RECALLED, score=1.5, rank=1, components=comps)],
            now=float(i), tenant="default", reader="alice", query="q" * 300, recall_id=f"rc_{i}",
        )  # fmt: skip
    records = backend.accesses.records(k)
    assert len(records) == 70 and [r.ts for r in records] == [float(i) for i in range(70)]
    last = records[-1]
    assert (last.channel, last.reader, last.memory_id, last.rank, last.recall_id) == (
        Channel.RECALLED, "alice", m.id, 1, "rc_69",
    )  # fmt: skip
    assert last.query == "q" * 200
    assert last.components == Components(rel=1.0, rec=0.5, imp=0.5, spread=0.0)  # the parts of the score
    usage = backend.accesses.usage(ALICE)
    assert usage.memories == 1 and usage.reads_per_memory == [70]


def test_tombstones_latest_per_value(backend: Backend) -> None:
    backend.tombstones.add(Tombstone("alice:1", "default", "alice", "h1", "alice", 1.0, "first"))
    backend.tombstones.add(Tombstone("alice:2", "default", "alice", "h1", "alice", 2.0, "second"))
    found = backend.tombstones.find("default", ["alice", "bob"], ["h1", "h2"])
    assert list(found) == [("alice", "h1")] and found["alice", "h1"].reason == "second"
    assert backend.tombstones.find("other", ["alice"], ["h1"]) == {}
    # find_at: the same stones, with the tenant's change sequence beside them
    with backend.atomic():
        stamp = backend.changes.next("default")
    latest, stones = backend.tombstones.find_at("default", ["alice", "bob"], ["h1", "h2"])
    assert latest == stamp == backend.changes.current("default") and stones == found
    assert backend.tombstones.find_at("default", ["bob"], ["h1"]) == (stamp, {})
    assert backend.tombstones.find_at("default", [], []) == (stamp, {})
    assert backend.tombstones.find_at("other", ["alice"], ["h1"])[1] == {}


def test_recall_log_is_per_reader(backend: Backend) -> None:
    rec = RecallRecord("rc_1", 1.0, "default", "alice", "what broke", {"k": 3}, [{"id": "alice:9", "score": 0.1}])
    backend.recalls.add(rec)
    assert backend.recalls.get("default", "alice", "rc_1") == rec
    assert backend.recalls.get("default", "bob", "rc_1") is None
    assert backend.recalls.get("other", "alice", "rc_1") is None
    backend.recalls.rewrite(RecallRecord("rc_1", 1.0, "default", "alice", "what broke", {"k": 4}, []))
    again = backend.recalls.get("default", "alice", "rc_1")
    assert again is not None and again.params == {"k": 4} and again.near_misses == []
    assert [r.recall_id for r in backend.recalls.mentioning("default", "alice:9")] in ([], ["rc_1"])


def test_versions_history(backend: Backend, store: Store) -> None:
    (k,) = store(memory())
    backend.versions.add(k, MemoryVersion(1, "t", "first", 1.0, "alice"))
    backend.versions.add(k, MemoryVersion(2, "t", "second", 2.0, "alice"))
    assert [v.content for v in backend.versions.history(k)] == ["first", "second"]
    backend.versions.delete(k)
    assert backend.versions.history(k) == []


# -- vectors --------------------------------------------------------------------------------------


def test_memory_vectors(backend: Backend, store: Store) -> None:
    import numpy as np

    ka, kb = store(memory(), memory(owner="bob"))
    va, vb = np.arange(4, dtype=np.float32), np.ones(4, dtype=np.float32)
    backend.vectors.put([(ka, "m", va.tobytes()), (kb, "m", vb.tobytes())])
    batches = [row for batch in backend.vectors.in_scope(ALICE, "m") for row in batch]
    assert [(r[0], np.frombuffer(r[4], dtype=np.float32).tolist()) for r in batches] == [(ka, va.tolist())]
    rows = {r[0]: r for r in backend.vectors.cache_rows("m", 0, "default")}
    assert set(rows) >= {ka, kb} and rows[ka][9] == va.tobytes()
    backend.vectors.put([(ka, "m", vb.tobytes())], replace=True)
    assert backend.vectors.cache_rows_for("m", [ka])[0][9] == vb.tobytes()
    backend.vectors.delete(ka)
    assert backend.vectors.cache_rows_for("m", [ka])[0][9] is None


def test_row_vectors_apply_and_version(backend: Backend) -> None:
    store = backend.row_vectors
    v0 = store.version()
    store.apply("shared_notes", "content", "m", [], [(1, b"d1", b"\x00" * 8), (2, b"d2", b"\x01" * 8)])
    assert store.version() != v0
    assert store.digests("shared_notes", "content", "m") == {1: b"d1", 2: b"d2"}
    store.apply("shared_notes", "content", "m", [1], [])
    assert store.load("shared_notes", "content", "m") == [(2, b"\x01" * 8)]


# -- units of work, locks, identity ---------------------------------------------------------------


def test_atomic_is_all_or_nothing_and_nests(backend: Backend) -> None:
    a, b = memory(), memory()

    with pytest.raises(RuntimeError), backend.atomic():
        put(backend, [a])
        raise RuntimeError("boom")
    assert backend.memories.get(ALICE, a.id) is None
    with backend.atomic():
        put(backend, [a])
        with pytest.raises(RuntimeError), backend.atomic():  # a savepoint: only the inner part is undone
            put(backend, [b])
            raise RuntimeError("boom")
        assert backend.in_transaction()
    assert backend.memories.get(ALICE, a.id) is not None and backend.memories.get(ALICE, b.id) is None
    assert not backend.in_transaction()


def test_a_unit_of_work_belongs_to_its_thread(backend: Backend) -> None:
    m = memory()
    seen: list[bool] = []

    with backend.atomic():
        put(backend, [m])
        t = threading.Thread(target=lambda: seen.append(backend.in_transaction()))
        t.start()
        t.join()
    assert seen == [False]


def test_snapshot_reads(backend: Backend, store: Store) -> None:
    m = memory()
    store(m)
    with backend.snapshot():
        assert backend.memories.get(ALICE, m.id) is not None


def test_tenant_lock_is_exclusive_and_released(backend: Backend) -> None:
    with backend.tenant_lock("default", "alice"):
        with pytest.raises(TransactionError), backend.tenant_lock("default", "bob"):
            pass
        with backend.tenant_lock("other", "bob"):  # another tenant's lock is free
            pass
    with backend.tenant_lock("default", "bob"):
        pass


def test_migrate_is_idempotent_and_identity_stable(backend: Backend) -> None:
    ident = backend.instance_id()
    assert ident
    v = backend.migrate(1.0)
    assert backend.migrate(2.0) == v
    assert backend.instance_id() == ident


def test_closed_backend_raises_an_engine_error(make_engine: Callable[..., object]) -> None:
    engine = make_engine("closing")
    b: Backend = engine._backend  # type: ignore[attr-defined]
    b.close()
    with pytest.raises(EngramError) as err:
        b.memories.get(ALICE, "x")
    assert isinstance(err.value, BackendError)
