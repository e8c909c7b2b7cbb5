"""`MemoryToolbox`: one agent's complete tool set, its specs, and one dispatcher.

    box = MemoryToolbox(engine.agent("researcher", tenant="acme", cap=Confidentiality.INTERNAL))
    tools = box.openai()                          # or box.anthropic(), box.specs()
    text = box.call(call.name, call.arguments)    # a dict or the JSON text the model produced

Who acts — agent, tenant, cap, floor — is the `Agent` handle the box was made with; no tool has a
parameter for any of them, and a call with an argument its schema does not list is refused. The
limits (`ToolLimits`) are written into the specs the model sees *and* checked on every call.
`call` never raises: a refusal or failure comes back as text saying what was wrong and that
nothing changed.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engramdb.aio import in_thread
from engramdb.errors import CallerError, EngramError, SqlError, ValidationError
from engramdb.memories.filters import check_session
from engramdb.memories.model import Memory, MemoryType
from engramdb.retrieval.evidence import EvidenceItem, render_evidence
from engramdb.tools.dialects import SqlDialect, dialect_of, told
from engramdb.tools.specs import ALL_TOOL_SPECS, ToolSpec
from engramdb.tools.sql import run_sql_result

if TYPE_CHECKING:
    from engramdb.agent import Agent


@dataclass(frozen=True, slots=True)
class ToolLimits:
    """What one tool call may ask for; enforced on every call and shown in the specs.

    Args:
        max_k: the most memories a recall or explain returns.
        max_content_chars: the longest content a remember, update, todo or intent may store.
        max_sql_chars: the longest SQL statement the SQL tool takes.
        max_rows: the most rows the SQL tool returns.
        max_result_chars: the longest text any tool returns (rows, evidence).
    """

    max_k: int = 20
    max_content_chars: int = 4000
    max_sql_chars: int = 8000
    max_rows: int = 50
    max_result_chars: int = 8000

    def __post_init__(self) -> None:
        for name in ("max_k", "max_content_chars", "max_sql_chars", "max_rows", "max_result_chars"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValidationError(f"{name} must be a positive integer, got {value!r}")
        if self.max_result_chars < 400:
            raise ValidationError("max_result_chars must be at least 400 (room for the evidence markers)")


_JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


def _check(name: str, value: Any, schema: Mapping[str, Any]) -> None:
    """Check `value` against the subset of JSON Schema the specs use; `ValidationError` saying how."""
    kinds = schema.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else kinds
        if not any(_JSON_TYPES[k](value) for k in kinds):
            raise ValidationError(f"argument {name!r} must be {' or '.join(kinds)}, got {type(value).__name__}")
    if "enum" in schema and value not in schema["enum"]:
        raise ValidationError(f"argument {name!r} must be one of {', '.join(map(str, schema['enum']))}")
    if isinstance(value, str):
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            raise ValidationError(f"argument {name!r} is {len(value)} characters; the limit is {schema['maxLength']}")
        if "minLength" in schema and len(value) < schema["minLength"]:
            raise ValidationError(f"argument {name!r} must not be empty")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            raise ValidationError(f"argument {name!r} must be at least {schema['minimum']}, got {value}")
        if "maximum" in schema and value > schema["maximum"]:
            raise ValidationError(f"argument {name!r} must be at most {schema['maximum']}, got {value}")
    if isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            raise ValidationError(f"argument {name!r} has {len(value)} items; the limit is {schema['maxItems']}")
        for i, item in enumerate(value):
            _check(f"{name}[{i}]", item, schema.get("items", {}))


def check_arguments(spec: ToolSpec, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """`arguments` checked against `spec`'s schema: no unknown key, every required one, each valid."""
    props: dict[str, Any] = spec.parameters.get("properties", {})
    unknown = sorted(set(arguments) - set(props))
    if unknown:
        allowed = ", ".join(props) or "none"
        raise ValidationError(f"unknown argument(s) {', '.join(unknown)} for {spec.name}; allowed: {allowed}")
    missing = [k for k in spec.parameters.get("required", []) if k not in arguments]
    if missing:
        raise ValidationError(f"{spec.name} needs argument(s): {', '.join(missing)}")
    for key, value in arguments.items():
        _check(key, value, props[key])
    return dict(arguments)


