"""Agent tools as plain functions over a context (`ctx`), for frameworks that inject one.

For a complete tool set bound to one agent, with a dispatcher, see `engramdb.tools.MemoryToolbox`.

Agent tools over memory scopes, with specs any function-calling LLM framework can take.

Each tool is a plain function ``tool(..., ctx) -> str`` that never raises to the model: a refusal
or failure comes back as a message saying what was wrong, that nothing changed, and what to do.

`ctx` is where the caller's scope comes from. It may be a `MemoryScope`, an object with a
``scope`` attribute, an object whose ``deps`` has one (as pydantic-ai's ``RunContext`` does), or
an object with ``shared`` and ``private`` scopes (an agent handle); with both, the statement goes
to the scope that owns the table it names (each scope still enforces its own namespace).

Example (OpenAI-style tools)::

    tools = [MEMORY_SCHEMA_TOOL.as_openai(), LIST_MEMORY_TABLES_TOOL.as_openai()]
    ...
    reply = memory_schema(sql=call.arguments["sql"], ctx=shared_scope)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engramdb.errors import CallerError, EngramError, SqlError, ValidationError
from engramdb.scopes.classify import classify
from engramdb.storage.ports import MemoryScope
from engramdb.tools.dialects import SqlDialect, dialect_of, told
from engramdb.tools.specs import LIST_MEMORY_TABLES_TOOL, MEMORY_SCHEMA_TOOL, RECALL_TOOL, REMEMBER_TOOL, ToolSpec


def tool_specs(ctx: Any = None) -> list[ToolSpec]:
    """The specs of every tool in this module; given the `ctx` the tools will be called with,
    memory_schema's description names its store's SQL dialect (asked of the database)."""
    specs = [MEMORY_SCHEMA_TOOL, LIST_MEMORY_TABLES_TOOL, REMEMBER_TOOL, RECALL_TOOL]
    if ctx is None:
        return specs
    try:
        scope = _scopes(ctx)[0]
    except TypeError as exc:
        raise ValidationError(str(exc)) from None
    spoken = dialect_of(scope)
    return [told(s, spoken) for s in specs]


def _scopes(ctx: Any) -> list[MemoryScope]:
    if isinstance(ctx, MemoryScope):
        return [ctx]
    agent = getattr(getattr(ctx, "deps", None), "agent", None) or getattr(ctx, "agent", None)
    if agent is not None and hasattr(agent, "shared") and hasattr(agent, "private"):
        ctx = agent
    for holder in (ctx, getattr(ctx, "deps", None)):
        scope = getattr(holder, "scope", None)
        if isinstance(scope, MemoryScope):
            return [scope]
        pair = [getattr(holder, "shared", None), getattr(holder, "private", None)]
        found = [s for s in pair if isinstance(s, MemoryScope)]
        if found:
            return found
    raise TypeError("ctx must be a MemoryScope, or carry one as .scope, .deps.scope, or .shared/.private")


def _describe(exc: EngramError) -> str:
    kind = type(exc).__name__
    advice = "Adapt the statement and call the tool again." if isinstance(exc, CallerError) else "Try again later."
    return f"REFUSED ({kind}): {exc}. Nothing was changed. {advice}"


def memory_schema(sql: str, ctx: Any) -> str:
    """Run one safelisted schema statement in the caller's scope; return a message for the model,
    naming the SQL dialect of the scope's database (``SQLite 3``, ``PostgreSQL 16``)."""
    return schema_change(sql, ctx, dialect_of)


