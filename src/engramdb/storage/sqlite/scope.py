"""`SqliteScope`: raw SQL inside one table namespace, enforced by SQLite's authorizer.

A scope never rewrites SQL. It classifies the statement (one statement, DDL safelist), checks the
names a ``CREATE`` would make, and lets SQLite prepare it under the namespace's authorizer, which
refuses any table outside the namespace before a single row is touched.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from engramdb.errors import ResourceLimitExceeded, ScopeViolation, SqlError, ValidationError
from engramdb.scopes.classify import Kind, Statement, classify
from engramdb.scopes.namespace import Namespace
from engramdb.storage.ports import ExecResult, MemoryScope, Page, Params, Row, RowVectorStore
from engramdb.storage.sqlite.connection import (
    FIRST_CHUNK,
    Conn,
    SqliteStore,
    convert,
    fetch_capped,
    fetch_rest,
    translate,
)

if TYPE_CHECKING:
    from engramdb.embeddings.base import Embedder

#: how many SQL texts one scope remembers as admitted (see `SqliteScope._plain`)
_PLAIN_CACHE = 1024


#: builds an `ExecResult` from a tuple without the Python frame of NamedTuple's ``__new__``
_result: Callable[[type[ExecResult], tuple[int, int | None, list[Row]]], ExecResult] = tuple.__new__


def _bare(name: str | None) -> str | None:
    """``main.t`` → ``t``; other qualifiers are kept so the policy refuses them."""
    if name and name.lower().startswith("main."):
        return name[5:]
    return name


#: what a Python int past SQLite's 64-bit integers gets (the driver's own OverflowError says less)
_INT_RANGE = "a parameter is an integer outside SQLite's 64-bit range (-2**63 .. 2**63-1); pass it as a str or a float"
_NOT_UNICODE = "the SQL or a parameter holds a lone surrogate, which is not valid text; pass bytes for binary data"
#: what a statement can raise: the driver's errors, and the checks it makes while binding parameters
_DRIVER_ERRORS = (sqlite3.Error, OverflowError, UnicodeEncodeError)


class SqliteScope(MemoryScope):
    """Raw SQL over the tables of one namespace: ``shared_*`` or ``private_<agent>_*`` (the SQLite
    `engramdb.storage.ports.MemoryScope`).

    Example::

        shared = engine.get_shared_scope()
        shared.execute("CREATE TABLE IF NOT EXISTS shared_notes (id INTEGER PRIMARY KEY, content TEXT)")
        shared.execute("INSERT INTO shared_notes (content) VALUES (?)", ("Finding: X implies Y",))
        rows = shared.query("SELECT id, content FROM shared_notes")

    Safe to use from many threads: each thread has its own connection, and a transaction begun
    on a thread belongs to that thread alone.
    """

    def __init__(
        self,
        store: SqliteStore,
        namespace: Namespace,
        row_vectors: RowVectorStore,
        embedder: Callable[[], Embedder | None] = lambda: None,
    ) -> None:
        self._store = store
        self._row_vectors = row_vectors
        self._namespace = namespace
        self._embedder = embedder
        self._role = f"scope:{namespace.label}"
        self._timeout = store.settings.statement_timeout
        self._settings = store.settings
        #: SQL texts this scope has classified and whose names passed this namespace's check, for
        #: statements that run as one plain call (no DDL, no savepoint, no write behind WITH).
        #: A decision about the text alone, in this namespace alone: which connection runs it,
        #: and so what the authorizer allows, is still decided per thread on every call.
        self._plain: dict[str, Statement] = {}

    @property
    def namespace(self) -> Namespace:
        """The table namespace of this scope (fixed for its life)."""
        return self._namespace

    @property
    def store(self) -> SqliteStore:
        """The connections of the SQLite file (engine-internal; not a public API)."""
        return self._store

    @property
    def row_vectors(self) -> RowVectorStore:
        """Where retrievers keep row embeddings (engine-internal)."""
        return self._row_vectors

    @property
    def embedder(self) -> Embedder | None:
        """The engine's embedder, or None when embeddings are off."""
        return self._embedder()

    def _conn(self) -> Conn:
        return self._store.connection(self._role, self.namespace)

    # -- statements ---------------------------------------------------------------------------

    def execute(self, sql: str, params: Params = None) -> ExecResult:
        """Run one statement in this namespace; return rows changed, last rowid and any rows.

        Raises `ScopeViolation` or `ForbiddenDDLError` before anything executes when the
        statement reaches outside the namespace or the DDL safelist; a failed call changes nothing.
        """
        try:
            stmt = self._plain[sql]
        except (KeyError, TypeError):
            return self._execute(sql, params)
        # The hot path, kept flat: SQLite's statement atomicity is all a failed call needs, and the
        # authorizer of this thread's connection decides anything SQLite has to prepare anew.
        state = self._store.local.state
        conn = state.conns.get(self._role)
        if conn is None:
            return self._execute(sql, params)
        if stmt.writes:
            holder = state.holder
            if holder is not None and holder is not conn:
                self._store.check_write(conn)
        policy = conn.policy
        assert policy is not None
        policy.statement = stmt.kind
        policy.denial = None
        conn.started = None
        try:
            cur = conn.raw.execute(sql, () if params is None else params)
            # fetch_capped, inlined: the hot path pays one fetch for a short result
            rows = cur.fetchmany(FIRST_CHUNK) if cur.description is not None else []
            if len(rows) == FIRST_CHUNK:
                rows = fetch_rest(cur, rows, self._settings)
        except _DRIVER_ERRORS as exc:
            raise self._failure(exc, conn) from None
        return _result(ExecResult, (cur.rowcount, cur.lastrowid, rows))

    def _execute(self, sql: str, params: Params) -> ExecResult:
        """The first call with this SQL on this scope (or one that needs more than one statement's
        atomicity): classify, check names, remember the decision, run through `_run`."""
        stmt = classify(sql)
        if stmt.reserved:
            self._check_reserved(stmt)
        if not (stmt.is_ddl or stmt.needs_savepoint or stmt.cte_write) and type(sql) is str:
            # Only a decision of this scope's namespace about this exact text is kept; the
            # connection, and so the authorizer, is still looked up per thread on every call.
            plain = self._plain
            if len(plain) >= _PLAIN_CACHE:
                plain.clear()
            plain[sql] = stmt
        return self._run(sql, stmt, lambda raw: raw.execute(sql, () if params is None else params))

    def executemany(self, sql: str, seq_of_params: Iterable[Sequence[Any] | Mapping[str, Any]]) -> ExecResult:
        """Run one DML statement for each parameter set, all or nothing."""
        stmt = classify(sql)
        if stmt.kind is not Kind.WRITE:
            raise ScopeViolation("executemany() runs INSERT, REPLACE, UPDATE or DELETE statements only")
        if isinstance(seq_of_params, (str, bytes)) or not isinstance(seq_of_params, Iterable):
            raise SqlError(f"executemany() takes a list of parameter sets, got {type(seq_of_params).__name__}")
        if stmt.reserved:
            self._check_reserved(stmt)
        return self._run(sql, stmt, lambda raw: raw.executemany(sql, seq_of_params), many=True)

    def stream(self, sql: str, params: Params = None, *, batch: int = 256) -> Generator[list[Row], None, None]:
        """Run one read and yield its rows in batches, so a caller can stop reading early.

        The read holds its snapshot until the generator is exhausted or closed; close it (or
        use it in a ``for`` loop that ends) before writing on this scope from the same thread.
        """
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ValidationError(f"batch must be a whole number of rows, 1 or more, got {batch!r}")
        stmt = classify(sql)
        if stmt.kind is not Kind.READ:
            raise ScopeViolation("stream() runs SELECT statements only")
        if stmt.reserved:
            self._check_reserved(stmt)
        return self._stream(stmt, sql, params, batch)

    def _stream(self, stmt: Statement, sql: str, params: Params, batch: int) -> Generator[list[Row], None, None]:
        conn = self._conn()
        policy = conn.policy
        assert policy is not None
        policy.begin(stmt.kind)
        conn.started = None
        cur = None
        try:
            cur = conn.raw.execute(sql, () if params is None else params)
            while True:
                rows = cur.fetchmany(batch)
                if rows:
                    yield rows
                if len(rows) < batch:
                    return
        except _DRIVER_ERRORS as exc:
            raise self._failure(exc, conn) from None
        finally:
            if cur is not None:
                cur.close()

    def read_page(self, sql: str, params: Params = None, *, limit: int) -> Page:
        """Run one read; at most `limit` rows, their column names, and whether more were left."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValidationError(f"limit must be a whole number of rows, 1 or more, got {limit!r}")
        stmt = classify(sql)
        if stmt.kind is not Kind.READ:
            raise ScopeViolation("read_page() runs SELECT statements only")
        if stmt.reserved:
            self._check_reserved(stmt)
        conn = self._conn()
        policy = conn.policy
        assert policy is not None
        policy.begin(stmt.kind)
        conn.started = None
        cur = None
        try:
            cur = conn.raw.execute(sql, () if params is None else params)
            columns = tuple(d[0] for d in cur.description or ())
            rows = cur.fetchmany(limit + 1)
        except _DRIVER_ERRORS as exc:
            raise self._failure(exc, conn) from None
        finally:
            if cur is not None:
                cur.close()
        return Page(columns, rows[:limit], len(rows) > limit)

    def query(self, sql: str, params: Params = None) -> list[Row]:
        """Run one statement and return its rows as tuples (``for a, b in scope.query(...)``)."""
        try:
            stmt = self._plain[sql]
        except (KeyError, TypeError):
            return self.execute(sql, params).rows
        conn = self._store.local.state.conns.get(self._role)
        if conn is None or stmt.writes:
            return self.execute(sql, params).rows
        # The read hot path: no write checks, no savepoint, no ExecResult.
        policy = conn.policy
        assert policy is not None
        policy.statement = stmt.kind
        policy.denial = None
        conn.started = None
        try:
            cur = conn.raw.execute(sql, () if params is None else params)
            rows = cur.fetchmany(FIRST_CHUNK) if cur.description is not None else []
            return rows if len(rows) < FIRST_CHUNK else fetch_rest(cur, rows, self._settings)
        except _DRIVER_ERRORS as exc:
            raise self._failure(exc, conn) from None

    def _check_reserved(self, stmt: Statement) -> None:
        """Names with another namespace's (or a reserved) prefix are refused by name alone."""
        if any(not self.namespace.owns(name) for name in stmt.reserved):
            raise ScopeViolation(
                f"{self.namespace.rule()}; names with another namespace's or a reserved prefix "
                "(shared_, private_, engram_, sqlite_, pragma_) cannot appear in this scope's SQL"
            )

    def _precheck(self, sql: str, stmt: Statement) -> None:
        """Refuse DDL names outside the namespace before SQLite can say "already exists"."""
        ns = self.namespace
        if not stmt.kind.is_ddl:
            return
        table = _bare(stmt.table)
        if table is None or not ns.owns(table):
            raise ScopeViolation(ns.rule())
        if stmt.kind is Kind.CREATE_INDEX:
            index = _bare(stmt.index)
            if index is None or not ns.may_name_index(index):
                raise ScopeViolation(
                    f"index names in scope '{ns.label}' must start with {ns.prefix}"
                    + (" or be unprefixed names outside other namespaces" if ns.prefix == "shared_" else "")
                    + " (index names share one database-wide namespace)"
                )

    def _run(self, sql: str, stmt: Statement, run: Any, *, many: bool = False) -> ExecResult:
        store = self._store
        conn = self._conn()
        policy = conn.policy
        assert policy is not None
        if stmt.is_ddl:
            self._precheck(sql, stmt)
        if stmt.writes and store.holder is not None:
            store.check_write(conn)
        policy.begin(stmt.kind)
        conn.started = None
        if not (stmt.is_ddl or stmt.needs_savepoint or many):
            # SQLite's statement atomicity is all a failed call needs here.
            before = conn.raw.total_changes
            try:
                cur = run(conn.raw)
                rows = fetch_capped(cur, self._settings)
            except _DRIVER_ERRORS as exc:
                raise self._failure(exc, conn) from None
            # The driver reports no row count for a write behind WITH; the connection knows it.
            rowcount = conn.raw.total_changes - before if stmt.cte_write else cur.rowcount
            return ExecResult(rowcount, cur.lastrowid, rows)
        with store.atomic(conn):
            before = conn.raw.total_changes
            try:
                cur = run(conn.raw)
                rows = fetch_capped(cur, self._settings)
            except _DRIVER_ERRORS as exc:
                raise self._failure(exc, conn) from None
            if stmt.is_ddl:
                self._check_foreign_keys(conn, stmt)
                self._check_defaults(conn, stmt)
        rowcount = conn.raw.total_changes - before if stmt.cte_write else cur.rowcount
        return ExecResult(rowcount, cur.lastrowid, rows)

    def _failure(self, exc: Exception, conn: Conn) -> Exception:
        # The driver's own checks while binding, before SQLite ran anything:
        if isinstance(exc, OverflowError):
            return SqlError(_INT_RANGE)
        if isinstance(exc, UnicodeEncodeError):
            return SqlError(_NOT_UNICODE)
        assert isinstance(exc, sqlite3.Error)
        err = convert(exc, conn)
        # An interrupted write makes SQLite roll back the whole transaction: say so.
        if isinstance(err, ResourceLimitExceeded) and self._store.last_holder is conn and not conn.raw.in_transaction:
            return ResourceLimitExceeded(
                f"{err}; SQLite rolled back this thread's whole open transaction, as it does for an interrupted write"
            )
        return err

    def _check_defaults(self, conn: Conn, stmt: Statement) -> None:
        """Column DEFAULTs are compiled into later INSERTs and never shown to the authorizer, so each
        one is prepared here, under this scope's policy, as ``SELECT (<default>) WHERE 0``:
        SQLite itself reports every function the expression calls, and nothing is evaluated."""
        if stmt.kind not in (Kind.CREATE_TABLE, Kind.ADD_COLUMN):
            return
        table = _bare(stmt.table)
        with conn.trusted() as raw, translate(conn):
            defaults = [
                str(r[0])
                for r in raw.execute(
                    "SELECT dflt_value FROM pragma_table_xinfo(?) WHERE dflt_value IS NOT NULL", (table,)
                )
            ]
        policy = conn.policy
        assert policy is not None
        for expr in defaults:
            policy.begin(Kind.READ)
            try:
                conn.raw.execute(f"SELECT ({expr}) WHERE 0").fetchall()
            except _DRIVER_ERRORS as exc:
                raise self._failure(exc, conn) from None
            finally:
                policy.begin(stmt.kind)

    def _check_foreign_keys(self, conn: Conn, stmt: Statement) -> None:
        """A foreign key into another namespace would let this scope probe its rows."""
        table = _bare(stmt.table)
        with conn.trusted() as raw, translate(conn):
            refs = raw.execute('SELECT DISTINCT "table" FROM pragma_foreign_key_list(?)', (table,)).fetchall()
        if any(not self.namespace.owns(str(r[0])) for r in refs):
            raise ScopeViolation(
                f"{self.namespace.rule()}; foreign keys may only reference tables of the same namespace"
            )

    # -- transactions -------------------------------------------------------------------------

    def begin(self) -> None:
        """Open a transaction for this thread on this scope (``BEGIN IMMEDIATE``)."""
        self._store.begin(self._conn())

    def commit(self) -> None:
        """Commit this thread's open transaction on this scope."""
        self._store.commit(self._conn())

    def rollback(self) -> None:
        """Roll back this thread's open transaction on this scope; a no-op when none is open."""
        self._store.rollback(self._conn())

    @property
    def in_transaction(self) -> bool:
        """True while this thread has a transaction open on this scope."""
        return self._conn().in_transaction

    # -- catalog ------------------------------------------------------------------------------

    def list_tables(self) -> list[str]:
        """The tables of this namespace only, sorted by name."""
        return [name for name in self._store.table_names() if self.namespace.owns(name)]

    def row_key(self, table: str) -> str:
        """``rowid`` (a WITHOUT ROWID table has none, and reading it says so: "no such column: rowid")."""
        self.columns(table)  # the same "no such table" for a missing or foreign table
        return "rowid"

    def columns(self, table: str) -> list[str]:
        """The column names of this namespace's `table`, in order; `SqlError` when there is no such
        table (said alike for a foreign table, which this scope may not read)."""
        rows: list[Any] = []
        if self.namespace.owns(table):
            conn = self._store.connection("engine")
            with translate(conn):
                rows = conn.raw.execute("SELECT name FROM pragma_table_info(?)", (table,)).fetchall()
        if not rows:
            raise SqlError(f"no such table: {table}")
        return [str(r[0]) for r in rows]