def _limited(spec: ToolSpec, limits: ToolLimits) -> ToolSpec:
    """`spec` with the box's limits written into its schema (what the model sees is what is checked)."""
    params = copy.deepcopy(spec.parameters)
    props = params.get("properties", {})
    for key in ("content",):
        if key in props:
            props[key]["maxLength"] = limits.max_content_chars
    if "k" in props:
        props["k"]["maximum"] = limits.max_k
        props["k"]["description"] = f"How many memories, 1–{limits.max_k} (default 5)."
    if "sql" in props:
        props["sql"]["maxLength"] = limits.max_sql_chars
    for key in ("query", "what", "text"):
        if key in props:
            props[key]["maxLength"] = limits.max_content_chars
    return dataclasses.replace(spec, parameters=params)


@dataclass(frozen=True, slots=True)
class ToolResult:
    """One call's outcome: the text for the model, the structured result (matching the tool's
    `ToolSpec.output`; empty when `error`), and whether the call was refused or failed."""

    text: str
    data: dict[str, Any]
    error: bool


#: the tools that take SQL (their descriptions and failures name the store's dialect)
_SQL_TOOLS = frozenset({"memory_schema", "memory_sql"})

#: what a handler returns: the text, and the structured result
_Reply = tuple[str, dict[str, Any]]


def _memory_data(m: Memory) -> dict[str, Any]:
    return {
        "id": m.id, "type": m.type.value, "shared": m.shared, "owner": m.owner,
        "status": m.status.value if m.status else None, "created_at": m.created_at, "importance": m.importance,
        "content": m.content, "session": m.session, "metadata": m.metadata,
    }  # fmt: skip


def _fitting(items: list[dict[str, Any]], budget: int) -> tuple[list[dict[str, Any]], bool]:
    """The leading `items` whose content fits `budget` characters, and whether any were left out."""
    out: list[dict[str, Any]] = []
    used = 0
    for item in items:
        used += len(item["content"]) + 200
        if out and used > budget:
            return out, True
        out.append(item)
    return out, False


def _line(m: Memory) -> EvidenceItem:
    owner = "shared" if m.shared else f"private to {m.owner}"
    status = f" · {m.status.value}" if m.status else ""
    return EvidenceItem(f"memory {m.id} · {m.type.value}{status} · {owner}", m.content)


