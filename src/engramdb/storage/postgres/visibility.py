"""`Visibility` compiled to a PostgreSQL predicate over ``engram.engram_memories`` (named parameters).

The SQLite form is `engramdb.storage.sqlite.visibility.predicate`, the array form for in-memory
channels `engramdb.retrieval.columns.VisibilityColumns.mask`; the contract suite holds them equal.
"""

from __future__ import annotations

from typing import Any

from engramdb.memories.model import Visibility
from engramdb.storage.memory_rows import visibility_predicate

#: PostgreSQL's named parameter (the one dialect difference of the predicate)
PLACEHOLDER = "%({})s"


def predicate(vis: Visibility, alias: str = "m") -> tuple[str, dict[str, Any]]:
    """The SQL condition (to AND into a WHERE) and its parameters; parameter names start ``v_``."""
    return visibility_predicate(vis, alias, PLACEHOLDER)
