"""The store contract of spec 002: tenant scopes, entries, queries, and the `MemoryStore` Protocol.

::

    TenantScope(tenant_id, user_id=None)    who the data belongs to; nothing ever crosses it
    MemoryEntry(content, …)                 what to store (the arguments of `Agent.remember`)
    MemoryQuery(text, k, …)                 what to recall, and from which namespaces
    MemoryStore                             store / recall / update / forget / add_link / prune
    AsyncMemoryStore                        the same, awaitable (astore / arecall / …)

`in_thread` derives each async method from its sync twin by running it in a worker thread
(`asyncio.to_thread`), so there is one copy of the logic. engramdb opens one SQLite connection per
thread, so a worker thread gets its own connection and never shares one with the event loop.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from engramdb.aio import in_thread
from engramdb.errors import ValidationError
from engramdb.memories import model as mm
from engramdb.memories.model import Channel, Confidentiality, Edge, Memory, MemoryRef, MemoryType
from engramdb.retrieval.when import When, resolve_when
from engramdb.tenancy.ids import check_agent_id

if TYPE_CHECKING:
    from engramdb.retrieval.results import Recall

#: `MemoryQuery.agent_prefix` asking for every namespace of the tenant (needs cross-namespace recall).
ALL_NAMESPACES = "*"

#: The separator between tenant and user in a scope's storage key; refused inside a tenant id.
_USER_SEPARATOR = "/"
_MAX_KEY = 128  # the engine's limit on a tenant string


def _printable(name: str, value: object) -> str:
    if not isinstance(value, str) or not value or not value.isprintable() or value != value.strip():
        raise ValidationError(f"{name} must be a non-empty printable string without surrounding spaces, got {value!r}")
    return value


def check_level(value: object, name: str = "confidentiality") -> Confidentiality:
    """`value` as a `Confidentiality` (an int 0–3 is accepted), else `ValidationError`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"{name} must be a Confidentiality (or 0–3), got {value!r}")
    try:
        return Confidentiality(value)
    except ValueError:
        raise ValidationError(f"{name} must be a Confidentiality (or 0–3), got {value!r}") from None


@dataclass(frozen=True, slots=True)
class TenantScope:
    """Whose memories a call acts on: a tenant, optionally narrowed to one user of it.

    A scope with a `user_id` is a partition of its own: what is stored under
    ``TenantScope("acme", "u42")`` is recalled only under that same scope, never under
    ``TenantScope("acme")`` or another user (a user's private conversations stay theirs). The
    storage key is ``tenant_id`` or ``tenant_id/user_id``; ``/`` is therefore refused in a
    tenant id, which keeps the mapping one-to-one.

    Example::

        scope = TenantScope("acme")
        dm = TenantScope("acme", user_id="telegram:4711")
    """

    tenant_id: str
    user_id: str | None = None

    def __post_init__(self) -> None:
        _printable("tenant_id", self.tenant_id)
        if _USER_SEPARATOR in self.tenant_id:
            raise ValidationError(f"tenant_id must not contain {_USER_SEPARATOR!r}, got {self.tenant_id!r}")
        if self.user_id is not None:
            _printable("user_id", self.user_id)
        if len(self.key) > _MAX_KEY:
            raise ValidationError(f"tenant_id and user_id together must be at most {_MAX_KEY - 1} characters")

    @property
    def key(self) -> str:
        """The tenant string the engine stores: ``tenant_id`` or ``tenant_id/user_id``."""
        if self.user_id is None:
            return self.tenant_id
        return f"{self.tenant_id}{_USER_SEPARATOR}{self.user_id}"


