"""The SQL tool: one statement in the caller's own scopes, rows back as a compact, quoted table.

Which scope runs the statement is a routing choice only (the scope whose namespace the names in
the statement carry); the scope's database authorizer still decides what is allowed, so a
statement that names another agent's table is refused by the database, not here. Rows are
content other agents (or the web) may have written: they come back inside the untrusted-evidence
markers, each cell cleaned like recalled text, within `max_chars`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engramdb.observability import otel
from engramdb.retrieval.evidence import END, START, EvidenceItem, new_nonce
from engramdb.scopes.classify import Kind, Statement, classify
from engramdb.storage.ports import MemoryScope

#: The widest a single cell is shown (longer values are cut and marked).
MAX_CELL_CHARS = 300


def pick_scope(scopes: Sequence[MemoryScope], stmt: Statement) -> MemoryScope:
    """The scope whose namespace owns the names the statement carries (else the first)."""
    names = {n.removeprefix("main.") for n in stmt.reserved}
    if stmt.table:
        names.add(stmt.table.removeprefix("main."))
    for scope in scopes:
        if names and all(scope.namespace.owns(n) for n in names):
            return scope
    return scopes[0]


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    text = str(value)
    return text if len(text) <= MAX_CELL_CHARS else text[: MAX_CELL_CHARS - 1] + "…"


def _value(value: Any) -> Any:
    """A cell as structured results carry it: JSON's own types, long text cut as in the text."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return _cell(value)


def render_rows(columns: Sequence[str], rows: Sequence[Sequence[Any]], *, more: bool, max_chars: int) -> str:
    """Rows as ``value | value`` lines inside the evidence markers, in order, within `max_chars`.

    Rows are never skipped in the middle: output stops at the first row that does not fit, and
    the last line says how many were left out and why.
    """
    return _render(columns, rows, more=more, max_chars=max_chars)[0]


def _render(columns: Sequence[str], rows: Sequence[Sequence[Any]], *, more: bool, max_chars: int) -> tuple[str, int]:
    """`render_rows`, and how many rows it showed."""
    nonce = new_nonce()
    head = f"columns: {' | '.join(columns)}" if columns else "columns: (as in your SELECT list)"
    lines = [START.format(nonce=nonce), EvidenceItem("columns", head.removeprefix("columns: ")).render()]
    end = END.format(nonce=nonce)
    used = sum(len(x) + 1 for x in lines) + len(end) + 80  # room for the summary line
    shown = 0
    for i, row in enumerate(rows, 1):
        line = EvidenceItem(f"row {i}", " | ".join(_cell(v) for v in row)).render()
        if used + len(line) + 1 > max_chars:
            break
        lines.append(line)
        used += len(line) + 1
        shown += 1
    lines.append(end)
    left = len(rows) - shown
    if left or more:
        why = f"{left}{'+' if more else ''} more row(s) not shown (size or row limit)"
        lines.append(f"{shown} row(s) shown; {why}. Narrow the query (WHERE, LIMIT, fewer columns).")
    else:
        lines.append(f"{shown} row(s).")
    return "\n".join(lines), shown


def run_sql(
    scopes: Sequence[MemoryScope],
    sql: str,
    params: Sequence[Any] | None,
    *,
    max_rows: int,
    max_chars: int,
    tenant: str | None = None,
    agent: str | None = None,
) -> str:
    """Run one statement in the scope of `scopes` it belongs to and describe the outcome.

    Raises the scope's `EngramError` on a refusal or failure (the dispatcher turns it into text).
    """
    return run_sql_result(scopes, sql, params, max_rows=max_rows, max_chars=max_chars, tenant=tenant, agent=agent)[0]


def run_sql_result(
    scopes: Sequence[MemoryScope],
    sql: str,
    params: Sequence[Any] | None,
    *,
    max_rows: int,
    max_chars: int,
    tenant: str | None = None,
    agent: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """`run_sql`, and the outcome as data: the scope, the columns, the rows the text shows (cells
    as JSON values, long text cut alike), whether more were left, rows changed, last row id."""
    stmt = classify(sql)
    scope = pick_scope(scopes, stmt)
    with otel.span(
        "engramdb.sql", tenant=tenant, agent=agent, scope=scope.label, statement=stmt.kind.value,
        sql=sql if otel.capture_text() else None,
    ) as span:  # fmt: skip
        return _run(scope, stmt, sql, params, max_rows=max_rows, max_chars=max_chars, span=span)


def _run(
    scope: MemoryScope,
    stmt: Statement,
    sql: str,
    params: Sequence[Any] | None,
    *,
    max_rows: int,
    max_chars: int,
    span: Any,
) -> tuple[str, dict[str, Any]]:
    if stmt.kind is Kind.READ:
        page = scope.read_page(sql, params, limit=max_rows)
        otel.set_attributes(span, rows=len(page.rows), more=page.more)
        body, shown = _render(page.columns, page.rows, more=page.more, max_chars=max_chars)
        data = _data(scope, list(page.columns), page.rows[:shown], page.more or shown < len(page.rows), None, None)
        return f"OK (scope '{scope.label}'):\n" + body, data
    result = scope.execute(sql, params)
    otel.set_attributes(span, rows=result.rowcount)
    what = "schema changed" if stmt.is_ddl else f"{result.rowcount} row(s) changed"
    last = result.lastrowid if result.lastrowid and stmt.kind is Kind.WRITE else None
    if last is not None:
        what += f", last row id {last}"
    text = f"OK (scope '{scope.label}'): {what}."
    changed = None if stmt.is_ddl else result.rowcount
    if result.rows:
        rows = result.rows[:max_rows]
        body, shown = _render((), rows, more=len(result.rows) > max_rows, max_chars=max_chars)
        return text + "\n" + body, _data(scope, [], rows[:shown], shown < len(result.rows), changed, last)
    return text, _data(scope, [], [], False, changed, last)


def _data(
    scope: MemoryScope,
    columns: list[str],
    rows: Sequence[Sequence[Any]],
    more: bool,
    changed: int | None,
    last: int | None,
) -> dict[str, Any]:
    return {
        "scope": scope.label, "columns": columns, "rows": [[_value(v) for v in row] for row in rows], "more": more,
        "changed": changed, "last_row_id": last,
    }  # fmt: skip
