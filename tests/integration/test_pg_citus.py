"""The engine on a Citus cluster: its tables distributed by tenant, and the tenant wall of
row-level security standing on the workers, where the shards are.

These run only against a real cluster: ``ENGRAMDB_TEST_PG_URL`` the coordinator's admin URL,
``ENGRAMDB_TEST_CITUS_WORKERS`` the workers' (docs/postgres.md, "Running on Citus"). CI runs a
single PostgreSQL, where they are skipped; the contract, leak and integration suites run against
the cluster the same way, unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from engramdb import DynamicMemoryEngine
from engramdb.testing import FixedClock

pytestmark = pytest.mark.postgres_only


def _workers() -> list[str]:
    from tests.pg_server import citus_workers

    return citus_workers()


@pytest.fixture
def url() -> Iterator[str]:
    if not _workers():
        pytest.skip("no Citus cluster under test (ENGRAMDB_TEST_CITUS_WORKERS unset)")
    from tests.pg_server import fresh_database

    with fresh_database("edbcitus") as u:
        yield u


def _engine(url: str) -> DynamicMemoryEngine:
    return DynamicMemoryEngine(url, clock=FixedClock(), memory_embedder=None)


def _rows(url: str, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as c:
        return list(c.execute(query, params).fetchall())


def _three_tenants(eng: DynamicMemoryEngine) -> None:
    for tenant in ("acme", "globex", "initech", "umbrella"):
        agent = eng.agent("ann", tenant=tenant)
        agent.remember(f"the {tenant} launch code is {tenant}-7731", shared=True)
        agent.remember(f"{tenant} ships on Thursdays", shared=True)


def test_every_engine_table_is_distributed_by_tenant_colocated_or_a_reference_table(url: str) -> None:
    from engramdb.storage.postgres.migrations import STORE_TABLES, TENANT_TABLES

    eng = _engine(url)
    eng.close()
    got = {
        str(name): (str(method), None if col is None else str(col), int(group))
        for name, method, col, group in _rows(
            url,
            "SELECT logicalrelid::regclass::text, partmethod, "
            "column_to_column_name(logicalrelid, partkey), colocationid FROM pg_dist_partition",
        )
    }
    for table in (*TENANT_TABLES, "engram_changes"):
        method, column, _ = got[f"engram.{table}"]
        assert (method, column) == ("h", "tenant"), table
    assert len({got[f"engram.{t}"][2] for t in (*TENANT_TABLES, "engram_changes")}) == 1, "not colocated"
    for table in STORE_TABLES:
        assert got[f"engram.{table}"][0] == "n", table  # a reference table


def test_the_tenants_rows_sit_on_both_workers_and_each_tenant_sees_only_its_own(url: str) -> None:
    eng = _engine(url)
    try:
        _three_tenants(eng)
        for tenant in ("acme", "globex", "initech", "umbrella"):
            hits = eng.agent("bob", tenant=tenant).recall("launch code", k=10).hits
            assert [h.memory.tenant for h in hits] == [tenant] * len(hits) and hits
            assert f"{tenant}-7731" in hits[0].memory.content
    finally:
        eng.close()
    ports = {
        int(p)
        for (p,) in _rows(
            url,
            "SELECT DISTINCT nodeport FROM citus_shards WHERE table_name = 'engram.engram_memories'::regclass "
            "AND shard_size > 0",
        )
    }
    assert len(ports) >= 2, f"every tenant's memories landed on one node ({ports})"


def _stored(url: str) -> str:
    """Four tenants' memories written and the engine closed; the engine role's name."""
    eng = _engine(url)
    try:
        _three_tenants(eng)
    finally:
        eng.close()
    return _engine_role(url)


def _engine_role(url: str) -> str:
    return str(_rows(url, "SELECT value FROM engram.engram_meta WHERE key = 'engine_role'")[0][0])


def _on_worker_as(url: str, worker: str, role: str) -> str:
    """A URL of `role` on `worker`, in `url`'s database (the cluster trusts loopback)."""
    from psycopg.conninfo import make_conninfo

    w = urlsplit(worker)
    return make_conninfo(
        host=w.hostname or "127.0.0.1", port=w.port or 5432, dbname=urlsplit(url).path.lstrip("/"), user=role
    )


