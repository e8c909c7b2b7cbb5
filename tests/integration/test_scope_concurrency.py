"""Scopes under concurrency: many threads, explicit transactions, several processes.

- 16 threads writing and reading shared and private scopes at once lose nothing and mix nothing up;
- a transaction begun on one thread never captures another thread's statements;
- ``transaction()`` rolls back on an exception; out-of-order transaction calls raise TransactionError;
- a write through another scope while this thread holds a transaction fails fast with
  TransactionError instead of waiting out the busy timeout on its own lock;
- several processes (spawned) inserting into the same shared table: the total is exact.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from engramdb import DynamicMemoryEngine, MemoryScope, ScopeViolation, TransactionError

pytestmark = pytest.mark.sqlite_only  # SQLite's own machinery; other backends have their own suite

THREADS = 16
ROUNDS = 30
AGENTS = [f"w{k}" for k in range(4)]


class Boom(Exception):
    pass


@pytest.fixture
def eng(tmp_path: Path) -> Iterator[DynamicMemoryEngine]:
    # The busy timeout is long on purpose: a test that finishes quickly proves that nothing waited on it.
    e = DynamicMemoryEngine(tmp_path / "concurrency.db", busy_timeout=30.0, statement_timeout=10.0)
    shared = e.get_shared_scope()
    shared.execute(
        "CREATE TABLE shared_log (id INTEGER PRIMARY KEY, tid INTEGER NOT NULL, seq INTEGER NOT NULL, "
        "kind TEXT NOT NULL, payload TEXT NOT NULL)"
    )
    shared.execute("CREATE TABLE shared_counter (name TEXT PRIMARY KEY, n INTEGER NOT NULL)")
    shared.execute("INSERT INTO shared_counter VALUES ('total', 0)")
    for agent in AGENTS:
        e.get_private_scope(agent).execute(
            f"CREATE TABLE private_{agent}_log (id INTEGER PRIMARY KEY, tid INTEGER, seq INTEGER, payload TEXT)"
        )
    yield e
    e.close()


# -- 16 threads at once -------------------------------------------------------------------------------


def test_sixteen_threads_lose_and_mix_up_nothing(eng: DynamicMemoryEngine) -> None:
    barrier = threading.Barrier(THREADS)

    def worker(tid: int) -> int:
        shared = eng.get_shared_scope()
        agent = AGENTS[tid % len(AGENTS)]
        private = eng.get_private_scope(agent)
        table = f"private_{agent}_log"
        barrier.wait(timeout=10)
        for seq in range(ROUNDS):
            # autocommit write
            shared.execute(
                "INSERT INTO shared_log (tid, seq, kind, payload) VALUES (?, ?, 'auto', ?)", (tid, seq, f"t{tid}s{seq}")
            )
            # a private transaction of two rows
            with private.transaction():
                private.execute(f"INSERT INTO {table} (tid, seq, payload) VALUES (?, ?, ?)", (tid, seq, "p1"))
                private.execute(f"INSERT INTO {table} (tid, seq, payload) VALUES (?, ?, ?)", (tid, seq, "p2"))
            # an explicit shared transaction that reads its own writes and bumps a shared counter
            shared.begin()
            assert shared.in_transaction
            shared.execute(
                "INSERT INTO shared_log (tid, seq, kind, payload) VALUES (?, ?, 'tx', ?)", (tid, seq, f"t{tid}s{seq}")
            )
            shared.execute("UPDATE shared_counter SET n = n + 1 WHERE name = 'total'")
            mine = shared.query("SELECT count(*) FROM shared_log WHERE tid = ?", (tid,))[0][0]
            assert mine == 2 * (seq + 1)
            shared.commit()
            assert not shared.in_transaction
            # a transaction that fails and must leave nothing behind
            with pytest.raises(Boom), shared.transaction():
                shared.execute(
                    "INSERT INTO shared_log (tid, seq, kind, payload) VALUES (?, ?, 'doomed', 'x')", (tid, seq)
                )
                shared.execute("UPDATE shared_counter SET n = n + 1000 WHERE name = 'total'")
                raise Boom
            assert not shared.in_transaction
            # a refusal in the middle of all this changes nothing and does not disturb the thread
            with pytest.raises(ScopeViolation):
                private.query("SELECT * FROM shared_log")
            own = private.query(f"SELECT count(*) FROM {table} WHERE tid = ?", (tid,))[0][0]
            assert own == 2 * (seq + 1)
        return tid

    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        done = sorted(f.result(timeout=60) for f in [pool.submit(worker, t) for t in range(THREADS)])
    assert done == list(range(THREADS))

    shared = eng.get_shared_scope()
    rows = shared.query("SELECT tid, seq, kind, payload FROM shared_log")
    assert len(rows) == THREADS * ROUNDS * 2
    assert Counter(kind for _, _, kind, _ in rows) == {"auto": THREADS * ROUNDS, "tx": THREADS * ROUNDS}
    expected = {(t, s, k, f"t{t}s{s}") for t in range(THREADS) for s in range(ROUNDS) for k in ("auto", "tx")}
    assert set(rows) == expected
    assert shared.query("SELECT n FROM shared_counter") == [(THREADS * ROUNDS,)]
    for k, agent in enumerate(AGENTS):
        prows = eng.get_private_scope(agent).query(f"SELECT tid, seq, payload FROM private_{agent}_log")
        tids = [t for t in range(THREADS) if t % len(AGENTS) == k]
        assert sorted(prows) == sorted((t, s, p) for t in tids for s in range(ROUNDS) for p in ("p1", "p2"))


def test_threads_share_no_transaction_state(eng: DynamicMemoryEngine) -> None:
    """Each thread begins, writes and rolls back or commits on its own; nothing bleeds across."""
    barrier = threading.Barrier(8)

    def worker(tid: int) -> bool:
        shared = eng.get_shared_scope()
        barrier.wait(timeout=10)
        assert not shared.in_transaction
        with pytest.raises(TransactionError):
            shared.commit()
        shared.begin()
        shared.execute("INSERT INTO shared_log (tid, seq, kind, payload) VALUES (?, 0, 'tx', 'x')", (tid,))
        if tid % 2:
            shared.rollback()
        else:
            shared.commit()
        return not shared.in_transaction

    with ThreadPoolExecutor(max_workers=8) as pool:
        assert all(pool.map(worker, range(8), timeout=60))
    tids = sorted(r[0] for r in eng.get_shared_scope().query("SELECT tid FROM shared_log"))
    assert tids == [0, 2, 4, 6]


def test_refusals_hold_while_other_threads_run_ddl(eng: DynamicMemoryEngine) -> None:
    """The authorizer's per-statement state (DDL bookkeeping allowances) never leaks to another
    thread: attacks on catalogs and private tables stay refused while DDL runs beside them."""
    barrier = threading.Barrier(THREADS)
    attacks = [
        "SELECT name, sql FROM sqlite_master",
        "SELECT * FROM private_w0_log",
        "INSERT INTO shared_log (tid, seq, kind, payload) SELECT 0, 0, 'x', name FROM sqlite_schema",
        "CREATE TABLE shared_stolen AS SELECT * FROM sqlite_master",
    ]

    def ddl(tid: int) -> int:
        shared = eng.get_shared_scope()
        barrier.wait(timeout=10)
        for k in range(6):
            shared.execute(f"CREATE TABLE shared_t{tid}_{k} (id INTEGER PRIMARY KEY, v TEXT)")
            shared.execute(f"CREATE INDEX shared_t{tid}_{k}_v ON shared_t{tid}_{k}(v)")
            shared.execute(f"ALTER TABLE shared_t{tid}_{k} ADD COLUMN updated_at REAL")
            shared.execute(f"CREATE TABLE shared_c{tid}_{k} AS SELECT * FROM shared_t{tid}_{k}")
        return 0

    def attack(tid: int) -> int:
        shared = eng.get_shared_scope()
        barrier.wait(timeout=10)
        refused = 0
        for _ in range(12):
            for sql in attacks:
                with pytest.raises(ScopeViolation):
                    shared.execute(sql)
                refused += 1
        return refused

    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        futures = [pool.submit(ddl if t % 2 == 0 else attack, t) for t in range(THREADS)]
        results = [f.result(timeout=60) for f in futures]
    assert sum(results) == (THREADS // 2) * 12 * len(attacks)
    tables = eng.get_shared_scope().list_tables()
    assert "shared_stolen" not in tables
    made = {f"shared_{p}{t}_{k}" for p in "tc" for t in range(0, THREADS, 2) for k in range(6)}
    assert made <= set(tables)
    assert eng.get_shared_scope().query("SELECT count(*) FROM shared_log") == [(0,)]


# -- a begin() on one thread never captures another thread's statements --------------------------------


def test_begin_on_one_thread_does_not_capture_another_threads_write(eng: DynamicMemoryEngine) -> None:
    shared = eng.get_shared_scope()
    a_ready, release, b_started, b_done = (threading.Event() for _ in range(4))
    errors: list[BaseException] = []

    def thread_a() -> None:
        try:
            shared.begin()
            shared.execute("INSERT INTO shared_log (tid, seq, kind, payload) VALUES (1, 0, 'tx', 'A')")
            a_ready.set()
            assert release.wait(timeout=20)
            assert shared.in_transaction
            shared.rollback()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
            a_ready.set()

    def thread_b() -> None:
        try:
            assert a_ready.wait(timeout=20)
            assert not shared.in_transaction  # A's transaction is not this thread's
            b_started.set()
            # Autocommit write: waits for A's write lock (busy timeout), then commits on its own.
            shared.execute("INSERT INTO shared_log (tid, seq, kind, payload) VALUES (2, 0, 'auto', 'B')")
            assert not shared.in_transaction
            b_done.set()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
            b_started.set()

    ta = threading.Thread(target=thread_a)
    tb = threading.Thread(target=thread_b)
    ta.start()
    tb.start()
    assert b_started.wait(timeout=20)
    time.sleep(0.3)
    assert not b_done.is_set(), "B wrote while A held the write lock: B's statement joined A's transaction?"
    release.set()
    ta.join(timeout=20)
    tb.join(timeout=20)
    assert not ta.is_alive() and not tb.is_alive()
    assert not errors, errors
    assert b_done.is_set()
    # A rolled back: its row is gone. B committed on its own: its row survived.
    assert shared.query("SELECT payload FROM shared_log") == [("B",)]
    assert not shared.in_transaction


def test_reader_on_another_thread_does_not_see_uncommitted_rows(eng: DynamicMemoryEngine) -> None:
    shared = eng.get_shared_scope()
    seen: list[object] = []

    def reader() -> None:
        seen.append(shared.in_transaction)
        seen.append(shared.query("SELECT count(*) FROM shared_log")[0][0])

    shared.begin()
    shared.execute("INSERT INTO shared_log (tid, seq, kind, payload) VALUES (1, 0, 'tx', 'uncommitted')")
    t = threading.Thread(target=reader)
    t.start()
    t.join(timeout=10)
    assert seen == [False, 0]
    assert shared.query("SELECT count(*) FROM shared_log") == [(1,)]
    shared.commit()
    seen.clear()
    t = threading.Thread(target=reader)
    t.start()
    t.join(timeout=10)
    assert seen == [False, 1]


# -- transaction API contract -------------------------------------------------------------------------


def test_transaction_context_manager_commits_or_rolls_back(eng: DynamicMemoryEngine) -> None:
    shared = eng.get_shared_scope()
    with shared.transaction() as tx:
        assert tx is shared
        assert shared.in_transaction
        shared.execute("INSERT INTO shared_log (tid, seq, kind, payload) VALUES (1, 0, 'tx', 'kept')")
    assert not shared.in_transaction
    with pytest.raises(Boom), shared.transaction():
        shared.execute("INSERT INTO shared_log (tid, seq, kind, payload) VALUES (1, 1, 'tx', 'gone')")
        shared.execute("UPDATE shared_log SET payload = 'changed' WHERE payload = 'kept'")
        raise Boom
    assert not shared.in_transaction
    assert shared.query("SELECT payload FROM shared_log") == [("kept",)]
    # a refused statement inside the block propagates and rolls back the block
    with pytest.raises(ScopeViolation), shared.transaction():
        shared.execute("INSERT INTO shared_log (tid, seq, kind, payload) VALUES (1, 2, 'tx', 'gone too')")
        shared.execute("SELECT * FROM private_w0_log")
    assert shared.query("SELECT payload FROM shared_log") == [("kept",)]


def test_transaction_calls_out_of_order(eng: DynamicMemoryEngine) -> None:
    shared = eng.get_shared_scope()
    private = eng.get_private_scope("w0")
    with pytest.raises(TransactionError):
        shared.commit()
    with pytest.raises(TransactionError):
        private.commit()
    shared.rollback()  # no-op when nothing is open
    assert not shared.in_transaction
    shared.begin()
    shared.execute("INSERT INTO shared_log (tid, seq, kind, payload) VALUES (1, 0, 'tx', 'first')")
    with pytest.raises(TransactionError):
        shared.begin()
    # the open transaction survived the refused begin()
    assert shared.in_transaction
    shared.execute("INSERT INTO shared_log (tid, seq, kind, payload) VALUES (1, 1, 'tx', 'second')")
    shared.commit()
    with pytest.raises(TransactionError):
        shared.commit()
    assert [r[0] for r in shared.query("SELECT payload FROM shared_log ORDER BY seq")] == ["first", "second"]
    # nested transaction() is begin twice as well
    with shared.transaction():
        with pytest.raises(TransactionError), shared.transaction():
            pass  # pragma: no cover
        # the inner failure must not have ended the outer transaction
        assert shared.in_transaction
    assert not shared.in_transaction


@pytest.mark.parametrize(
    ("holder", "other", "sql"),
    [
        ("shared", "w0", "INSERT INTO private_w0_log (tid, seq, payload) VALUES (1, 0, 'x')"),
        ("w0", "shared", "INSERT INTO shared_log (tid, seq, kind, payload) VALUES (1, 0, 'auto', 'x')"),
        ("w0", "w1", "UPDATE private_w1_log SET payload = 'x'"),
        ("w1", "shared", "CREATE TABLE shared_new (x)"),
        ("shared", "w2", "ALTER TABLE private_w2_log ADD COLUMN extra TEXT"),
        ("shared", "w3", "CREATE INDEX private_w3_log_tid ON private_w3_log(tid)"),
        ("w2", "w3", "DELETE FROM private_w3_log"),
    ],
    ids=[
        "shared-then-private",
        "private-then-shared",
        "private-then-private",
        "ddl-create",
        "ddl-add-column",
        "ddl-create-index",
        "delete",
    ],
)
def test_write_through_other_scope_during_transaction_fails_fast(
    eng: DynamicMemoryEngine, holder: str, other: str, sql: str
) -> None:
    def scope(name: str) -> MemoryScope:
        return eng.get_shared_scope() if name == "shared" else eng.get_private_scope(name)

    held, other_scope = scope(holder), scope(other)
    own_insert = (
        "INSERT INTO shared_log (tid, seq, kind, payload) VALUES (9, 9, 'tx', 'held')"
        if holder == "shared"
        else f"INSERT INTO private_{holder}_log (tid, seq, payload) VALUES (9, 9, 'held')"
    )
    held.begin()
    held.execute(own_insert)
    start = time.monotonic()
    with pytest.raises(TransactionError):
        other_scope.execute(sql)
    assert time.monotonic() - start < 2.0, "waited on this thread's own lock"
    with pytest.raises(TransactionError):
        other_scope.begin()
    other_insert = (
        "INSERT INTO shared_log (tid, seq, kind, payload) VALUES (?, 0, 'auto', 'x')"
        if other == "shared"
        else f"INSERT INTO private_{other}_log (tid, seq, payload) VALUES (?, 0, 'x')"
    )
    with pytest.raises(TransactionError):
        other_scope.executemany(other_insert, [(1,), (2,)])
    assert time.monotonic() - start < 3.0
    # reading through the other scope does not need the write lock
    other_table = "shared_log" if other == "shared" else f"private_{other}_log"
    assert other_scope.query(f"SELECT count(*) FROM {other_table}") == [(0,)]
    # the held transaction is intact and commits
    assert held.in_transaction
    held.commit()
    # now the other scope may write
    other_scope.execute(sql)
    held_table = "shared_log" if holder == "shared" else f"private_{holder}_log"
    assert held.query(f"SELECT payload FROM {held_table} WHERE tid = 9") == [("held",)]


# -- several processes --------------------------------------------------------------------------------

PROCESSES = 3
ROWS_PER_PROCESS = 150

# Run in spawned interpreters through exec(), so that the child never has to import this test
# module (which works whatever import mode pytest uses).
_WORKER = r"""
import os, time
from engramdb import DynamicMemoryEngine


