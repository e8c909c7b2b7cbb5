"""`NamespacedMemory`: one agent's namespace over the engine, with a confidentiality cap and floor.

Spec 002's enforcement point. Every call names a `TenantScope`; the namespace turns it into the
engine's agent handle for that tenant, with the cap and floor set, and builds the visibility
predicate that the engine places *inside* its candidate queries. What the caller (or an LLM
tricked into calling recall) asks for is a request: the cap, the tenant and the namespace win.

    ns = NamespacedMemory(engine, "researcher").with_max_confidentiality(Confidentiality.INTERNAL)
    ns.store(TenantScope("acme"), MemoryEntry("The deploy key rotates on Mondays"))
    hits = ns.recall(TenantScope("acme"), MemoryQuery("deploy key", k=5))

Several tenants in one store share the engine's tables row by row; `TenantFiles` gives each tenant
its own database file instead (see ``docs/tenancy.md`` for when to use which).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import inspect
import math
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from engramdb.errors import ConfigError, NotFound, ValidationError
from engramdb.memories import writing
from engramdb.memories.model import Confidentiality, Edge, EdgeType, Memory, Visibility, check_path
from engramdb.retrieval.results import Explanation, Recall
from engramdb.tenancy.contract import (
    ALL_NAMESPACES,
    MemoryEntry,
    MemoryQuery,
    TenantScope,
    check_level,
    in_thread,
    seconds,
)
from engramdb.tenancy.ids import check_agent_id, tenant_file_name

if TYPE_CHECKING:
    from engramdb.agent import Agent
    from engramdb.engine import DynamicMemoryEngine
    from engramdb.observability.stats import Stats


class AgentSource(Protocol):
    """What `NamespacedMemory` wraps: anything that hands out agent handles per tenant.

    `DynamicMemoryEngine` (tenants share one database) and `TenantFiles` (a database per tenant).
    """

    def agent(
        self,
        agent_id: str,
        *,
        tenant: str = "default",
        cap: Confidentiality = Confidentiality.RESTRICTED,
        floor: Confidentiality = Confidentiality.PUBLIC,
    ) -> Agent:
        """The handle of `agent_id` in `tenant`, reading up to `cap` and storing at `floor` or above."""
        ...


def _not_found(agent_id: str, memory_id: object) -> NotFound:
    # Word for word what `Agent` says for a missing or invisible id: a foreign id must read alike.
    return NotFound(f"no memory {memory_id!r} is visible to agent {agent_id}")


@dataclasses.dataclass(frozen=True, slots=True)
class NamespacedMemory:
    """One agent's namespace over an engine: `MemoryStore` and `AsyncMemoryStore` in one.

    * ids carry the author: ``"{agent}:{hex}"``; an id given without a ``:`` gets this agent's
      prefix, so ``"3fa9…"`` and ``"researcher:3fa9…"`` name the same memory;
    * `recall` sees the agent's namespace (its private memories and the tenant's shared ones), or
      every namespace of the tenant with ``agent_prefix="*"`` where `cross_namespace` allows it;
      never above the cap, never another tenant;
    * writes (`update`, `forget`, `add_link`, `prune`) act only on memories this agent wrote;
      any other id answers exactly like a missing one;
    * builders return a changed copy; the original is never modified, so a capped copy can be
      handed to an LLM tool while the uncapped one stays with trusted code.

    Example::

        ns = (NamespacedMemory(engine, "assistant")
              .with_max_confidentiality(Confidentiality.INTERNAL)
              .with_default_store_confidentiality(Confidentiality.CONFIDENTIAL))
        ns.store(scope, MemoryEntry("met Dana about the Q3 renewal"))    # stored CONFIDENTIAL
        ns.recall(scope, MemoryQuery("Dana", max_confidentiality=Confidentiality.RESTRICTED))
        # → nothing above INTERNAL, whatever the query asked
    """

    inner: AgentSource
    agent_name: str
    max_confidentiality: Confidentiality | None = None
    default_store_confidentiality: Confidentiality = Confidentiality.PUBLIC
    cross_namespace: bool = False

    def __post_init__(self) -> None:
        check_agent_id(self.agent_name)
        if not callable(getattr(self.inner, "agent", None)):
            raise ValidationError("inner must hand out agents: a DynamicMemoryEngine, TenantFiles or alike")
        if self.max_confidentiality is not None:
            object.__setattr__(self, "max_confidentiality", check_level(self.max_confidentiality, "cap"))
        object.__setattr__(self, "default_store_confidentiality", check_level(self.default_store_confidentiality))
        if not isinstance(self.cross_namespace, bool):
            raise ValidationError("cross_namespace must be a bool")

    def __repr__(self) -> str:
        cap = "none" if self.max_confidentiality is None else self.max_confidentiality.name
        return (
            f"NamespacedMemory({self.agent_name!r}, cap={cap}, floor={self.default_store_confidentiality.name}, "
            f"cross_namespace={self.cross_namespace})"
        )

    # -- builders ---------------------------------------------------------------------------

    def with_max_confidentiality(self, level: Confidentiality | None) -> NamespacedMemory:
        """A copy whose every recall is capped at `level` (None: no cap), whatever a query asks."""
        return dataclasses.replace(self, max_confidentiality=level)

    def with_default_store_confidentiality(self, level: Confidentiality) -> NamespacedMemory:
        """A copy that stores nothing below `level`: lower entries are raised to it."""
        return dataclasses.replace(self, default_store_confidentiality=level)

    def with_cross_namespace_recall(self, allowed: bool = True) -> NamespacedMemory:
        """A copy that may (or may not) recall from every agent's namespace of the tenant.

        Off by default: a query's ``agent_prefix="*"`` is then narrowed to this agent's
        namespace, so a prompt cannot widen what an agent reads.
        """
        return dataclasses.replace(self, cross_namespace=allowed)

    # -- the engine handle ------------------------------------------------------------------

    @property
    def cap(self) -> Confidentiality:
        """The effective recall cap (`RESTRICTED` when none is set)."""
        return Confidentiality.RESTRICTED if self.max_confidentiality is None else self.max_confidentiality

    def agent(self, scope: TenantScope) -> Agent:
        """This namespace's engine handle in `scope`, with its cap and floor applied.

        For the engine's other reads (`edges`, `history`, `accesses`, `memories`): they see what
        this namespace sees. A fresh handle each call, so no state is shared between copies.
        """
        if not isinstance(scope, TenantScope):
            raise ValidationError(f"scope must be a TenantScope, got {type(scope).__name__}")
        return self.inner.agent(
            self.agent_name, tenant=scope.key, cap=self.cap, floor=self.default_store_confidentiality
        )

    def _own(self, memory_id: object) -> str | None:
        """`memory_id` in full if it names one of this agent's memories, else None."""
        if not isinstance(memory_id, str) or not memory_id:
            return None
        if ":" not in memory_id:
            return f"{self.agent_name}:{memory_id}"
        return memory_id if memory_id.startswith(f"{self.agent_name}:") else None

    def _full(self, memory_id: object) -> object:
        return memory_id if not isinstance(memory_id, str) or ":" in memory_id else f"{self.agent_name}:{memory_id}"

    def visibility(self, scope: TenantScope, query: MemoryQuery | None = None) -> Visibility:
        """The predicate a recall in `scope` runs under: the tenant, this agent, the tighter cap.

        ``agent_prefix="*"`` widens it to the tenant's every namespace only when `cross_namespace`.
        """
        if not isinstance(scope, TenantScope):
            raise ValidationError(f"scope must be a TenantScope, got {type(scope).__name__}")
        if query is not None and not isinstance(query, MemoryQuery):
            raise ValidationError(f"query must be a MemoryQuery or None, got {type(query).__name__}")
        query = query or MemoryQuery("")
        cap = self.cap if query.max_confidentiality is None else min(self.cap, query.max_confidentiality)
        if query.agent_prefix not in (None, self.agent_name, ALL_NAMESPACES):
            raise ValidationError(
                f"agent_prefix must be None, {self.agent_name!r} or {ALL_NAMESPACES!r} (every namespace); "
                "to read one other agent, recall with '*' and keep the hits whose memory.author matches"
            )
        cross = self.cross_namespace and query.agent_prefix == ALL_NAMESPACES
        return Visibility(scope.key, self.agent_name, cap, query.as_of, cross_agent=cross)

    # -- the contract -----------------------------------------------------------------------

    def store(self, scope: TenantScope, entry: MemoryEntry) -> Memory:
        """Store `entry` in this agent's namespace of `scope` (never below the floor).

        Returns the memory stored — or, when the engine's dedup finds a near-identical visible
        memory of the same owner at or above the entry's level, the one it reinforced.
        """
        if not isinstance(entry, MemoryEntry):
            raise ValidationError(f"entry must be a MemoryEntry, got {type(entry).__name__}")
        return self.agent(scope).remember_many([entry.remember_kwargs()])[0]

    def recall(self, scope: TenantScope, query: MemoryQuery) -> Recall:
        """The best `query.k` memories this namespace may see in `scope` (see `visibility`)."""
        if not isinstance(query, MemoryQuery):
            raise ValidationError(f"query must be a MemoryQuery, got {type(query).__name__}")
        handle = self.agent(scope)
        recall, _ = handle._runtime.recaller.run(
            query.text, vis=self.visibility(scope, query), k=query.k, hops=query.hops,
            types=None if query.types is None else frozenset(query.types), channel=query.channel,
            trace_ref=query.trace_ref, dry_run=False, when=query.when,
        )  # fmt: skip
        return recall

    def update(self, scope: TenantScope, id: str, content: str) -> Memory:
        """Replace the content of this agent's memory `id`; `NotFound` for any other id."""
        own = self._own(id)
        if own is None:
            raise _not_found(self.agent_name, self._full(id))
        return self.agent(scope).update(own, content=content)

    def forget(self, scope: TenantScope, id: str) -> bool:
        """Forget this agent's memory `id`; False when no such memory of this agent is visible."""
        own = self._own(id)
        return own is not None and _forget(self.agent(scope), own)

    def add_link(
        self, scope: TenantScope, id: str, related_id: str, *, edge_type: EdgeType | str = EdgeType.RELATED
    ) -> Edge:
        """Link two of this agent's memories in `scope` (followed from either end).

        Both ids must be this agent's and visible under the cap, else `NotFound`; so a link never
        crosses tenants or namespaces, and never reaches a memory above the cap. Linking raises
        the lower end to the higher end's confidentiality (the engine's rule).
        """
        own, other = self._own(id), self._own(related_id)
        if own is None:
            raise _not_found(self.agent_name, self._full(id))
        if other is None:
            raise _not_found(self.agent_name, self._full(related_id))
        return self.agent(scope).link(own, other, edge_type)

    def prune(
        self, scope: TenantScope, min_strength: float, min_age: float | dt.timedelta, agent_prefix: str | None = None
    ) -> int:
        """Retire this agent's private memories with `strength` below `min_strength` and older than
        `min_age` (seconds or a timedelta); return how many.

        Only this namespace: `agent_prefix` may be None or this agent's name. Memories above the
        cap are neither touched nor counted; skills are never pruned.
        """
        if agent_prefix is not None and (
            not isinstance(agent_prefix, str) or agent_prefix.rstrip(":") != self.agent_name
        ):
            raise ValidationError(f"a NamespacedMemory prunes only its own namespace ({self.agent_name!r})")
        if isinstance(min_strength, bool) or not isinstance(min_strength, (int, float)) or math.isnan(min_strength):
            raise ValidationError(f"min_strength must be a number, got {min_strength!r}")
        age = seconds(min_age)
        handle = self.agent(scope)
        return writing.retire_weak(
            handle._runtime, handle._principal, self.visibility(scope), below_strength=float(min_strength), min_age=age
        )

    # -- reads beyond the contract ----------------------------------------------------------

    def get(self, scope: TenantScope, id: str) -> Memory:
        """The memory `id` if this namespace may see it in `scope` (a deliberate read), else `NotFound`."""
        return self.agent(scope).get(str(self._full(id)) if isinstance(id, str) else id)

    def stats(self, scope: TenantScope) -> Stats:
        """Usage statistics over what this namespace sees in `scope` (capped like recall)."""
        return self.agent(scope).stats()

    def explain(self, scope: TenantScope, what: MemoryQuery | Recall | str) -> Explanation:
        """Why a recall ranked what it did, never naming a memory this namespace may not see now.

        A `MemoryQuery` runs as a dry recall (nothing logged). A `Recall` or recall id made by
        this agent in `scope` is replayed from the access stream, and any hit or near miss that
        is above the cap now, or in a namespace this copy may not read, is left out.
        """
        handle = self.agent(scope)
        if isinstance(what, MemoryQuery):
            _, explanation = handle._runtime.recaller.run(
                what.text, vis=self.visibility(scope, what), k=what.k, hops=what.hops,
                types=None if what.types is None else frozenset(what.types), channel=what.channel,
                trace_ref=None, dry_run=True, when=what.when,
            )  # fmt: skip
            return explanation
        if not isinstance(what, (Recall, str)):
            raise ValidationError(f"explain() takes a MemoryQuery, a Recall or a recall id, got {type(what).__name__}")
        replay = handle.explain(what)
        widest = self.visibility(scope, MemoryQuery("", agent_prefix=ALL_NAMESPACES))
        return _redact(handle, replay, dataclasses.replace(widest, as_of=None, include_archived=True))

    # -- async mirrors (one copy of the logic: each runs its sync twin in a worker thread) ----

    astore = in_thread(store)
    arecall = in_thread(recall)
    aupdate = in_thread(update)
    aforget = in_thread(forget)
    aadd_link = in_thread(add_link)
    aprune = in_thread(prune)
    aget = in_thread(get)
    astats = in_thread(stats)
    aexplain = in_thread(explain)


