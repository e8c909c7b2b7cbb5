"""Usage statistics over the access stream, restricted to the memories a reader can see."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

from engramdb.memories.store import Visibility

_READS = "('recalled', 'searched', 'deref')"


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


def compute_stats(db: sqlite3.Connection, vis: Visibility) -> Stats:
    pred, params = vis.sql("m")
    db.execute("DROP TABLE IF EXISTS temp.engram_visible")
    db.execute(
        # A forgotten memory's husk (kept for the access stream's keys) is not a memory any more.
        "CREATE TEMP TABLE engram_visible AS SELECT m.n, m.type, m.archived, m.author FROM engram_memories m "  # noqa: S608
        f"WHERE {pred} AND m.id NOT LIKE 'forgotten:%'",
        params,
    )
    try:
        total, archived = db.execute("SELECT count(*), coalesce(sum(archived), 0) FROM temp.engram_visible").fetchone()
        by_type = dict(
            db.execute("SELECT type, count(*) FROM temp.engram_visible WHERE archived = 0 GROUP BY type ORDER BY type")
        )
        live = total - archived
        per_memory = [
            int(r[0])
            for r in db.execute(
                f"SELECT count(*) FROM engram_access a JOIN temp.engram_visible v ON v.n = a.n WHERE a.channel IN {_READS} GROUP BY a.n ORDER BY 1 DESC"  # noqa: S608
            )
        ]
        reads = sum(per_memory)
        fetched_live = db.execute(
            f"SELECT count(DISTINCT a.n) FROM engram_access a JOIN temp.engram_visible v ON v.n = a.n WHERE v.archived = 0 AND a.channel IN {_READS}"  # noqa: S608
        ).fetchone()[0]
        top = max(1, (live + 9) // 10)
        injected, injected_memories, used_after = db.execute(
            "SELECT count(*), count(DISTINCT a.n), count(DISTINCT CASE WHEN EXISTS (SELECT 1 FROM engram_access b WHERE b.n = a.n "  # noqa: S608 - engine-built fragments, values bound
            f"AND b.channel IN {_READS} AND b.ts >= a.ts) THEN a.n END) "
            "FROM engram_access a JOIN temp.engram_visible v ON v.n = a.n WHERE a.channel = 'injected'"
        ).fetchone()
        cross = db.execute(
            f"SELECT count(*) FROM engram_access a JOIN temp.engram_visible v ON v.n = a.n WHERE a.channel IN {_READS} AND a.reader <> v.author"  # noqa: S608
        ).fetchone()[0]
        refl_reads = db.execute(
            f"SELECT count(*) FROM engram_access a JOIN temp.engram_visible v ON v.n = a.n WHERE a.channel IN {_READS} AND v.type = 'reflection'"  # noqa: S608
        ).fetchone()[0]
        recalls = db.execute(
            "SELECT count(*) FROM engram_recalls WHERE tenant = ? AND reader = ?", (vis.tenant, vis.reader)
        ).fetchone()[0]
    finally:
        db.execute("DROP TABLE IF EXISTS temp.engram_visible")
    return Stats(
        memories=total,
        archived=archived,
        by_type=by_type,
        never_fetched_share=(live - fetched_live) / live if live else 0.0,
        fetch_concentration=sum(per_memory[:top]) / reads if reads else 0.0,
        reads=reads,
        injected=injected,
        injected_then_used=used_after / injected_memories if injected_memories else 0.0,
        cross_owner_reads=cross,
        reflection_rows_share=by_type.get("reflection", 0) / live if live else 0.0,
        reflection_reads_share=refl_reads / reads if reads else 0.0,
        recalls=recalls,
    )
