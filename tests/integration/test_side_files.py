"""Both channels' side files (`engramdb.retrieval.side_files`): a reopened engine adopts them,
answers exactly as an engine that loaded everything from the database, catches up with writes
made since, and refuses any file that does not fit (damaged, truncated, another database's,
ahead of the database, or a diverged history)."""

from __future__ import annotations

import json
import logging
import shutil
import sqlite3
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engramdb import DynamicMemoryEngine
from engramdb.retrieval import lexical_channel
from engramdb.retrieval.lexical_channel import _Rings
from engramdb.retrieval.side_files import fast_sum, side_dir_for, tip_fits
from engramdb.testing import FixedClock, fake_embedder
from engramdb.vectors.ann import AnnIndex
from engramdb.vectors.exact import KeyRows
from engramdb.vectors.npz import write_arrays

pytestmark = pytest.mark.sqlite_only  # side files are kept beside SQLite files only

pytest.importorskip("faiss")

WORDS = ("otter", "heron", "badger", "lynx", "marten", "newt", "wren", "harbour", "quarry", "orchard", "ferry")
TEXTS = [
    f"note {i}: the {WORDS[i % 11]} met a {WORDS[(i * 7) % 11]} near the {WORDS[(i * 3) % 11]} on day {i}"
    for i in range(500)
]
QUERIES = ("otter harbour", "the heron at the quarry", "lynx on day 12", "wren ferry", "badger orchard day 40")
LEX_LOG = "engramdb.retrieval.lexical_channel"


@pytest.fixture(autouse=True)
def small_saves(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lexical_channel, "SAVE_MIN", 64)


def small_ann(dim: int) -> AnnIndex:
    return AnnIndex(dim, train_at=64, nlist=8, exact_rows=0)


def open_engine(path: Path, clock: FixedClock, **options: Any) -> DynamicMemoryEngine:
    options.setdefault("vector_index", small_ann)
    return DynamicMemoryEngine(path, clock=clock, memory_embedder=fake_embedder(), **options)


def answers(engine: DynamicMemoryEngine) -> list[Any]:
    """Dry-run recalls with scores and sources, and the raw lexical candidates."""
    me = engine.agent("alice")
    out: list[Any] = []
    for q in QUERIES:
        x = me.explain(q, k=8)
        out.append([(h.memory_id, round(h.score, 9), h.source) for h in (*x.hits, *x.near_misses)])
    return out


def lexical(engine: DynamicMemoryEngine) -> Any:
    return engine._runtime.recaller.lexical


def from_database(path: Path, clock: FixedClock, tmp: Path) -> list[Any]:
    """The answers of an engine on a copy of `path` without any side file (a full load)."""
    copy = tmp / f"copy-{len(list(tmp.glob('copy-*')))}.db"
    with sqlite3.connect(path) as src, sqlite3.connect(copy) as dst:
        src.backup(dst)
    src.close()
    dst.close()
    with open_engine(copy, clock) as engine:
        got = answers(engine)
        assert not lexical(engine).restored
    return got


@pytest.fixture
def db(tmp_path: Path, clock: FixedClock) -> Path:
    path = tmp_path / "m.db"
    with open_engine(path, clock) as engine:
        engine.agent("alice").remember_many([{"content": t} for t in TEXTS])
        answers(engine)  # the first recall loads both channels and saves them
    assert (side_dir_for(path) / "lexical.npz").is_file()
    return path


def test_a_reopened_engine_adopts_both_side_files_and_answers_as_a_full_load(
    db: Path, clock: FixedClock, tmp_path: Path
) -> None:
    expected = from_database(db, clock, tmp_path)
    with open_engine(db, clock) as engine:
        assert answers(engine) == expected
        assert lexical(engine).restored and engine._runtime.vectors is not None and engine._runtime.vectors.restored


def test_writes_between_save_and_load_are_caught_up(db: Path, clock: FixedClock, tmp_path: Path) -> None:
    """A writer in another thread adds and changes memories after the save; a new
    engine adopts the (now older) files and reads only what changed since."""

    def write() -> None:
        with open_engine(db, clock, vector_file=False) as writer:
            me = writer.agent("alice")
            me.remember_many([{"content": f"later {t} with a kingfisher"} for t in TEXTS[:40]])
            hit = me.search("otter harbour", k=1)[0].memory
            me.update(hit.id, content="the otter moved inland to the kingfisher mill")

    t = threading.Thread(target=write)
    t.start()
    t.join()
    expected = from_database(db, clock, tmp_path)
    with open_engine(db, clock) as engine:
        got = answers(engine)
        assert got == expected
        assert lexical(engine).restored and engine._runtime.vectors is not None and engine._runtime.vectors.restored
        assert "kingfisher" in json.dumps(engine.agent("alice").search("kingfisher mill", k=3)[0].memory.content)


def damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "flipped":
        middle = bytearray(data)
        middle[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(middle))
    elif how == "truncated":
        path.write_bytes(data[: len(data) - 1000])
    elif how == "empty":
        path.write_bytes(b"")


@pytest.mark.parametrize("how", ["flipped", "truncated", "empty"])
def test_a_damaged_lexical_file_is_refused_and_rebuilt(
    db: Path, clock: FixedClock, tmp_path: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    expected = from_database(db, clock, tmp_path)
    damage(side_dir_for(db) / "lexical.npz", how)
    with open_engine(db, clock) as engine, caplog.at_level(logging.DEBUG, LEX_LOG):
        assert answers(engine) == expected
        assert not lexical(engine).restored
    assert "ignoring the lexical side file" in caplog.text
    with open_engine(db, clock) as engine:  # the full load wrote a good file again
        answers(engine)
        assert lexical(engine).restored


def test_a_damaged_ivf_file_is_refused(
    db: Path, clock: FixedClock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    expected = from_database(db, clock, tmp_path)
    (ivf,) = side_dir_for(db).glob("vectors-*.faiss")
    damage(ivf, "flipped")
    with open_engine(db, clock) as engine, caplog.at_level(logging.DEBUG, "engramdb.retrieval.vector_channel"):
        assert answers(engine) == expected
        assert engine._runtime.vectors is not None and not engine._runtime.vectors.restored
    assert "is damaged" in caplog.text


def test_the_ivf_file_is_read_on_its_own_thread_while_the_arrays_are(
    db: Path, clock: FixedClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engramdb.retrieval import vector_channel
    from engramdb.vectors.ann import read_ivf  # the function vector_channel calls by that name

    expected = from_database(db, clock, tmp_path)
    threads: list[str] = []
    read, files = read_ivf, vector_channel._read_files

    def read_noting_the_thread(path: Path) -> Any:
        threads.append(threading.current_thread().name)
        return read(path)

    def files_noting_the_thread(*a: Any) -> Any:
        threads.append(threading.current_thread().name)
        return files(*a)

    monkeypatch.setattr(vector_channel, "read_ivf", read_noting_the_thread)
    monkeypatch.setattr(vector_channel, "_read_files", files_noting_the_thread)
    with open_engine(db, clock) as engine:
        assert answers(engine) == expected  # a recall first: the side file is read beside the lexical one
        assert engine._runtime.vectors is not None and engine._runtime.vectors.restored
    assert threads == ["engramdb-side-file-read", "engramdb-ivf-read"]
    assert not any(t.name.startswith("engramdb-") and t.name.endswith("-read") for t in threading.enumerate())
    threads.clear()
    with open_engine(db, clock) as engine:  # a write first: read on the writer's thread, the IVF beside it
        engine.agent("alice").remember("a kingfisher note")
        assert engine._runtime.vectors is not None and engine._runtime.vectors.restored
    assert threads == [threading.current_thread().name, "engramdb-ivf-read"]


def test_a_missing_ivf_file_is_a_rebuild_not_an_error(
    db: Path, clock: FixedClock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    expected = from_database(db, clock, tmp_path)
    (ivf,) = side_dir_for(db).glob("vectors-*.faiss")
    ivf.unlink()
    with open_engine(db, clock) as engine:
        assert answers(engine) == expected
        assert engine._runtime.vectors is not None and not engine._runtime.vectors.restored
    assert not any(t.name == "engramdb-ivf-read" for t in threading.enumerate())


def test_another_databases_lexical_file_is_refused(
    db: Path, clock: FixedClock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    other = tmp_path / "other" / "m.db"
    with open_engine(other, clock) as engine:
        engine.agent("alice").remember_many([{"content": t.replace("note", "memo")} for t in TEXTS])
        answers(engine)
    shutil.copyfile(side_dir_for(db) / "lexical.npz", side_dir_for(other) / "lexical.npz")
    with open_engine(other, clock) as engine, caplog.at_level(logging.DEBUG, LEX_LOG):
        answers(engine)
        assert not lexical(engine).restored
    assert "instance_id differs" in caplog.text


@pytest.mark.parametrize("diverged", [False, True])
def test_a_lexical_file_of_a_later_or_other_history_is_refused(
    tmp_path: Path, clock: FixedClock, diverged: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A backup restored after the save: behind the file's change, or — written to again — level
    with it but with other texts under the same keys and change numbers."""
    path, copy = tmp_path / "m.db", tmp_path / "backup.db"
    with open_engine(path, clock) as engine:
        engine.agent("alice").remember_many([{"content": t} for t in TEXTS[:400]])
    with sqlite3.connect(path) as src, sqlite3.connect(copy) as dst:
        src.backup(dst)
    src.close()
    dst.close()
    with open_engine(path, clock) as engine:
        engine.agent("alice").remember_many([{"content": t} for t in TEXTS[400:]])
        answers(engine)
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(copy, path)
    if diverged:
        with open_engine(path, clock, vector_file=False) as writer:
            writer.agent("alice").remember_many([{"content": f"diverged {t}"} for t in TEXTS[400:]])
    expected = from_database(path, clock, tmp_path)
    with open_engine(path, clock) as engine, caplog.at_level(logging.DEBUG, LEX_LOG):
        assert answers(engine) == expected
        assert not lexical(engine).restored
    assert ("rows differ" if diverged else "reflects change") in caplog.text


def test_forget_removes_the_side_files(db: Path, clock: FixedClock) -> None:
    with open_engine(db, clock) as engine:
        me = engine.agent("alice")
        me.forget(me.search("otter harbour", k=1)[0].memory.id)
        assert not any(side_dir_for(db).glob("*"))


def test_tip_fits_rules() -> None:
    saved = [(10, 7, "a"), (9, 7, "b"), (4, 5, "c")]
    assert tip_fits(saved, [(10, 7, "a"), (9, 7, "b"), (4, 5, "c"), (3, 2, "z")])
    assert tip_fits(saved, [(9, 7, "b"), (3, 2, "z")])  # 10 and 4 changed since: read again
    assert not tip_fits(saved, [(10, 7, "x")])  # same key and change, other contents
    assert not tip_fits(saved, [(10, 6, "a")])  # went back to another change
    assert not tip_fits(saved, [(11, 6, "q")])  # a row the saved history did not have
    assert tip_fits([], [(1, 1, "a")])


def test_fast_sum_sees_one_flipped_bit_and_a_shorter_file() -> None:
    a = np.arange(1001, dtype=np.int32)
    b = a.copy()
    b.view(np.uint8)[1234] ^= 0x10
    assert fast_sum(a) != fast_sum(b) and fast_sum(a) != fast_sum(a[:-1]) and fast_sum(a) == fast_sum(a.copy())


def test_rings_round_trip_with_changes() -> None:
    rings = _Rings()
    rings[3], rings[5], rings[9] = b"abc", b"", b"xy"
    saved = _Rings.from_arrays({k: np.array(v) for k, v in rings.to_arrays(12).items()})
    assert [saved[k] for k in range(12)] == [None, None, None, b"abc", None, b"", None, None, None, b"xy", None, None]
    saved[3], saved[4], saved[9] = None, b"new", b"xyz"
    again = _Rings.from_arrays(saved.to_arrays(14))
    assert [again[k] for k in range(14)] == [None] * 4 + [b"new", b""] + [None] * 3 + [b"xyz"] + [None] * 4


def test_key_rows_dense_and_far_keys() -> None:
    rows = KeyRows()
    rows.set_many(np.array([5, 10**12, -3, 2000]), np.array([0, 1, 2, 3]))
    assert len(rows) == 4 and rows.get(5) == 0 and rows.get(10**12) == 1 and rows.get(-3) == 2 and rows.get(7) is None
    assert rows.lookup(np.array([2000, 6, 10**12, -3, 10**15])).tolist() == [3, -1, 1, 2, -1]
    with pytest.raises(ValueError, match="repeated"):
        KeyRows.of(np.array([1, 2, 1]))


def test_the_ivf_file_and_arrays_round_trip(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((400, 16)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    index = AnnIndex(16, train_at=64, nlist=4)
    index.upsert(np.arange(400, dtype=np.int64) * 3, vecs)
    assert index.compact and index.trained
    index.write_ivf(tmp_path / "x.faiss")
    write_arrays(tmp_path / "x.npz", index.to_arrays(ivf=False))
    with np.load(tmp_path / "x.npz") as npz:
        loaded = AnnIndex.from_arrays({k: npz[k] for k in npz.files}, ivf_file=tmp_path / "x.faiss")
    for q in vecs[:20]:
        assert loaded.search(q, 5)[0].tolist() == index.search(q, 5)[0].tolist()
    with np.load(tmp_path / "x.npz") as npz, pytest.raises(ValueError, match="written apart"):
        AnnIndex.from_arrays({k: npz[k] for k in npz.files})


def test_a_file_saved_with_new_terms_in_its_delta_is_adopted(
    db: Path, clock: FixedClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Terms first seen after the last merge live only in the delta (the main postings cover fewer
    terms than the vocabulary): such a file, saved at close, is adopted and answers as a full load."""
    monkeypatch.setattr(lexical_channel, "_CLOSE_SAVE_SHARE", 0.0)
    with open_engine(db, clock) as engine:
        answers(engine)
        assert lexical(engine).restored
        engine.agent("alice").remember("a kingfisher nested under the zeppelin hangar")  # words new to the index
        answers(engine)
        assert len(lexical(engine)._indptr) < len(lexical(engine)._vocab) + 1
    expected = from_database(db, clock, tmp_path)
    with open_engine(db, clock) as engine:
        assert answers(engine) == expected
        assert lexical(engine).restored
        assert "zeppelin" in engine.agent("alice").search("zeppelin hangar", k=1)[0].memory.content


def test_fast_sum_sees_reordered_words() -> None:
    """A word sum and xor did not change when an array's words were reordered."""
    a = np.arange(1, 1001, dtype=np.float64)
    assert fast_sum(a) != fast_sum(a[::-1].copy())
    assert fast_sum(a.view(np.uint8)) == fast_sum(a)


@pytest.mark.parametrize("target", ["lexical.npz", "vectors"])
def test_a_reversed_array_with_its_stamp_kept_is_refused(
    db: Path, clock: FixedClock, tmp_path: Path, target: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Every array of the side file read back, one 8-byte array reversed, the stamp kept as it
    was: the old word-sum check adopted it (and an answer changed); it must be refused."""
    from engramdb.vectors.npz import StoredArrays

    expected = from_database(db, clock, tmp_path)
    folder = side_dir_for(db)
    (path,) = [folder / "lexical.npz"] if target == "lexical.npz" else folder.glob("vectors-*.npz")
    with path.open("rb") as fh:
        stored = StoredArrays(fh)
        arrays = {name: np.array(stored[name]) for name in stored}
    name = next(
        n for n, a in arrays.items() if n != "stamp" and a.dtype.itemsize == 8 and a.ndim == 1 and len(np.unique(a)) > 1
    )
    arrays[name] = arrays[name][::-1].copy()
    write_arrays(path, arrays)
    with open_engine(db, clock) as engine, caplog.at_level(logging.DEBUG, "engramdb.retrieval"):
        assert answers(engine) == expected
        assert not (lexical(engine).restored if target == "lexical.npz" else engine._runtime.vectors.restored)  # type: ignore[union-attr]
    assert "damaged" in caplog.text


@pytest.mark.parametrize("kind", ["symlink to /dev/zero", "fifo", "directory"])
def test_a_side_file_that_is_not_a_regular_file_is_never_read(
    db: Path, clock: FixedClock, tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A symlink to /dev/zero in place of a side file was read without bound (a process grew to
    19 GB); a FIFO blocked the open. Both files of both channels are replaced here."""
    import os
    import resource

    expected = from_database(db, clock, tmp_path)
    folder = side_dir_for(db)
    for path in [folder / "lexical.npz", *folder.glob("vectors-*.npz"), *folder.glob("vectors-*.faiss")]:
        path.unlink()
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "directory":
            path.mkdir()
        else:
            path.symlink_to("/dev/zero")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with open_engine(db, clock) as engine, caplog.at_level(logging.DEBUG, "engramdb.retrieval"):
        assert answers(engine) == expected
        assert (
            not lexical(engine).restored
            and engine._runtime.vectors is not None
            and not engine._runtime.vectors.restored
        )
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 512 * 1024  # KiB: nothing near the 19 GB
    assert "not a regular file" in caplog.text or "regular file" in caplog.text
