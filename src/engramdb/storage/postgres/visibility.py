"""`Visibility` compiled to a PostgreSQL predicate over ``engram.engram_memories`` (named parameters).

The SQLite form is `engramdb.storage.sqlite.visibility.predicate`, the array form for in-memory
channels `engramdb.retrieval.columns.VisibilityColumns.mask`; the contract suite holds them equal.
"""

from __future__ import annotations

from typing import Any

from engramdb.memories.model import Visibility


def predicate(vis: Visibility, alias: str = "m") -> tuple[str, dict[str, Any]]:
    """The SQL condition (to AND into a WHERE) and its parameters; parameter names start ``v_``."""
    a = alias
    parts = [f"{a}.tenant = %(v_tenant)s", f"{a}.confidentiality <= %(v_cap)s"]
    params: dict[str, Any] = {"v_tenant": vis.tenant, "v_cap": int(vis.cap)}
    if vis.own_only:
        parts.append(f"{a}.owner = %(v_reader)s")
        params["v_reader"] = vis.reader
    elif not vis.cross_agent:
        parts.append(f"({a}.owner = '' OR {a}.owner = %(v_reader)s)")
        params["v_reader"] = vis.reader
    if not vis.include_archived:
        parts.append(f"{a}.archived = 0")
    if vis.as_of is not None:
        parts.append(
            f"({a}.valid_from IS NULL OR {a}.valid_from <= %(v_as_of)s) "
            f"AND ({a}.valid_to IS NULL OR {a}.valid_to > %(v_as_of)s)"
        )
        params["v_as_of"] = vis.as_of
    return " AND ".join(parts), params
