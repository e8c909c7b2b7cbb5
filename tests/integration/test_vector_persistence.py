"""The vector cache's side file: a reopened engine adopts it instead of re-reading every vector and
re-training the IVF, sees every write made since, and ignores any file that does not fit."""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engramdb import DynamicMemoryEngine
from engramdb.memories.model import Visibility
from engramdb.retrieval.side_files import safe_name, side_dir_for
from engramdb.tenancy.namespaced import TenantFiles
from engramdb.testing import FixedClock, fake_embedder
from engramdb.vectors.ann import AnnIndex
from engramdb.vectors.npz import write_arrays

pytestmark = pytest.mark.sqlite_only  # SQLite's own machinery; other backends have their own suite

pytest.importorskip("faiss")  # the side file holds an AnnIndex

COLOURS = ("red", "green", "blue", "amber", "violet")
ANIMALS = ("otter", "heron", "badger", "lynx", "marten", "newt", "wren")
PLACES = ("harbour", "quarry", "orchard", "station", "market", "chapel", "ferry", "mill", "bridge", "dunes", "forge")
TEXTS = [f"note {i}: the {COLOURS[i % 5]} {ANIMALS[i % 7]} visited the {PLACES[i % 11]} on day {i}" for i in range(600)]
QUERIES = ("red otter harbour", "the heron at the quarry", "violet lynx on day 12", "amber wren ferry", "badger mill")
VIS = Visibility("default", "alice")
CHANNEL_LOG = "engramdb.retrieval.vector_channel"


