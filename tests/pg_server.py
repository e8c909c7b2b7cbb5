"""A real PostgreSQL 16 with pgvector for the tests: the `pgserver` package (PyPI) runs one per test
session, or ``ENGRAMDB_TEST_PG_URL`` names a server that is already running (an admin URL: the
role must be able to create databases and roles).

Each test that needs a store gets a database of its own (`fresh_database`), dropped afterwards
with every role the engine made for it. Nothing here mocks the server.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import shutil
import tempfile
import threading
import warnings
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

_lock = threading.Lock()
_admin_url: str | None = None
_counter = itertools.count()


def admin_url() -> str:
    """The URL of a superuser (or CREATEDB + CREATEROLE) connection to the test server."""
    global _admin_url
    with _lock:
        if _admin_url is None:
            url = os.environ.get("ENGRAMDB_TEST_PG_URL")
            if not url:
                with warnings.catch_warnings():
                    # platformdirs warns at import when XDG_RUNTIME_DIR is unset (CI, containers).
                    warnings.simplefilter("ignore")
                    import pgserver  # the "test" extra

                # A short path: the server's unix socket lives in it (107 bytes at most).
                root = tempfile.mkdtemp(prefix="edbpg-", dir="/tmp")
                server = pgserver.get_server(root, cleanup_mode="stop")
                atexit.register(shutil.rmtree, root, True)
                url = server.get_uri()
            _admin_url = url
        return _admin_url


def with_database(url: str, database: str) -> str:
    """`url` pointing at `database` instead (query string, with its host socket, kept)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + database, parts.query, parts.fragment))


@contextlib.contextmanager
def fresh_database(prefix: str = "edbt") -> Iterator[str]:
    """A new empty database with pgvector available, as an admin URL; dropped on exit together
    with every role whose name starts with the database name (the engine names its roles so)."""
    import psycopg

    name = f"{prefix}_{os.getpid()}_{next(_counter)}"
    admin = admin_url()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = with_database(admin, name)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        yield url
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            roles = [r[0] for r in conn.execute("SELECT rolname FROM pg_roles WHERE rolname LIKE %s", (f"{name}%",))]
            for role in roles:
                conn.execute(f'DROP ROLE IF EXISTS "{role}"')
