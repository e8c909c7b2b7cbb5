"""Side files: the in-memory candidate indexes saved beside a SQLite database, so that a new process
loads them instead of reading every stored row and re-training the IVF (far sooner: see
``restart_first_recall_s`` against ``first_recall_s`` in benchmarks/results/scale.json).

**Where.** One folder beside the database, ``<database file>.engramdb-index/``, holding
``lexical.npz`` (the lexical channel) and ``vectors-<embedder>.npz`` with its IVF in
``vectors-<embedder>.<token>.faiss`` (the vector channel). Deleting the folder, or any file in it,
is always safe: the stored rows are the truth, a missing or refused file only costs the next
process a full load (and that load writes the files again). In-memory (``":memory:"``) and
PostgreSQL stores never keep side files.

**What makes a file trusted.** Each ``.npz`` holds a ``stamp`` (JSON) beside its arrays:

- ``format`` and the engramdb version that wrote it, and its ``kind``;
- the database's ``instance_id`` (a random id given once, kept in the database: a copy of the file
  keeps it, a new database at the same path gets a new one);
- ``change``: the write sequence number the saved index reflects; a file ahead of the database
  is refused, one behind it is caught up with the rows changed since (the channels' usual
  incremental refresh, by write sequence);
- ``tip``: (key, changed, digest) of the most recently changed rows at or before ``change``; the
  database must agree on each of them that has not changed since (`tip_fits`), so a backup
  restored and written to since (same identity, reused sequence numbers, other contents) is refused;
- ``sums``: the length and CRC-32 of every array (and of the ``.faiss`` file), so a truncated,
  damaged or reordered file is refused (a checksum against damage, not a signature: the folder is
  as trusted as the database beside it, and gets its permission bits). A word sum and xor, before
  format 3, did not change when the words were reordered: a reversed array was adopted.

Only regular files are read (opened without following a symlink, checked on the open
descriptor): a symlink to ``/dev/zero`` or a FIFO in the folder is refused, never read without end.

Writes are atomic (a temporary file, then one rename: see `engramdb.vectors.npz.write_arrays`);
readers refuse anything that does not fit, and the caller then loads from the database.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import io
import json
import os
import re
import stat
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from engramdb.vectors.npz import StoredArrays, with_room, write_arrays

__all__ = ["with_room"]  # re-exported: callers of read_side_file adopt its buffers with it

FORMAT = 3
SUFFIX = ".engramdb-index"
#: rows of the tip kept in a stamp
TIP_ROWS = 32
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@functools.cache
def _version() -> str:
    """The installed engramdb's version (read from its metadata: the package root is above this layer)."""
    try:
        return importlib.metadata.version("engramdb")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def side_dir_for(database: str | os.PathLike[str]) -> Path:
    """The folder of side files of `database`: ``<database file>.engramdb-index`` beside it."""
    db = Path(database)
    return db.with_name(db.name + SUFFIX)


def safe_name(model: str) -> str:
    """`model` as a file-name part."""
    return _UNSAFE.sub("-", model).strip("-") or "model"


def remove_side_files(database: str | os.PathLike[str]) -> None:
    """Delete every side file of `database` (and files of older releases beside it); always safe."""
    folder = side_dir_for(database)
    if folder.is_dir():
        for p in folder.iterdir():
            with contextlib.suppress(OSError):
                p.unlink()
        with contextlib.suppress(OSError):
            folder.rmdir()
    db = Path(database)
    for legacy in db.parent.glob(f"{db.name}.vectors-*.npz"):  # the single file of 0.1 pre-releases
        with contextlib.suppress(OSError):
            legacy.unlink()


def prefetch(folder: Path) -> None:
    """Ask the kernel to start reading every side file in `folder` into the page cache now, so the
    second channel's files arrive while the first one's are being read (best effort; POSIX only)."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None or not folder.is_dir():
        return
    for p in folder.iterdir():
        if p.suffix in (".npz", ".faiss") and p.is_file() and not p.is_symlink():
            with contextlib.suppress(OSError):
                fd = os.open(p, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
                try:
                    advise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
                finally:
                    os.close(fd)


def fast_sum(data: npt.NDArray[Any] | bytes | memoryview) -> str:
    """Length and CRC-32 of `data`'s bytes: order-dependent (a reordered array sums otherwise)."""
    raw = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else _bytes_of(data)
    return f"{len(raw)}:{zlib.crc32(raw.data):08x}"


