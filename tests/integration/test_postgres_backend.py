"""What only the PostgreSQL backend does: URL opening, the row-level-security wall, coherence across
processes, migrations run again and at once, error translation, the PgBouncer mode.

Run with ``pytest --backend=postgres`` (a real server from ``tests/pg_server.py``; nothing is mocked).
"""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from engramdb import BackendError, DynamicMemoryEngine, SchemaVersionError, TransactionError
from engramdb.config import load_config
from engramdb.engine import open_team_memory_engine
from engramdb.memories.model import Visibility
from engramdb.testing import FixedClock, fake_embedder

pytestmark = pytest.mark.postgres_only


@pytest.fixture
def url() -> Iterator[str]:
    from tests.pg_server import fresh_database

    with fresh_database() as u:
        yield u


def _admin(url: str) -> Any:
    import psycopg

    return psycopg.connect(url, autocommit=True)


def _open(url: str, **options: Any) -> DynamicMemoryEngine:
    options.setdefault("clock", FixedClock())
    options.setdefault("memory_embedder", fake_embedder())
    return DynamicMemoryEngine(url, **options)


# -- opening ------------------------------------------------------------------------------------


def test_a_url_opens_postgres_and_a_path_opens_sqlite(url: str, tmp_path: Any) -> None:
    from engramdb.storage.postgres import PostgresBackend
    from engramdb.storage.sqlite import SqliteBackend

    for scheme_url in (url, "postgres://" + url.split("://", 1)[1]):
        with _open(scheme_url) as eng:
            assert isinstance(eng._backend, PostgresBackend)
            assert eng._backend.cache_file is None
            m = eng.agent("alice").remember(f"the kiln fires at noon ({scheme_url.split(':')[0]})")
            assert eng.agent("alice").recall("kiln fires")[0].memory.id == m.id
    with DynamicMemoryEngine(tmp_path / "m.db") as eng:
        assert isinstance(eng._backend, SqliteBackend)
    with open_team_memory_engine(load_config(env={"ENGRAMDB_URL": url})) as eng:
        assert isinstance(eng._backend, PostgresBackend)
        assert len(eng.agent("alice").memories()) == 2  # the same database as above


def test_engine_tables_live_in_their_own_schema_that_public_cannot_use(url: str) -> None:
    with _open(url) as eng:
        eng.agent("alice").remember("a note")
    with _admin(url) as pg:
        schemas = {
            r[0]
            for r in pg.execute("SELECT table_schema FROM information_schema.tables WHERE table_name LIKE 'engram%'")
        }
        assert schemas == {"engram"}
        acl = pg.execute("SELECT has_schema_privilege('public', 'engram', 'USAGE')").fetchone()[0]
        assert acl is False
        db = pg.execute("SELECT current_database()").fetchone()[0]
        pg.execute(f'CREATE ROLE "{db}_stranger" NOLOGIN')
        pg.execute(f'SET ROLE "{db}_stranger"')
        import psycopg

        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="schema engram"):
            pg.execute("SELECT count(*) FROM engram.engram_memories")


def test_the_tenant_leads_every_primary_key_and_unique_constraint(url: str) -> None:
    _open(url).close()
    with _admin(url) as pg:
        rows = pg.execute(
            "SELECT c.conrelid::regclass::text, c.conname, a.attname FROM pg_constraint c "
            "JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1] "
            "JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = 'engram' AND c.contype IN ('p', 'u')"
        ).fetchall()
    from engramdb.storage.postgres.migrations import STORE_TABLES

    tenant_tables = [r for r in rows if r[0].split(".")[-1] not in STORE_TABLES]
    assert len(tenant_tables) >= 9
    assert all(col == "tenant" for _, _, col in tenant_tables), tenant_tables


# -- row-level security -------------------------------------------------------------------------


