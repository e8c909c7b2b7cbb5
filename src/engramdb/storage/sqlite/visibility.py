"""`Visibility` compiled to a SQLite predicate over ``engram_memories`` (named parameters).

The array form for in-memory channels is `engramdb.retrieval.columns.VisibilityColumns.mask`; a
property test (``tests/contract/test_visibility.py``) holds the two equal on random rows and readers.
"""

from __future__ import annotations

from typing import Any

from engramdb.memories.model import Visibility
from engramdb.storage.memory_rows import visibility_predicate

#: SQLite's named parameter (the one dialect difference of the predicate)
PLACEHOLDER = ":{}"


def predicate(vis: Visibility, alias: str = "m") -> tuple[str, dict[str, Any]]:
    """The SQL condition (to AND into a WHERE) and its parameters; parameter names start ``v_``."""
    return visibility_predicate(vis, alias, PLACEHOLDER)
