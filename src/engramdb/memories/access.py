"""Logging accesses: every access is a record in the stream; deliberate ones also reinforce.

A deliberate access (recalled, searched, fetched, reinforced on write) moves the memory's access
ring — the newest `ScoringConfig.ring_size` times exactly, the older ones folded into a count and
their newest and oldest times for Petrov's approximation — and adds to its strength. Injected and
reflected accesses are logged but never reinforce: what the harness chose to show must not count
as use.
"""

from __future__ import annotations

from collections.abc import Iterable

from engramdb.memories.model import Channel
from engramdb.memories.text import pack_times, unpack_times
from engramdb.storage.ports import AccessUpdate, Backend, Touch

#: deliberate channels that also add one to a memory's strength
_BUMPS = frozenset({Channel.RECALLED, Channel.SEARCHED, Channel.DEREF, Channel.REINFORCED})


def log_accesses(
    store: Backend,
    touches: Iterable[Touch],
    *,
    now: float,
    tenant: str,
    reader: str,
    ring_size: int,
    query: str | None = None,
    trace_ref: str | None = None,
    recall_id: str | None = None,
) -> tuple[int, list[AccessUpdate]] | None:
    """Append `touches` to the access stream and reinforce the deliberate ones (call inside
    `Backend.atomic`, so the record and the reinforcement go together). Returns the write sequence
    the reinforcement took and the access state it wrote (None when nothing was reinforced), so a
    caller can hand its own committed write to the caches instead of reading it back."""
    touches = list(touches)
    store.accesses.append(
        touches, now=now, tenant=tenant, reader=reader, query=query, trace_ref=trace_ref, recall_id=recall_id
    )
    deliberate = [t.key for t in touches if t.channel.deliberate]
    if not deliberate:
        return None
    bumps = {t.key for t in touches if t.channel in _BUMPS}
    # The sequence first: taking it waits for every other writer holding it (PostgreSQL's row lock
    # on the counter; SQLite's write lock is held already), so the rings read next are the ones
    # those writers committed. Read first, two concurrent recalls on PostgreSQL each appended to
    # the ring they had read, and the later commit dropped the earlier one's access.
    change = store.changes.next(tenant)
    rows = store.memories.access_state(deliberate)
    updates: list[AccessUpdate] = []
    for n, ring, old_count, old_newest, old_oldest in rows:
        times = [*unpack_times(ring), now]
        while len(times) > ring_size:
            evicted = times.pop(0)
            old_count += 1
            old_newest = evicted if old_newest is None else max(old_newest, evicted)
            old_oldest = evicted if old_oldest is None else min(old_oldest, evicted)
        updates.append((pack_times(times), old_count, old_newest, old_oldest, now, 1 if n in bumps else 0, n))
    store.memories.set_access_state(updates, change)
    return change, updates
