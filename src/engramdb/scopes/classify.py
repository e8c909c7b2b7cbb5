"""Classify one SQL statement before SQLite prepares it.

This module decides nothing about *which tables* a statement may touch: SQLite's authorizer does
that (see `Policy` in `engramdb/storage/sqlite/authorizer.py`). It only answers questions the authorizer cannot:

- is this exactly one statement (a trigger body holds ``;``, so triggers are classified first);
- which verb is it, and is that verb on the DDL safelist (``ALTER TABLE … ADD COLUMN`` and
  ``ALTER TABLE … RENAME`` look the same to the authorizer);
- what is the name of the object a ``CREATE`` makes, so that a name outside the namespace is refused
  before SQLite can answer "already exists" (which would reveal that the object exists).

The tokenizer knows SQLite's lexical rules: ``--`` and ``/* */`` comments, ``'strings'`` with
doubled quotes, identifiers quoted with ``"…"``, ``[…]`` or backticks, blobs ``x'..'``, and
parameters. It never rewrites SQL.
"""

from __future__ import annotations

import enum
import functools
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, replace

from engramdb.errors import ForbiddenDDLError, InvalidStatement, ScopeViolation


class TokenType(enum.Enum):
    WORD = "word"  # bare identifier or keyword
    QUOTED = "quoted"  # "ident", [ident], `ident`
    STRING = "string"  # 'text'
    NUMBER = "number"
    PARAM = "param"
    PUNCT = "punct"


@dataclass(frozen=True, slots=True)
class Token:
    type: TokenType
    text: str  # identifiers unquoted; keywords as written

    @property
    def upper(self) -> str:
        return self.text.upper() if self.type is TokenType.WORD else ""


_CLOSERS = {'"': '"', "`": "`", "[": "]"}


def tokenize(sql: str) -> Iterator[Token]:
    """Yield the tokens of `sql`, skipping white space and comments.

    Raises `InvalidStatement` for an unterminated string, quoted identifier or block comment.
    """
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c.isspace():
            i += 1
        elif c == "-" and sql.startswith("--", i):
            j = sql.find("\n", i)
            i = n if j < 0 else j + 1
        elif c == "/" and sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            if j < 0:
                raise InvalidStatement("unterminated /* comment */ in the SQL")
            i = j + 2
        elif c == "'" or ((c in "xX") and sql.startswith("'", i + 1)):
            start = i + (1 if c == "'" else 2)
            j = start
            while True:
                j = sql.find("'", j)
                if j < 0:
                    raise InvalidStatement("unterminated string literal in the SQL")
                if sql.startswith("''", j):
                    j += 2
                    continue
                break
            yield Token(TokenType.STRING, sql[start:j].replace("''", "'"))
            i = j + 1
        elif c in _CLOSERS:
            close = _CLOSERS[c]
            j = i + 1
            parts: list[str] = []
            while True:
                k = sql.find(close, j)
                if k < 0:
                    raise InvalidStatement(f"unterminated quoted identifier starting with {c}")
                parts.append(sql[j:k])
                # "" inside "…" and `` inside `…` stand for one quote; ] cannot be escaped.
                if close != "]" and sql.startswith(close * 2, k):
                    parts.append(close)
                    j = k + 2
                    continue
                break
            yield Token(TokenType.QUOTED, "".join(parts))
            i = k + 1
        elif c.isalpha() or c == "_" or ord(c) > 127:
            j = i + 1
            while j < n and (sql[j].isalnum() or sql[j] in "_$" or ord(sql[j]) > 127):
                j += 1
            yield Token(TokenType.WORD, sql[i:j])
            i = j
        elif c.isdigit() or (c == "." and i + 1 < n and sql[i + 1].isdigit()):
            j = i + 1
            while j < n and (sql[j].isalnum() or sql[j] == "."):
                j += 1
            yield Token(TokenType.NUMBER, sql[i:j])
            i = j
        elif c in "?:@$":
            j = i + 1
            while j < n and (sql[j].isalnum() or sql[j] == "_"):
                j += 1
            yield Token(TokenType.PARAM, sql[i:j])
            i = j
        else:
            yield Token(TokenType.PUNCT, c)
            i += 1