def test_a_session_of_one_tenant_on_a_worker_cannot_read_another_tenants_shard_rows(url: str) -> None:
    import psycopg

    role = _stored(url)
    seen_other = 0
    checked = 0
    for worker in _workers():
        shards = [
            str(s)
            for (s,) in _rows(
                url,
                "SELECT shard_name FROM citus_shards WHERE table_name = 'engram.engram_memories'::regclass "
                "AND nodeport = %s",
                (urlsplit(worker).port,),
            )
        ]
        with psycopg.connect(_on_worker_as(url, worker, role), autocommit=True) as c:
            for shard in shards:
                table = psycopg.sql.Identifier(*shard.split(".", 1))
                # No tenant set: nothing at all (the policy fails closed).
                assert c.execute(psycopg.sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone() == (0,)
                with c.transaction():
                    c.execute("SET LOCAL engramdb.tenant = 'acme'")
                    tenants = {r[0] for r in c.execute(psycopg.sql.SQL("SELECT tenant FROM {}").format(table))}
                assert tenants <= {"acme"}, f"{shard} showed {tenants} to a session of acme"
                with c.transaction():
                    c.execute("SET LOCAL engramdb.tenant = 'acme'")
                    seen_other += c.execute(
                        psycopg.sql.SQL("SELECT count(*) FROM {} WHERE tenant <> 'acme'").format(table)
                    ).fetchone()[0]  # type: ignore[index]
                checked += 1
    assert checked >= 2 and seen_other == 0


def test_through_the_coordinator_a_session_setting_never_reaches_the_workers(url: str) -> None:
    """Why the engine sets the tenant with SET LOCAL: a session setting stays on the coordinator,
    so a worker's policy sees no tenant and returns nothing; SET LOCAL, propagated, is enforced
    there."""
    import psycopg

    role = _stored(url)
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(psycopg.sql.SQL("SET ROLE {}").format(psycopg.sql.Identifier(role)))
        c.execute("SET engramdb.tenant = 'globex'")
        assert c.execute("SELECT count(*) FROM engram.engram_memories").fetchone() == (0,)
        with c.transaction():
            c.execute("SET LOCAL citus.propagate_set_commands = 'local'")
            c.execute("SET LOCAL engramdb.tenant = 'globex'")
            tenants = [r[0] for r in c.execute("SELECT tenant FROM engram.engram_memories")]
        assert tenants and set(tenants) == {"globex"}
        with c.transaction():
            c.execute("SET LOCAL citus.propagate_set_commands = 'local'")
            c.execute("SET LOCAL engramdb.tenant = 'globex'")
            n = c.execute("SELECT count(*) FROM engram.engram_memories WHERE tenant = 'acme'").fetchone()
        assert n == (0,)


def test_a_store_made_before_citus_was_added_is_distributed_when_it_opens(url: str) -> None:
    """The engine distributes what it finds undistributed at every open (under the migration
    lock), so a store that predates the cluster keeps its rows."""
    import psycopg

    eng = _engine(url)
    try:
        _three_tenants(eng)
    finally:
        eng.close()
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("SELECT undistribute_table('engram.engram_row_vectors')")
    assert not _rows(url, "SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'engram.engram_row_vectors'::regclass")
    eng = _engine(url)
    try:
        assert eng.agent("ann", tenant="acme").recall("launch code", k=3).hits
    finally:
        eng.close()
    assert _rows(url, "SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'engram.engram_row_vectors'::regclass")


def test_a_scope_on_citus_keeps_its_tables_on_the_coordinator_and_cannot_reach_other_nodes(url: str) -> None:
    from engramdb.errors import EngramError

    eng = _engine(url)
    try:
        scope = eng.agent("ann", tenant="acme").private
        scope.execute("CREATE TABLE private_ann_notes (id integer PRIMARY KEY, body text)")
        scope.execute("INSERT INTO private_ann_notes VALUES (1, 'kept on the coordinator')")
        for attempt in (
            "SELECT create_distributed_table('private_ann_notes', 'id')",
            "SELECT create_reference_table('private_ann_notes')",
            "SELECT citus_add_local_table_to_metadata('private_ann_notes')",
            "SELECT * FROM run_command_on_workers('SELECT count(*) FROM pg_class')",
            "SELECT * FROM master_run_on_worker(ARRAY['127.0.0.1'], ARRAY[9801], ARRAY['SELECT 1'], false)",
        ):
            with pytest.raises(EngramError):
                scope.query(attempt)
        assert [tuple(r) for r in scope.query("SELECT body FROM private_ann_notes")] == [("kept on the coordinator",)]
        schema = scope.schema  # type: ignore[attr-defined]
    finally:
        eng.close()
    assert not _rows(
        url, "SELECT 1 FROM pg_dist_partition WHERE logicalrelid::regclass::text LIKE %s", (f"{schema}.%",)
    )
    assert not _rows(url, "SELECT 1 FROM pg_dist_schema WHERE schemaid::regnamespace::text = %s", (schema,))


def test_a_scope_role_is_the_coordinators_alone_and_reassign_owned_does_not_crash_the_server(url: str) -> None:
    """Citus 13.2 crashes the coordinator's backend (and so restarts every session) when a
    distributed role runs ``REASSIGN OWNED BY CURRENT_USER TO CURRENT_USER``, which PostgreSQL
    allows any role. Scope roles are made with DDL propagation off, so they are not distributed
    objects, and Citus skips that code for them."""
    import psycopg

    eng = _engine(url)
    try:
        agent = eng.agent("ann", tenant="acme")
        agent.remember("the acme launch code is acme-7731", shared=True)
        scope = agent.private
        scope.execute("CREATE TABLE private_ann_notes (id integer PRIMARY KEY, body text)")
        where = scope._where  # type: ignore[attr-defined]
        assert not _rows(
            url, "SELECT 1 FROM pg_dist_object WHERE classid = 'pg_authid'::regclass AND objid = %s::regrole",
            (where.role,),
        )  # fmt: skip
        for port in {urlsplit(w).port for w in _workers()}:  # nor made on any worker
            worker = urlsplit(url)._replace(netloc=f"{urlsplit(url).netloc.rsplit(':', 1)[0]}:{port}").geturl()
            assert not _rows(worker, "SELECT 1 FROM pg_roles WHERE rolname = %s", (where.role,))
        with psycopg.connect(where.conninfo, autocommit=True) as c:
            c.execute("REASSIGN OWNED BY CURRENT_USER TO CURRENT_USER")
            assert c.execute("SELECT 1").fetchone() == (1,)  # the session, and so the server, lives on
        assert [h.memory.content for h in agent.recall("launch code")] == ["the acme launch code is acme-7731"]
        scope.execute("INSERT INTO private_ann_notes VALUES (1, 'still here')")
    finally:
        eng.close()


def test_a_scope_does_not_see_citus_views_in_its_information_schema(url: str) -> None:
    eng = _engine(url)
    try:
        scope = eng.agent("ann", tenant="acme").private
        scope.execute("CREATE TABLE private_ann_notes (id integer PRIMARY KEY, body text)")
        listed = scope.query(
            "SELECT table_name FROM information_schema.tables WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
        )
        assert [tuple(r) for r in listed] == [("private_ann_notes",)]
        from engramdb.errors import EngramError

        with pytest.raises(EngramError):
            scope.query("SELECT * FROM public.citus_tables")
    finally:
        eng.close()


def test_recalls_and_dedup_answered_by_the_server_are_single_shard_router_queries(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tenant too large for the cache budget is recalled (and deduplicated) by `ServerIndex`
    reads; each names its tenant, so Citus sends it to the one shard holding the tenant's rows:
    with ``citus.multi_task_query_log_level = error`` in their transactions, a statement that
    fanned out to every shard would fail (the control below shows the setting does that)."""
    import psycopg

    from engramdb.storage.postgres import server_index
    from engramdb.testing import fake_embedder

    ran: list[str] = []

    def routed(self: Any, tenant: str, query: str, params: Any, *, binary: bool = False) -> list[tuple[Any, ...]]:
        def go(db: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            db.execute("SET LOCAL citus.multi_task_query_log_level = 'error'")
            ran.append(query.split()[0])
            return list(db.execute(query, params, binary=binary).fetchall())

        return self._store.run(tenant, go)  # type: ignore[no-any-return]

    writer = DynamicMemoryEngine(url, clock=FixedClock(), memory_embedder=fake_embedder())
    for tenant in ("acme", "globex"):
        agent = writer.agent("ann", tenant=tenant)
        for i in range(30):
            agent.remember(f"{tenant} note {i}: the launch moves to week {i % 7}", shared=True, dedup=False)
    writer.close()
    monkeypatch.setattr(server_index.PgServerIndex, "_fetch", routed)
    eng = DynamicMemoryEngine(url, clock=FixedClock(), memory_embedder=fake_embedder(), cache_budget=0)
    try:
        ann = eng.agent("ann", tenant="acme")
        hits = ann.recall("when does the launch move", k=5, hops=1).hits
        assert hits and all(h.memory.tenant == "acme" for h in hits)
        again = ann.remember("acme note 3: the launch moves to week 3", shared=True)
        assert again.id in {m.id for m in ann.memories()} and again.access_count >= 1  # folded, server-side
        stats = eng.cache_stats()
        assert stats is not None and stats.tenants == 0 and stats.served_too_large >= 2
        assert len(ran) >= 4
        with pytest.raises(Exception, match=r"(?i)multi-task"):  # the control: a fan-out fails so
            routed(eng._backend.server_index, "acme", "SELECT count(*) FROM engram.engram_memories", ())
    finally:
        eng.close()
