"""The SQL examples of the README and the docs run as written on the backend under test.

``pytest tests/integration/test_doc_examples.py`` runs them on SQLite, ``--backend=postgres`` on
PostgreSQL. An example is a statement with its literal parameters, found by reading the docs:

- in a ```` ```sql ```` block, each statement ending in ``;`` at the end of a line, run in the
  shared scope (the docs' SQL names ``shared_*`` tables);
- in a ```` ```python ```` block, the literal SQL of ``<scope>.execute(…)`` / ``.query(…)``,
  ``memory_schema(sql, ctx=<scope>)`` and ``<box>.call("memory_sql" | "memory_schema", {"sql": …})``,
  run in the scope the example names (``shared``, ``engine.get_private_scope("writer")``, an agent's
  tool box: the scope whose names the statement uses). An example inside ``try: … except
  ScopeViolation`` must raise that error, on every backend.

Examples run in document order, on one store per document (a Python block that makes its own
engine gets a fresh store). A block the doc marks ``<!-- sqlite-only -->`` or ``<!-- postgres-only
-->`` (the line before its fence) runs on its backend; on the other, each of its statements must
fail with an engramdb caller error (`SqlError`, `ScopeViolation`), never a driver exception or a
silent success.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import engramdb
from engramdb import DynamicMemoryEngine
from engramdb.errors import CallerError, EngramError, ScopeViolation, SqlError
from engramdb.scopes.classify import classify
from engramdb.storage.ports import MemoryScope
from engramdb.tools.sql import pick_scope

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "docs/interfaces.md", "docs/tools.md", "docs/sql-dialects.md")

#: a fenced block, with the backend mark on the line before it if there is one
_BLOCK = re.compile(r"(?:<!--\s*(sqlite|postgres)-only\s*-->[ \t]*\n)?^```(python|sql)[ \t]*\n(.*?)^```", re.M | re.S)

#: Statements of the README that fail on PostgreSQL today, with the error they fail with there: each
#: must still fail so (a fixed one is to be removed from here), and each must still be in the README
#: (a stale entry fails too). None today: the README's quickstart gives every row its id, as the
#: portable subset says (docs/sql-dialects.md).
KNOWN_POSTGRES_GAPS: dict[tuple[str, str], type[EngramError]] = {}


@dataclass(frozen=True)
class Example:
    """One statement of a doc, where it runs and what it must do."""

    doc: str
    line: int
    sql: str
    params: Any
    where: tuple[str, ...]  # ("shared",) / ("private", agent) / ("tools", agent)
    store: int  # examples of one store number share a store
    expect: tuple[str, ...] = ()  # the error class names an enclosing ``except`` catches
    only: str | None = None  # "sqlite" / "postgres" for a marked block

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {self.sql[:90]!r}"


@dataclass
class _Reader(ast.NodeVisitor):
    """The SQL calls of one Python block, with the scope each names and the errors around it."""

    doc: str
    first_line: int
    store: int
    only: str | None
    names: dict[str, tuple[int, tuple[str, ...]]]  # a name of an earlier block keeps its store
    found: list[Example] = field(default_factory=list)
    catching: list[tuple[str, ...]] = field(default_factory=list)

    def where(self, node: ast.expr | None) -> tuple[int, tuple[str, ...]] | None:
        """The store and the scope an expression stands for, if the doc says."""
        if isinstance(node, ast.Name):
            return self.names.get(node.id)
        if isinstance(node, ast.Attribute) and node.attr in ("shared", "private"):
            agent = self.where(node.value)
            if agent and agent[1][0] == "tools":
                return agent[0], ("shared",) if node.attr == "shared" else ("private", agent[1][1])
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method, args = node.func.attr, node.args
            if method == "get_shared_scope":
                return self.store, ("shared",)
            if method in ("get_private_scope", "agent") and args and isinstance(args[0], ast.Constant):
                return self.store, ("private" if method == "get_private_scope" else "tools", str(args[0].value))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "MemoryToolbox":
            return self.where(node.args[0]) if node.args else None
        return None

    def visit_Assign(self, node: ast.Assign) -> None:
        self.generic_visit(node)
        where = self.where(node.value)
        for target in node.targets:
            if isinstance(target, ast.Name):
                if where is not None:
                    self.names[target.id] = where
                else:
                    self.names.pop(target.id, None)

    def visit_Try(self, node: ast.Try) -> None:
        caught: list[str] = []
        for handler in node.handlers:
            kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
            caught += [k.id if isinstance(k, ast.Name) else getattr(k, "attr", "") for k in kinds if k is not None]
        self.catching.append(tuple(caught))
        for statement in node.body:
            self.visit(statement)
        self.catching.pop()
        for rest in (*node.handlers, *node.orelse, *node.finalbody):
            self.visit(rest)

    def visit_Call(self, node: ast.Call) -> None:
        self.generic_visit(node)
        func, args = node.func, node.args
        sql: ast.expr | None = None
        params: ast.expr | None = None
        where: tuple[int, tuple[str, ...]] | None = None  # (store, scope), as `where()` gives it
        if isinstance(func, ast.Attribute) and func.attr in ("execute", "query") and args:
            sql, params, where = args[0], args[1] if len(args) > 1 else None, self.where(func.value)
        elif isinstance(func, ast.Name) and func.id == "memory_schema" and args:
            ctx = args[1] if len(args) > 1 else next((k.value for k in node.keywords if k.arg == "ctx"), None)
            sql, where = args[0], self.where(ctx)
        elif (
            isinstance(func, ast.Attribute)
            and func.attr == "call"
            and len(args) == 2
            and isinstance(args[0], ast.Constant)
            and args[0].value in ("memory_sql", "memory_schema")
            and isinstance(args[1], ast.Dict)
        ):
            given = {
                k.value: v for k, v in zip(args[1].keys, args[1].values, strict=True) if isinstance(k, ast.Constant)
            }
            sql, params = given.get("sql"), given.get("params")
            box = self.where(func.value)
            where = (box[0], ("tools", box[1][1])) if box else None
        if not (isinstance(sql, ast.Constant) and isinstance(sql.value, str)):
            return
        assert where is not None, f"{self.doc}:{self.first_line + node.lineno}: which scope runs {sql.value!r}?"
        self.found.append(
            Example(
                self.doc, self.first_line + node.lineno, sql.value, ast.literal_eval(params) if params else None,
                where[1], where[0], self.catching[-1] if self.catching else (), self.only,
            )
        )  # fmt: skip


def examples(doc: str) -> list[Example]:
    """Every SQL example of `doc`, in order."""
    text = (ROOT / doc).read_text(encoding="utf-8")
    found: list[Example] = []
    store = 0
    names: dict[str, tuple[int, tuple[str, ...]]] = {}
    for match in _BLOCK.finditer(text):
        only, language, body = match.group(1), match.group(2), match.group(3)
        first_line = text.count("\n", 0, match.start(3))
        if language == "sql":
            start = 0
            for part in re.finditer(r";[ \t]*(?:\n|$)", body):
                raw = body[start : part.start()]
                statement = raw.strip()
                line = first_line + 1 + body.count("\n", 0, start + len(raw) - len(raw.lstrip()))
                found.append(Example(doc, line, statement, None, ("shared",), store, (), only))
                start = part.end()
            assert not body[start:].strip(), f"{doc}: a statement of the sql block at line {first_line} lacks its ;"
            continue
        if "DynamicMemoryEngine(" in body:
            store += 1
        reader = _Reader(doc, first_line, store, only, names)
        reader.visit(ast.parse(body))
        found += reader.found
    return found


def _scope(engine: DynamicMemoryEngine, example: Example) -> MemoryScope:
    kind = example.where[0]
    if kind == "shared":
        return engine.get_shared_scope()
    if kind == "private":
        return engine.get_private_scope(example.where[1])
    agent = engine.agent(example.where[1])
    return pick_scope([agent.private, agent.shared], classify(example.sql))


def _errors(names: tuple[str, ...]) -> tuple[type[BaseException], ...]:
    return tuple(getattr(engramdb, n) for n in names if isinstance(getattr(engramdb, n, None), type))


def run_doc(doc: str, backend: str, open_store: Callable[[int], DynamicMemoryEngine]) -> Iterator[str]:
    """Run every example of `doc`; yield what went wrong with each one that did not do as told."""
    for example in examples(doc):
        scope = _scope(open_store(example.store), example)
        gap = KNOWN_POSTGRES_GAPS.get((doc, example.sql)) if backend == "postgres" else None
        expected = _errors(example.expect)
        other_backend = example.only is not None and example.only != backend
        try:
            scope.execute(example.sql, example.params)
        except EngramError as exc:
            if expected and isinstance(exc, expected):
                continue
            if other_backend and isinstance(exc, (SqlError, ScopeViolation)) and str(exc):
                continue
            if gap is not None and isinstance(exc, gap):
                continue
            yield f"{example}: {type(exc).__name__}: {exc}"
            continue
        if expected:
            yield f"{example}: ran, but the doc expects {' or '.join(example.expect)}"
        elif other_backend:
            yield f"{example}: marked {example.only}-only, but ran on {backend} (unmark it)"
        elif gap is not None:
            yield f"{example}: listed in KNOWN_POSTGRES_GAPS but runs on PostgreSQL now (remove it)"


@pytest.mark.parametrize("doc", DOCS)
def test_the_sql_examples_of_a_doc_run_on_this_backend(
    doc: str, backend_name: str, make_engine: Callable[..., DynamicMemoryEngine]
) -> None:
    def open_store(number: int) -> DynamicMemoryEngine:
        made = stores.get(number)
        if made is None:
            made = stores[number] = make_engine(name=f"doc{number}")
        return made

    stores: dict[int, DynamicMemoryEngine] = {}
    wrong = list(run_doc(doc, backend_name, open_store))
    assert not wrong, "\n".join(wrong)


def test_the_docs_have_examples_and_both_marks() -> None:
    found = {doc: examples(doc) for doc in DOCS}
    assert len(found["README.md"]) >= 6  # the raw-SQL quickstart
    assert len(found["docs/interfaces.md"]) >= 2  # the tools' and the toolbox's
    dialects = found["docs/sql-dialects.md"]
    assert {e.only for e in dialects} == {None, "sqlite", "postgres"}
    assert all(e.where == ("shared",) for e in dialects)
    # what the reader saw of the README's quickstart: its scopes and the refusals it shows
    readme = {e.sql: e for e in found["README.md"]}
    assert readme["SELECT * FROM private_researcher_scratch"].where == ("private", "writer")
    assert readme["SELECT * FROM private_researcher_scratch"].expect == ("ScopeViolation",)
    assert readme["DROP TABLE shared_notes"].expect == ("ForbiddenDDLError",)


def test_known_gaps_are_still_in_the_docs() -> None:
    present = {(doc, e.sql) for doc in DOCS for e in examples(doc)}
    stale = sorted(set(KNOWN_POSTGRES_GAPS) - present)
    assert not stale, f"no longer in the docs, remove from KNOWN_POSTGRES_GAPS: {stale}"


def test_a_marked_example_that_runs_on_the_other_backend_is_reported(
    backend_name: str, make_engine: Callable[..., DynamicMemoryEngine], tmp_path: Path
) -> None:
    # A portable statement marked as the other backend's must be reported, not passed.
    other = "postgres" if backend_name == "sqlite" else "sqlite"
    doc = tmp_path / "doc.md"
    doc.write_text(f"<!-- {other}-only -->\n```sql\nCREATE TABLE shared_x (id INTEGER PRIMARY KEY);\n```\n")
    (found,) = examples(str(doc))
    assert found.only == other
    engine = make_engine()
    wrong = list(run_doc(str(doc), backend_name, lambda _n: engine))
    assert wrong and "unmark it" in wrong[0]


def test_errors_the_docs_catch_are_engramdb_caller_errors() -> None:
    caught = {n for doc in DOCS for e in examples(doc) for n in e.expect}
    assert caught and all(issubclass(t, CallerError) for t in _errors(tuple(caught)))