@pytest.fixture(autouse=True)
def small_lexical_saves(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lexical side file is written from 20k memories on; these stores have hundreds."""
    from engramdb.retrieval import lexical_channel

    monkeypatch.setattr(lexical_channel, "SAVE_MIN", 64)


def small_ann(dim: int) -> AnnIndex:
    # Trains at 64 vectors; exact_rows=0 so that searches go through the IVF, not the exact path.
    return AnnIndex(dim, train_at=64, nlist=8, exact_rows=0)


def open_engine(path: Path, clock: FixedClock, **options: Any) -> DynamicMemoryEngine:
    options.setdefault("vector_index", small_ann)
    return DynamicMemoryEngine(path, clock=clock, memory_embedder=fake_embedder(), **options)


def results(engine: DynamicMemoryEngine) -> list[Any]:
    """Dry-run recalls (they log nothing) and the raw vector candidates, for every query."""
    me = engine.agent("alice")
    out: list[Any] = []
    for q in QUERIES:
        x = me.explain(q, k=8)
        out.append([(h.memory_id, h.score, h.source) for h in (*x.hits, *x.near_misses)])
        channel, embedder = engine._runtime.vectors, engine.memory_embedder
        assert channel is not None and embedder is not None
        out.append(channel.search(embedder.embed([q])[0], 20, VIS))
    return out


def no_rebuild(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(self: AnnIndex) -> None:
        raise AssertionError("the IVF was trained again")

    monkeypatch.setattr(AnnIndex, "rebuild", fail)


def channel_of(engine: DynamicMemoryEngine) -> Any:
    channel = engine._runtime.vectors
    assert channel is not None
    return channel


def saved_change(path: Path) -> int:
    with np.load(path) as npz:
        return int(json.loads(bytes(npz["stamp"]))["change"])


@pytest.fixture
def db(tmp_path: Path, clock: FixedClock) -> Iterator[Path]:
    """A database of 600 memories whose side file was saved by the first recall."""
    path = tmp_path / "m.db"
    with open_engine(path, clock) as engine:
        engine.agent("alice").remember_many([{"content": t} for t in TEXTS])
        results(engine)
        channel = channel_of(engine)
        assert channel.index.trained and channel.index.generation == 1 and not channel.restored
    yield path


def side(path: Path) -> Path:
    return side_dir_for(path) / f"vectors-{safe_name(fake_embedder().name)}.npz"


def test_a_reopened_engine_adopts_the_side_file_and_answers_the_same(
    db: Path, clock: FixedClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert side(db).is_file() and side(db).name.startswith("vectors-hashing-")
    assert side(db).parent.name == "m.db.engramdb-index" and (side(db).parent / "lexical.npz").is_file()
    assert stat.S_IMODE(side(db).stat().st_mode) == stat.S_IMODE(db.stat().st_mode) & 0o666  # readable as the db
    with open_engine(db, clock) as first:
        expected = results(first)  # restored too; the next engine must not even build the IVF
    no_rebuild(monkeypatch)
    with open_engine(db, clock) as engine:
        assert results(engine) == expected
        channel = channel_of(engine)
        assert channel.restored and channel.index.trained and channel.index.generation == 0
        assert len(channel.index) == len(TEXTS)


def key_of(engine: DynamicMemoryEngine, memory_id: str) -> int:
    key = engine._backend.memories.key_of("default", memory_id)
    assert key is not None
    return key


def vector_hits(engine: DynamicMemoryEngine, text: str) -> dict[int, float]:
    embedder = engine.memory_embedder
    assert embedder is not None
    hits: dict[int, float] = channel_of(engine).search(embedder.embed([text])[0], 50, VIS)
    return hits


def test_writes_made_after_the_save_are_seen_after_reopen(
    db: Path, clock: FixedClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_rebuild(monkeypatch)
    with open_engine(db, clock) as running, open_engine(db, clock) as writer:
        results(running)  # its cache now reflects the saved state
        w = writer.agent("alice")
        added = w.remember("a purple walrus painted the lighthouse at dawn")
        old = w.search("violet lynx on day 12", k=1)[0].memory
        w.update(old.id, content="the grey mole dug under the lighthouse")
        expected = results(running)  # the long-running engine refreshed incrementally
        with open_engine(db, clock) as engine:
            assert results(engine) == expected
            assert channel_of(engine).restored
            me = engine.agent("alice")
            assert me.search("purple walrus lighthouse", k=1)[0].memory.id == added.id
            assert me.search("grey mole dug under the lighthouse", k=1)[0].memory.id == old.id


def saved_rows(path: Path) -> Any:
    """The saved vectors (dequantised: a trained index holds int8 codes with a scale per row)."""
    with np.load(path) as npz:
        if "codes" in npz.files:
            return npz["codes"].astype(np.float32) * npz["scales"][:, None]
        return np.array(npz["vectors"])


def test_a_forgotten_memorys_vector_leaves_every_side_file(db: Path, clock: FixedClock) -> None:
    """forget() drops the side file; a cache that still holds the vector zeroes it before any
    later save, even one written at close by another engine that loaded it before the forget."""
    with open_engine(db, clock) as stale, open_engine(db, clock) as writer:
        results(stale)  # holds every vector, the one about to be forgotten included
        w = writer.agent("alice")
        gone = w.search("amber wren ferry", k=1)[0].memory
        gone_n = key_of(writer, gone.id)
        vec = channel_of(stale).index.vectors_of(np.array([gone_n]))[0].copy()
        assert side(db).exists() and (np.abs(saved_rows(side(db)) - vec).max(axis=1) < 1e-6).any()
        w.forget(gone.id)
        assert not side(db).exists()
        # the stale engine has new rows to save (more than a tenth of its cache) when it closes
        stale.agent("alice").remember_many([{"content": f"{t} (again, later)"} for t in TEXTS[:100]])
    assert side(db).exists()  # written at close, after catching up with the forget
    assert not (np.abs(saved_rows(side(db)) - vec).max(axis=1) < 1e-6).any()
    with open_engine(db, clock) as engine:
        results(engine)
        assert channel_of(engine).restored
        assert gone_n not in vector_hits(engine, gone.content)
        row = channel_of(engine).index.row_of(gone_n)
        assert row is None or not channel_of(engine).index.vectors_of(np.array([gone_n])).any()


def test_close_writes_again_the_side_files_a_forget_dropped(
    db: Path, clock: FixedClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A forget drops both side files; the engine that forgot writes them again at close, from
    caches that caught up with the forget, so the next process adopts them instead of rebuilding
    (and neither holds the forgotten vector or words)."""
    lexical = side_dir_for(db) / "lexical.npz"
    with open_engine(db, clock) as engine:
        results(engine)
        me = engine.agent("alice")
        gone = me.search("amber wren ferry", k=1)[0].memory
        gone_n = key_of(engine, gone.id)
        vec = channel_of(engine).index.vectors_of(np.array([gone_n]))[0].copy()
        assert side(db).exists() and lexical.exists()
        me.forget(gone.id)
        assert not side(db).exists() and not lexical.exists()
    _written_again_without(db, clock, monkeypatch, gone, gone_n, vec)


def test_a_forget_in_a_process_that_never_recalled_keeps_the_side_files(
    db: Path, clock: FixedClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that forgets without having loaded the caches (the CLI's `engramdb forget`) loads
    them from the side files first, so that its close writes them again without the forgotten
    memory: the next process adopts them instead of rebuilding both caches from every row."""
    lexical = side_dir_for(db) / "lexical.npz"
    with open_engine(db, clock) as engine:
        results(engine)
        gone = engine.agent("alice").search("amber wren ferry", k=1)[0].memory
        gone_n = key_of(engine, gone.id)
        vec = channel_of(engine).index.vectors_of(np.array([gone_n]))[0].copy()
    assert side(db).exists() and lexical.exists()
    with open_engine(db, clock) as engine:  # no recall, no search: a forget only
        engine.agent("alice").forget(gone.id)
        assert not side(db).exists() and not lexical.exists()
    _written_again_without(db, clock, monkeypatch, gone, gone_n, vec)


def _written_again_without(
    db: Path, clock: FixedClock, monkeypatch: pytest.MonkeyPatch, gone: Any, gone_n: int, vec: Any
) -> None:
    """Both side files were written again at close without the forgotten memory's vector, and the
    next process adopts them (no IVF training) and never finds it."""
    assert side(db).exists() and (side_dir_for(db) / "lexical.npz").exists()
    assert not (np.abs(saved_rows(side(db)) - vec).max(axis=1) < 1e-6).any()
    no_rebuild(monkeypatch)
    with open_engine(db, clock) as engine:
        results(engine)
        assert channel_of(engine).restored and engine._runtime.recaller.lexical.restored
        assert gone_n not in vector_hits(engine, gone.content)


def test_a_forget_inside_a_callers_transaction_leaves_later_saves_alone(db: Path, clock: FixedClock) -> None:
    """A forget inside the caller's transaction does not load the caches for it (a cache read in a
    transaction that may yet roll back is never saved): the process's first recall after it loads
    them from the rows, and the side files are written again (found by a review: loading them in
    the transaction kept them from being written for the rest of the process)."""
    lexical = side_dir_for(db) / "lexical.npz"
    with open_engine(db, clock) as engine:
        gone = engine.agent("alice").search("amber wren ferry", k=1)[0].memory
    with open_engine(db, clock) as engine:
        me = engine.agent("alice")
        with engine._backend.atomic():
            me.forget(gone.id)
        assert not side(db).exists() and not lexical.exists()
        results(engine)
    assert side(db).exists() and lexical.exists()


def test_a_forget_does_not_load_a_cache_that_has_no_side_file(
    tmp_path: Path, clock: FixedClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exact vector index never writes a side file: a forget on a file with only the lexical
    one does not read every stored vector into memory for nothing."""
    from engramdb.storage.sqlite.vectors import SqliteMemoryVectors

    path = tmp_path / "m.db"
    lexical = side_dir_for(path) / "lexical.npz"
    with open_engine(path, clock, vector_index="exact") as engine:
        engine.agent("alice").remember_many([{"content": t} for t in TEXTS])
        results(engine)
    assert lexical.exists() and not side(path).exists()
    loads: list[int] = []
    real = SqliteMemoryVectors.cache_row_batches

    def counted(self: SqliteMemoryVectors, *a: Any) -> Any:
        loads.append(1)
        return real(self, *a)

    monkeypatch.setattr(SqliteMemoryVectors, "cache_row_batches", counted)
    with open_engine(path, clock, vector_index="exact") as engine:
        me = engine.agent("alice")
        me.forget(me.memories()[0].id)
        assert not loads
    assert lexical.exists()  # the lexical cache was loaded and written again


def test_forgotten_memories_stay_invisible_after_reopen(
    tmp_path: Path, clock: FixedClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "m.db"
    with open_engine(path, clock) as engine:
        me = engine.agent("alice")
        mems = me.remember_many([{"content": t} for t in TEXTS])
        results(engine)  # loads the vectors, trains the IVF, saves
        before, after = mems[3], mems[4]
        keys = {m.id: key_of(engine, m.id) for m in (before, after)}
        assert keys[before.id] in vector_hits(engine, before.content)
        me.forget(before.id)
        channel_of(engine).index.rebuild()  # so that the next refresh saves, with `before` purged
        results(engine)
        assert saved_change(side(path)) == engine._backend.changes.current()
        me.forget(after.id)  # drops the file again
        assert not side(path).exists()
        expected = results(engine)
    with open_engine(path, clock) as engine:
        assert results(engine) == expected
        for memory in (before, after):
            assert keys[memory.id] not in vector_hits(engine, memory.content)


DAMAGES = {
    "truncated": "not a zip file",
    "garbage": "not a zip file",
    "flipped": "its sum differs",
    "empty": "not a zip file",
    "npy": "not a zip file",
    "other_format": "unknown side file format",
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_side_file_is_ignored(
    db: Path, clock: FixedClock, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    with open_engine(db, clock) as engine:
        expected = results(engine)
    path = side(db)
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(bytes(range(256)) * 64)
    elif damage == "flipped":
        middle = bytearray(data)
        middle[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(middle))
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "npy":
        with path.open("wb") as fh:
            np.save(fh, np.arange(10))
    else:
        with np.load(path) as npz:
            arrays = {k: npz[k] for k in npz.files}
        arrays["stamp"] = np.frombuffer(json.dumps({"format": 99}).encode(), dtype=np.uint8)
        write_arrays(path, arrays)
    with open_engine(db, clock) as engine, caplog.at_level(logging.DEBUG, CHANNEL_LOG):
        assert results(engine) == expected  # a full load, trained again from the stored vectors
        assert not channel_of(engine).restored and channel_of(engine).index.generation == 1
    assert DAMAGES[damage] in caplog.text
    with open_engine(db, clock) as engine:  # the retrained index replaced the damaged file
        results(engine)
        assert channel_of(engine).restored


def test_a_side_file_of_another_database_is_ignored(
    db: Path, tmp_path: Path, clock: FixedClock, caplog: pytest.LogCaptureFixture
) -> None:
    other = tmp_path / "other" / "m.db"
    with open_engine(other, clock) as engine:
        engine.agent("alice").remember_many([{"content": t.replace("note", "memo")} for t in reversed(TEXTS)])
        expected = results(engine)
    assert side(other).is_file()
    shutil.copyfile(side(db), side(other))  # same counter and size, another instance_id
    with open_engine(other, clock) as engine, caplog.at_level(logging.DEBUG, CHANNEL_LOG):
        assert results(engine) == expected
        assert not channel_of(engine).restored
    assert "instance_id differs" in caplog.text


def backup(path: Path, to: Path) -> None:
    with sqlite3.connect(path) as src, sqlite3.connect(to) as dst:
        src.backup(dst)
    src.close()
    dst.close()


def restore(copy: Path, path: Path) -> None:
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(copy, path)


@pytest.mark.parametrize("diverged", [False, True])
def test_a_side_file_ahead_of_the_database_is_ignored(
    tmp_path: Path, clock: FixedClock, diverged: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A backup restored after the save: its counter is behind the file's, or — once written to
    again — level with it but with other contents under the same keys and change numbers."""
    path, copy = tmp_path / "m.db", tmp_path / "backup.db"
    with open_engine(path, clock) as engine:
        engine.agent("alice").remember_many([{"content": t} for t in TEXTS[:500]])
    backup(path, copy)
    with open_engine(path, clock) as engine:
        engine.agent("alice").remember_many([{"content": t} for t in TEXTS[500:]])
        results(engine)
    saved = saved_change(side(path))  # saved again by close(): 100 of 600 rows changed
    restore(copy, path)
    if diverged:  # the same writes with other contents, by an engine that leaves the file alone
        with open_engine(path, clock, vector_index="exact") as writer:
            writer.agent("alice").remember_many([{"content": f"diverged {t}"} for t in TEXTS[500:]])
            assert writer._backend.changes.current() == saved
    with open_engine(path, clock) as engine, caplog.at_level(logging.DEBUG, CHANNEL_LOG):
        got = results(engine)
        assert not channel_of(engine).restored
    assert ("rows differ" if diverged else f"reflects change {saved}") in caplog.text
    fresh = tmp_path / "fresh.db"  # the same database without a side file
    backup(path, fresh)
    with open_engine(fresh, clock) as engine:
        assert results(engine) == got


def test_close_saves_when_a_tenth_of_the_rows_changed(db: Path, clock: FixedClock) -> None:
    path = side(db)
    before = saved_change(path)
    with open_engine(db, clock) as engine, open_engine(db, clock) as writer:
        results(engine)
        writer.agent("alice").remember_many([{"content": f"few {t}"} for t in TEXTS[:30]])  # 5%
        results(engine)
        inode = path.stat().st_ino
    assert path.stat().st_ino == inode and saved_change(path) == before  # not worth saving
    with open_engine(db, clock) as engine, open_engine(db, clock) as writer:
        results(engine)
        writer.agent("alice").remember_many([{"content": f"many {t}"} for t in TEXTS[:100]])  # 100 of 630
        results(engine)
        latest = engine._backend.changes.current()
    assert saved_change(path) == latest


def test_no_side_file_without_a_trained_ann_index_on_a_file(tmp_path: Path, clock: FixedClock) -> None:
    with open_engine(Path(":memory:"), clock) as engine:
        engine.agent("alice").remember_many([{"content": t} for t in TEXTS[:100]])
        results(engine)
        assert channel_of(engine).index.trained
        assert not list(engine.path.parent.glob("*.engramdb-index"))
    for name, index in (("exact.db", "exact"), ("auto.db", "auto")):  # auto: trains at 20k only
        with open_engine(tmp_path / name, clock, vector_index=index) as engine:
            engine.agent("alice").remember_many([{"content": t} for t in TEXTS[:100]])
            results(engine)
    assert not list(tmp_path.glob("*.engramdb-index/vectors-*"))


def test_tenant_files_keep_a_side_file_per_tenant(
    tmp_path: Path, clock: FixedClock, monkeypatch: pytest.MonkeyPatch
) -> None:

    options: dict[str, Any] = {"clock": clock, "memory_embedder": fake_embedder(), "vector_index": small_ann}
    expected = {}
    with TenantFiles(tmp_path / "tenants", **options) as files:
        for tenant in ("acme", "globex"):
            me = files.agent("alice", tenant=tenant)
            me.remember_many([{"content": f"{tenant} {t}"} for t in TEXTS[:200]])
            expected[tenant] = [h.memory_id for h in me.explain("red otter harbour", k=8).hits]
            assert side(files.path_for(tenant)).is_file()
    no_rebuild(monkeypatch)
    with TenantFiles(tmp_path / "tenants", **options) as files:
        for tenant in ("acme", "globex"):
            assert [
                h.memory_id for h in files.agent("alice", tenant=tenant).explain("red otter harbour", k=8).hits
            ] == (expected[tenant])
            assert channel_of(files.engine(tenant)).restored


def test_a_cache_read_inside_a_transaction_is_never_saved(tmp_path: Path, clock: FixedClock) -> None:
    path = tmp_path / "m.db"
    with open_engine(path, clock) as engine:
        # dedup off: no lookup loads the cache first (a loaded cache takes a committed write as
        # written, `VectorChannel.written`, and would have nothing left to read below)
        engine.agent("alice").remember_many([{"content": t} for t in TEXTS], dedup=False)
        with engine._backend.snapshot():  # what it reads inside a transaction might yet be rolled back
            channel_of(engine).refresh(engine._backend)
        assert channel_of(engine).index.trained
    assert not side(path).exists()


def test_each_database_has_its_own_instance_id(tmp_path: Path) -> None:
    ids: list[str] = []
    for name in ("a.db", "b.db", "a.db"):
        with DynamicMemoryEngine(tmp_path / name, memory_embedder=None) as engine:
            instance_id = engine._backend.instance_id()
            assert instance_id is not None
            ids.append(instance_id)
    assert ids[0] == ids[2] != ids[1] and len(ids[0]) == 32


def test_concurrent_saves_never_leave_a_torn_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    indexes = []
    for size in (300, 500):
        vecs = rng.standard_normal((size, 16)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        index = AnnIndex(16, train_at=64, nlist=4)
        index.upsert(np.arange(size, dtype=np.int64), vecs)
        indexes.append(index)
    path = tmp_path / "index.npz"
    indexes[0].save(path)
    errors: list[BaseException] = []
    seen: set[int] = set()

    def save(index: AnnIndex) -> None:
        try:
            for _ in range(15):
                index.save(path)
        except BaseException as exc:
            errors.append(exc)

    def load() -> None:
        try:
            for _ in range(30):
                seen.add(len(AnnIndex.load(path)))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=save, args=(i,)) for i in indexes] + [threading.Thread(target=load)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and seen <= {300, 500}
    assert len(AnnIndex.load(path)) in (300, 500)
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_vector_file_false_neither_writes_nor_reads_a_side_file(db: Path, clock: FixedClock) -> None:
    saved = side(db).read_bytes()
    side(db).unlink()
    with open_engine(db, clock, vector_file=False) as engine:
        results(engine)
        assert channel_of(engine).side_file is None and not channel_of(engine).restored
    assert not side(db).exists()
    side(db).write_bytes(saved)  # a good file is there, and still not read
    with open_engine(db, clock, vector_file=False) as engine:
        results(engine)
        assert not channel_of(engine).restored
    with pytest.raises(ValueError, match="vector_file must be True or False"):
        open_engine(db, clock, vector_file="no")


def test_a_crash_leftover_is_removed_by_the_next_save_but_a_young_one_is_not(tmp_path: Path) -> None:
    target = tmp_path / "m.db.vectors-x.npz"
    old, young = tmp_path / ".m.db.vectors-x.npz.abc.tmp", tmp_path / ".m.db.vectors-x.npz.def.tmp"
    other = tmp_path / ".other.npz.abc.tmp"
    for f in (old, young, other):
        f.write_bytes(b"partial")
    two_hours_ago = os.path.getmtime(young) - 7200
    for f in (old, other):
        os.utime(f, (two_hours_ago, two_hours_ago))
    write_arrays(target, {"a": np.arange(3)})
    assert target.is_file() and not old.exists()
    assert young.exists() and other.exists()  # maybe another process's write; not this file's leftover
