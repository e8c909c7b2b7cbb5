"""Usage statistics over the access stream, restricted to the memories a reader can see."""

from __future__ import annotations

from dataclasses import dataclass, field

from engramdb.memories.model import Visibility
from engramdb.storage.ports import Backend


@dataclass(frozen=True, slots=True)
class Stats:
    """What the memories are used for.

    Attributes:
        memories: visible memories (archived included in `archived` only).
        by_type: visible, unarchived memories per type.
        never_fetched_share: share of unarchived memories never deliberately read (recalled,
            searched or fetched by id); creation does not count as a read.
        fetch_concentration: share of all deliberate reads that went to the most-read 10% of
            memories (1.0 = a few memories get everything).
        injected: accesses on the injected channel.
        injected_then_used: share of injected memories that were later read deliberately.
        cross_owner_reads: deliberate reads by an agent other than the memory's author.
        reflection_rows_share / reflection_reads_share: reflections' share of memories and of
            deliberate reads (spec 001 reports 22% of rows but ~1% of reads).
        recalls: recalls logged.
    """

    memories: int
    archived: int
    by_type: dict[str, int] = field(default_factory=dict)
    never_fetched_share: float = 0.0
    fetch_concentration: float = 0.0
    reads: int = 0
    injected: int = 0
    injected_then_used: float = 0.0
    cross_owner_reads: int = 0
    reflection_rows_share: float = 0.0
    reflection_reads_share: float = 0.0
    recalls: int = 0


def compute_stats(store: Backend, vis: Visibility) -> Stats:
    """The statistics over what `vis` shows, from the store's raw usage counts."""
    u = store.accesses.usage(vis)
    live = u.memories - u.archived
    per_memory = u.reads_per_memory
    reads = sum(per_memory)
    top = max(1, (live + 9) // 10)
    return Stats(
        memories=u.memories,
        archived=u.archived,
        by_type=u.by_type,
        never_fetched_share=(live - u.read_live) / live if live else 0.0,
        fetch_concentration=sum(per_memory[:top]) / reads if reads else 0.0,
        reads=reads,
        injected=u.injected,
        injected_then_used=u.injected_then_used / u.injected_memories if u.injected_memories else 0.0,
        cross_owner_reads=u.cross_owner_reads,
        reflection_rows_share=u.by_type.get("reflection", 0) / live if live else 0.0,
        reflection_reads_share=u.reflection_reads / reads if reads else 0.0,
        recalls=u.recalls,
    )
