"""`DynamicMemoryEngine`: opens a store and hands out table scopes (and, later, agents)."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import engramdb.memories.schema  # noqa: F401  (registers the memory tables' migration)
from engramdb.config import TeamMemoryConfig, load_config
from engramdb.errors import MissingExtra
from engramdb.memories.forgetting import ForgettingPolicy, with_lifecycle
from engramdb.memories.references import ReferenceResolvers
from engramdb.memories.scoring import ScoringConfig
from engramdb.retrieval.recall import Recaller
from engramdb.scopes.policy import ENGINE_PREFIX, ascii_lower
from engramdb.scopes.scope import MemoryScope
from engramdb.storage.migrations import migrate
from engramdb.storage.sqlite import SqliteSettings, SqliteStore, translate
from engramdb.tenancy.ids import SHARED, private_namespace

if TYPE_CHECKING:
    from engramdb.agent import Agent
    from engramdb.embeddings.base import Embedder
    from engramdb.retrieval.vector_channel import VectorChannel
    from engramdb.vectors.base import VectorIndex

Clock = Callable[[], float]


class DynamicMemoryEngine:
    """A memory store in one SQLite file (WAL): shared and private table scopes for a team.

    Example::

        engine = DynamicMemoryEngine(".engramdb/memory.db")
        shared = engine.get_shared_scope()               # shared_* tables, every agent
        private = engine.get_private_scope("researcher")  # private_researcher_* tables only

    Args:
        path: the database file (parent directories are created); ``":memory:"`` uses a private
            temporary file removed on `close`.
        enable_embeddings: let retrievers rank rows semantically too (needs the ``memory`` extra).
        embedder: the `Embedder` to use when embeddings are enabled (default: the offline static
            model shipped with the ``memory`` extra).
        clock: seconds since the epoch; inject a fixed clock in tests.
        busy_timeout: seconds a writer waits for another writer before `BackendError`.
        statement_timeout: seconds one scope statement may run before it is stopped.
        max_value_bytes: the largest string or blob a scope statement may build.
        synchronous: SQLite's ``synchronous`` setting; ``"NORMAL"`` (default) survives process
            crashes in WAL mode, ``"FULL"`` also power loss.
        secure_delete: SQLite's ``secure_delete``: deleted and overwritten content is zeroed, so
            `Agent.forget` leaves no copy of the text in the file. ``"FAST"`` (default) in the
            b-tree pages, at no extra I/O; ``"ON"`` also in pages that become wholly free.
        memory_embedder: the embedder of typed memories: ``"default"`` (the offline static model
            when the ``memory`` extra is installed, else none), an `Embedder`, or None for
            lexical-only recall.
        scoring: the recall constants (`ScoringConfig`).
        forgetting: retention and prune guards (`ForgettingPolicy`).
        dedup_threshold: cosine at or above which `remember` reinforces an existing memory instead.
        vector_index: ``"exact"`` (numpy scan), ``"ann"`` (faiss IVF, the ``ann`` extra; exact below
            20k vectors), ``"auto"`` (ann when faiss is installed), or a callable that makes the
            `VectorIndex` for a dimension (e.g. ``lambda dim: AnnIndex(dim, nprobe=64)``). A file
            database keeps a trained `AnnIndex` in a side file beside it
            (``<file>.vectors-<embedder>.npz``), so a new process need not re-read every vector
            and re-train it; the file is a cache that may be deleted at any time.
        vector_file: keep that side file (False: never read or write one — every new process
            then reads the stored vectors and trains the IVF again; ~2 GB saved per 1M memories).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        enable_embeddings: bool = False,
        embedder: Embedder | None = None,
        clock: Clock = time.time,
        busy_timeout: float = 30.0,
        statement_timeout: float = 5.0,
        max_value_bytes: int = 16 * 1024 * 1024,
        synchronous: str = "NORMAL",
        secure_delete: str = "FAST",
        memory_embedder: Embedder | str | None = "default",
        scoring: ScoringConfig | None = None,
        forgetting: ForgettingPolicy | None = None,
        dedup_threshold: float = 0.92,
        vector_index: str | Callable[[int], VectorIndex] = "auto",
        vector_file: bool = True,
    ) -> None:
        settings = SqliteSettings(
            busy_timeout=busy_timeout,
            statement_timeout=statement_timeout,
            max_value_bytes=max_value_bytes,
            synchronous=synchronous,
            secure_delete=secure_delete,
        )
        self.clock = clock
        self._store = SqliteStore(path, settings)
        conn = self._store.connection("engine")
        with translate(conn):
            migrate(conn.raw, clock)
        self.enable_embeddings = enable_embeddings
        self._embedder = embedder
        self._embedder_lock = threading.Lock()
        if enable_embeddings and embedder is None:
            self._embedder = self._default_embedder()
        self.scoring = scoring or ScoringConfig()
        if isinstance(memory_embedder, str) and memory_embedder != "default":
            raise ValueError('memory_embedder must be "default", an Embedder, or None')
        if not callable(vector_index) and vector_index not in ("auto", "exact", "ann"):
            raise ValueError('vector_index must be "auto", "exact", "ann" or a callable making an index')
        self._vector_index = vector_index
        if not isinstance(vector_file, bool):
            raise ValueError(f"vector_file must be True or False, got {vector_file!r}")
        # Only a real file gets a side file beside it (not the private temp file of ":memory:").
        self._persistent = vector_file and str(path) != ":memory:" and self._store.path.is_file()
        self._memory_choice: Embedder | str | None = memory_embedder
        self._memory_parts: tuple[Embedder | None, VectorChannel | None, Recaller] | None = None
        self.forgetting = forgetting or ForgettingPolicy()
        #: resolvers of memory references by kind, called at recall time (`Agent.resolve_refs`)
        self.resolvers = ReferenceResolvers()
        #: a new memory this close (cosine) to a visible one of the same type and owner reinforces it instead
        self.dedup_threshold = dedup_threshold
        self._shared = MemoryScope(self._store, SHARED, lambda: self._embedder)
        self._private: dict[str, MemoryScope] = {}

    @staticmethod
    def _default_embedder() -> Embedder:
        try:
            from engramdb.embeddings.static import default_embedder
        except ImportError:
            raise MissingExtra("enable_embeddings=True", "memory") from None
        return default_embedder()

    def _memory(self) -> tuple[Embedder | None, VectorChannel | None, Recaller]:
        """The embedder, vector cache and recaller of typed memories, made on first use, so that an
        engine used only for tables never loads the embedding model."""
        parts = self._memory_parts
        if parts is not None:
            return parts
        with self._embedder_lock:
            if self._memory_parts is None:
                choice = self._memory_choice
                embedder: Embedder | None
                if isinstance(choice, str):
                    try:
                        embedder = self._embedder or self._default_embedder()
                    except MissingExtra:
                        embedder = None  # lexical-only recall without the memory extra
                else:
                    embedder = choice
                channel = None
                if embedder is not None:
                    from engramdb.retrieval.vector_channel import VectorChannel

                    database = self._store.path if self._persistent else None
                    channel = VectorChannel(embedder, self._make_index(embedder.dim), database=database)
                from engramdb.retrieval.lexical_channel import LexicalChannel

                recaller = Recaller(self._store, self.clock, self.scoring, embedder, channel, LexicalChannel())
                recaller.annotate = lambda m, now: with_lifecycle(m, now, self.forgetting)
                self._memory_parts = (embedder, channel, recaller)
            return self._memory_parts

    def _make_index(self, dim: int) -> VectorIndex | None:
        if callable(self._vector_index):
            return self._vector_index(dim)
        if self._vector_index == "exact":
            return None
        from engramdb.vectors import ann

        if self._vector_index == "auto" and not ann.faiss_available():
            return None
        return ann.AnnIndex(dim)

    @property
    def memory_embedder(self) -> Embedder | None:
        """The embedder of typed memories, or None for lexical-only recall."""
        return self._memory()[0]

    @property
    def recaller(self) -> Recaller:
        """The recall pipeline (engine-internal)."""
        return self._memory()[2]

    def agent(self, agent_id: str, *, tenant: str = "default") -> Agent:
        """The handle of agent `agent_id` in `tenant`: its table scopes and its memories."""
        from engramdb.agent import Agent

        return Agent(self, agent_id, tenant=tenant)

    @property
    def vectors(self) -> VectorChannel | None:
        """The in-memory vector cache of memories (engine-internal)."""
        return self._memory()[1]

    def drop_vector_file(self) -> None:
        """Delete the vector side file, if any (it is only a cache): `Agent.forget` calls this so
        that a forgotten memory's vector does not outlive it on disk. The next save writes a new
        one from a cache that no longer holds the vector."""
        if not self._persistent:
            return
        embedder = self.memory_embedder
        if embedder is None:
            return
        from engramdb.retrieval.vector_file import side_file_for

        with contextlib.suppress(FileNotFoundError):
            side_file_for(self._store.path, embedder.name).unlink()

    @property
    def path(self) -> Path:
        """The database file."""
        return self._store.path

    @property
    def store(self) -> SqliteStore:
        """The storage backend (engine-internal; not a public API)."""
        return self._store

    @property
    def embedder(self) -> Embedder | None:
        """The embedder in use, or None when embeddings are off."""
        return self._embedder

    def get_shared_scope(self) -> MemoryScope:
        """The scope of the team-wide ``shared_*`` tables."""
        return self._shared

    def get_private_scope(self, agent_id: str) -> MemoryScope:
        """The scope of ``private_<agent_id>_*`` tables; `InvalidAgentId` for a bad id."""
        scope = self._private.get(agent_id)
        if scope is None:
            scope = MemoryScope(self._store, private_namespace(agent_id), lambda: self._embedder)
            scope = self._private.setdefault(agent_id, scope)
        return scope

    def list_all_tables(self, *, include_engine: bool = False) -> list[str]:
        """Admin view: the tables of every namespace (and the engine's own with `include_engine`)."""
        names = self._store.table_names()
        if include_engine:
            return names
        return [n for n in names if ascii_lower(n).startswith(("shared_", "private_"))]

    def close(self) -> None:
        """Close every connection; the file stays as it is. Saves the vector side file first when
        more than a tenth of the cached vectors changed since it was last saved."""
        parts = self._memory_parts
        try:
            if parts is not None and parts[1] is not None:
                parts[1].save_if_changed(self._store.connection("engine").raw)
        finally:
            self._store.close()

    def __enter__(self) -> DynamicMemoryEngine:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"DynamicMemoryEngine({str(self.path)!r})"


def open_team_memory_engine(config: TeamMemoryConfig | None = None) -> DynamicMemoryEngine:
    """Open the one engine a team shares, as `config` describes (default: `load_config()`)."""
    config = config or load_config()
    return DynamicMemoryEngine(
        config.db_path,
        enable_embeddings=config.enable_embeddings,
        busy_timeout=config.busy_timeout,
        statement_timeout=config.statement_timeout,
        synchronous=config.synchronous,
    )


__all__ = ["ENGINE_PREFIX", "Clock", "DynamicMemoryEngine", "open_team_memory_engine"]
