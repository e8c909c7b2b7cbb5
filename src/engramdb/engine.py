"""`DynamicMemoryEngine`: opens a store and hands out table scopes and agent handles.

The engine is a facade: it opens a storage backend (a SQLite file from a path, PostgreSQL from a URL, or any
`engramdb.storage.ports.Backend` given), brings its schema up to date, and wires the services
(`engramdb.memories.runtime.Runtime`) that agent handles call.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from engramdb.agent import Agent
from engramdb.config import TeamMemoryConfig, load_config
from engramdb.engine_options import check_engine_options
from engramdb.errors import ConfigError, MissingExtra
from engramdb.llm.protocol import Extractor
from engramdb.llm.worker import ExtractionWorker, revert
from engramdb.memories.forgetting import ForgettingPolicy
from engramdb.memories.model import Confidentiality, Limits, Principal, Visibility
from engramdb.memories.resolvers import ReferenceResolvers
from engramdb.memories.runtime import Runtime, default_embedder
from engramdb.memories.scoring import ScoringConfig
from engramdb.memories.writing import ForgetReport, forget_where
from engramdb.observability import otel
from engramdb.retrieval.tenant_caches import DEFAULT_BUDGET, CacheStats
from engramdb.scopes.namespace import ENGINE_PREFIX, Namespace, ascii_lower
from engramdb.storage.ports import Backend, Job, MemoryScope
from engramdb.storage.sqlite import SqliteBackend, SqliteSettings
from engramdb.tenancy.ids import SHARED, check_agent_id, check_tenant, private_namespace

#: who a tenant's erasure records as the forgetter of its shared memories
_SHARED_ERASER = "engramdb-admin"

if TYPE_CHECKING:
    from engramdb.embeddings.base import Embedder, Reranker
    from engramdb.vectors.base import VectorIndex

Clock = Callable[[], float]


class DynamicMemoryEngine:
    """A team's memory store: shared and private table scopes, and agent handles over typed memories.

    By default one SQLite file (WAL) that many threads and processes share.

    Example::

        engine = DynamicMemoryEngine(".engramdb/memory.db")
        shared = engine.get_shared_scope()               # shared_* tables, every agent
        private = engine.get_private_scope("researcher")  # private_researcher_* tables only

    Args:
        path: the database file (parent directories are created); ``":memory:"`` uses a private
            temporary file removed on `close`. Or a ``postgresql://`` (``postgres://``) URL: the
            store is that PostgreSQL database (the ``postgres`` extra; docs/postgres.md), and
            `busy_timeout` is its lock timeout. Or a storage backend object
            (`engramdb.storage.ports.Backend`, e.g. ``SqliteBackend(path, settings)``), whose own
            settings then apply instead of the SQLite arguments below.
        enable_embeddings: let retrievers rank rows semantically too (needs the ``memory`` extra).
        embedder: the `Embedder` to use when embeddings are enabled (default: the offline static
            model shipped with the ``memory`` extra).
        clock: seconds since the epoch; inject a fixed clock in tests.
        busy_timeout: seconds a writer waits for another writer before `BackendError`.
        statement_timeout: seconds one scope statement may run before it is stopped.
        max_value_bytes: the largest string or blob a scope statement may build.
        max_result_rows, max_result_bytes: the most rows, and bytes of text and blobs, one scope
            call may return (`ResourceLimitExceeded` past them; `MemoryScope.stream` reads any
            number in batches).
        synchronous: SQLite's ``synchronous`` setting; ``"NORMAL"`` (default) survives process
            crashes in WAL mode, ``"FULL"`` also power loss.
        secure_delete: SQLite's ``secure_delete``: deleted and overwritten content is zeroed, so
            `Agent.forget` leaves no copy of the text in the file. ``"ON"`` (default) also zeroes
            pages that become wholly free (a long text's overflow pages, freed by every rewrite of
            its row, are reused by other tables before a forget could wipe them); ``"FAST"`` only
            zeroes within b-tree pages, at no extra I/O, and leaves such copies behind.
        checkpoint_interval: seconds after a commit at which a background thread of this process
            copies the write-ahead log into the database (a PASSIVE checkpoint on its own
            connection: writers and readers never wait for it; a writer checkpoints itself only
            when the log passes 64 MB). ``0``: no thread, SQLite's own checkpoint inside the
            committing writer every 1,000 pages. Durability is the same either way.
        memory_embedder: the embedder of typed memories: ``"default"`` (the offline static model
            when the ``memory`` extra is installed, else none), an `Embedder`, or None for
            lexical-only recall.
        scoring: the recall constants (`ScoringConfig`).
        forgetting: retention and prune guards (`ForgettingPolicy`).
        dedup_threshold: cosine at or above which `remember` reinforces an existing memory instead.
        vector_index: ``"exact"`` (numpy scan), ``"ann"`` (faiss IVF, the ``ann`` extra; exact below
            20k vectors), ``"auto"`` (ann when faiss is installed), or a callable that makes the
            `VectorIndex` for a dimension (e.g. ``lambda dim: AnnIndex(dim, nprobe=64)``). A file
            database keeps a trained `AnnIndex` in side files beside it (the folder
            ``<file>.engramdb-index/``), so a new process need not re-read every vector and
            re-train it; they are a cache that may be deleted at any time.
        limits: the largest content, title, tag and query accepted (`Limits`; defaults sized for
            agent memories).
        vector_file: keep that side file (False: never read or write one — every new process
            then reads the stored vectors and trains the IVF again; ~2 GB saved per 1M memories).
        cache_budget: on PostgreSQL, where recall's caches are kept per tenant (loaded at a
            tenant's first recall or write), the bytes they may hold before the least recently
            used tenants' are dropped (default 512 MiB; None: no budget). The tenant being served
            is never dropped for it. SQLite keeps one cache per file and ignores it.
        reranker: a `Reranker` (e.g. `engramdb.embeddings.rerank.HttpReranker` for a
            cross-encoder behind vLLM, the llama.cpp server or text-embeddings-inference) that
            re-scores the ``ScoringConfig.rerank_top`` most relevant candidates of every recall
            before ACT-R ranks them (``rerank_weight`` is its share of relevance; each hit's
            ``components.rerank`` is its score). None (default): no second stage. Its latency
            is on every recall's path; a failing reranker fails the recall (`RerankerError`).
        rerank_cap: the most confidential memory whose text is sent to the reranker (default
            every level); above it a memory keeps its first-stage relevance.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | Backend,
        *,
        enable_embeddings: bool = False,
        embedder: Embedder | None = None,
        clock: Clock = time.time,
        busy_timeout: float = 30.0,
        statement_timeout: float = 5.0,
        max_value_bytes: int = 16 * 1024 * 1024,
        max_result_rows: int = 100_000,
        max_result_bytes: int = 64 * 1024 * 1024,
        synchronous: str = "NORMAL",
        secure_delete: str = "ON",
        checkpoint_interval: float = 1.0,
        memory_embedder: Embedder | str | None = "default",
        scoring: ScoringConfig | None = None,
        forgetting: ForgettingPolicy | None = None,
        dedup_threshold: float = 0.92,
        vector_index: str | Callable[[int], VectorIndex] = "auto",
        vector_file: bool = True,
        limits: Limits | None = None,
        cache_budget: int | None = DEFAULT_BUDGET,
        reranker: Reranker | None = None,
        rerank_cap: Confidentiality = Confidentiality.RESTRICTED,
        extractor: Extractor | None = None,
        queue_extraction: bool | None = None,
    ) -> None:
        check_engine_options(path, locals())
        backend: Backend
        if _is_url(path):
            backend = _postgres(
                str(path),
                lock_timeout=busy_timeout,
                statement_timeout=statement_timeout,
                max_value_bytes=max_value_bytes,
            )
        elif isinstance(path, (str, os.PathLike)):
            settings = SqliteSettings(
                busy_timeout=busy_timeout,
                statement_timeout=statement_timeout,
                max_value_bytes=max_value_bytes,
                max_result_rows=max_result_rows,
                max_result_bytes=max_result_bytes,
                synchronous=synchronous,
                secure_delete=secure_delete,
                checkpoint_interval=checkpoint_interval,
            )
            backend = SqliteBackend(path, settings)
        else:
            backend = path
        self.clock = clock
        self._backend = backend
        try:
            backend.migrate(clock())
        except BaseException:
            backend.close()
            raise
        self.enable_embeddings = enable_embeddings
        self._embedder = embedder
        if enable_embeddings and embedder is None:
            self._embedder = default_embedder()
        self._runtime = Runtime(
            backend,
            clock=clock,
            scoring=scoring or ScoringConfig(),
            forgetting=forgetting or ForgettingPolicy(),
            dedup_threshold=dedup_threshold,
            memory_embedder=memory_embedder,
            fallback_embedder=self._embedder,
            vector_index=vector_index,
            vector_file=vector_file,
            limits=limits,
            cache_budget=cache_budget,
            reranker=reranker,
            rerank_cap=rerank_cap,
        )
        self._scopes: dict[tuple[str, str], MemoryScope] = {}
        self._scopes_lock = threading.Lock()
        # Extraction: conversations are queued when an extractor is given (or queue_extraction,
        # for a worker in another process: `engramdb worker`); the given one runs in a thread,
        # started at the first queued conversation.
        self._runtime.extraction = extractor is not None if queue_extraction is None else queue_extraction
        self._worker: ExtractionWorker | None = None
        if extractor is not None:
            self._worker = ExtractionWorker(self._runtime, extractor)
            worker = self._worker

            def wake() -> None:
                worker.start()
                worker.wake()

            self._runtime.on_queued = wake
        # Scopes are made when first asked for (a backend may make roles or connections for one).

    # -- what the engine is made of ------------------------------------------------------------

    @property
    def scoring(self) -> ScoringConfig:
        """The recall constants."""
        return self._runtime.scoring

    @property
    def forgetting(self) -> ForgettingPolicy:
        """Retention and prune guards."""
        return self._runtime.forgetting

    @property
    def resolvers(self) -> ReferenceResolvers:
        """Resolvers of memory references by kind, called at recall time (`Agent.resolve_refs`)."""
        return self._runtime.resolvers

    @property
    def dedup_threshold(self) -> float:
        """A new memory this close (cosine) to a visible one of the same type and owner reinforces it instead."""
        return self._runtime.dedup_threshold

    @property
    def memory_embedder(self) -> Embedder | None:
        """The embedder of typed memories, or None for lexical-only recall."""
        return self._runtime.embedder

    def cache_stats(self) -> CacheStats | None:
        """What this process's per-tenant recall caches hold (PostgreSQL): tenants held, their
        bytes against `cache_budget`, loads and evictions so far. None when the store keeps one
        cache for everything (SQLite) or no recall or dedup has run yet."""
        if not self._runtime.started:
            return None
        caches = self._runtime.tenant_caches
        return None if caches is None else caches.stats()

    def drop_vector_file(self) -> None:
        """Delete the vector side file, if any (it is only a cache); see `Runtime.drop_vector_file`."""
        self._runtime.drop_vector_file()

    @property
    def path(self) -> Path:
        """The database file (SQLite), or where the store is, as a path (other backends)."""
        return getattr(self._backend, "path", Path(self._backend.location))

    @property
    def location(self) -> str:
        """Where the store is, to show: the SQLite file's path, or the PostgreSQL URL without its password."""
        return str(self._backend.location)

    @property
    def embedder(self) -> Embedder | None:
        """The embedder of retrievers over tables, or None when embeddings are off."""
        return self._embedder

    # -- handles ---------------------------------------------------------------------------------

    def agent(
        self,
        agent_id: str,
        *,
        tenant: str = "default",
        cap: Confidentiality = Confidentiality.RESTRICTED,
        floor: Confidentiality = Confidentiality.PUBLIC,
    ) -> Agent:
        """The handle of `agent_id` in `tenant`: its table scopes and its memories.

        `cap` is the most confidential level it may read, `floor` the least confidential level it
        stores at; both are fixed for the handle's life (give an LLM tool a capped handle).
        """
        return Agent(
            self._runtime,
            agent_id,
            tenant=tenant,
            cap=cap,
            floor=floor,
            shared=lambda: self.get_shared_scope(check_tenant(tenant)),
            private=lambda: self.get_private_scope(agent_id, tenant=tenant),
        )

    def forget_agent(
        self, agent_id: str, *, tenant: str = "default", dry_run: bool = False, reason: str = "agent erased"
    ) -> ForgetReport:
        """Forget every memory `agent_id` owns in `tenant` (archived ones too), as `Agent.forget`
        forgets one: a tombstone each, text, vectors, versions, edges and recall-log mentions
        erased. The tenant's shared memories stay (they are the team's; `forget_tenant` takes
        them). A `dry_run` counts and names them and changes nothing."""
        who = Principal(check_tenant(tenant), check_agent_id(agent_id))
        report = forget_where(self._runtime, who, None, owners=(who.agent_id,), dry_run=dry_run, reason=reason)
        if not dry_run:
            self._runtime.store.jobs.delete(who.tenant, who.agent_id)
        return report

    def forget_tenant(self, tenant: str, *, dry_run: bool = False, reason: str = "tenant erased") -> ForgetReport:
        """Forget every memory of `tenant` — each agent's and the shared ones — as `forget_agent`
        does, owner by owner; one report for all. Raw-SQL tables are not memories: drop them
        through the tenant's scopes."""
        tenant = check_tenant(tenant)
        everyone = Visibility(tenant, "", Confidentiality.RESTRICTED, include_archived=True, cross_agent=True)
        owners = sorted({m.owner for m in self._runtime.store.memories.listing(everyone)})
        ids: list[str] = []
        for owner in owners:
            who = Principal(tenant, owner or _SHARED_ERASER)
            ids += forget_where(self._runtime, who, None, owners=(owner,), dry_run=dry_run, reason=reason).ids
        if not dry_run:
            self._runtime.store.jobs.delete(tenant)
        return ForgetReport(len(ids), tuple(ids), dry_run)

    # -- extraction (engramdb.llm.worker) ---------------------------------------------------------

    def extraction_worker(self, extractor: Extractor, **options: Any) -> ExtractionWorker:
        """A worker running this store's queued extraction jobs with `extractor`; `options` are
        `ExtractionWorker`'s (tenant, llm_cap, lease, max_attempts, …). Call `run_once`,
        `drain`, or `start` for a thread."""
        return ExtractionWorker(self._runtime, extractor, **options)

    @property
    def worker(self) -> ExtractionWorker | None:
        """The worker of the extractor given to the engine, or None."""
        return self._worker

    def pending(
        self, *, tenant: str | None = None, agent_id: str | None = None, statuses: Sequence[str] = ("pending", "failed")
    ) -> list[Job]:
        """Extraction jobs not done (of `tenant`, or every tenant; of `agent_id`), oldest first:
        each says its turns, attempts, last error and whether it is waiting or failed for good."""
        bad = [s for s in statuses if s not in ("pending", "failed", "done")]
        if bad or isinstance(statuses, str):
            raise ConfigError(f"statuses are 'pending', 'failed' and 'done', got {statuses!r}")
        return self._runtime.store.jobs.listing(
            None if tenant is None else check_tenant(tenant),
            agent=None if agent_id is None else check_agent_id(agent_id),
            statuses=tuple(statuses),
        )

    def requeue(self, *, tenant: str = "default", job_ids: Sequence[str] | None = None) -> int:
        """Failed extraction jobs of `tenant` (those of `job_ids`, or all) queued again with fresh
        attempts; how many."""
        n = self._runtime.store.jobs.requeue(check_tenant(tenant), self._runtime.clock(), job_ids)
        if n and self._runtime.on_queued is not None:
            self._runtime.on_queued()
        return n

    def revert_extraction(self, job_id: str, *, tenant: str = "default") -> int:
        """Undo what extraction job `job_id` applied (its facts forgotten, what it superseded or
        closed valid again), in one transaction; how many decisions were undone."""
        return revert(self._runtime, check_tenant(tenant), job_id)

    def get_shared_scope(self, tenant: str = "default") -> MemoryScope:
        """The scope of the team-wide ``shared_*`` tables of `tenant` (each tenant's tables are
        apart: a schema of its own on PostgreSQL; on SQLite the home tenant's in the store's file,
        each other tenant's in a file beside it)."""
        return self._scope(SHARED, tenant)

    def get_private_scope(self, agent_id: str, *, tenant: str = "default") -> MemoryScope:
        """The scope of ``private_<agent_id>_*`` tables; `InvalidAgentId` for a bad id."""
        return self._scope(private_namespace(agent_id), tenant)

    def _scope(self, namespace: Namespace, tenant: str) -> MemoryScope:
        key = (tenant, namespace.label)
        scope = self._scopes.get(key)
        if scope is None:
            with self._scopes_lock:
                scope = self._scopes.get(key)
                if scope is None:
                    scope = self._backend.scope(namespace, self._embedder, tenant=tenant)
                    if otel.scope_sql():
                        scope = otel.TracedScope(scope)
                    self._scopes[key] = scope
        return scope

    def move_tables(self, tables: Sequence[str], *, to_tenant: str, from_tenant: str = "default") -> list[str]:
        """Hand raw-SQL tables from one tenant to another, with their rows, indexes and row
        embeddings; returns the names moved. For SQLite files made before each tenant had its own
        tables, when every tenant's were in the store's file (docs/tenancy.md, "Upgrading").

        Checked before anything is written (`ValidationError`): each table exists in
        `from_tenant`, none of that name in `to_tenant`, no foreign key crosses the move. Not
        inside a transaction. PostgreSQL has kept each tenant's tables in schemas of its own from
        the start: there is nothing to move, and it says so (`ConfigError`).
        """
        mover = getattr(self._backend, "tenant_tables", None)
        if mover is None:
            raise ConfigError(
                "this store has kept each tenant's raw-SQL tables apart from the start (PostgreSQL: a schema "
                "per tenant and namespace); there is nothing to move"
            )
        names: list[str] = mover.move(tables, source=check_tenant(from_tenant), target=check_tenant(to_tenant))
        return names

    def _keep_tables_of(self, tenant: str) -> None:
        """Make the store's own file keep `tenant`'s raw-SQL tables (`TenantFiles`: a file per tenant)."""
        mover = getattr(self._backend, "tenant_tables", None)
        if mover is not None:
            mover.claim(tenant)

    def list_all_tables(self, *, include_engine: bool = False) -> list[str]:
        """Admin view: the tables of every namespace (and the engine's own with `include_engine`).

        PostgreSQL: every tenant's. SQLite: the store's own file, i.e. its home tenant's (another
        tenant's are in its own file; ask its scopes' `list_tables`)."""
        names = self._backend.table_names()
        if include_engine:
            return names
        return [n for n in names if ascii_lower(n).startswith(("shared_", "private_"))]

    def compact(self) -> None:
        """Rewrite the store's files from their live rows, so that nothing deleted survives in
        them. `Agent.forget` already zeroes the text's cells and every free page (SQLite) and
        empties the log; a b-tree rebalance can still leave old bytes of a row in the unused
        space of a page in use, which only a rewrite reaches. SQLite: VACUUM (the whole file;
        slow for the 2.8 GB file of a million memories, and room for a second copy); PostgreSQL: VACUUM FULL of
        the engine's tables (each locked while it is rewritten; run it with the URL of the
        tables' owner). Not inside a transaction. SQLite's VACUUM keeps every engine key but may
        renumber the rowids of a raw-SQL table without an INTEGER PRIMARY KEY: give such a table
        one if anything refers to its rows by rowid."""
        self._backend.compact()

    def close(self) -> None:
        """Close every connection; the store stays as it is. Saves the vector side file first when
        more than a tenth of the cached vectors changed since it was last saved. Stops the
        engine's extraction thread first (after the job it is running; queued jobs stay queued)."""
        if self._worker is not None:
            self._worker.stop()
        self._runtime.close()

    def __enter__(self) -> DynamicMemoryEngine:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"DynamicMemoryEngine({self._backend.location!r})"


