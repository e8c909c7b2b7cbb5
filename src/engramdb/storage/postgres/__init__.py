"""The PostgreSQL backend: every storage port over one database (PostgreSQL 16+ with pgvector),
engine tables in the schema ``engram`` under row-level security by tenant. Needs the ``postgres``
extra (psycopg 3, psycopg-pool, pgvector)."""

from engramdb.storage.postgres.backend import PostgresBackend
from engramdb.storage.postgres.connection import PostgresSettings, is_postgres_url

__all__ = ["PostgresBackend", "PostgresSettings", "is_postgres_url"]