class Kind(enum.Enum):
    """What a statement does, as far as the scope's policy cares."""

    READ = "read"  # SELECT, VALUES, WITH … SELECT
    WRITE = "write"  # INSERT, REPLACE, UPDATE, DELETE (also behind WITH)
    CREATE_TABLE = "create table"
    CREATE_TABLE_AS = "create table as select"
    CREATE_INDEX = "create index"
    ADD_COLUMN = "alter table add column"

    @property
    def is_ddl(self) -> bool:
        return self in (Kind.CREATE_TABLE, Kind.CREATE_TABLE_AS, Kind.CREATE_INDEX, Kind.ADD_COLUMN)


@dataclass(frozen=True, slots=True)
class Statement:
    """One classified statement: its kind and, for DDL, the objects it names."""

    kind: Kind
    #: the table created, altered or indexed (DDL only)
    table: str | None = None
    #: the index created (CREATE INDEX only)
    index: str | None = None
    #: True when a failure could leave part of the statement applied (OR FAIL, OR ROLLBACK), so
    #: the call must run inside its own savepoint; SQLite's statement atomicity covers the rest.
    needs_savepoint: bool = False
    #: identifiers (not string literals) that carry a namespace or reserved prefix, ASCII-lowered
    reserved: frozenset[str] = frozenset()
    #: a write behind WITH, whose row count the driver does not report
    cte_write: bool = False
    #: precomputed from `kind` so the per-call path does no enum work
    is_ddl: bool = False
    writes: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_ddl", self.kind.is_ddl)
        object.__setattr__(self, "writes", self.kind is not Kind.READ)


_NOT_DDL = {
    "PRAGMA": "PRAGMA",
    "ATTACH": "ATTACH",
    "DETACH": "DETACH",
    "EXPLAIN": "EXPLAIN",
}
_TX = {"BEGIN", "COMMIT", "END", "ROLLBACK", "SAVEPOINT", "RELEASE"}
_FORBIDDEN_DDL_VERBS = {"DROP", "REINDEX", "VACUUM", "ANALYZE"}
_DML = {"INSERT": Kind.WRITE, "REPLACE": Kind.WRITE, "UPDATE": Kind.WRITE, "DELETE": Kind.WRITE}


def _forbidden(what: str) -> ForbiddenDDLError:
    return ForbiddenDDLError(
        f"{what} is not permitted by the DDL safelist (allowed: CREATE TABLE, CREATE INDEX, ALTER TABLE … ADD COLUMN)"
    )


def _name_after(tokens: list[Token], i: int) -> tuple[str | None, int]:
    """Read an object name (optionally ``schema.name``) at `i`; return (name, next index).

    A schema-qualified name is returned as ``schema.name`` so that the caller sees the schema.
    """
    if i >= len(tokens) or tokens[i].type not in (TokenType.WORD, TokenType.QUOTED, TokenType.STRING):
        return None, i
    name = tokens[i].text
    if i + 2 < len(tokens) and tokens[i + 1].text == "." and tokens[i + 1].type is TokenType.PUNCT:
        return f"{name}.{tokens[i + 2].text}", i + 3
    return name, i + 1


def _skip_if_not_exists(tokens: list[Token], i: int) -> int:
    words = [t.upper for t in tokens[i : i + 3]]
    return i + 3 if words == ["IF", "NOT", "EXISTS"] else i


def _refuse_partial_conflict_clauses(tokens: list[Token]) -> None:
    """A table-level ON CONFLICT FAIL or ROLLBACK would let a later plain INSERT keep partial writes
    or end the caller's transaction, which breaks the promise that a failed call changes nothing."""
    words = [t.upper for t in tokens]
    for k, w in enumerate(words[:-1]):
        if w == "CONFLICT" and words[k + 1] in ("FAIL", "ROLLBACK"):
            raise ForbiddenDDLError(
                f"ON CONFLICT {words[k + 1]} in a table definition is not permitted by the DDL safelist: "
                "use ABORT (the default), IGNORE or REPLACE, or write OR FAIL on the statement instead"
            )