def schema_change(sql: str, ctx: Any, dialect: Callable[[MemoryScope], SqlDialect | None]) -> str:
    """`memory_schema` with the dialect given by `dialect(scope)` (a tool box passes the one it
    asked for once). Never raises."""
    scope: MemoryScope | None = None
    try:
        scopes = _scopes(ctx)
        stmt = classify(sql)
        if not stmt.kind.is_ddl:
            return (
                "REFUSED: memory_schema only changes schema (CREATE TABLE, CREATE INDEX, ALTER TABLE … "
                "ADD COLUMN); reads and writes of rows go through memory_sql. Nothing was changed."
            )
        table = (stmt.table or "").removeprefix("main.")
        scope = next((s for s in scopes if s.namespace.owns(table)), scopes[0])
        before = set(scope.list_tables())
        scope.execute(sql)
        tables = scope.list_tables()
        created = sorted(set(tables) - before)
        what = f"created {', '.join(created)}" if created else f"{stmt.kind.value} applied"
        spoken = _asked(dialect, scope)
        said = f" SQL dialect: {spoken.name}." if spoken is not None else ""
        return f"OK: {what} in scope '{scope.label}'. Tables in this scope: {', '.join(tables) or '(none)'}.{said}"
    except EngramError as exc:
        text = _describe(exc)
        if isinstance(exc, SqlError) and scope is not None and (spoken := _asked(dialect, scope)) is not None:
            text += f" {spoken.hint()}"  # the database read it as its own dialect
        return text
    except Exception as exc:  # the model must get a message, never a traceback
        return f"ERROR ({type(exc).__name__}): the tool failed: {exc}. Nothing was changed."


def _asked(dialect: Callable[[MemoryScope], SqlDialect | None], scope: MemoryScope) -> SqlDialect | None:
    """`dialect(scope)`, or None if asking fails: naming the dialect is a courtesy, and the
    statement's outcome (done, or refused) is what the answer must get right."""
    try:
        return dialect(scope)
    except Exception:
        return None


def list_memory_tables(ctx: Any) -> str:
    """The tables the caller can use, one line per scope; never raises."""
    try:
        lines = [f"{s.label}: {', '.join(s.list_tables()) or '(no tables yet)'}" for s in _scopes(ctx)]
        return "\n".join(lines)
    except EngramError as exc:
        return _describe(exc)
    except Exception as exc:
        return f"ERROR ({type(exc).__name__}): the tool failed: {exc}."


def _agent(ctx: Any) -> Any:
    """The agent handle behind `ctx`: an `Agent`, or an object whose ``agent`` / ``deps`` is one."""
    from engramdb.agent import Agent

    for holder in (
        ctx,
        getattr(ctx, "agent", None),
        getattr(ctx, "deps", None),
        getattr(getattr(ctx, "deps", None), "agent", None),
    ):
        if isinstance(holder, Agent):
            return holder
    raise TypeError("ctx must be an Agent, or carry one as .agent, .deps or .deps.agent")


def remember(
    content: str,
    ctx: Any,
    type: str = "info",
    importance: float | None = None,
    tags: list[str] | None = None,
    shared: bool = False,
) -> str:
    """Store a memory for the calling agent; return a message with its id. Never raises."""
    try:
        m = _agent(ctx).remember(content, type=type, importance=importance, tags=tags, shared=shared)
        return f"OK: remembered as {m.id} ({m.type.value}, {'shared' if m.shared else 'private'})."
    except EngramError as exc:
        return f"REFUSED ({type_name(exc)}): {exc}. Nothing was stored."
    except Exception as exc:
        return f"ERROR ({type_name(exc)}): the tool failed: {exc}. Nothing was stored."


def recall(query: str, ctx: Any, k: int = 5, token_budget: int = 800) -> str:
    """Recall for the calling agent; return the hits as untrusted evidence. Never raises."""
    try:
        hits = _agent(ctx).recall(query, k=k)
        return hits.as_evidence(token_budget) or "No memories matched."
    except EngramError as exc:
        return f"REFUSED ({type_name(exc)}): {exc}."
    except Exception as exc:
        return f"ERROR ({type_name(exc)}): the tool failed: {exc}."


def type_name(exc: BaseException) -> str:
    """The class name of `exc` (what a refusal message names)."""
    return type(exc).__name__