def test_row_level_security_hides_other_tenants_even_from_a_query_without_a_predicate(url: str) -> None:
    with _open(url) as eng:
        eng.agent("alice", tenant="acme").remember("acme plans", shared=True)
        eng.agent("alice", tenant="globex").remember("globex plans", shared=True)
        role = eng._backend.store.role  # type: ignore[attr-defined]
        assert role is not None
    import psycopg

    with _admin(url) as pg:
        pg.execute(f'SET ROLE "{role}"')  # the role the engine's statements run as
        assert pg.execute("SELECT count(*) FROM engram.engram_memories").fetchone()[0] == 0  # no tenant set: nothing
        pg.execute("SELECT set_config('engramdb.tenant', 'acme', false)")
        # A "wrong predicate" — none at all, or one naming the other tenant — still returns only acme.
        assert {r[0] for r in pg.execute("SELECT tenant FROM engram.engram_memories")} == {"acme"}
        assert pg.execute("SELECT count(*) FROM engram.engram_memories WHERE tenant = 'globex'").fetchone()[0] == 0
        assert {r[0] for r in pg.execute("SELECT tenant FROM engram.engram_access")} == {"acme"}
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
            pg.execute("UPDATE engram.engram_memories SET tenant = 'globex'")
        pg.execute("SELECT set_config('engramdb.tenant', '*', false)")  # engine-internal calls
        assert {r[0] for r in pg.execute("SELECT tenant FROM engram.engram_memories")} == {"acme", "globex"}


def test_port_calls_naming_a_tenant_run_under_it(url: str) -> None:
    with _open(url) as eng:
        backend: Any = eng._backend
        acme = eng.agent("alice", tenant="acme").remember("acme plans")
        globex = eng.agent("alice", tenant="globex").remember("globex plans")
        globex_key = backend.memories.key_of("globex", globex.id)
        # Ask as acme for every key there is: the wall answers with acme's rows only, whatever the SQL.
        seen = backend.store.run("acme", lambda db: db.execute("SELECT id FROM engram.engram_memories").fetchall())
        assert [r[0] for r in seen] == [acme.id]
        vis = Visibility(tenant="acme", reader="alice")
        assert list(backend.memories.many(vis, [1, 2, 3])) == [backend.memories.key_of("acme", acme.id)]
        # Calls by key alone run under the tenant this thread named last (acme): globex's row is
        # out of their reach, for reading and for writing.
        assert backend.memories.get_key(globex_key) is None
        assert backend.memories.archive_keys([globex_key], backend.changes.next("acme")) == 0
        assert backend.memories.key_of("globex", globex.id) == globex_key  # naming globex moves the thread there
        assert backend.memories.get_key(globex_key) is not None


# -- coherence across processes -----------------------------------------------------------------


def _remember(url: str, text: str) -> None:
    with DynamicMemoryEngine(url, clock=FixedClock(), memory_embedder=fake_embedder()) as eng:
        eng.agent("bob").remember(text, shared=True)


def _hold_lock_and_die(url: str, ready: Any) -> None:
    from engramdb.storage.postgres import PostgresBackend

    backend = PostgresBackend(url)
    lock = backend.tenant_lock("default", "doomed")
    lock.__enter__()
    ready.set()
    threading.Event().wait(60)  # killed before this ends


def test_a_write_in_another_process_is_recalled_at_once(url: str) -> None:
    with _open(url) as eng:
        alice = eng.agent("alice")
        alice.remember("the morning standup moved", shared=True)
        assert len(alice.recall("standup moved")) == 1  # the caches are loaded now
        ctx = multiprocessing.get_context("spawn")
        child = ctx.Process(target=_remember, args=(url, "the zebra crossing standup is cancelled"))
        child.start()
        child.join(60)
        assert child.exitcode == 0
        hits = alice.recall("zebra crossing standup")
        assert hits[0].memory.content == "the zebra crossing standup is cancelled"


def test_a_crashed_lock_holder_never_leaves_the_tenant_locked(url: str) -> None:
    _open(url).close()
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    child = ctx.Process(target=_hold_lock_and_die, args=(url, ready))
    child.start()
    try:
        assert ready.wait(60)
        with _open(url) as eng, pytest.raises(TransactionError, match=r"held by doomed pid \d+"):
            eng._backend.tenant_lock("default", "me").__enter__()
    finally:
        child.kill()
        child.join(30)
    with _open(url) as eng, eng._backend.tenant_lock("default", "me"):
        pass  # the server dropped the dead session's lock


# -- migrations ---------------------------------------------------------------------------------


def _migrate(url: str) -> int:
    from engramdb.storage.postgres import PostgresBackend

    backend = PostgresBackend(url)
    try:
        return backend.migrate(0.0)
    finally:
        backend.close()