def _classify_create(tokens: list[Token]) -> Statement:
    _refuse_partial_conflict_clauses(tokens)
    i = 1
    words = [t.upper for t in tokens]
    if i < len(words) and words[i] in ("TEMP", "TEMPORARY"):
        nxt = words[i + 1] if i + 1 < len(words) else ""
        raise _forbidden(f"CREATE TEMP {nxt}".strip())
    if i < len(words) and words[i] == "UNIQUE":
        i += 1
    what = words[i] if i < len(words) else ""
    if what in ("TABLE", "INDEX"):
        # `CREATE TABLE temp.x` is a temporary table under another spelling: outside the safelist
        # (the authorizer refuses temp objects in any case; this only makes it read as DDL).
        j = _skip_if_not_exists(tokens, i + 1)
        if (
            j + 1 < len(tokens)
            and tokens[j + 1].text == "."
            and tokens[j].text.strip('"`[]').upper() in ("TEMP", "TEMPORARY")
        ):
            raise _forbidden(f"CREATE {what} temp.…")
    if what == "TABLE":
        name, j = _name_after(tokens, _skip_if_not_exists(tokens, i + 1))
        if name is None:
            raise InvalidStatement("CREATE TABLE needs a table name")
        kind = Kind.CREATE_TABLE_AS if j < len(tokens) and words[j] == "AS" else Kind.CREATE_TABLE
        return Statement(kind, table=name)
    if what == "INDEX":
        index, j = _name_after(tokens, _skip_if_not_exists(tokens, i + 1))
        if index is None or j >= len(words) or words[j] != "ON":
            raise InvalidStatement("CREATE INDEX needs the form CREATE INDEX name ON table(columns)")
        table, _ = _name_after(tokens, j + 1)
        if table is None:
            raise InvalidStatement("CREATE INDEX needs a table after ON")
        return Statement(Kind.CREATE_INDEX, table=table, index=index)
    if what == "VIRTUAL":
        raise _forbidden("CREATE VIRTUAL TABLE")
    if what in ("VIEW", "TRIGGER"):
        raise _forbidden(f"CREATE {what}")
    raise _forbidden(f"CREATE {what}".strip())


def _classify_alter(tokens: list[Token]) -> Statement:
    words = [t.upper for t in tokens]
    if len(words) < 2 or words[1] != "TABLE":
        raise ForbiddenDDLError(
            "ALTER needs the form ALTER TABLE name ADD COLUMN …; only ADD COLUMN is permitted by the DDL safelist"
        )
    table, j = _name_after(tokens, 2)
    action = words[j] if j < len(words) else ""
    if action == "ADD":
        _refuse_partial_conflict_clauses(tokens)
        return Statement(Kind.ADD_COLUMN, table=table)
    if action == "RENAME":
        target = words[j + 1] if j + 1 < len(words) else ""
        if target == "TO":
            raise _forbidden("ALTER TABLE … RENAME TO")
        raise _forbidden("ALTER TABLE … RENAME COLUMN")
    if action == "DROP":
        raise _forbidden("ALTER TABLE … DROP COLUMN")
    raise _forbidden(f"ALTER TABLE … {action}".strip())


#: Prefixes of names that belong to some namespace or to the engine or SQLite itself.
RESERVED_PREFIXES = ("shared_", "private_", "engram_", "sqlite_", "pragma_")
_RESERVED_NAMES = frozenset({"dbstat", "sqlite_master", "sqlite_schema", "sqlite_temp_master", "sqlite_sequence"})


def _reserved_names(tokens: list[Token]) -> frozenset[str]:
    """Identifiers shaped like another namespace's (or the engine's) objects.

    A scope refuses any it does not own by name alone, before SQLite resolves anything, so
    whether such an object exists never changes the answer ("no such column" vs "denied").
    """
    out = set()
    for t in tokens:
        if t.type in (TokenType.WORD, TokenType.QUOTED):
            name = t.text.encode("utf-8", "surrogatepass").lower().decode("utf-8", "surrogatepass")
            if name.startswith(RESERVED_PREFIXES) or name in _RESERVED_NAMES:
                out.add(name)
    return frozenset(out)


