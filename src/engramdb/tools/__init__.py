"""Agent tools: specs any function-calling LLM framework can take, and the functions behind them.

- `MemoryToolbox` — one agent's complete tool set (remember, recall, forget, update, link,
  todos, intend/due, explain, memory_schema, list_memory_tables, memory_sql) with specs in
  OpenAI and Anthropic form and one dispatcher, ``box.call(name, arguments) -> str``.
- `memory_schema`, `list_memory_tables`, `remember`, `recall` — plain functions taking a `ctx`
  (a scope, an agent handle, or a framework context carrying one), for frameworks that inject it.

- `SqlDialect`, `dialect_of` — the SQL dialect of a scope's database, as the SQL tools name it
  in their descriptions and answers (docs/sql-dialects.md).

No tool raises to the model: refusals and failures come back as text.
"""

from engramdb.tools.dialects import SqlDialect, dialect_of
from engramdb.tools.functions import list_memory_tables, memory_schema, recall, remember, tool_specs, type_name
from engramdb.tools.specs import (
    ALL_TOOL_SPECS,
    DUE_TOOL,
    EXPLAIN_TOOL,
    FORGET_TOOL,
    INTEND_TOOL,
    LINK_TOOL,
    LIST_MEMORY_TABLES_TOOL,
    MEMORY_SCHEMA_TOOL,
    MEMORY_SQL_TOOL,
    RECALL_TOOL,
    REMEMBER_TOOL,
    TODO_ADD_TOOL,
    TODO_COMPLETE_TOOL,
    TODO_DROP_TOOL,
    TODO_LIST_TOOL,
    UPDATE_TOOL,
    ToolSpec,
)
from engramdb.tools.toolbox import MemoryToolbox, ToolLimits, check_arguments

__all__ = [
    "ALL_TOOL_SPECS",
    "DUE_TOOL",
    "EXPLAIN_TOOL",
    "FORGET_TOOL",
    "INTEND_TOOL",
    "LINK_TOOL",
    "LIST_MEMORY_TABLES_TOOL",
    "MEMORY_SCHEMA_TOOL",
    "MEMORY_SQL_TOOL",
    "RECALL_TOOL",
    "REMEMBER_TOOL",
    "TODO_ADD_TOOL",
    "TODO_COMPLETE_TOOL",
    "TODO_DROP_TOOL",
    "TODO_LIST_TOOL",
    "UPDATE_TOOL",
    "MemoryToolbox",
    "SqlDialect",
    "ToolLimits",
    "ToolSpec",
    "check_arguments",
    "dialect_of",
    "list_memory_tables",
    "memory_schema",
    "recall",
    "remember",
    "tool_specs",
    "type_name",
]