def test_migrations_run_again_change_nothing(url: str) -> None:
    from engramdb.storage.postgres.migrations import code_version

    assert _migrate(url) == _migrate(url) == code_version()
    with _admin(url) as pg:
        assert pg.execute("SELECT count(*) FROM engram.engram_migrations").fetchone()[0] == code_version()


def test_concurrent_first_opens_by_several_processes_apply_each_migration_once(url: str) -> None:
    from engramdb.storage.postgres.migrations import code_version

    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(3) as pool:
        assert pool.map(_migrate, [url] * 3) == [code_version()] * 3
    with _admin(url) as pg:
        rows = pg.execute("SELECT version, count(*) FROM engram.engram_migrations GROUP BY version").fetchall()
        assert sorted(rows) == [(v, 1) for v in range(1, code_version() + 1)]


def test_a_database_from_a_newer_engramdb_refuses_to_open(url: str) -> None:
    _open(url).close()
    with _admin(url) as pg:
        pg.execute("INSERT INTO engram.engram_migrations VALUES (999, 'from the future', 0)")
    with pytest.raises(SchemaVersionError, match="schema version 999"):
        _open(url)


# -- errors -------------------------------------------------------------------------------------


def test_no_server_is_a_backend_error() -> None:
    with pytest.raises(BackendError, match=r"cannot connect|connection failed"):
        DynamicMemoryEngine("postgresql://nobody@127.0.0.1:1/none?connect_timeout=1")


def test_a_dropped_connection_is_a_backend_error_and_the_next_call_reconnects(url: str) -> None:
    with _open(url) as eng:
        alice = eng.agent("alice")
        alice.remember("before the restart")
        with _admin(url) as pg:
            pg.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        with pytest.raises(BackendError, match="connection failed"):
            alice.remember("during the restart")
        # The pool drops the broken connection; a new one serves the next call.
        alice.remember("after the restart", dedup=False)
        assert {m.content for m in alice.memories()} >= {"before the restart", "after the restart"}


def test_a_closed_engine_is_a_backend_error(url: str) -> None:
    eng = _open(url)
    alice = eng.agent("alice")
    eng.close()
    with pytest.raises(BackendError, match="closed"):
        alice.remember("too late")


def test_a_unique_violation_is_a_constraint_error(url: str) -> None:
    from engramdb import ConstraintError

    with _open(url) as eng:
        m = eng.agent("alice").remember("once")
        backend: Any = eng._backend
        from engramdb.storage.ports import NewMemory

        with pytest.raises(ConstraintError, match="duplicate key"), backend.atomic():
            backend.memories.insert([NewMemory(m, "h", "once", b"")], backend.changes.next("default"))


