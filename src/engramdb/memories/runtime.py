"""What the services of one engine share: the store's ports, the clock, the constants and the
in-memory caches (candidate channels, embedder), made on first use.

Services take a `Runtime` and a `Principal` (or an `Acting` object that carries both, such as an
agent handle); they never take a connection, and they reach storage only through
`engramdb.storage.ports`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Protocol

from engramdb.errors import MissingExtra
from engramdb.memories.forgetting import ForgettingPolicy, fill_lifecycle, with_lifecycle
from engramdb.memories.model import DEFAULT_LIMITS, Confidentiality, Limits, Memory, Principal
from engramdb.memories.resolvers import ReferenceResolvers
from engramdb.memories.scoring import ScoringConfig
from engramdb.retrieval.lexical_channel import LexicalChannel
from engramdb.retrieval.recall import DEFAULT_TENANT, Recaller
from engramdb.retrieval.server_channels import ServerVectors, server_pair
from engramdb.retrieval.slots import TenantSlots
from engramdb.retrieval.tenant_caches import DEFAULT_BUDGET, CachePair, TenantCaches, WholeStore

if TYPE_CHECKING:
    from engramdb.embeddings.base import Embedder, Reranker
    from engramdb.retrieval.vector_channel import VectorChannel
    from engramdb.storage.ports import Backend
    from engramdb.vectors.base import VectorIndex

Clock = Callable[[], float]
#: how typed memories are embedded: "default" (the shipped static model), an embedder, or None
EmbedderChoice = "Embedder | str | None"
#: which vector index backs the vector channel: "auto", "exact", "ann", or a factory by dimension
IndexChoice = "str | Callable[[int], VectorIndex]"


def default_embedder() -> Embedder:
    """The offline static embedder shipped in the wheel (`MissingExtra` when numpy is absent)."""
    try:
        from engramdb.embeddings.static import default_embedder as make
    except ImportError:
        raise MissingExtra("enable_embeddings=True", "memory") from None
    return make()


class Runtime:
    """The ports, settings and caches every service of one engine uses (engine-internal).

    The embedder and the candidate channels are made on first use, so that an engine used only
    for tables never loads the embedding model.
    """

    def __init__(
        self,
        store: Backend,
        *,
        clock: Clock,
        scoring: ScoringConfig,
        forgetting: ForgettingPolicy,
        dedup_threshold: float,
        memory_embedder: Embedder | str | None,
        fallback_embedder: Embedder | None,
        vector_index: str | Callable[[int], VectorIndex],
        vector_file: bool,
        limits: Limits | None = None,
        cache_budget: int | None = DEFAULT_BUDGET,
        reranker: Reranker | None = None,
        rerank_cap: Confidentiality = Confidentiality.RESTRICTED,
    ) -> None:
        self.store = store
        #: the second stage of recall, and the most confidential memory it is sent
        self.reranker, self.rerank_cap = reranker, rerank_cap
        #: bytes the caches of tenants other than the one in use may hold (a store with
        #: `Backend.caches_by_tenant`; see `engramdb.retrieval.tenant_caches`)
        self.cache_budget = cache_budget
        #: the largest input taken (content, titles, labels, queries)
        self.limits = limits or DEFAULT_LIMITS
        self.clock = clock
        self.scoring = scoring
        self.forgetting = forgetting
        #: a new memory this close (cosine) to a visible one of the same type and owner reinforces it instead
        self.dedup_threshold = dedup_threshold
        #: resolvers of memory references by kind, called at recall time
        self.resolvers = ReferenceResolvers()
        self._choice = memory_embedder
        self._fallback = fallback_embedder
        self._vector_index = vector_index
        self._vector_file = vector_file
        self._lock = threading.Lock()
        self._parts: tuple[Embedder | None, TenantCaches | WholeStore, Recaller] | None = None
        self._closed = False
        #: whether ``remember(messages=…)`` queues its turns for extraction (`engramdb.llm.worker`)
        self.extraction = False
        #: called after a conversation was queued (the engine's worker thread wakes on it)
        self.on_queued: Callable[[], None] | None = None

    # -- parts made on first use ----------------------------------------------------------------

    def _memory(self) -> tuple[Embedder | None, TenantCaches | WholeStore, Recaller]:
        parts = self._parts
        if parts is not None:
            return parts
        with self._lock:
            if self._parts is None:
                embedder: Embedder | None
                if isinstance(self._choice, str):
                    try:
                        embedder = self._fallback or default_embedder()
                    except MissingExtra:
                        embedder = None  # lexical-only recall without the memory extra
                else:
                    embedder = self._choice
                caches: TenantCaches | WholeStore
                if self.store.caches_by_tenant:
                    index = self.store.server_index
                    caches = TenantCaches(
                        lambda tenant: self._pair(embedder, tenant),
                        self.cache_budget,
                        server=None if index is None else partial(server_pair, index, embedder=embedder),
                        size_of=None if index is None else index.size,
                    )
                else:
                    caches = WholeStore(self._pair(embedder, None))
                recaller = Recaller(self.store, self.clock, self.scoring, embedder, caches)
                recaller.annotate = self.annotate_read
                recaller.limits = self.limits
                recaller.reranker, recaller.rerank_cap = self.reranker, self.rerank_cap
                self._parts = (embedder, caches, recaller)
            return self._parts

    def _pair(self, embedder: Embedder | None, tenant: str | None) -> CachePair:
        """New, empty caches of `tenant` (None: of the whole store, with side files when kept)."""
        slots = TenantSlots() if tenant is not None else None
        database = self.store.cache_file if self._vector_file and tenant is None else None
        channel = None
        if embedder is not None:
            from engramdb.retrieval.vector_channel import VectorChannel

            channel = VectorChannel(
                embedder, self._make_index(embedder.dim, small=tenant is not None), database=database,
                tenant=tenant, slots=slots,
            )  # fmt: skip
        lexical = LexicalChannel(database=database, tenant=tenant, slots=slots)
        return CachePair(lexical, channel, lexical.slots)

    def _make_index(self, dim: int, *, small: bool = False) -> VectorIndex | None:
        if callable(self._vector_index):
            return self._vector_index(dim)
        if self._vector_index == "exact":
            return None
        from engramdb.vectors import ann

        if self._vector_index == "auto" and not ann.faiss_available():
            return None
        # A tenant's cache starts small: a process may hold a thousand of them.
        return ann.AnnIndex(dim, capacity=16) if small else ann.AnnIndex(dim)

    @property
    def embedder(self) -> Embedder | None:
        """The embedder of typed memories, or None for lexical-only recall."""
        return self._memory()[0]

    @property
    def vectors(self) -> VectorChannel | None:
        """The in-memory vector cache of memories (of the default tenant when caches are kept per
        tenant), or None without an embedder."""
        return self._memory()[1].of(DEFAULT_TENANT).vectors

    def caches(self, tenant: str) -> CachePair:
        """The candidate caches that serve `tenant` (the store's one pair, or the tenant's own)."""
        return self._memory()[1].of(tenant)

    def vectors_for(self, tenant: str) -> VectorChannel | None:
        """The vector cache that serves `tenant`, or None without an embedder."""
        return self._memory()[1].of(tenant).vectors

    def dedup_vectors(self, tenant: str) -> VectorChannel | ServerVectors | None:
        """Where a write of `tenant` looks up its near-duplicates: the tenant's vector cache, or,
        as for a recall, the server's exact scans for a tenant that would not fit in the cache
        budget or whose cache another thread is loading (a write neither loads a tenant past the
        budget nor waits for another thread's load). None without an embedder."""
        return self._memory()[1].for_recall(tenant).vectors

    def held_vectors(self, tenant: str) -> VectorChannel | None:
        """The vector cache of `tenant` if this process holds it already (a write hands its rows
        to a cache that is there; it does not make one for a tenant no recall has used)."""
        if self._parts is None:
            return None
        pair = self._parts[1].peek(tenant)
        return None if pair is None else pair.vectors

    def settle_caches(self, tenant: str) -> None:
        """Hold the tenant caches within their budget after `tenant`'s were used."""
        self._memory()[1].settle(tenant)

    @property
    def tenant_caches(self) -> TenantCaches | None:
        """The per-tenant caches (None when the store keeps one cache for everything)."""
        caches = self._memory()[1]
        return caches if isinstance(caches, TenantCaches) else None

    @property
    def recaller(self) -> Recaller:
        """The recall pipeline."""
        return self._memory()[2]

    @property
    def started(self) -> bool:
        """True once the embedder and channels were made."""
        return self._parts is not None

    # -- small shared rules ----------------------------------------------------------------------

    def annotate(self, memory: Memory, now: float | None = None) -> Memory:
        """`memory` with its read-time retention and projected prune time."""
        return with_lifecycle(memory, self.clock() if now is None else now, self.forgetting)

    def annotate_read(self, memory: Memory, now: float) -> Memory:
        """`annotate` for a memory just read from its row for this call alone (recall's hits):
        filled in place, not copied (`forgetting.fill_lifecycle`)."""
        return fill_lifecycle(memory, now, self.forgetting)

    def load_saved_caches(self) -> None:
        """Bring both caches up to the store now, from their side files, when this file has side
        files and this process has not loaded them yet (what a first recall does before it ranks).
        A forget calls it before it drops the files: close then writes them again from caches
        caught up with the forget. Without it, a process that forgot and never recalled (the
        CLI's `engramdb forget`) left every later process to rebuild both caches from every row
        instead of reading them, far slower at 1M memories (benchmarks/bench_scale.py measures both:
        ``first_recall_s`` against ``restart_first_recall_s`` in benchmarks/results/scale.json)."""
        store = self.store
        if not self._vector_file or store.cache_file is None or store.in_transaction():
            # (inside a caller's transaction a cache read may yet be rolled back: such a cache is
            # never saved, so loading it here would stop the files from being written again)
            return
        from engramdb.retrieval.side_files import side_dir_for

        if not side_dir_for(store.cache_file).is_dir():
            return
        caches = self._memory()[1]
        if not isinstance(caches, WholeStore):
            return
        channel = caches.pair.vectors
        latest = store.changes.current()
        # Only a cache with a file to write again: an exact vector index never has one, and loading
        # it would read every stored vector for nothing.
        vectors = (
            channel if channel is not None and channel.side_file is not None and channel.side_file.exists() else None
        )
        lexical = caches.pair.lexical
        if vectors is not None:
            vectors.prefetch(store, latest)  # (nothing when it is loaded already)
        if lexical.side_file is not None and lexical.side_file.exists():
            lexical.refresh(store, latest)
        if vectors is not None:
            vectors.refresh(store, latest)

    def drop_vector_file(self) -> None:
        """Delete the side files, if any (they are only caches), so that a forgotten memory's vector
        and terms do not outlive it on disk; the next save writes them without it."""
        if not self._vector_file or self.store.cache_file is None:
            return
        from engramdb.retrieval.side_files import remove_side_files

        remove_side_files(self.store.cache_file)

    def close(self) -> None:
        """Save the vector side file when enough changed, then close the store. Closing again
        does nothing."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        parts = self._parts
        try:
            if parts is not None and isinstance(parts[1], WholeStore):
                pair = parts[1].pair
                if pair.vectors is not None:
                    pair.vectors.save_if_changed(self.store)
                pair.lexical.save_if_changed(self.store)
        finally:
            self.store.close()


class Acting(Protocol):
    """Anything that acts in the engine: a runtime and the principal it acts as (an agent handle).
    Both are engine-internal: a handle keeps them private (``_runtime``, ``_principal``), the
    services read them."""

    @property
    def _runtime(self) -> Runtime: ...

    @property
    def _principal(self) -> Principal: ...
