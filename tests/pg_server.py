"""A real PostgreSQL 16 with pgvector for the tests: the `pgserver` package (PyPI) runs one per test
session, or ``ENGRAMDB_TEST_PG_URL`` names a server that is already running (an admin URL: the
role must be able to create databases and roles).

Each test that needs a store gets a database of its own (`fresh_database`), dropped afterwards
with every role the engine made for it. Nothing here mocks the server.

**Citus.** With ``ENGRAMDB_TEST_CITUS_WORKERS`` set too (admin URLs of the workers, comma
separated; ``ENGRAMDB_TEST_PG_URL`` is then the coordinator's), each database is made on every
node with the ``citus`` and ``vector`` extensions and the workers added to it, so the engine finds
a cluster and distributes its tables (docs/postgres.md, "Running on Citus"). CI does not run a
cluster; this is how the suites were run against one.
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


def citus_workers() -> list[str]:
    """The admin URLs of the Citus workers under test (none: a single PostgreSQL)."""
    return [u.strip() for u in os.environ.get("ENGRAMDB_TEST_CITUS_WORKERS", "").split(",") if u.strip()]


@contextlib.contextmanager
def fresh_database(prefix: str = "edbt") -> Iterator[str]:
    """A new empty database with pgvector available, as an admin URL; dropped on exit together
    with every role whose name starts with the database name (the engine names its roles so)."""
    import psycopg

    name = f"{prefix}_{os.getpid()}_{next(_counter)}"
    admin = admin_url()
    workers = citus_workers()
    for node in (admin, *workers):
        with psycopg.connect(node, autocommit=True) as conn:
            # On Citus the coordinator may already have made it on the workers.
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
                conn.execute(f'CREATE DATABASE "{name}"')
    url = with_database(admin, name)
    try:
        for node in (*workers, admin) if workers else (admin,):
            with psycopg.connect(with_database(node, name), autocommit=True) as conn:
                if workers:
                    conn.execute("CREATE EXTENSION IF NOT EXISTS citus")
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        if workers:
            with psycopg.connect(url, autocommit=True) as conn:
                parts = urlsplit(admin)
                conn.execute("SELECT citus_set_coordinator_host(%s, %s)", (parts.hostname, parts.port or 5432))
                for worker in workers:
                    w = urlsplit(worker)
                    conn.execute("SELECT citus_add_node(%s, %s)", (w.hostname, w.port or 5432))
        yield url
    finally:
        for node in (admin, *workers):
            _drop(node, name)


def _drop(admin: str, name: str) -> None:
    import psycopg

    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        roles = [r[0] for r in conn.execute("SELECT rolname FROM pg_roles WHERE rolname LIKE %s", (f"{name}%",))]
        for role in roles:
            conn.execute(f'DROP ROLE IF EXISTS "{role}"')