def _is_url(path: object) -> bool:
    return isinstance(path, str) and path.split("://", 1)[0].lower() in ("postgresql", "postgres")


def _postgres(url: str, **settings: Any) -> Backend:
    try:
        from engramdb.storage.postgres import PostgresBackend, PostgresSettings
    except ImportError as exc:
        if getattr(exc, "name", "") and str(exc.name).startswith("engramdb"):
            raise
        raise MissingExtra("a PostgreSQL store", "postgres") from None
    return PostgresBackend(url, PostgresSettings(**settings))


def open_team_memory_engine(config: TeamMemoryConfig | None = None) -> DynamicMemoryEngine:
    """Open the one engine a team shares, as `config` describes (default: `load_config()`)."""
    if config is None:
        config = load_config()
    elif not isinstance(config, TeamMemoryConfig):
        raise ConfigError(f"config must be a TeamMemoryConfig (see load_config()) or None, got {type(config).__name__}")
    return DynamicMemoryEngine(
        config.url or config.db_path,
        enable_embeddings=config.enable_embeddings,
        busy_timeout=config.busy_timeout,
        statement_timeout=config.statement_timeout,
        synchronous=config.synchronous,
    )


__all__ = ["ENGINE_PREFIX", "Clock", "DynamicMemoryEngine", "open_team_memory_engine"]