@dataclass(frozen=True, slots=True)
class MemoryEntry:
    """One memory to store: the arguments of `Agent.remember`, as a value.

    `confidentiality` None means the namespace's floor; a level below the floor is raised to
    it. The engine assigns the id (``"{agent}:{hex}"``), so an entry has none.

    Example::

        MemoryEntry("Deploy key rotates on Mondays", type=MemoryType.INFO, importance=7,
                    tags=("ops",), confidentiality=Confidentiality.INTERNAL)
    """

    content: str
    type: MemoryType = MemoryType.INFO
    importance: float | None = None  # None: nobody scored it (5.0, which reflection may rescore)
    salience: float = 0.0
    confidence: float = 1.0
    tags: tuple[str, ...] = ()
    entities: tuple[str, ...] = ()
    title: str = ""
    refs: tuple[MemoryRef, ...] = ()
    valid_from: float | None = None
    valid_to: float | None = None
    shared: bool = False
    status: str | None = None
    created_at: float | None = None
    confidentiality: Confidentiality | None = None

    def __post_init__(self) -> None:
        # Cheap normalisation only; `Agent.remember` validates every field with its own messages.
        object.__setattr__(self, "type", mm.check_type(self.type))
        for name in ("tags", "entities", "refs"):
            value = getattr(self, name)
            if isinstance(value, str):
                raise ValidationError(f"{name} must be a sequence, not one string")
            object.__setattr__(self, name, tuple(mm.check_many(name, value, "a sequence")))
        if self.confidentiality is not None:
            object.__setattr__(self, "confidentiality", check_level(self.confidentiality))
        if not isinstance(self.shared, bool):
            raise ValidationError(f"shared must be a bool, got {self.shared!r}")

    def remember_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of `Agent.remember` (and the item mapping of `remember_many`)."""
        return {
            "content": self.content,
            "type": self.type,
            "importance": self.importance,
            "salience": self.salience,
            "confidence": self.confidence,
            "tags": list(self.tags),
            "entities": list(self.entities),
            "title": self.title,
            "refs": list(self.refs),
            "valid_from": self.valid_from,
            "valid_to": self.valid_to,
            "shared": self.shared,
            "status": self.status,
            "created_at": self.created_at,
            "confidentiality": self.confidentiality,
        }


_QUERY_CHANNELS = frozenset({Channel.RECALLED, Channel.SEARCHED, Channel.INJECTED})


@dataclass(frozen=True, slots=True)
class MemoryQuery:
    """What to recall. Every field is a request; the namespace enforces its own limits on top.

    Attributes:
        text: the query.
        k: how many hits (1–1000).
        types: only these memory types (None: all).
        agent_prefix: whose memories: None or the agent's own name for its namespace (its
            private memories and the tenant's shared ones); `ALL_NAMESPACES` (``"*"``) for every
            agent of the tenant — honoured only where the namespace allows cross-namespace recall,
            and silently narrowed to its own namespace elsewhere.
        max_confidentiality: the highest level wanted; the namespace's cap wins when lower.
        as_of: recall what was valid at this time (epoch seconds; None: now).
        hops: edges spreading activation may cross (0–5).
        channel: ``recalled`` (default) or ``searched`` reinforce the hits; ``injected`` (what a
            harness shows unasked) logs without reinforcing.
        trace_ref: an id of the caller's trace, stored with each access.
        when: time windows whose memories get a lift: ``"auto"`` (the dates `text` names), None,
            or ``(start, end)`` pairs, as `Agent.recall` takes them.

    Example::

        MemoryQuery("when does the deploy key rotate?", k=5, types=(MemoryType.INFO,))
    """

    text: str
    k: int = 5
    types: tuple[MemoryType, ...] | None = None
    agent_prefix: str | None = None
    max_confidentiality: Confidentiality | None = None
    as_of: float | None = None
    hops: int = 1
    channel: Channel = Channel.RECALLED
    trace_ref: str | None = field(default=None, repr=False)
    when: When = "auto"

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise ValidationError(f"query text must be a str, got {type(self.text).__name__}")
        if isinstance(self.k, bool) or not isinstance(self.k, int) or not 1 <= self.k <= 1000:
            raise ValidationError(f"k must be an integer from 1 to 1000, got {self.k!r}")
        if isinstance(self.hops, bool) or not isinstance(self.hops, int) or not 0 <= self.hops <= 5:
            raise ValidationError(f"hops must be an integer from 0 to 5, got {self.hops!r}")
        if self.types is not None:
            types: Iterable[object] = (
                [self.types] if isinstance(self.types, str) else mm.check_many("types", self.types, "a tuple of types")
            )
            object.__setattr__(self, "types", tuple(dict.fromkeys(mm.check_type(t) for t in types)))
        if self.agent_prefix is not None:
            prefix = self.agent_prefix
            if isinstance(prefix, str) and prefix.endswith(":"):
                prefix = prefix[:-1]  # "researcher:" is the id prefix of "researcher"
            if prefix != ALL_NAMESPACES:
                check_agent_id(prefix)
            object.__setattr__(self, "agent_prefix", prefix)
        if self.max_confidentiality is not None:
            object.__setattr__(self, "max_confidentiality", check_level(self.max_confidentiality))
        if self.as_of is not None:
            object.__setattr__(self, "as_of", mm.check_time("as_of", self.as_of))
        try:
            channel = Channel(self.channel)
        except ValueError:
            channel = None
        if channel not in _QUERY_CHANNELS:
            raise ValidationError(f"channel must be recalled, searched or injected, got {self.channel!r}")
        object.__setattr__(self, "channel", channel)
        if self.trace_ref is not None and not isinstance(self.trace_ref, str):
            raise ValidationError("trace_ref must be a str or None")
        if self.when != "auto" and self.when is not None:
            object.__setattr__(self, "when", resolve_when(self.when, self.text, 0.0))  # explicit: check it now
        else:
            resolve_when(self.when, "", 0.0)  # a str other than "auto" is refused here


def seconds(value: float | dt.timedelta, name: str = "min_age") -> float:
    """A duration in seconds from a number of seconds or a `timedelta`; negative is refused."""
    if isinstance(value, dt.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValidationError(f"{name} must be a non-negative duration (seconds or timedelta), got {value!r}")
    return float(value)


@runtime_checkable
class MemoryStore(Protocol):
    """The memory contract of spec 002, synchronous. Every call names the `TenantScope` it acts in.

    Invariants every implementation keeps:

    * nothing crosses tenant scopes: an id of another scope behaves exactly like a missing id
      (same error class, same message apart from the id);
    * ids carry their author's namespace: ``"{agent}:{…}"``;
    * `recall` never returns a memory above the implementation's confidentiality cap, whatever
      the query asks; `store` never stores below its floor;
    * `update`, `forget`, `add_link` and `prune` act only inside the caller's own namespace.
    """

    def store(self, scope: TenantScope, entry: MemoryEntry) -> Memory:
        """Persist `entry` under `scope` and return the stored memory (with its id)."""
        ...

    def recall(self, scope: TenantScope, query: MemoryQuery) -> Recall:
        """The memories of `scope` best matching `query`, best first."""
        ...

    def update(self, scope: TenantScope, id: str, content: str) -> Memory:
        """Replace the content of memory `id` (earlier versions stay in its history)."""
        ...

    def forget(self, scope: TenantScope, id: str) -> bool:
        """Forget memory `id`: True if it was forgotten, False if no such memory is visible."""
        ...

    def add_link(self, scope: TenantScope, id: str, related_id: str) -> Edge:
        """Link two memories; the link is followed from either end."""
        ...

    def prune(
        self, scope: TenantScope, min_strength: float, min_age: float | dt.timedelta, agent_prefix: str | None = None
    ) -> int:
        """Retire memories weaker than `min_strength` and older than `min_age`; return how many."""
        ...


@runtime_checkable
class AsyncMemoryStore(Protocol):
    """`MemoryStore` for asyncio frameworks: the same methods, awaitable, prefixed with ``a``."""

    async def astore(self, scope: TenantScope, entry: MemoryEntry) -> Memory:
        """Awaitable `MemoryStore.store`."""
        ...

    async def arecall(self, scope: TenantScope, query: MemoryQuery) -> Recall:
        """Awaitable `MemoryStore.recall`."""
        ...

    async def aupdate(self, scope: TenantScope, id: str, content: str) -> Memory:
        """Awaitable `MemoryStore.update`."""
        ...

    async def aforget(self, scope: TenantScope, id: str) -> bool:
        """Awaitable `MemoryStore.forget`."""
        ...

    async def aadd_link(self, scope: TenantScope, id: str, related_id: str) -> Edge:
        """Awaitable `MemoryStore.add_link`."""
        ...

    async def aprune(
        self, scope: TenantScope, min_strength: float, min_age: float | dt.timedelta, agent_prefix: str | None = None
    ) -> int:
        """Awaitable `MemoryStore.prune`."""
        ...


__all__ = [
    "ALL_NAMESPACES",
    "AsyncMemoryStore",
    "MemoryEntry",
    "MemoryQuery",
    "MemoryStore",
    "TenantScope",
    "check_level",
    "in_thread",
    "seconds",
]
