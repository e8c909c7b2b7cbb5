"""Table namespaces: ``shared_*`` for the team, ``private_<agent>_*`` for one agent.

Names alone, no database: which table and index names a namespace owns. Each backend enforces
the namespace with its own machinery (SQLite's authorizer, PostgreSQL's grants); this module is
only the naming rule they share.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Engine-owned tables start with this prefix; no scope may name them.
ENGINE_PREFIX = "engram_"

#: Prefixes no scope may use for a name it does not own.
RESERVED_PREFIXES = ("shared_", "private_", ENGINE_PREFIX, "sqlite_")

_NAME_RE = re.compile(r"[a-z0-9_-]+\Z")


def ascii_lower(name: str) -> str:
    """Fold ASCII letters only, as SQLite does for identifiers (``'K'`` (Kelvin) stays as it is)."""
    return name.encode("utf-8", "surrogatepass").lower().decode("utf-8", "surrogatepass")


@dataclass(frozen=True, slots=True)
class Namespace:
    """A table namespace: ``shared`` or ``private:<agent>``, with its table-name prefix."""

    label: str  # "shared" or "private:researcher"
    prefix: str  # "shared_" or "private_researcher_"

    def owns(self, name: object) -> bool:
        """True if `name` is a table or index name inside this namespace (ASCII case-insensitive)."""
        if not name or not isinstance(name, str):
            return False
        folded = ascii_lower(name)
        return folded.startswith(self.prefix) and len(folded) > len(self.prefix) and _NAME_RE.match(folded) is not None

    def may_name_index(self, name: str) -> bool:
        """Index names share one database-wide namespace, so they must not collide across scopes.

        A private scope's indexes carry its own prefix. The shared scope may also use unprefixed
        names (spec 000's ``idx_notes_ts``), but never another namespace's or a reserved prefix.
        """
        if self.owns(name):
            return True
        if self.prefix != "shared_":
            return False
        folded = ascii_lower(name)
        reserved = ("private_", ENGINE_PREFIX, "sqlite_")
        return _NAME_RE.match(folded) is not None and not folded.startswith(reserved)

    def rule(self) -> str:
        return f"scope '{self.label}' may only use tables named {self.prefix}<name> (ASCII letters, digits, _ and -)"
