"""Raw-SQL scope connections on PostgreSQL scale with the load, not with the number of scopes.

Each scope logs in as its own role; the backend's `ScopeConnections` opens a connection when a
statement needs one, keeps at most `PostgresSettings.scope_connections` open over all scopes,
and closes idle ones. What each connection may do is still its own role's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from engramdb import DynamicMemoryEngine
from engramdb.errors import BackendError
from engramdb.testing import FixedClock

pytestmark = pytest.mark.postgres_only


@pytest.fixture
def url() -> Iterator[str]:
    from tests.pg_server import fresh_database

    with fresh_database() as u:
        yield u


def _engine(url: str, **settings: Any) -> DynamicMemoryEngine:
    from engramdb.storage.postgres import PostgresBackend, PostgresSettings

    return DynamicMemoryEngine(
        PostgresBackend(url, PostgresSettings(**settings)), clock=FixedClock(), memory_embedder=None
    )


def _scope_sessions(url: str, roles: list[str]) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as c:
        row = c.execute("SELECT count(*) FROM pg_stat_activity WHERE usename = ANY(%s)", (roles,)).fetchone()
    assert row is not None
    return int(row[0])


def test_thirty_private_scopes_used_round_robin_by_two_threads_stay_within_the_cap(url: str) -> None:
    eng = _engine(url, scope_connections=3)
    try:
        scopes = [eng.agent(f"agent{i:02d}").private for i in range(30)]
        for i, scope in enumerate(scopes):
            scope.execute(f"CREATE TABLE private_agent{i:02d}_notes (id integer PRIMARY KEY, body text)")
        roles = [scope.role for scope in scopes]  # type: ignore[attr-defined]
        peak = [0]
        errors: list[BaseException] = []

        def work(offset: int) -> None:
            try:
                for round_ in range(3):
                    for i in range(offset, 30, 2):
                        scopes[i].execute(f"INSERT INTO private_agent{i:02d}_notes VALUES (?, 'x')", (round_,))
                        peak[0] = max(peak[0], eng._backend._scope_conns.stats().open)  # type: ignore[attr-defined]
            except BaseException as exc:  # handed to the test thread
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(o,)) for o in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert peak[0] <= 3
        assert _scope_sessions(url, roles) <= 3  # the server's own count
        for i, scope in enumerate(scopes):  # every write landed, each scope as its own role
            assert scope.query(f"SELECT count(*) FROM private_agent{i:02d}_notes") == [(3,)]
            assert scope.query("SELECT current_user") == [(roles[i],)]
        stats = eng._backend._scope_conns.stats()  # type: ignore[attr-defined]
        assert stats.taken_over > 0 and stats.open <= 3
    finally:
        eng.close()
    assert _scope_sessions(url, roles) == 0  # close() closed them


def test_an_idle_scope_connection_is_closed_after_the_idle_timeout(url: str) -> None:
    eng = _engine(url, scope_idle_timeout=0.2)
    try:
        a, b = eng.agent("alice").private, eng.agent("bob").private
        a.execute("CREATE TABLE private_alice_t (x integer)")
        roles = [a.role, b.role]  # type: ignore[attr-defined]
        assert _scope_sessions(url, roles) == 1
        time.sleep(0.4)
        b.execute("CREATE TABLE private_bob_t (x integer)")  # closes alice's idle one on the way
        assert _scope_sessions(url, [roles[0]]) == 0
        assert eng._backend._scope_conns.stats().closed_idle >= 1  # type: ignore[attr-defined]
    finally:
        eng.close()


def test_when_every_connection_is_held_a_statement_waits_then_says_why(url: str) -> None:
    eng = _engine(url, scope_connections=1, pool_timeout=0.5, statement_timeout=0.1)
    try:
        a, b = eng.agent("alice").private, eng.agent("bob").private
        a.execute("CREATE TABLE private_alice_t (x integer)")
        a.begin()  # holds the one connection
        try:
            t0 = time.monotonic()
            with pytest.raises(BackendError, match="scope connections of this engine are in use"):
                b.query("SELECT 1")
            assert time.monotonic() - t0 < 5
            a.execute("INSERT INTO private_alice_t VALUES (1)")  # the holder goes on
        finally:
            a.commit()
        assert b.query("SELECT 1") == [(1,)]  # free again
        assert a.query("SELECT count(*) FROM private_alice_t") == [(1,)]
    finally:
        eng.close()


def test_a_closed_scope_connection_has_left_the_server_when_its_slot_frees(url: str) -> None:
    """A connection the engine closes (taken over by another scope, idle past its timeout, or at
    close) still counts until its server session has ended, so a replacement never makes the
    server hold more sessions than the cap, even for the moment a backend takes to exit."""
    import psycopg

    eng = _engine(url, scope_connections=1)
    try:
        scopes = [eng.agent(f"agent{i}").private for i in range(2)]
        for i, scope in enumerate(scopes):
            scope.execute(f"CREATE TABLE private_agent{i}_notes (id integer PRIMARY KEY)")
        roles = [scope.role for scope in scopes]  # type: ignore[attr-defined]
        conns = eng._backend._scope_conns  # type: ignore[attr-defined]
        seen = []
        with psycopg.connect(url, autocommit=True) as admin:
            count = "SELECT count(*) FROM pg_stat_activity WHERE usename = ANY(%s)"
            for n in range(120):
                scopes[n % 2].query(f"SELECT count(*) FROM private_agent{n % 2}_notes")  # takes the other's over
                seen.append(admin.execute(count, (roles,)).fetchone()[0])  # type: ignore[index]
                if n % 4 == 3:
                    conns.close()  # every idle connection closed: none may still be on the server
                    seen.append(admin.execute(count, (roles,)).fetchone()[0] + 1)  # type: ignore[index]
        assert max(seen) == 1, seen
    finally:
        eng.close()
