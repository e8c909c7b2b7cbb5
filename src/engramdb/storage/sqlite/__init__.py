"""The SQLite backend: every storage port over one WAL-mode file, raw-SQL scopes enforced by
SQLite's authorizer. The only package that runs SQL against SQLite."""

from engramdb.storage.sqlite.backend import SqliteBackend
from engramdb.storage.sqlite.connection import SqliteSettings

__all__ = ["SqliteBackend", "SqliteSettings"]
