"""The SQLite authorizer policy of one namespace: deny by default.

SQLite calls `Policy.authorize` for every action while it *prepares* a statement, naming the real
tables and columns after quoting, case, views, CTEs and subqueries are resolved. The policy allows:

- reads, inserts, updates and deletes of the namespace's own tables in ``main``;
- the schema bookkeeping that a safelisted DDL statement makes (``sqlite_master`` writes for
  CREATE TABLE / CREATE INDEX / ADD COLUMN), and nothing of ``sqlite_master`` otherwise;
- functions on an allowlist, ``SELECT`` and ``WITH RECURSIVE``, and the table-valued JSON functions;
- transaction control only while the engine itself runs it (`trusted`).

Everything else is denied: other namespaces, engine tables (``engram_*``), catalogs, ``pragma_*``
and ``dbstat``, temp objects, views, triggers, virtual tables, ATTACH, PRAGMA, VACUUM, ANALYZE.
A denial records a fixed, rule-level reason; it never echoes the name SQLite resolved, since that
would reveal whether (and how) a foreign object exists.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from engramdb.scopes.classify import Kind
from engramdb.scopes.namespace import RESERVED_PREFIXES, Namespace, ascii_lower

# Action codes from sqlite3.h (the module exposes them, but the numbers keep the table readable).
_CREATE_INDEX, _CREATE_TABLE, _DELETE, _INSERT, _PRAGMA, _READ, _SELECT = 1, 2, 9, 18, 19, 20, 21
_TRANSACTION, _UPDATE, _ALTER_TABLE, _REINDEX, _FUNCTION, _SAVEPOINT, _RECURSIVE = 22, 23, 26, 27, 31, 32, 33

_OK, _DENY = sqlite3.SQLITE_OK, sqlite3.SQLITE_DENY

_SCHEMA_TABLES = frozenset({"sqlite_master", "sqlite_schema"})
_TABLE_VALUED = frozenset({"json_each", "json_tree"})

#: Scalar, aggregate, window, date and JSON functions a scope may call. Absent on purpose:
#: load_extension, fts3_tokenizer, sqlite_compileoption_*, sqlite_offset, and anything unknown.
ALLOWED_FUNCTIONS = frozenset(
    [
        "abs",
        "avg",
        "changes",
        "char",
        "coalesce",
        "concat",
        "concat_ws",
        "count",
        "date",
        "datetime",
        "format",
        "glob",
        "group_concat",
        "hex",
        "ifnull",
        "iif",
        "instr",
        "julianday",
        "last_insert_rowid",
        "length",
        "like",
        "likelihood",
        "likely",
        "lower",
        "ltrim",
        "max",
        "min",
        "nullif",
        "octet_length",
        "printf",
        "quote",
        "random",
        "randomblob",
        "replace",
        "round",
        "rtrim",
        "sign",
        "soundex",
        "sqlite_version",
        "strftime",
        "string_agg",
        "substr",
        "substring",
        "sum",
        "time",
        "total",
        "total_changes",
        "trim",
        "typeof",
        "unhex",
        "unicode",
        "unixepoch",
        "unlikely",
        "upper",
        "zeroblob",
        "row_number",
        "rank",
        "dense_rank",
        "percent_rank",
        "cume_dist",
        "ntile",
        "lag",
        "lead",
        "first_value",
        "last_value",
        "nth_value",
        "acos",
        "acosh",
        "asin",
        "asinh",
        "atan",
        "atan2",
        "atanh",
        "ceil",
        "ceiling",
        "cos",
        "cosh",
        "degrees",
        "exp",
        "floor",
        "ln",
        "log",
        "log10",
        "log2",
        "mod",
        "pi",
        "pow",
        "power",
        "radians",
        "sin",
        "sinh",
        "sqrt",
        "tan",
        "tanh",
        "trunc",
        "json",
        "json_array",
        "json_array_length",
        "json_error_position",
        "json_extract",
        "json_group_array",
        "json_group_object",
        "json_insert",
        "json_object",
        "json_patch",
        "json_quote",
        "json_remove",
        "json_replace",
        "json_set",
        "json_type",
        "json_valid",
        "jsonb",
        "jsonb_array",
        "jsonb_extract",
        "jsonb_insert",
        "jsonb_object",
        "jsonb_patch",
        "jsonb_remove",
        "jsonb_replace",
        "jsonb_set",
        "jsonb_group_array",
        "jsonb_group_object",
    ]
)


class Policy:
    """Authorizer state for one connection of one namespace.

    The engine sets `statement` before each prepare and reads `denial` after a refusal. One
    connection serves one thread, so this state is never shared between threads.
    """

    def __init__(self, namespace: Namespace, table_exists: Callable[[str], bool]) -> None:
        self.namespace = namespace
        self._table_exists = table_exists
        self.statement: Kind = Kind.READ
        self.trusted = False
        self.denial: str | None = None
        #: set by a guarded function (printf) that refused an oversized result
        self.limit: str | None = None
        self._schema_written = False

    def begin(self, kind: Kind) -> None:
        self.statement = kind
        self.denial = None
        self.limit = None
        self._schema_written = False

    def _deny(self, reason: str) -> int:
        if self.denial is None:
            self.denial = reason
        return _DENY

    def authorize(self, action: int, arg1: str | None, arg2: str | None, db: str | None, _source: str | None) -> int:
        if self.trusted:
            return _OK
        ns = self.namespace
        kind = self.statement
        if action in (_SELECT, _RECURSIVE):
            # Only CREATE TABLE … AS SELECT may carry a query among the DDL forms; a SELECT inside
            # any other DDL would be a way around the bookkeeping exemption below.
            # (ADD COLUMN with a CHECK makes SQLite verify the table's rows with its own query.)
            if kind.is_ddl and kind not in (Kind.CREATE_TABLE_AS, Kind.ADD_COLUMN):
                return self._deny("a schema statement may not contain a query")
            return _OK
        if action == _FUNCTION:
            if arg2 is not None and ascii_lower(arg2) in ALLOWED_FUNCTIONS:
                return _OK
            return self._deny(f"function {arg2}() is not on the allowlist of functions a scope may call")
        if db not in ("main", None):
            return self._deny(f"{ns.rule()}; other schemas (temp, attached) are not reachable")
        if action in (_READ, _INSERT, _UPDATE, _DELETE):
            table = arg1 or ""
            if ns.owns(table):
                return _OK
            if action == _READ and ascii_lower(table) in _TABLE_VALUED:
                return _OK
            if action == _READ and kind is Kind.ADD_COLUMN and table == "pragma_quick_check":
                return _OK
            if action == _READ and db is None and arg2 == "" and self._is_derived(table):
                return _OK
            if ascii_lower(table) in _SCHEMA_TABLES and kind.is_ddl:
                return self._schema_bookkeeping(action, arg2)
            return self._deny(ns.rule())
        if action == _CREATE_TABLE:
            if kind in (Kind.CREATE_TABLE, Kind.CREATE_TABLE_AS) and ns.owns(arg1):
                return _OK
            return self._deny(ns.rule())
        if action == _CREATE_INDEX:
            if kind is Kind.CREATE_INDEX and ns.owns(arg2) and arg1 is not None and ns.may_name_index(arg1):
                return _OK
            # PRIMARY KEY and UNIQUE constraints make SQLite create sqlite_autoindex_<table>_<n>.
            if (
                kind in (Kind.CREATE_TABLE, Kind.CREATE_TABLE_AS)
                and arg2 is not None
                and ns.owns(arg2)
                and arg1 is not None
                and arg1.startswith(f"sqlite_autoindex_{arg2}_")
            ):
                return _OK
            return self._deny(ns.rule())
        if action == _REINDEX:
            # CREATE INDEX fills the new index through an internal REINDEX of that index only.
            if kind is Kind.CREATE_INDEX and arg1 is not None and ns.may_name_index(arg1):
                return _OK
            return self._deny("REINDEX is not permitted by the DDL safelist")
        if action == _ALTER_TABLE:
            # For ALTER the database name comes first and the table second.
            if kind is Kind.ADD_COLUMN and arg1 == "main" and ns.owns(arg2):
                return _OK
            return self._deny(ns.rule())
        if action in (_TRANSACTION, _SAVEPOINT):
            return self._deny("transaction control goes through scope.begin(), commit() and rollback()")
        if action == _PRAGMA:
            if kind is Kind.ADD_COLUMN and arg1 == "quick_check" and ns.owns(arg2):
                return _OK  # SQLite's own check of the altered table's rows against a new CHECK
            return self._deny("PRAGMA statements and pragma functions are not allowed through a memory scope")
        return self._deny("this kind of statement is not allowed through a memory scope")

    def _is_derived(self, name: str) -> bool:
        """``count(*)`` over a CTE or subquery reports a READ of its alias, with no database and
        no column, exactly as it does for a real table. An alias is allowed when it cannot be a
        real table outside the namespace: no namespace or reserved prefix (judged by name alone,
        so the answer never depends on whether a foreign table exists) and no such table."""
        if ascii_lower(name).startswith(RESERVED_PREFIXES):
            return False
        return not self._table_exists(name)

    def _schema_bookkeeping(self, action: int, column: str | None) -> int:
        """Allow the ``sqlite_master`` accesses that SQLite makes on behalf of safelisted DDL.

        CREATE TABLE … AS SELECT is the one DDL form that carries a user SELECT, and that SELECT is
        prepared before SQLite's own bookkeeping. So for it, reading ``sqlite_master`` is allowed
        only after SQLite has started writing it, and only its rowid.
        """
        kind = self.statement
        if action in (_INSERT, _UPDATE):
            self._schema_written = self._schema_written or action == _UPDATE
            return _OK
        if action == _READ:
            if kind is not Kind.CREATE_TABLE_AS:
                return _OK
            if self._schema_written and column == "ROWID":
                return _OK
        return self._deny(self.namespace.rule())
