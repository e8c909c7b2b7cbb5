"""Uncompressed ``.npz`` files for index side files: written atomically, read fast and checked.

`write_arrays` writes through a temporary file and one rename, so a reader never sees a torn file.
`StoredArrays` reads such a file member by member straight into fresh writable arrays (one copy
from the page cache, faster than `numpy.load` for a 1.5 GB matrix) and checks
each member's CRC-32, so a damaged file is refused rather than misread. Only stored (uncompressed),
C-order, non-object arrays are read; anything else is a `ValueError`.
"""

from __future__ import annotations

import contextlib
import glob
import io
import math
import os
import tempfile
import time
import zipfile
import zlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["StoredArrays", "remove_stale_temporaries", "with_room", "write_arrays"]

#: a temporary file of `write_arrays` this old (seconds) is a crash's leftover, not a write in progress
STALE_TMP_S = 3600.0

_LOCAL_HEADER = 30  # bytes of a zip local file header before its name and extra field
_HEADER_READERS = {
    (1, 0): np.lib.format.read_array_header_1_0,
    (2, 0): np.lib.format.read_array_header_2_0,
}


def write_arrays(path: str | os.PathLike[str], arrays: Mapping[str, npt.NDArray[Any]], *, mode: int = 0o644) -> None:
    """Write `arrays` to an uncompressed ``.npz`` file at `path` with permission bits `mode`, atomically.

    The data goes to a temporary file of a unique name in the same directory, then replaces `path`
    with one rename: a reader sees the old file or the new one, never a mix, and two writers at
    once each rename a whole file (the last one wins). The zip format's CRC-32s let a reader tell a
    damaged file. A crash can leave a hidden ``.<name>.*.tmp`` file behind, never a torn `path`;
    the next write removes such leftovers once they are `STALE_TMP_S` old (a younger one may be
    another process's write in progress).
    """
    target = Path(path)
    remove_stale_temporaries(target)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        os.chmod(tmp, mode)  # mkstemp makes it private (0600)
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **arrays)  # type: ignore[arg-type]
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def remove_stale_temporaries(target: Path, older_than: float = STALE_TMP_S) -> list[Path]:
    """Remove the temporary files `write_arrays` left beside `target` (a crash mid-write) that
    were last modified more than `older_than` seconds ago; returns the ones removed."""
    removed = []
    cutoff = time.time() - older_than  # file times are the file system's, not an injected clock
    for tmp in target.parent.glob(f".{glob.escape(target.name)}.*.tmp"):
        with contextlib.suppress(OSError):  # gone already, or not ours to remove
            if tmp.stat().st_mtime < cutoff:
                tmp.unlink()
                removed.append(tmp)
    return removed


class StoredArrays(Mapping[str, npt.NDArray[Any]]):
    """The arrays of an uncompressed ``.npz`` file open as `fh`, each read when first asked for.

    With ``verify=False`` the CRC-32s are not checked (their cost grows with the bytes read): for
    callers that check the arrays themselves (`engramdb.retrieval.side_files`); sizes and truncation
    still are.

    Every access reads the member again into a new array (keep the result). The file must stay open
    while the mapping is used; reading from one handle also means one file, even if another process
    replaces the path meanwhile.

    Raises (on construction or access):
        ValueError: not a zip file, a damaged one (a member's size or CRC-32 is wrong), or a
            compressed, Fortran-order or object member.
        KeyError: no such array.
    """

    def __init__(self, fh: io.BufferedIOBase, *, verify: bool = True) -> None:
        self._fh = fh
        self._verify = verify
        self._size = fh.seek(0, io.SEEK_END)
        fh.seek(0)
        try:
            with zipfile.ZipFile(fh) as zf:
                infos = zf.infolist()
        except zipfile.BadZipFile as exc:
            raise ValueError(f"not a zip file ({exc})") from None
        self._members = {i.filename.removesuffix(".npy"): i for i in infos if i.filename.endswith(".npy")}

    def __getitem__(self, name: str) -> npt.NDArray[Any]:
        return self.read(name)

    def read(self, name: str, spare: Callable[[int], int] | None = None) -> npt.NDArray[Any]:
        """Array `name`; with `spare`, read into a buffer with ``spare(rows)`` more rows
        (uninitialised) after its own: the
        array returned is a view of its rows, whose ``base`` is the whole buffer (room to grow into
        without a copy; see `engramdb.retrieval.side_files.with_room`)."""
        info = self._members.get(name)
        if info is None:
            raise KeyError(name)
        if info.compress_type != zipfile.ZIP_STORED:
            raise ValueError(f"array {name!r} is compressed")
        fh = self._fh
        fh.seek(info.header_offset)
        local = fh.read(_LOCAL_HEADER)
        if len(local) != _LOCAL_HEADER or local[:4] != b"PK\x03\x04":
            raise ValueError(f"bad zip header for array {name!r}")
        start = info.header_offset + _LOCAL_HEADER + int.from_bytes(local[26:28], "little")
        start += int.from_bytes(local[28:30], "little")
        fh.seek(start)
        read_header = _HEADER_READERS.get(np.lib.format.read_magic(fh))
        if read_header is None:
            raise ValueError(f"array {name!r} has an unsupported .npy version")
        shape, fortran, dtype = read_header(fh)
        if fortran or dtype.hasobject:
            raise ValueError(f"array {name!r} is Fortran-ordered or holds objects")
        header = fh.tell() - start
        # The sizes a damaged or hostile file states are checked before any memory is taken for
        # them: the array's bytes must be the member's, and lie inside the file.
        nbytes = math.prod(int(d) for d in shape) * dtype.itemsize
        if header + nbytes != info.file_size:
            raise ValueError(f"array {name!r} takes {info.file_size} bytes, its header says {header + nbytes}")
        if start + header + nbytes > self._size:
            raise ValueError(f"array {name!r} runs past the end of the file")
        extra = spare(shape[0]) if spare is not None and len(shape) else 0
        room = np.empty((shape[0] + extra, *shape[1:]) if extra else shape, dtype=dtype)
        out = room[: shape[0]] if extra else room
        buf = out.reshape(-1).data.cast("B")
        done = 0
        while done < len(buf):
            got = fh.readinto(buf[done:])
            if not got:
                raise ValueError(f"array {name!r} is truncated")
            done += got
        fh.seek(start)
        if self._verify and zlib.crc32(buf, zlib.crc32(fh.read(header))) != info.CRC:
            raise ValueError(f"array {name!r} fails its CRC-32 check")
        return out

    def __iter__(self) -> Iterator[str]:
        return iter(self._members)

    def __len__(self) -> int:
        return len(self._members)


def with_room(a: npt.NDArray[Any], fill: Any = None) -> npt.NDArray[Any]:
    """The whole buffer `a` was read into by `StoredArrays.read` with spare rows (its rows, then spare rows set to
    `fill` unless None), so a cache can grow into it without copying; `a` itself otherwise."""
    base = a.base
    if (
        isinstance(base, np.ndarray)
        and base.dtype == a.dtype
        and base.shape[1:] == a.shape[1:]
        and len(base) >= len(a)
        and base.ctypes.data == a.ctypes.data
        and base.flags.writeable
        and base.flags.c_contiguous
    ):
        if fill is not None:
            base[len(a) :] = fill
        return base
    return a