def _first_verb_after_with(tokens: list[Token]) -> Kind:
    """The statement kind behind a ``WITH`` clause: the first DML/SELECT keyword at depth 0."""
    depth = 0
    for t in tokens[1:]:
        if t.type is TokenType.PUNCT:
            if t.text == "(":
                depth += 1
            elif t.text == ")":
                depth -= 1
            continue
        if depth == 0 and t.type is TokenType.WORD:
            up = t.upper
            if up in _DML:
                return _DML[up]
            if up in ("SELECT", "VALUES"):
                return Kind.READ
    raise InvalidStatement("a WITH clause must be followed by SELECT, INSERT, UPDATE or DELETE")


def classify(sql: str) -> Statement:
    """Classify `sql`, which must be exactly one statement (cached: a pure function of the text).

    Raises `ForbiddenDDLError` for schema changes outside the safelist, `ScopeViolation` for
    statements a scope never runs (PRAGMA, ATTACH, transaction control, EXPLAIN), and
    `InvalidStatement` for empty input or more than one statement.
    """
    if not isinstance(sql, str):
        raise InvalidStatement(f"SQL must be a str, got {type(sql).__name__}")
    return _classify(sql)


@functools.lru_cache(maxsize=2048)
def _classify(sql: str) -> Statement:
    tokens = list(tokenize(sql))
    if not tokens or (len(tokens) == 1 and tokens[0].text == ";"):
        raise InvalidStatement("the SQL is empty: pass exactly one statement")
    first = tokens[0].upper
    # A trigger body holds ';' — refuse it as DDL before any one-statement check.
    if first == "CREATE":
        stmt_words = [t.upper for t in tokens[:4]]
        if "TRIGGER" in stmt_words:
            raise _forbidden("CREATE TRIGGER")
    semis = [k for k, t in enumerate(tokens) if t.type is TokenType.PUNCT and t.text == ";"]
    if semis:
        if semis[0] != len(tokens) - 1:
            raise InvalidStatement(
                "one statement per call: split the SQL into single statements and run each in a call of its own"
            )
        tokens = tokens[:-1]
    if first in _NOT_DDL:
        raise ScopeViolation(f"{_NOT_DDL[first]} statements are not allowed through a memory scope")
    if first in _TX:
        raise ScopeViolation(
            f"{first} is not allowed as SQL in a memory scope: "
            "use scope.begin(), scope.commit(), scope.rollback() or scope.transaction()"
        )
    if first in _FORBIDDEN_DDL_VERBS:
        obj = tokens[1].upper if first == "DROP" and len(tokens) > 1 else ""
        return_verb = f"{first} {obj}".strip()
        raise _forbidden(return_verb)
    if first == "CREATE":
        return replace(_classify_create(tokens), reserved=_reserved_names(tokens))
    if first == "ALTER":
        return replace(_classify_alter(tokens), reserved=_reserved_names(tokens))
    reserved = _reserved_names(tokens)
    if first in ("SELECT", "VALUES"):
        return Statement(Kind.READ, reserved=reserved)
    kind = _DML.get(first) or (_first_verb_after_with(tokens) if first == "WITH" else None)
    if kind is not None:
        words = [t.upper for t in tokens]
        if any(w == "OR" and nxt == "ROLLBACK" for w, nxt in itertools.pairwise(words)):
            raise ScopeViolation(
                "OR ROLLBACK is not allowed through a memory scope: it would end the caller's whole transaction; "
                "use OR ABORT (the default) or OR FAIL, and scope.rollback() to undo a transaction"
            )
        return Statement(
            kind,
            reserved=reserved,
            needs_savepoint="FAIL" in words and kind is Kind.WRITE,
            cte_write=first == "WITH" and kind is Kind.WRITE,
        )
    if tokens[0].type is TokenType.PUNCT and tokens[0].text == "(":
        return Statement(Kind.READ, reserved=reserved)  # (SELECT …) — SQLite rejects it, the error is SQLite's
    raise InvalidStatement(f"unrecognised statement starting with {tokens[0].text[:30]!r}")
