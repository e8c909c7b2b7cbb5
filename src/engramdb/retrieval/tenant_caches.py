"""Recall's caches of a server of many tenants: one pair per tenant, loaded at the tenant's first
use, the least recently used dropped once they hold more than a byte budget.

A process serving a few tenants of a PostgreSQL store of a thousand used to load every tenant's
memories into one pair of caches at its first recall (slow, and 1 GB at 1,000 tenants of 200 memories).
Here each tenant's lexical and vector caches (`LexicalChannel`, `VectorChannel` with a tenant)
read only that tenant's rows, by its own change sequence, at slots of its own
(`engramdb.retrieval.slots.TenantSlots`), so a first recall of a tenant costs what that tenant
alone costs, and a process holds only the tenants it serves. The rankings are the ones the same
tenant would get alone in a store of its own: BM25's statistics and the visibility mask were
always over the reader's tenant, and "the memory written just before" is the tenant's previous one.

**The budget.** After each use (`settle`) the caches of other tenants are dropped, least recently
used first, until what is held (each pair's `nbytes`, arrays with their room to grow) is within
`budget` bytes. The tenant in use is never dropped by its own call, so a tenant larger than the
whole budget is held alone while it is served. A pair dropped while another thread still reads it
stays intact for that thread and is freed when it is done. None: no budget (nothing is dropped).

**What is not loaded.** Given a `server` (PostgreSQL: `engramdb.retrieval.server_channels`), a
recall (`for_recall`) does not load a tenant whose rows would not fit in the budget — its row count
times the bytes a held row costs (measured over the pairs held, `DEFAULT_ROW_BYTES` before any) —
and does not wait for a cache another thread is loading: both are answered exactly by the server,
holding nothing. A tenant that fits is loaded by its first recall, as before.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engramdb.retrieval.lexical_channel import LexicalChannel
from engramdb.retrieval.slots import Keys

if TYPE_CHECKING:
    from engramdb.retrieval.server_channels import ServerPair
    from engramdb.retrieval.vector_channel import VectorChannel

#: the default budget of one process's tenant caches
DEFAULT_BUDGET = 512 << 20
#: what a held memory is taken to cost before any pair is held to measure it: a cache of 10,000
#: memories with the shipped 256-dimension embedder held 1.86 KB each (benchmarks/bench_tenants.py)
DEFAULT_ROW_BYTES = 2048
#: rows held before their measured cost replaces `DEFAULT_ROW_BYTES`
_MEASURE_ROWS = 1000


@dataclass(eq=False)
class CachePair:
    """One cache's lexical and vector halves (the vector one None without an embedder), and the
    slots they share."""

    lexical: LexicalChannel
    vectors: VectorChannel | None
    slots: Keys = field(default_factory=Keys)

    def nbytes(self) -> int:
        held = self.lexical.nbytes() + self.slots.nbytes()
        return held + (self.vectors.nbytes() if self.vectors is not None else 0)

    def rows(self) -> int:
        """How many memories the pair holds (its slots)."""
        return len(self.slots)

    def ready(self) -> bool:
        """True once both halves have loaded (a first refresh ran)."""
        return self.lexical.loaded and (self.vectors is None or self.vectors.loaded)

    def busy(self) -> bool:
        """True while another thread holds either half (a load in progress, when not `ready`)."""
        for lock in (self.lexical.lock, None if self.vectors is None else self.vectors.lock):
            if lock is None:
                continue
            if not lock.acquire(blocking=False):
                return True
            lock.release()
        return False


@dataclass(frozen=True, slots=True)
class CacheStats:
    """What a process's tenant caches hold and have done (`TenantCaches.stats`)."""

    tenants: int
    nbytes: int
    budget: int | None
    loads: int
    evictions: int
    held: tuple[str, ...]
    #: recalls answered by the server: of a tenant larger than the budget, of one being loaded
    served_too_large: int = 0
    served_while_loading: int = 0


class WholeStore:
    """The one pair of caches of a store that keeps one cache for everything (SQLite)."""

    def __init__(self, pair: CachePair) -> None:
        self.pair = pair

    def of(self, tenant: str) -> CachePair:
        return self.pair

    def peek(self, tenant: str) -> CachePair | None:
        return self.pair

    def for_recall(self, tenant: str) -> CachePair:
        return self.pair

    def settle(self, tenant: str) -> None:
        """Nothing to drop: one pair."""


