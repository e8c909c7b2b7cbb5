"""SQL text for PostgreSQL scopes: PostgreSQL's own tokenization of a statement (to check that it
reads the statement as the shared classifier does), and ``?`` / ``:name`` placeholders turned
into psycopg's form. Nothing here rewrites SQL beyond the placeholders."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import Any

from engramdb.errors import InvalidStatement, SqlError
from engramdb.scopes.classify import TokenType, tokenize
from engramdb.storage.ports import Params


def pg_lex(sql: str) -> Iterator[tuple[str, int, int]]:
    """(kind, start, end) spans of `sql` as PostgreSQL's lexer reads it; kinds: ``word``, ``param``
    (``?``), ``named`` (``:name``), ``semi``, ``other`` (strings, numbers, operators), and
    ``skip`` (comments, quoted identifiers: text that is never a keyword). Raises
    `InvalidStatement` for an unterminated string, identifier or comment."""
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c.isspace():
            i += 1
        elif sql.startswith("--", i):
            j = sql.find("\n", i)
            j = n if j < 0 else j + 1
            yield "skip", i, j
            i = j
        elif sql.startswith("/*", i):
            depth, j = 1, i + 2
            while depth:
                a, b = sql.find("/*", j), sql.find("*/", j)
                if b < 0:
                    raise InvalidStatement("unterminated /* comment */ in the SQL")
                if 0 <= a < b:
                    depth, j = depth + 1, a + 2
                else:
                    depth, j = depth - 1, b + 2
            yield "skip", i, j
            i = j
        elif c == "'" or (c in "eEbBxXnN" and sql.startswith("'", i + 1)) or sql[i : i + 3].upper() == "U&'":
            if c != "'":
                if c not in "xX":  # the classifier reads x'…' as one blob, and E, B, N, U as words
                    yield "word", i, i + 1
                i += 2 if sql[i + 1] == "&" else 1
            backslash = c in "eE"
            j = i + 1
            while True:
                if j >= n:
                    raise InvalidStatement("unterminated string literal in the SQL")
                ch = sql[j]
                if backslash and ch == "\\":
                    j += 2
                    continue
                if ch == "'":
                    if sql.startswith("''", j):
                        j += 2
                        continue
                    break
                j += 1
            yield "other", i, j + 1
            i = j + 1
        elif c == '"':
            j = i + 1
            while True:
                k = sql.find('"', j)
                if k < 0:
                    raise InvalidStatement('unterminated quoted identifier starting with "')
                if sql.startswith('""', k):
                    j = k + 2
                    continue
                break
            yield "skip", i, k + 1
            i = k + 1
        elif c == "$" and (tag := dollar_tag(sql, i)) is not None:
            k = sql.find(tag, i + len(tag))
            if k < 0:
                raise InvalidStatement("unterminated $$ string in the SQL")
            yield "other", i, k + len(tag)
            i = k + len(tag)
        elif c.isalpha() or c == "_" or ord(c) > 127:
            j = i + 1
            while j < n and (sql[j].isalnum() or sql[j] in "_$" or ord(sql[j]) > 127):
                j += 1
            # a type name glued to ``::`` is a parameter-like token to the classifier (``:int``)
            yield ("cast" if i >= 2 and sql[i - 2 : i] == "::" else "word"), i, j
            i = j
        elif c == "?":
            yield "param", i, i + 1
            i += 1
        elif (
            c == ":"
            and not sql.startswith("::", i)
            and (i == 0 or sql[i - 1] != ":")
            and i + 1 < n
            and (sql[i + 1].isalpha() or sql[i + 1] == "_")
        ):
            j = i + 2
            while j < n and (sql[j].isalnum() or sql[j] == "_"):
                j += 1
            yield "named", i, j
            i = j
        elif c.isdigit():
            j = i + 1
            while j < n and (sql[j].isalnum() or sql[j] in "._"):
                j += 1
            yield "other", i, j
            i = j
        elif c == ";":
            yield "semi", i, i + 1
            i += 1
        else:
            yield "other", i, i + 1
            i += 1


def dollar_tag(sql: str, i: int) -> str | None:
    """``$tag$`` at `i` (``$$`` or ``$name$``), or None (``$1`` is a parameter, not a quote)."""
    j = i + 1
    while j < len(sql) and (sql[j].isalnum() or sql[j] == "_"):
        j += 1
    if j < len(sql) and sql[j] == "$" and not sql[i + 1 : j][:1].isdigit():
        return sql[i : j + 1]
    return None


def lexers_agree(sql: str) -> bool:
    """The classifier's words and semicolons are PostgreSQL's, in the same order."""
    try:
        ours = [
            t.text if t.type is TokenType.WORD else ";"
            for t in tokenize(sql)
            if t.type is TokenType.WORD or (t.type is TokenType.PUNCT and t.text == ";")
        ]
        theirs = [sql[a:b] if kind == "word" else ";" for kind, a, b in pg_lex(sql) if kind in ("word", "semi")]
    except InvalidStatement:
        return False
    return ours == theirs


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def translate(sql: str, params: Params) -> tuple[str, Any]:
    """`sql` for psycopg with `params`: ``?`` → ``%s`` for a sequence, ``:name`` → ``%(name)s`` for
    a mapping, every ``%`` → ``%%``; nothing else changes."""
    named = isinstance(params, Mapping)
    if params is None:
        args: Any = ()
    elif named:
        args = dict(params)
    elif isinstance(params, (str, bytes)):
        raise SqlError("params must be a sequence or a mapping of values, not a single string")
    else:
        try:
            args = list(params)
        except TypeError:
            raise SqlError(f"params must be a sequence or a mapping of values, got {type(params).__name__}") from None
    for i, value in enumerate(args.values() if named else args):
        if isinstance(value, str) and not _encodable(value):
            raise SqlError(f"parameter {i + 1} is not valid text (a lone surrogate); nothing ran")
    if not _encodable(sql):
        raise SqlError("the SQL is not valid text (a lone surrogate); nothing ran")
    out: list[str] = []
    last = 0
    for kind, a, b in pg_lex(sql):
        if kind == "param" or (kind == "named" and named):
            out.append(sql[last:a].replace("%", "%%"))
            if kind == "param":
                if named:
                    raise SqlError("the SQL uses ? placeholders but the parameters are a mapping")
                out.append("%s")
            else:
                name = sql[a + 1 : b]
                if name not in args:
                    raise SqlError(f"no value for the parameter :{name}")
                out.append(f"%({name})s")
            last = b
    out.append(sql[last:].replace("%", "%%"))
    return "".join(out), args


def dollar_form(query: str, args: Any) -> str:
    """psycopg's form of `query` in the server's ``$n`` form, for a Describe (nothing is bound)."""
    counter = itertools.count(1)
    numbers: dict[str, int] = {}
    out: list[str] = []
    i, n = 0, len(query)
    while i < n:
        c = query[i]
        if c == "%" and query.startswith("%%", i):
            out.append("%")
            i += 2
        elif c == "%" and query.startswith("%s", i):
            out.append(f"${next(counter)}")
            i += 2
        elif c == "%" and query.startswith("%(", i):
            j = query.index(")s", i)
            name = query[i + 2 : j]
            if name not in numbers:
                numbers[name] = next(counter)
            out.append(f"${numbers[name]}")
            i = j + 2
        else:
            out.append(c)
            i += 1
    return "".join(out)