deadline = time.monotonic() + 30
while not os.path.exists(GO) and time.monotonic() < deadline:
    time.sleep(0.005)
engine = DynamicMemoryEngine(PATH, busy_timeout=30.0)
try:
    shared = engine.get_shared_scope()
    half = ROWS // 2
    for seq in range(half):
        shared.execute(
            "INSERT INTO shared_log (tid, seq, kind, payload) VALUES (?, ?, 'auto', ?)", (TAG, seq, f"p{TAG}s{seq}")
        )
    for start in range(half, ROWS, 25):
        with shared.transaction():
            for seq in range(start, min(start + 25, ROWS)):
                shared.execute(
                    "INSERT INTO shared_log (tid, seq, kind, payload) VALUES (?, ?, 'tx', ?)", (TAG, seq, f"p{TAG}s{seq}")
                )
            shared.execute("UPDATE shared_counter SET n = n + ? WHERE name = 'total'", (min(start + 25, ROWS) - start,))
finally:
    engine.close()
"""


def test_processes_insert_into_one_shared_table(eng: DynamicMemoryEngine, tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    go = tmp_path / "go"
    procs = [
        ctx.Process(
            target=exec,
            args=(_WORKER, {"PATH": str(eng.path), "GO": str(go), "TAG": 100 + k, "ROWS": ROWS_PER_PROCESS}),
        )
        for k in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    # This process writes too while the children run.
    shared = eng.get_shared_scope()
    go.touch()
    for seq in range(50):
        shared.execute("INSERT INTO shared_log (tid, seq, kind, payload) VALUES (0, ?, 'auto', 'parent')", (seq,))
    for p in procs:
        p.join(timeout=60)
    for p in procs:
        if p.is_alive():  # pragma: no cover - only on a hang
            p.kill()
            p.join()
    assert [p.exitcode for p in procs] == [0] * PROCESSES, "a worker process failed (see its stderr)"

    rows = shared.query("SELECT tid, seq, payload FROM shared_log WHERE tid >= 100")
    assert len(rows) == PROCESSES * ROWS_PER_PROCESS
    assert set(rows) == {(100 + k, s, f"p{100 + k}s{s}") for k in range(PROCESSES) for s in range(ROWS_PER_PROCESS)}
    assert shared.query("SELECT count(*) FROM shared_log WHERE tid = 0") == [(50,)]
    half = ROWS_PER_PROCESS - ROWS_PER_PROCESS // 2
    assert shared.query("SELECT n FROM shared_counter") == [(PROCESSES * half,)]
