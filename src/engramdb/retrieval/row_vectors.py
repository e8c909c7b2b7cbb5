"""Embeddings of scope-table rows for semantic ranking, without SQLite extensions.

Many Python builds (this project's CI among them) cannot load SQLite extensions such as
sqlite-vec, so vectors are stored as BLOBs in the engine table ``engram_row_vectors`` (the truth,
written in one transaction per sync) and searched exactly with numpy from an in-memory matrix
(a rebuildable cache). Exact search scores every row, so its cost grows linearly with the rows.

A sync embeds rows that are new or whose content changed (by digest) and drops vectors of deleted
rows. It runs only when the store changed since the last sync as seen from this thread
(`engramdb.storage.ports.RowVectorStore.version`).
"""

from __future__ import annotations

import hashlib
import threading
from typing import TYPE_CHECKING, Any

from engramdb.errors import MissingExtra

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from engramdb.embeddings.base import Embedder
    from engramdb.storage.ports import MemoryScope


def _numpy() -> Any:
    try:
        import numpy
    except ImportError:
        raise MissingExtra("semantic ranking", "memory") from None
    return numpy


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()


class RowVectors:
    """The vectors of one (table, column) of one scope, kept in step with the table."""

    def __init__(self, scope: MemoryScope, table: str, column: str, embedder: Embedder) -> None:
        self._np = _numpy()
        self.scope, self.table, self.column, self.embedder = scope, table, column, embedder
        self._lock = threading.Lock()
        self._ids: list[int] = []
        self._matrix: npt.NDArray[np.float32] = self._np.zeros((0, embedder.dim), dtype=self._np.float32)
        self._seen: dict[int, int] = {}  # thread id -> data_version at last sync
        self._loaded = False

    def _version(self) -> int:
        """Changes whenever anything committed to the store since this thread last looked."""
        return self.scope.row_vectors.version()

    def sync(self) -> None:
        """Embed new or changed rows, drop deleted ones, and rebuild the search matrix."""
        with self._lock:
            tid = threading.get_ident()
            if self._loaded and self._seen.get(tid) == self._version():
                return
            np = self._np
            rowkey = self.scope.row_key(self.table)
            rows = self.scope.query(f'SELECT {rowkey}, "{self.column}" FROM "{self.table}"')  # noqa: S608 - names validated by caller
            store = self.scope.row_vectors
            model = self.embedder.name
            key = (self.table, self.column, model)
            stored = store.digests(*key)
            current = {int(rid): ("" if text is None else str(text)) for rid, text in rows}
            todo = [(rid, text, _digest(text)) for rid, text in current.items() if stored.get(rid) != _digest(text)]
            gone = [rid for rid in stored if rid not in current]
            if todo or gone:
                vecs = self.embedder.embed([t for _, t, _ in todo]) if todo else None
                new = [] if vecs is None else [(rid, dg, vecs[i].tobytes()) for i, (rid, _, dg) in enumerate(todo)]
                store.apply(*key, gone, new)
            loaded = store.load(*key)
            self._ids = [int(r[0]) for r in loaded]
            blob = b"".join(r[1] for r in loaded)
            self._matrix = np.frombuffer(blob, dtype=np.float32).reshape(len(loaded), self.embedder.dim)
            self._loaded = True
            self._seen = {tid: self._version()}  # other threads re-check after any sync

    def similarities(self, query: str) -> dict[int, float]:
        """Cosine similarity of `query` to every row, by rowid (after `sync`)."""
        self.sync()
        if not self._ids:
            return {}
        q = self.embedder.embed([query])[0]
        sims = self._np.einsum("ij,j->i", self._matrix, q)  # single-threaded; see ExactIndex.search
        return dict(zip(self._ids, (float(s) for s in sims), strict=True))