class TenantCaches:
    """A pair of caches per tenant, made by `make` at the tenant's first use, held within `budget`
    bytes (see the module docstring)."""

    def __init__(
        self,
        make: Callable[[str], CachePair],
        budget: int | None = DEFAULT_BUDGET,
        *,
        server: Callable[[str], ServerPair] | None = None,
        size_of: Callable[[str], int] | None = None,
    ) -> None:
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 0):
            raise ValueError(f"the cache budget must be a whole number of bytes (0 or more) or None, got {budget!r}")
        self._make = make
        self.budget = budget
        self._lock = threading.Lock()
        self._held: OrderedDict[str, CachePair] = OrderedDict()
        #: bytes each held pair counted at its last `settle`
        self._sizes: dict[str, int] = {}
        self._loads = 0
        self._evictions = 0
        self._server, self._size_of = server, size_of
        self._too_large = 0
        self._while_loading = 0

    def of(self, tenant: str) -> CachePair:
        """`tenant`'s caches (made, empty, at its first use: they load at their first refresh),
        counted as used now."""
        with self._lock:
            pair = self._held.get(tenant)
            if pair is not None:
                self._held.move_to_end(tenant)
                return pair
        made = self._make(tenant)
        with self._lock:
            pair = self._held.get(tenant)
            if pair is None:  # (another thread may have made it meanwhile: one pair per tenant)
                pair = self._held[tenant] = made
                self._loads += 1
            self._held.move_to_end(tenant)
            return pair

    def peek(self, tenant: str) -> CachePair | None:
        """`tenant`'s caches if this process holds them (nothing is made or counted as used)."""
        with self._lock:
            return self._held.get(tenant)

    def for_recall(self, tenant: str) -> CachePair | ServerPair:
        """What answers a recall of `tenant`: its caches (made and counted as used, as `of`), or,
        given a server, the server for a tenant that would not fit in the budget or whose caches
        another thread is loading (see the module docstring)."""
        if self._server is None:
            return self.of(tenant)
        with self._lock:
            pair = self._held.get(tenant)
            if pair is not None:
                self._held.move_to_end(tenant)
        if pair is not None:
            if pair.ready() or not pair.busy():
                return pair
            with self._lock:
                self._while_loading += 1
            return self._server(tenant)
        if (
            self.budget is not None
            and self._size_of is not None
            and self._size_of(tenant) * self.row_bytes() > self.budget
        ):
            with self._lock:
                self._too_large += 1
            return self._server(tenant)
        return self.of(tenant)

    def row_bytes(self) -> float:
        """What a held memory costs: measured over the pairs held once they hold enough rows."""
        with self._lock:
            rows = sum(p.rows() for p in self._held.values())
            held = sum(self._sizes.get(t, 0) for t in self._held)
        return held / rows if rows >= _MEASURE_ROWS and held else float(DEFAULT_ROW_BYTES)

    def settle(self, tenant: str) -> None:
        """Count `tenant`'s caches as they are now, and drop others', least recently used first,
        while all of them hold more than the budget."""
        with self._lock:
            pair = self._held.get(tenant)
            # (a few array sizes: cheap on every recall; not of a pair another thread is still
            # loading, whose locks it holds: a recall the server answered must not wait for them)
            if pair is not None and pair.ready():
                self._sizes[tenant] = pair.nbytes()
            if self.budget is None:
                return
            total = sum(self._sizes.get(t, 0) for t in self._held)
            for other in list(self._held):
                if total <= self.budget:
                    break
                if other == tenant:
                    continue
                total -= self._sizes.pop(other, 0)
                del self._held[other]
                self._evictions += 1

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(
                tenants=len(self._held),
                nbytes=sum(self._sizes.get(t, 0) for t in self._held),
                budget=self.budget,
                loads=self._loads,
                evictions=self._evictions,
                held=tuple(self._held),
                served_too_large=self._too_large,
                served_while_loading=self._while_loading,
            )


__all__ = ["DEFAULT_BUDGET", "DEFAULT_ROW_BYTES", "CachePair", "CacheStats", "TenantCaches", "WholeStore"]