def test_without_psycopg_a_url_names_the_extra() -> None:
    script = textwrap.dedent(
        """
        import sys
        sys.modules["psycopg"] = None
        from engramdb import DynamicMemoryEngine, MissingExtra
        try:
            DynamicMemoryEngine("postgresql://x@y/z")
        except MissingExtra as exc:
            print(exc.extra)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "postgres", out.stderr


# -- PgBouncer transaction mode -----------------------------------------------------------------


def _prepared_and_setting(backend: Any) -> tuple[int, str]:
    def go(db: Any) -> tuple[int, str]:
        n = db.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()[0]
        return int(n), str(db.execute("SELECT current_setting('engramdb.tenant', true)").fetchone()[0] or "")

    # Outside the engine's calls: what is left on the pooled session between transactions.
    with backend.store.pool().connection() as db:
        return go(db)


@pytest.mark.parametrize("pgbouncer", [False, True])
def test_pgbouncer_mode_leaves_no_prepared_statements_or_settings_on_a_session(url: str, pgbouncer: bool) -> None:
    from engramdb.storage.postgres import PostgresBackend, PostgresSettings

    backend = PostgresBackend(url, PostgresSettings(pool_max_size=1, pgbouncer=pgbouncer))
    with DynamicMemoryEngine(backend, clock=FixedClock(), memory_embedder=fake_embedder()) as eng:
        alice = eng.agent("alice", tenant="acme")
        for i in range(8):
            alice.remember(f"note {i} about the harbor")
            alice.recall("harbor")
        prepared, tenant = _prepared_and_setting(backend)
        if pgbouncer:
            assert (prepared, tenant) == (0, "")
        else:
            assert prepared > 0 and tenant in ("acme", "*")  # session state, set again only on change
        assert len(alice.recall("harbor", k=10)) == 8


# -- the server-side kNN path ------------------------------------------------------------------


def test_server_side_knn_keeps_visibility_inside_the_query(url: str) -> None:
    import numpy as np

    with _open(url) as eng:
        backend: Any = eng._backend
        emb = fake_embedder()
        mine = eng.agent("alice", tenant="acme").remember("the red lighthouse")
        eng.agent("alice", tenant="globex").remember("the red lighthouse")  # the same vector, another tenant
        eng.agent("bob", tenant="acme").remember("the red lighthouse")  # another agent's private memory
        q = np.asarray(emb.embed(["the red lighthouse"])[0], dtype=np.float32).tobytes()
        hits = backend.vectors.knn(Visibility(tenant="acme", reader="alice"), emb.name, q, 10)
        assert [k for k, _ in hits] == [backend.memories.key_of("acme", mine.id)]
        assert hits[0][1] == pytest.approx(1.0, abs=1e-5)


# -- one visibility rule, two dialects ---------------------------------------------------------


def test_the_visibility_predicate_admits_the_same_memories_on_both_backends(url: str, tmp_path: Any) -> None:
    import itertools

    from engramdb import Confidentiality

    day = 86_400.0
    now = FixedClock()()
    engines = [_open(url), DynamicMemoryEngine(tmp_path / "m.db", clock=FixedClock(), memory_embedder=None)]
    try:
        for eng in engines:
            world = itertools.product(
                ("acme", "globex"),
                ("alice", "bob"),
                (False, True),
                Confidentiality,
                ((None, None), (now - 2 * day, now - day), (now + day, None)),
            )
            for i, (tenant, agent, shared, level, (vfrom, vto)) in enumerate(world, start=1):
                eng.agent(agent, tenant=tenant).remember(
                    f"memory {i}", shared=shared, confidentiality=level, valid_from=vfrom, valid_to=vto, dedup=False
                )
            backend: Any = eng._backend
            doomed = [m.id for m in eng.agent("alice", tenant="acme").memories() if m.content.endswith("7")]
            backend.memories.archive("acme", doomed, backend.changes.next("acme"))

        def admitted(eng: DynamicMemoryEngine, vis: Visibility) -> set[str]:
            backend: Any = eng._backend
            keys = backend.memories.visible_keys(vis)
            return {content for content, *_ in backend.memories.contents(keys).values()}

        checked, answers = 0, set[frozenset[str]]()
        for tenant, reader, cap, as_of, cross, archived, own in itertools.product(
            ("acme", "globex"),
            ("alice", "bob"),
            Confidentiality,
            (None, now, now - 1.5 * day),
            (False, True),
            (False, True),
            (False, True),
        ):
            vis = Visibility(tenant, reader, cap, as_of, cross_agent=cross, include_archived=archived, own_only=own)
            got = admitted(engines[0], vis)
            assert got == admitted(engines[1], vis), vis
            answers.add(frozenset(got))
            checked += 1
        assert checked == 2 * 2 * 4 * 3 * 8
        assert len(answers) > 50  # the grid tells the predicates' parts apart
    finally:
        for eng in engines:
            eng.close()


def test_a_stopped_server_is_a_backend_error() -> None:
    """A server of its own (pgserver), stopped under an open engine: every call is a `BackendError`."""
    import shutil
    import tempfile
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver

    root = tempfile.mkdtemp(prefix="edbstop-", dir="/tmp")
    try:
        server = pgserver.get_server(root, cleanup_mode="stop")
        with _admin(server.get_uri()) as pg:
            pg.execute("CREATE EXTENSION IF NOT EXISTS vector")
        from engramdb.storage.postgres import PostgresBackend, PostgresSettings

        backend = PostgresBackend(server.get_uri(), PostgresSettings(pool_timeout=2.0))
        eng = DynamicMemoryEngine(backend, clock=FixedClock(), memory_embedder=fake_embedder())
        alice = eng.agent("alice")
        alice.remember("written while the server ran")
        server.cleanup()  # stops the server
        with pytest.raises(BackendError):
            alice.remember("written after it stopped", dedup=False)
        with pytest.raises(BackendError, match="unreachable"):
            alice.recall("written")
        # close() still closes the pool, without a word with the server (PostgreSQL keeps no side
        # files: nothing to catch up with before it).
        eng.close()
        with pytest.raises(BackendError, match="closed"):
            alice.recall("written")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_the_whole_engine_runs_in_pgbouncer_mode(url: str) -> None:
    """Writes, links, updates, intents, forgetting, reflection and explain with transaction-local
    settings only and no prepared statements, on a pool of two connections."""
    from engramdb import EdgeType, Forgotten
    from engramdb.storage.postgres import PostgresBackend, PostgresSettings

    clock = FixedClock()
    backend = PostgresBackend(url, PostgresSettings(pool_max_size=2, pgbouncer=True))
    with DynamicMemoryEngine(backend, clock=clock, memory_embedder=fake_embedder()) as eng:
        alice, bob = eng.agent("alice", tenant="acme"), eng.agent("bob", tenant="globex")
        a = alice.remember("the quarterly plan is due in March", shared=True)
        b = alice.remember("the budget review precedes the quarterly plan", dedup=False)
        bob.remember("globex has its own quarterly plan")
        alice.link(b.id, a.id, EdgeType.CAUSES)
        alice.update(a.id, content="the quarterly plan is due in April")
        assert [v.content for v in alice.history(a.id)] == ["the quarterly plan is due in March"]
        alice.intend("ask about the plan", on_event="standup")
        assert [m.content for m in alice.due(event="standup")] == ["ask about the plan"]
        hits = alice.recall("quarterly plan", k=5, hops=2)
        assert {h.memory.id for h in hits} >= {a.id, b.id} and all(h.memory.tenant == "acme" for h in hits)
        assert hits.recall_id is not None
        assert alice.explain(hits.recall_id).hits[0].memory_id == hits[0].memory.id
        alice.forget(b.id, reason="outdated")
        with pytest.raises(Forgotten):
            alice.remember("the budget review precedes the quarterly plan")
        alice.reflect()
        assert alice.stats().memories >= 1
        prepared, tenant = _prepared_and_setting(backend)
        assert (prepared, tenant) == (0, "")


def test_the_citus_mode_sets_the_tenant_with_set_local_and_leaves_nothing_on_a_session(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On Citus the tenant is set with SET LOCAL statements inside each transaction (Citus replays
    those on the workers; tests/integration/test_pg_citus.py runs it on a cluster). On a single
    server the same statements run (a ``citus.*`` setting is a plain placeholder there): the
    engine works, each tenant sees its own, and no tenant or role is left on a pooled session."""
    import psycopg

    from engramdb.storage.postgres import PostgresBackend, PostgresSettings, connection

    monkeypatch.setattr(connection, "has_citus", lambda conn: True)
    sent: list[str] = []
    real = psycopg.Connection.execute

    def execute(self: Any, query: Any, *a: Any, **k: Any) -> Any:
        if not isinstance(query, str):
            sent.append(query.as_string(self))
        return real(self, query, *a, **k)

    monkeypatch.setattr(psycopg.Connection, "execute", execute)
    backend = PostgresBackend(url, PostgresSettings(pool_max_size=1))
    with DynamicMemoryEngine(backend, clock=FixedClock(), memory_embedder=fake_embedder()) as eng:
        assert backend.store.citus and backend.store.per_transaction
        alice, bob = eng.agent("alice", tenant="acme"), eng.agent("bob", tenant="it's globex")
        alice.remember("the harbor opens at six", shared=True)
        bob.remember("the harbor closes at noon", shared=True)
        assert [h.memory.tenant for h in alice.recall("harbor", k=5)] == ["acme"]
        assert [h.memory.tenant for h in bob.recall("harbor", k=5)] == ["it's globex"]
        with backend.store.pool().connection() as db:
            row = db.execute("SELECT current_setting('engramdb.tenant', true), current_user = session_user").fetchone()
        assert row is not None and (row[0] or "") == "" and row[1]
    assert any("SET LOCAL engramdb.tenant = 'it''s globex'" in q for q in sent)
    assert any("SET LOCAL citus.propagate_set_commands = 'local'" in q for q in sent)


def test_a_non_superuser_owner_opens_the_engine_and_is_bound_by_the_wall(url: str) -> None:
    """The usual production setup: the URL's role owns the database and may create roles, no
    more. FORCE'd row-level security binds it too, on its own connections."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    db = parts.path.strip("/")
    with _admin(url) as pg:
        pg.execute(f'CREATE ROLE "{db}_owner" LOGIN CREATEROLE')
        pg.execute(f'ALTER DATABASE "{db}" OWNER TO "{db}_owner"')
    host = parts.netloc.rsplit("@", 1)[-1] if "@" in parts.netloc else parts.netloc  # kept: a TCP server's host:port
    owner_url = urlunsplit((parts.scheme, f"{db}_owner@{host}", parts.path, parts.query, ""))
    with _open(owner_url) as eng:
        acme = eng.agent("alice", tenant="acme")
        acme.remember("the owner's engine works")
        eng.agent("bob", tenant="globex").remember("a globex memory")
        assert [h.memory.content for h in acme.recall("owner engine")] == ["the owner's engine works"]
    with _admin(owner_url) as pg:
        assert pg.execute("SELECT count(*) FROM engram.engram_memories").fetchone()[0] == 0
        from engramdb.storage.postgres.migrations import has_citus

        if has_citus(pg):  # a session setting never reaches a worker: per transaction, as the engine does
            pg.execute("BEGIN")
            pg.execute("SET LOCAL citus.propagate_set_commands = 'local'")
            pg.execute("SET LOCAL engramdb.tenant = 'acme'")
        else:
            pg.execute("SELECT set_config('engramdb.tenant', 'acme', false)")
        assert pg.execute("SELECT tenant, count(*) FROM engram.engram_memories GROUP BY 1").fetchall() == [("acme", 1)]


def test_the_engine_keeps_working_after_scopes_harden_the_database(make_engine: Any) -> None:
    """Making a raw-SQL scope hardens the database (revokes from PUBLIC what a scope role could
    use); the engine's own role is given back what it needs (the tenant setting, locks, pgvector's
    type in public), so memories, reflection and recall go on as before."""
    eng = make_engine(memory_embedder=fake_embedder())
    eng.get_shared_scope().execute("CREATE TABLE shared_notes (id bigint PRIMARY KEY, body text)")
    me = eng.agent("alice")
    m = me.remember("the scopes were hardened first")
    assert me.recall("hardened scopes", k=1)[0].memory.id == m.id
    assert me.reflect(steps=["link"]).step("link").errors == 0
    with eng._backend.tenant_lock("default", "alice"):
        pass


def test_a_store_made_before_per_tenant_sequences_keeps_every_memory_recallable(url: str) -> None:
    """Migration 7 starts each tenant's sequence where the store-wide one stood, so a new write
    is stamped above every old one and a fresh process's caches load old and new alike."""
    with _open(url) as eng:
        for tenant in ("acme", "globex"):
            for i in range(3):
                eng.agent("alice", tenant=tenant).remember(f"{tenant} note {i} about the launch")
    with _admin(url) as pg:  # the store as migration 6 left it: one counter, no per-tenant rows
        pg.execute("DROP TABLE engram.engram_changes")
        pg.execute("DROP INDEX engram.engram_memories_tenant_changed")
        pg.execute("CREATE INDEX engram_memories_changed ON engram.engram_memories (changed)")
        pg.execute("DELETE FROM engram.engram_migrations WHERE version >= 7")  # (8 replays: IF NOT EXISTS)
        pg.execute(
            "UPDATE engram.engram_counters SET value = (SELECT max(changed) FROM engram.engram_memories) "
            "WHERE name = 'memories'"
        )
        old = pg.execute("SELECT value FROM engram.engram_counters").fetchone()
    assert old is not None
    with _open(url) as eng:
        assert eng._backend.changes.current("acme") == eng._backend.changes.current("globex") == old[0]
        assert eng._backend.changes.current("initech") == 0  # a tenant with nothing yet
        new = eng.agent("alice", tenant="acme").remember("acme launch moved to May")
        key = eng._backend.memories.key_of("acme", new.id)
        rows = eng._backend.memories.index_rows(old[0], "acme")
        assert [r[0] for r in rows] == [key]
    with _open(url) as fresh:  # a new process: caches load from the rows
        got = {h.memory.content for h in fresh.agent("alice", tenant="acme").recall("acme launch", k=10).hits}
        assert got == {"acme note 0 about the launch", "acme note 1 about the launch", "acme note 2 about the launch",
                       "acme launch moved to May"}  # fmt: skip
        assert len(fresh.agent("alice", tenant="globex").recall("globex launch", k=10).hits) == 3