def _forget(handle: Agent, memory_id: str) -> bool:
    """The one place `forget` forgets: the engine's own forgetting (text deleted, a tombstone left).
    True when this call forgot it; False when there is no such memory now (never was, hidden, or
    already forgotten — spec 002's answer for an id that is gone)."""
    try:
        handle.get(memory_id, touch=False)  # is there a memory (archived or not) to forget?
        handle.forget(memory_id)
    except NotFound:
        return False
    return True


def _redact(handle: Agent, explanation: Explanation, vis: Visibility) -> Explanation:
    """`explanation` without the hits and near misses `vis` does not show."""
    ids = [e.memory_id for e in (*explanation.hits, *explanation.near_misses)]
    if not ids:
        return explanation
    shown = set(handle._runtime.store.memories.visible_ids(vis, sorted(set(ids))))
    return dataclasses.replace(
        explanation,
        hits=tuple(e for e in explanation.hits if e.memory_id in shown),
        near_misses=tuple(e for e in explanation.near_misses if e.memory_id in shown),
    )


# -- a database per tenant --------------------------------------------------------------------


def _check_engine_option_names(options: Mapping[str, Any]) -> None:
    """Refuse a keyword `DynamicMemoryEngine` does not take now, not when the first tenant opens."""
    from engramdb.engine import DynamicMemoryEngine

    known = set(inspect.signature(DynamicMemoryEngine).parameters) - {"path"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ConfigError(f"unknown engine option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")


class TenantFiles:
    """A database file per tenant under one directory; hands out agents like one engine does.

    Use it as the `inner` of a `NamespacedMemory` when tenants must share nothing at all: the raw
    SQL tables (``shared_*``, ``private_<agent>_*``) of one engine are per database, and so are the
    full-text statistics that rank lexical matches. Engines open on first use and stay open until
    `close`.

    Example::

        with TenantFiles(".engramdb/tenants") as files:
            ns = NamespacedMemory(files, "assistant")
            ns.store(TenantScope("acme"), MemoryEntry("…"))     # .engramdb/tenants/acme-….db

    Args:
        root: the directory of the files (created when missing).
        **engine_options: passed to every `DynamicMemoryEngine` (clock, memory_embedder, …).
    """

    def __init__(self, root: str | os.PathLike[str], **engine_options: Any) -> None:
        self.root = Path(check_path("root", root, ConfigError)).expanduser()
        _check_engine_option_names(engine_options)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"cannot create the tenant folder {self.root} ({exc.strerror}); pass a writable directory"
            ) from None
        self._options = dict(engine_options)
        self._engines: dict[str, DynamicMemoryEngine] = {}
        self._lock = threading.Lock()
        self._closed = False

    def path_for(self, tenant: str) -> Path:
        """Where `tenant`'s database lives (whether or not it exists yet)."""
        if not isinstance(tenant, str) or not tenant:
            raise ValidationError(f"tenant must be a non-empty string, got {tenant!r}")
        return self.root / tenant_file_name(tenant)

    def engine(self, tenant: str) -> DynamicMemoryEngine:
        """`tenant`'s engine, opened on first use."""
        from engramdb.engine import DynamicMemoryEngine

        with self._lock:
            if self._closed:
                raise ValidationError("these tenant files are closed")
            engine = self._engines.get(tenant)
            if engine is None:
                engine = DynamicMemoryEngine(self.path_for(tenant), **self._options)
                try:
                    # The file is this tenant's alone: its raw-SQL tables stay in it, as they
                    # always were, rather than in a tenant file beside it.
                    engine._keep_tables_of(tenant)
                except BaseException:
                    engine.close()
                    raise
                self._engines[tenant] = engine
            return engine

    def agent(
        self,
        agent_id: str,
        *,
        tenant: str = "default",
        cap: Confidentiality = Confidentiality.RESTRICTED,
        floor: Confidentiality = Confidentiality.PUBLIC,
    ) -> Agent:
        """The handle of `agent_id` in `tenant`, inside `tenant`'s own database."""
        return self.engine(tenant).agent(agent_id, tenant=tenant, cap=cap, floor=floor)

    def close(self) -> None:
        """Close every engine opened so far."""
        with self._lock:
            self._closed = True
            engines, self._engines = list(self._engines.values()), {}
        for engine in engines:
            engine.close()

    def __enter__(self) -> TenantFiles:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TenantFiles({str(self.root)!r})"


__all__ = ["AgentSource", "NamespacedMemory", "TenantFiles", "tenant_file_name"]
