"""The scope's hot path: the second and later calls with the same SQL text.

A scope remembers which SQL texts it has classified and whose names passed its namespace's check
(`MemoryScope._plain`), so that a repeated call skips the tokenizer. These tests hold that cache to
what it may be:

- a decision of one scope, about one text: it never admits the text in another scope;
- never a connection or a prepared statement: each thread still runs on its own connection, and
  SQLite's authorizer still decides every prepare (also a re-prepare after a schema change);
- a repeated refusal reads exactly like the first, and changes nothing;
- the time budget is armed on every call: a runaway repeat is stopped, and an idle gap between two
  calls is never charged to the second one.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from engramdb import (
    ConstraintError,
    DynamicMemoryEngine,
    EngramError,
    MemoryScope,
    ResourceLimitExceeded,
    ScopeViolation,
)
from engramdb.storage.sqlite import scope as scope_module

pytestmark = pytest.mark.sqlite_only  # SQLite's own machinery; other backends have their own suite


def _sqlite(scope: MemoryScope) -> scope_module.SqliteScope:
    """`scope` as the SQLite scope it is here (its statement cache and store)."""
    return cast(scope_module.SqliteScope, scope)


@pytest.fixture
def eng(tmp_path: Path) -> Iterator[DynamicMemoryEngine]:
    e = DynamicMemoryEngine(tmp_path / "hot.db", busy_timeout=30.0, statement_timeout=0.5)
    e.get_shared_scope().execute("CREATE TABLE shared_t (id INTEGER PRIMARY KEY, v TEXT)")
    e.get_shared_scope().execute("INSERT INTO shared_t (v) VALUES ('shared row')")
    for agent in ("a", "ab"):
        scope = e.get_private_scope(agent)
        scope.execute(f"CREATE TABLE private_{agent}_t (id INTEGER PRIMARY KEY, v TEXT)")
        scope.execute(f"INSERT INTO private_{agent}_t (v) VALUES ('{agent} row')")
    yield e
    e.close()


def _refusal(scope: MemoryScope, sql: str, *, query: bool = False) -> tuple[type[BaseException], str]:
    with pytest.raises(EngramError) as info:
        if query:
            scope.query(sql)
        else:
            scope.execute(sql)
    return type(info.value), str(info.value)


# -- a decision of one scope, about one text -------------------------------------------------------


@pytest.mark.parametrize(
    ("owner", "sql"),
    [
        ("shared", "SELECT v FROM shared_t"),
        ("shared", "INSERT INTO shared_t (v) VALUES ('again')"),
        ("private:a", "SELECT v FROM private_a_t"),
        ("private:a", "UPDATE private_a_t SET v = v"),
        ("private:ab", "DELETE FROM private_ab_t WHERE id < 0"),
    ],
)
def test_text_admitted_in_one_scope_stays_refused_in_the_others(eng: DynamicMemoryEngine, owner: str, sql: str) -> None:
    scopes = {
        "shared": _sqlite(eng.get_shared_scope()),
        "private:a": _sqlite(eng.get_private_scope("a")),
        "private:ab": _sqlite(eng.get_private_scope("ab")),
    }
    others = {name: s for name, s in scopes.items() if name != owner}
    cold = {name: _refusal(s, sql) for name, s in others.items()}
    for _ in range(3):  # warm: the owner's later calls run on its hot path
        scopes[owner].execute(sql)
    assert sql in scopes[owner]._plain
    for name, s in others.items():
        for _ in range(2):
            assert _refusal(s, sql) == cold[name]
            assert cold[name][0] is ScopeViolation
        assert sql not in s._plain, "a refused text was remembered as admitted"
    assert scopes["private:a"].query("SELECT v FROM private_a_t") == [("a row",)]
    assert scopes["private:ab"].query("SELECT count(*) FROM private_ab_t") == [(1,)]
    # What the cache remembers holds for the scope's namespace, which cannot change under it.
    with pytest.raises(AttributeError):
        scopes[owner].namespace = next(iter(others.values())).namespace  # type: ignore[misc]


def test_only_exact_str_texts_are_remembered(eng: DynamicMemoryEngine) -> None:
    class Sql(str):
        pass

    shared = _sqlite(eng.get_shared_scope())
    text = Sql("SELECT count(*) FROM shared_t")
    assert shared.query(text) == [(1,)]
    assert shared.query(text) == [(1,)]
    assert not any(type(k) is not str for k in shared._plain)


def test_cache_is_bounded(eng: DynamicMemoryEngine) -> None:
    shared = _sqlite(eng.get_shared_scope())
    for k in range(scope_module._PLAIN_CACHE + 50):
        assert shared.query(f"SELECT {k}") == [(k,)]
    assert 0 < len(shared._plain) <= scope_module._PLAIN_CACHE
    assert shared.query("SELECT 0") == [(0,)]


# -- the authorizer still decides every prepare -----------------------------------------------------


def test_cached_text_is_authorized_again_when_sqlite_prepares_it_anew(eng: DynamicMemoryEngine) -> None:
    """A CTE named like no table is allowed; once a real table of that name exists (made past
    the engine), the schema change makes SQLite re-prepare the cached statement, and the
    authorizer, not the remembered decision, refuses it. (The statement reads an own table too:
    SQLite checks the schema only for statements that open the database.)"""
    shared = eng.get_shared_scope()
    sql = "WITH loose AS (SELECT 1 AS x) SELECT count(*) FROM loose, shared_t"
    for _ in range(3):
        assert shared.query(sql) == [(1,)]
        assert shared.execute(sql).rows == [(1,)]
    con = sqlite3.connect(eng.path)
    try:
        con.execute("CREATE TABLE loose (x)")
        con.commit()
    finally:
        con.close()
    for _ in range(2):
        with pytest.raises(ScopeViolation):
            shared.query(sql)
        with pytest.raises(ScopeViolation):
            shared.execute(sql)


def test_repeated_refusal_by_the_authorizer_reads_alike_and_changes_nothing(eng: DynamicMemoryEngine) -> None:
    """Texts that pass the name check but are denied by the authorizer are remembered as admitted;
    the authorizer refuses them on every call all the same."""
    shared = eng.get_shared_scope()
    for sql in (
        "SELECT sqlite_compileoption_get(0)",
        "SELECT load_extension('/nonexistent/evil')",
        "INSERT INTO shared_t (v) SELECT sqlite_source_id()",
    ):
        cold = _refusal(shared, sql)
        assert cold[0] is ScopeViolation
        for _ in range(3):
            assert _refusal(shared, sql) == cold
            assert _refusal(shared, sql, query=True) == cold
    assert shared.query("SELECT v FROM shared_t") == [("shared row",)]


def test_an_old_refusal_never_explains_a_later_failure(eng: DynamicMemoryEngine) -> None:
    shared = eng.get_shared_scope()
    insert = "INSERT INTO shared_t (id, v) VALUES (1, 'dup')"
    for sql in ("SELECT printf('%.*c', 2000000000, 'x')", "SELECT sqlite_compileoption_get(0)"):
        for _ in range(2):
            with pytest.raises((ResourceLimitExceeded, ScopeViolation)):
                shared.query(sql)
            for _ in range(2):  # cold, then hot
                with pytest.raises(ConstraintError):
                    shared.execute(insert)


# -- threads: a remembered text never brings a connection with it ----------------------------------


def test_warm_text_on_another_thread_runs_on_that_threads_connection(eng: DynamicMemoryEngine) -> None:
    shared = _sqlite(eng.get_shared_scope())
    insert = "INSERT INTO shared_t (v) VALUES (?)"
    count = "SELECT count(*) FROM shared_t"
    for k in range(3):  # warm on this thread
        shared.execute(insert, (f"main {k}",))
        shared.query(count)
    main_conn = shared.store.local.state.conns["scope:shared"]
    a_in_tx, b_started, b_done, release = (threading.Event() for _ in range(4))
    errors: list[BaseException] = []
    conns: dict[str, object] = {}

    def thread_a() -> None:
        try:
            shared.begin()
            shared.execute(insert, ("A, rolled back",))
            assert shared.query(count) == [(5,)]
            conns["a"] = shared.store.local.state.conns["scope:shared"]
            a_in_tx.set()
            assert release.wait(timeout=20)
            shared.rollback()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
            a_in_tx.set()

    def thread_b() -> None:
        try:
            assert a_in_tx.wait(timeout=20)
            assert not shared.in_transaction
            assert shared.query(count) == [(4,)]  # A's row is not visible here
            b_started.set()
            shared.execute(insert, ("B, autocommit",))  # waits for A's write lock
            conns["b"] = shared.store.local.state.conns["scope:shared"]
            b_done.set()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
            b_started.set()

    ta, tb = threading.Thread(target=thread_a), threading.Thread(target=thread_b)
    ta.start()
    tb.start()
    assert b_started.wait(timeout=20)
    time.sleep(0.3)
    assert not b_done.is_set(), "B's write joined A's transaction"
    release.set()
    ta.join(timeout=20)
    tb.join(timeout=20)
    assert not errors, errors
    assert conns["a"] is not conns["b"] and main_conn not in (conns["a"], conns["b"])
    assert [r[0] for r in shared.query("SELECT v FROM shared_t ORDER BY id")] == [
        "shared row",
        "main 0",
        "main 1",
        "main 2",
        "B, autocommit",
    ]


# -- the time budget ----------------------------------------------------------------------------------

RUNAWAY = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r"
#: long enough to reach the progress handler many times, far shorter than the 0.5 s budget
BUSY = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r WHERE x < 20000) SELECT count(*) FROM r"


def test_repeated_runaway_is_stopped_every_time(eng: DynamicMemoryEngine) -> None:
    shared = eng.get_shared_scope()
    for call in (shared.execute, shared.query, shared.execute):
        start = time.monotonic()
        with pytest.raises(ResourceLimitExceeded):
            call(RUNAWAY)
        assert time.monotonic() - start < 3.0
    assert shared.query("SELECT count(*) FROM shared_t") == [(1,)]


def test_idle_time_between_calls_is_not_charged_to_the_next_call(eng: DynamicMemoryEngine) -> None:
    shared = eng.get_shared_scope()
    for call in (shared.query, shared.query, lambda sql: shared.execute(sql).rows):
        assert call(BUSY) == [(20000,)]
        time.sleep(0.6)  # longer than the budget: a clock left running would stop the next call
    shared.begin()
    assert shared.query(BUSY) == [(20000,)]
    time.sleep(0.6)
    shared.execute("INSERT INTO shared_t (v) VALUES ('in tx')")
    assert shared.query(BUSY) == [(20000,)]
    shared.commit()
    assert shared.query("SELECT count(*) FROM shared_t") == [(2,)]