def _bytes_of(a: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def open_regular(path: Path) -> io.BufferedReader:
    """`path` opened for reading if it is a regular file: not followed if it is a symlink, and
    checked on the open descriptor (so it cannot be swapped between check and read); a FIFO is
    opened without blocking and refused. `ValueError` for anything else."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise ValueError(f"{path.name} cannot be opened as a regular file ({exc.strerror})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path.name} is not a regular file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def file_sum(path: Path, block: int = 1 << 24) -> str:
    """`fast_sum` of a regular file's bytes, read in blocks (no copy of a large file in memory)."""
    crc = length = 0
    buf = np.empty(block, dtype=np.uint8)
    with open_regular(path) as fh:
        while True:
            got = fh.readinto(buf.data)
            if not got:
                break
            crc = zlib.crc32(buf[:got].data, crc)
            length += got
    return f"{length}:{crc:08x}"


def digest(payload: bytes) -> str:
    """A short digest of one row's payload, for a stamp's tip."""
    return hashlib.blake2b(payload, digest_size=8).hexdigest()


def tip_fits(saved: Sequence[Sequence[Any]], now: Iterable[tuple[int, int, str]]) -> bool:
    """Whether the database's tip `now` (key, changed, digest; newest first, read at or before the
    saved change) agrees with the `saved` one: every saved row the database still has at the same
    ``changed`` has the same digest, no saved row went back to another ``changed``, and the
    database has no row the saved history did not have at that point (newer than the oldest saved
    one). Rows changed since the save left the tip: the catch-up reads them again."""
    held = {int(n): (int(c), str(d)) for n, c, d in saved}
    oldest = min(((int(c), int(n)) for n, c, _ in saved), default=None)
    for n, c, d in now:
        mine = held.get(n)
        if mine is None:
            if oldest is not None and (c, n) >= oldest:
                return False
            continue
        if mine != (c, d):
            return False
    return True


def folder_mode(database: Path) -> tuple[int, int]:
    """(file mode, folder mode) for side files of `database`: its permission bits, so whoever may
    read the database may read them, and no one else."""
    mode = stat.S_IMODE(database.stat().st_mode) & 0o666
    return mode, mode | ((mode & 0o444) >> 2)


def write_side_file(
    path: Path, arrays: Mapping[str, npt.NDArray[Any]], stamp: Mapping[str, Any], *, database: Path
) -> None:
    """Write `arrays` with `stamp` (plus format, version and sums) to `path` in one atomic step."""
    mode, dmode = folder_mode(database)
    path.parent.mkdir(mode=dmode, exist_ok=True)
    meta = {**stamp, "format": FORMAT, "version": _version(), "sums": {k: fast_sum(a) for k, a in arrays.items()}}
    out = dict(arrays)
    out["stamp"] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    write_arrays(path, out, mode=mode)


#: arrays of one row per memory are read with this share of spare rows (room for new memories)
SPARE_SHARE = 0.125


def read_side_file(
    path: Path,
    *,
    kind: str,
    instance_id: str,
    latest: int,
    rows: int | None = None,
    on_stamp: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(stamp, arrays) of the side file at `path`, when it is a whole file of `kind` written by this
    version for database `instance_id` at a change no later than `latest`. Arrays of at least
    `rows` rows are read with `SPARE_SHARE` spare rows behind them (`with_room`). `on_stamp` is
    called with the stamp once it is checked, before the arrays are read (a caller may start
    reading a file the stamp names meanwhile).

    Raises:
        FileNotFoundError: there is none.
        ValueError: it does not fit or is damaged (the message says why).
        Exception: whatever else a damaged file makes json or numpy raise; callers treat any
            exception as "no usable side file".
    """
    with open_regular(path) as fh:
        npz = StoredArrays(fh, verify=False)  # `sums` below check every byte, and faster
        meta = json.loads(bytes(np.asarray(npz["stamp"], dtype=np.uint8)).decode("utf-8"))
        if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("kind") != kind:
            raise ValueError("unknown side file format")
        if meta.get("version") != _version():
            raise ValueError(f"written by engramdb {meta.get('version')!r}, this is {_version()!r}")
        if meta.get("instance_id") != instance_id:
            raise ValueError("made for another database (instance_id differs)")
        change = meta.get("change")
        if not isinstance(change, int) or not 0 <= change <= latest:
            raise ValueError(f"reflects change {change!r}, the database is at {latest}")
        sums = meta.get("sums")
        if not isinstance(sums, dict) or set(sums) != set(npz) - {"stamp"}:
            raise ValueError("the arrays differ from the stamp's list")
        if on_stamp is not None:
            on_stamp(meta)
        arrays: dict[str, Any] = {}
        for name in sums:
            a = npz.read(name, None if rows is None else lambda r: int(r * SPARE_SHARE) + 1024 if r >= rows else 0)
            if fast_sum(a) != sums[name]:
                raise ValueError(f"array {name!r} is damaged (its sum differs)")
            arrays[name] = a
    return meta, arrays
