"""Where a cache keeps each memory: the memory's key itself, or a small slot of its tenant's own.

The candidate channels hold their arrays by position. A cache of a whole store (SQLite: one file)
keeps each memory at its key (`Keys`): the keys are the file's own, dense, and translating them
would cost every call. A cache of one tenant of a server (`TenantSlots`) cannot: the store's keys
come from one sequence over every tenant, so a tenant of 200 memories among a million holds keys
spread up to a million, and arrays by key would cost each cached tenant as much as the whole store.
It gives the tenant's memories slots 0, 1, 2, … in the order of their keys, which is the order
they were written in (a tenant's writes hold its change sequence while they take their keys), so
"the memory written just before" (implicit episodes, `engramdb.retrieval.sequence`) is the
tenant's previous memory — as it is for the same tenant alone in a store of its own.

Keys the cache has not seen have no slot (`find` gives −1); slots of memories forgotten since are
kept (a key is never given to another memory on PostgreSQL), so they read as hidden rows.
"""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

_Row = TypeVar("_Row", bound=tuple[Any, ...])


class Keys:
    """The identity: a memory's slot is its key (a cache of a whole SQLite file)."""

    #: True when slots are not keys
    translated = False

    def __len__(self) -> int:
        return 0

    def assign(self, keys: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The slots of `keys`, giving new keys the next free slots in key order."""
        return keys

    def find(self, keys: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The slots of `keys`; −1 for a key without one."""
        return keys

    def keys(self, slots: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        """The keys at `slots` (every one of them assigned)."""
        return slots.astype(np.int64, copy=False)

    def rows(self, rows: list[_Row]) -> list[_Row]:
        """`rows` with each one's key (its first field) replaced by its slot, new keys assigned."""
        return rows

    def nbytes(self) -> int:
        return 0


class TenantSlots(Keys):
    """Slots 0, 1, 2, … of one tenant's memories, in key order (see the module docstring)."""

    translated = True

    def __init__(self) -> None:
        self._slot: dict[int, int] = {}
        self._key = np.zeros(16, dtype=np.int64)

    def __len__(self) -> int:
        return len(self._slot)

    def assign(self, keys: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        slot = self._slot
        kl = np.asarray(keys, dtype=np.int64).tolist()
        new = sorted({k for k in kl if k not in slot})
        if new:
            start = len(slot)
            need = start + len(new)
            if need > len(self._key):
                grown = np.zeros(max(need, 2 * len(self._key)), dtype=np.int64)
                grown[:start] = self._key[:start]
                self._key = grown
            self._key[start:need] = new
            slot.update(zip(new, range(start, need), strict=True))
        return np.fromiter((slot[k] for k in kl), dtype=np.int64, count=len(kl))

    def find(self, keys: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        get = self._slot.get
        kl = np.asarray(keys, dtype=np.int64).tolist()
        return np.fromiter((get(k, -1) for k in kl), dtype=np.int64, count=len(kl))

    def keys(self, slots: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        return self._key[np.asarray(slots, dtype=np.int64)]

    def rows(self, rows: list[_Row]) -> list[_Row]:
        if not rows:
            return rows
        slots = self.assign(np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))).tolist()
        return [(s, *r[1:]) for s, r in zip(slots, rows, strict=True)]  # type: ignore[misc]

    def nbytes(self) -> int:
        # a dict entry with its two ints (~100 bytes in CPython), and the array of keys
        return 100 * len(self._slot) + self._key.nbytes


__all__ = ["Keys", "TenantSlots"]
