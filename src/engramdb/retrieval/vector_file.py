"""The vector cache's side file: a saved `AnnIndex` beside the database, so a new process neither
re-reads every stored vector nor re-trains the IVF.

One uncompressed ``.npz`` file, ``<database file>.vectors-<embedder name>.npz``, written atomically
(a temporary file, then one rename) and holding in the same file:

- the `AnnIndex` arrays (``meta``, ``keys``, ``vectors``, ``ivf``: see `AnnIndex.to_arrays`);
- ``channel``: JSON with the format, the embedder's name and dimension, the database's
  ``instance_id`` and ``change``, the write sequence number the index reflects;
- ``changed``: for each index row, the ``changed`` value of the memory row its vector was read
  from (``~changed``, a negative number, when that memory has no vector any more).

So the description can never belong to another index than the one beside it. `read_side_file`
checks what the file alone can tell (format, embedder, database identity, a counter not ahead of
the database, the index's own consistency, equal index settings); the channel then checks the
rows against the database (see `VectorChannel`). The file is only a cache: deleting it changes
nothing but the time of the first recall.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from engramdb.vectors.ann import AnnIndex
from engramdb.vectors.npz import StoredArrays, write_arrays

FORMAT = 1
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def side_file_for(database: str | os.PathLike[str], model: str) -> Path:
    """Where the vector cache of `database` for embedder `model` lives: beside the database."""
    db = Path(database)
    return db.with_name(f"{db.name}.vectors-{_UNSAFE.sub('-', model).strip('-') or 'model'}.npz")


@dataclass(frozen=True, slots=True)
class SideFile:
    """A side file's content, checked against the expectations given to `read_side_file`."""

    index: AnnIndex
    #: per index row: the memory's ``changed`` when its vector was read, ``~changed`` when it had none
    changed: npt.NDArray[np.int64]
    #: the database's write sequence number the index reflects
    change: int


def write_side_file(
    path: Path,
    index: AnnIndex,
    changed: npt.NDArray[np.int64],
    *,
    model: str,
    dim: int,
    instance_id: str,
    change: int,
    mode: int = 0o644,
) -> None:
    """Write `index` and its description to `path` in one atomic step (see the module docstring),
    with permission bits `mode` (those of the database, so whoever may read it may read this)."""
    if len(changed) != len(index):
        raise ValueError(f"{len(changed)} change numbers for {len(index)} index rows")
    meta = {"format": FORMAT, "model": model, "dim": dim, "instance_id": instance_id, "change": change}
    arrays = index.to_arrays()
    arrays["channel"] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    arrays["changed"] = changed
    write_arrays(path, arrays, mode=mode)


def read_side_file(
    path: Path, *, model: str, dim: int, instance_id: str, latest: int, settings: dict[str, Any]
) -> SideFile:
    """The side file at `path`, when it was written for embedder `model` of `dim` dimensions, for
    the database `instance_id` at a change no later than `latest`, by an index of equal `settings`.

    Raises:
        FileNotFoundError: there is no side file.
        ValueError: it does not fit (the message says why).
        Exception: whatever else a damaged file makes json, numpy or faiss raise; callers treat
            any exception as "no usable side file".
    """
    # One handle for every read: one file, even if another process replaces it meanwhile.
    with path.open("rb") as fh:
        npz = StoredArrays(fh)
        meta = json.loads(bytes(np.asarray(npz["channel"], dtype=np.uint8)).decode("utf-8"))
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise ValueError("unknown side file format")
        if meta.get("model") != model or meta.get("dim") != dim:
            raise ValueError(f"made for embedder {meta.get('model')!r} ({meta.get('dim')}-d), not {model!r} ({dim}-d)")
        if meta.get("instance_id") != instance_id:
            raise ValueError("made for another database (instance_id differs)")
        change = meta.get("change")
        if not isinstance(change, int) or not 0 <= change <= latest:
            raise ValueError(f"reflects change {change!r}, the database is at {latest}")
        index = AnnIndex.from_arrays(npz, copy=False)
        changed = np.asarray(npz["changed"], dtype=np.int64).reshape(-1)
    if index.settings != settings:
        raise ValueError(f"made by an index with settings {index.settings}, this one has {settings}")
    if len(changed) != len(index):
        raise ValueError(f"{len(changed)} change numbers for {len(index)} index rows")
    return SideFile(index, changed, change)