class MemoryToolbox:
    """The memory tools of one agent handle, with specs and a dispatcher that never raises.

    Args:
        agent: the `Agent` every call acts as (made with its tenant, cap and floor).
        limits: what a single call may ask for (`ToolLimits`).
        tools: the names of the tools to offer (default: all of ``ALL_TOOL_SPECS``).
        session: the conversation or run the model is in (the harness's id, never the model's):
            every memory the tools store carries it, and recall's ``this_session`` reads it.
    """

    def __init__(
        self,
        agent: Agent,
        *,
        limits: ToolLimits | None = None,
        tools: list[str] | None = None,
        session: str | None = None,
    ) -> None:
        from engramdb.agent import Agent

        if not isinstance(agent, Agent):
            raise ValidationError(f"a MemoryToolbox needs an Agent handle, got {type(agent).__name__}")
        if limits is not None and not isinstance(limits, ToolLimits):
            raise ValidationError(f"limits must be a ToolLimits or None, got {type(limits).__name__}")
        self._agent = agent
        self._session = None if session is None else check_session(session)
        self._limits = limits or ToolLimits()
        names = [s.name for s in ALL_TOOL_SPECS]
        if tools is not None and (isinstance(tools, str) or not isinstance(tools, Iterable)):
            raise ValidationError(f"tools must be a list of tool names or None, got {tools!r}")
        wanted = names if tools is None else list(tools)
        if any(not isinstance(t, str) for t in wanted):
            raise ValidationError(f"tools must be tool names (str), got {wanted!r}")
        unknown = sorted(set(wanted) - set(names))
        if unknown:
            raise ValidationError(f"unknown tool(s) {', '.join(unknown)}; known: {', '.join(names)}")
        self._specs = {s.name: _limited(s, self._limits) for s in ALL_TOOL_SPECS if s.name in wanted}
        self._dialect: SqlDialect | None = None
        self._handlers: dict[str, Callable[[dict[str, Any]], _Reply]] = {
            "remember": self._remember, "recall": self._recall, "forget": self._forget, "update": self._update,
            "link": self._link, "todo_add": self._todo_add, "todo_list": self._todo_list,
            "todo_complete": self._todo_complete, "todo_drop": self._todo_drop, "intend": self._intend,
            "due": self._due, "explain": self._explain, "memory_schema": self._memory_schema,
            "list_memory_tables": self._list_tables, "memory_sql": self._sql,
        }  # fmt: skip

    @property
    def agent(self) -> Agent:
        """The handle every call acts as."""
        return self._agent

    @property
    def limits(self) -> ToolLimits:
        """The limits every call is checked against."""
        return self._limits

    @property
    def dialect(self) -> SqlDialect | None:
        """The SQL dialect of the agent's store, as the SQL tools' descriptions and answers name
        it (asked of the database at first use; None while it cannot answer, then asked again)."""
        if self._dialect is None:
            self._dialect = dialect_of(self._agent.shared)
        return self._dialect

    def specs(self) -> list[ToolSpec]:
        """The specs of the offered tools, in a fixed order, with this box's limits in their
        schemas and the store's SQL dialect in the descriptions of the tools that take SQL."""
        dialect = self.dialect if any(s.name in _SQL_TOOLS for s in self._specs.values()) else None
        return [told(s, dialect) for s in self._specs.values()]

    def openai(self) -> list[dict[str, Any]]:
        """The offered tools as OpenAI / LiteLLM ``tools=[…]`` entries."""
        return [s.as_openai() for s in self.specs()]

    def anthropic(self) -> list[dict[str, Any]]:
        """The offered tools as Anthropic Messages API ``tools=[…]`` entries."""
        return [s.as_anthropic() for s in self.specs()]

    def call(self, name: str, arguments: Mapping[str, Any] | str | None = None) -> str:
        """Run tool `name` with `arguments` (a mapping, or the JSON text a model produced) and
        return the text for the model. Never raises."""
        return self.call_result(name, arguments).text

    def call_result(self, name: str, arguments: Mapping[str, Any] | str | None = None) -> ToolResult:
        """As `call`, with the structured result too (what MCP sends as ``structuredContent``)."""
        try:
            spec = self._specs.get(name) if isinstance(name, str) else None
            if spec is None:
                offered = ", ".join(self._specs)
                return ToolResult(f"REFUSED: there is no tool {name!r}. Tools: {offered}.", {}, True)
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments) if arguments.strip() else {}
                except json.JSONDecodeError as exc:
                    return ToolResult(
                        f"REFUSED: the arguments are not valid JSON ({exc.msg}). Nothing was changed.", {}, True
                    )
            if arguments is None:
                arguments = {}
            if not isinstance(arguments, Mapping):
                return ToolResult("REFUSED: the arguments must be a JSON object. Nothing was changed.", {}, True)
            text, data = self._handlers[name](check_arguments(spec, arguments))
            refused = text.startswith(("REFUSED", "ERROR"))
            return ToolResult(self._cap(text), {} if refused else data, refused)
        except EngramError as exc:
            advice = "Fix the call and try again." if isinstance(exc, CallerError) else "Try again later."
            text = f"REFUSED ({type(exc).__name__}): {exc}. Nothing was changed. {advice}"
            if isinstance(exc, SqlError) and name in _SQL_TOOLS:
                with contextlib.suppress(Exception):  # the hint is a courtesy; the refusal stands
                    if self.dialect is not None:
                        text += f" {self.dialect.hint()}"  # the database read it as its own dialect
            return ToolResult(self._cap(text), {}, True)
        except Exception as exc:  # the model must get a message, never a traceback
            return ToolResult(f"ERROR ({type(exc).__name__}): the tool failed: {exc}. Nothing was changed.", {}, True)

    acall = in_thread(call)

    def _cap(self, text: str) -> str:
        limit = self._limits.max_result_chars
        if len(text) <= limit:
            return text
        return text[: limit - 60] + "\n… (cut at the tool's size limit; ask for less)"

    # -- the tools ----------------------------------------------------------------------------

    def _remember(self, a: dict[str, Any]) -> _Reply:
        m = self._agent.remember(
            a["content"], type=a.get("type", "info"), importance=a.get("importance"), tags=a.get("tags"),
            shared=a.get("shared", False), force=a.get("force", False), session=self._session,
            metadata=a.get("metadata"),
        )  # fmt: skip
        text = f"OK: remembered as {m.id} ({m.type.value}, {'shared' if m.shared else 'private'})."
        return text, {"id": m.id, "type": m.type.value, "shared": m.shared}

    def _evidence_budget(self) -> int:
        return max(1, (self._limits.max_result_chars - 200) // 4)

    def _recall(self, a: dict[str, Any]) -> _Reply:
        session = None
        if a.get("this_session"):
            if self._session is None:
                raise ValidationError("this_session needs a conversation, and this harness names none; leave it out")
            session = self._session
        hits = self._agent.recall(
            a["query"], k=a.get("k", 5), min_relevance=a.get("min_relevance"), where=a.get("where"), session=session
        )
        items = [{**_memory_data(h.memory), "relevance": h.relevance, "rank": h.rank} for h in hits.hits]
        shown, more = _fitting(items, self._limits.max_result_chars)
        data = {"recall_id": hits.recall_id, "memories": shown, "more": more, "note": hits.note}
        text = hits.as_evidence(self._evidence_budget())
        if not text:
            return "No memories matched." + (f" ({hits.note}.)" if hits.note else ""), data
        scores = ", ".join(f"{h.memory.id} {h.relevance:.2f}" for h in hits.hits)
        fewer = f" Fewer than asked: {hits.note}." if hits.note else ""
        return (
            f"{text}\n(relevance 0–1: {scores}.{fewer} recall id {hits.recall_id}: pass it to explain to see why "
            "these ranked.)",
            data,
        )

    def _forget(self, a: dict[str, Any]) -> _Reply:
        stone = self._agent.forget(a["id"], reason=a.get("reason", ""))
        text = f"OK: forgot {stone.memory_id}; its text is deleted and will not be stored again by accident."
        return text, {"id": stone.memory_id}

    def _update(self, a: dict[str, Any]) -> _Reply:
        if len(a) == 1:
            raise ValidationError("update needs at least one of content, importance, tags")
        m = self._agent.update(a["id"], content=a.get("content"), importance=a.get("importance"), tags=a.get("tags"))
        return f"OK: updated {m.id} (version {m.version}).", {"id": m.id, "version": m.version}

    def _link(self, a: dict[str, Any]) -> _Reply:
        e = self._agent.link(a["source"], a["target"], a.get("type", "related"))
        return f"OK: linked {e.source} —{e.type.value}→ {e.target}.", {
            "source": e.source, "target": e.target, "type": e.type.value,
        }  # fmt: skip

    def _todo_add(self, a: dict[str, Any]) -> _Reply:
        m = self._agent.remember(
            a["content"],
            type=MemoryType.TODO,
            importance=a.get("importance"),
            shared=a.get("shared", False),
            session=self._session,
        )
        return f"OK: todo {m.id} added ({'shared' if m.shared else 'private'}, open).", {"id": m.id, "shared": m.shared}

    def _listed(self, memories: list[Memory], empty: str, unfit: str) -> _Reply:
        shown, more = _fitting([_memory_data(m) for m in memories], self._limits.max_result_chars)
        data = {"memories": shown, "more": more}
        if not memories:
            return empty, data
        return render_evidence([_line(m) for m in memories], self._evidence_budget()) or unfit, data

    def _todo_list(self, a: dict[str, Any]) -> _Reply:
        status = a.get("status", "open")
        todos = self._agent.todos(None if status == "all" else status)
        empty = f"No {'' if status == 'all' else status + ' '}todos."
        return self._listed(todos, empty, "The todos do not fit the limit.")

    def _todo_complete(self, a: dict[str, Any]) -> _Reply:
        m = self._agent.complete(a["id"])
        return f"OK: todo {m.id} is done.", {"id": m.id, "status": "done"}

    def _todo_drop(self, a: dict[str, Any]) -> _Reply:
        m = self._agent.drop(a["id"])
        return f"OK: todo {m.id} is dropped.", {"id": m.id, "status": "dropped"}

    def _intend(self, a: dict[str, Any]) -> _Reply:
        given = [k for k in ("when", "on_event", "cue") if k in a]
        if len(given) != 1:
            raise ValidationError("intend needs exactly one of when, on_event, cue")
        m = self._agent.intend(
            a["content"], when=a.get("when"), on_event=a.get("on_event"), cue=a.get("cue"),
            repeat=a.get("repeat", False),
        )  # fmt: skip
        return f"OK: intention {m.id} set ({given[0]}).", {"id": m.id, "trigger": given[0]}

    def _due(self, a: dict[str, Any]) -> _Reply:
        fired = self._agent.due(event=a.get("event"), text=a.get("text"))
        return self._listed(fired, "Nothing is due.", "Due items do not fit the limit.")

    def _explain(self, a: dict[str, Any]) -> _Reply:
        why = self._agent.explain(a["what"], k=a.get("k", 5))

        def entry(e: Any) -> dict[str, Any]:
            parts = {f.name: float(getattr(e.components, f.name)) for f in dataclasses.fields(e.components)}
            return {
                "rank": e.rank, "id": e.memory_id, "score": e.score, "relevance": e.relevance,
                "source": str(getattr(e.source, "value", e.source)), "components": parts,
            }  # fmt: skip

        data = {
            "recall_id": why.recall_id, "k": why.k, "hops": why.hops,
            "hits": [entry(e) for e in why.hits], "near_misses": [entry(e) for e in why.near_misses],
        }  # fmt: skip
        lines = [f"explain {why.recall_id or '(dry run)'} · k={why.k} hops={why.hops}"]
        for label, entries in (("hit", why.hits), ("near miss", why.near_misses)):
            for e in entries:
                c = e.components
                lines.append(
                    f"{label} {e.rank}: {e.memory_id} score {e.score:.3f} via {e.source} · rel {c.rel:.2f} "
                    f"rec {c.rec:.2f} imp {c.imp:.2f} spread {c.spread:.2f} cos {c.cos:.2f} bm25 {c.bm25:.2f} "
                    f"when {c.when:.0f} entity {c.entity:.0f} ctx {c.ctx:.2f}"
                )
        if len(lines) == 1:
            lines.append("no candidates")
        return "\n".join(lines), data

    def _memory_schema(self, a: dict[str, Any]) -> _Reply:
        from engramdb.tools.functions import schema_change

        text = schema_change(a["sql"], self._agent, lambda _scope: self.dialect)
        return text, {"message": text}

    def _list_tables(self, a: dict[str, Any]) -> _Reply:
        out = []
        scopes = []
        for scope in (self._agent.shared, self._agent.private):
            tables = [(t, scope.columns(t)) for t in scope.list_tables()]
            described = [f"{t}({', '.join(cols)})" for t, cols in tables]
            out.append(f"{scope.label} (tables named {scope.prefix}<name>): {'; '.join(described) or '(none yet)'}")
            scopes.append({
                "scope": scope.label, "prefix": scope.prefix,
                "tables": [{"name": t, "columns": cols} for t, cols in tables],
            })  # fmt: skip
        return "\n".join(out), {"scopes": scopes}

    def _sql(self, a: dict[str, Any]) -> _Reply:
        return run_sql_result(
            [self._agent.private, self._agent.shared], a["sql"], a.get("params"), max_rows=self._limits.max_rows,
            max_chars=self._limits.max_result_chars - 100, tenant=self._agent.tenant, agent=self._agent.agent_id,
        )  # fmt: skip
