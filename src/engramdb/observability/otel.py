"""OpenTelemetry spans for remember, recall, explain, reflect and the SQL tool (the ``otel`` extra).

With ``opentelemetry-api`` installed, engramdb opens a span per operation on the tracer provider
the application configured (`configure`, or globally, e.g. with ``opentelemetry-sdk``); until it
sets one up, and without the package, every span is a no-op costing one function call.

Spans carry counts, settings, timings and the score components of the top hit — never memory
text, and not query or SQL text unless ``configure(capture_text=True)`` (or the environment
variable ``ENGRAMDB_OTEL_CAPTURE_TEXT=1``) says so. Names and attributes:

- ``engramdb.remember``: ``engramdb.items``, ``engramdb.stored``, ``engramdb.dedup``
- ``engramdb.recall``: ``engramdb.k``, ``engramdb.hops``, ``engramdb.channel``,
  ``engramdb.dry_run``, ``engramdb.hits``, ``engramdb.duration_ms``, ``engramdb.top.score``,
  ``engramdb.top.source`` and ``engramdb.top.<component>`` (rel, rec, imp, spread, cos, cue,
  bm25, when, entity, ctx)
- ``engramdb.explain``: ``engramdb.recall_id``, ``engramdb.replayed``, ``engramdb.hits``,
  ``engramdb.near_misses``
- ``engramdb.reflect``: ``engramdb.run_id``, ``engramdb.steps``, ``engramdb.interrupted``,
  ``engramdb.reflect.<step>.changed`` / ``.examined``
- ``engramdb.sql``: ``engramdb.scope``, ``engramdb.statement``, ``engramdb.rows``
Every span has ``engramdb.tenant`` and ``engramdb.agent``. A span that ends in an exception
records it and has status ERROR.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from engramdb.scopes.namespace import Namespace
from engramdb.storage.ports import ExecResult, MemoryScope, Page, Params, Row, RowVectorStore

if TYPE_CHECKING:
    from engramdb.embeddings.base import Embedder

try:
    from opentelemetry import trace as _trace
except ImportError:  # the otel extra is optional
    _trace = None  # type: ignore[assignment]

_state: dict[str, Any] = {
    "provider": None,
    "tracer": None,
    "capture_text": os.environ.get("ENGRAMDB_OTEL_CAPTURE_TEXT") == "1",
    # Spans for every raw-SQL scope call (execute, executemany, query, stream): opt-in, since a
    # span costs more than the scope call it traces (ENGRAMDB_OTEL_SCOPE_SQL=1, or configure(scope_sql=True)).
    "scope_sql": os.environ.get("ENGRAMDB_OTEL_SCOPE_SQL") == "1",
}


class _NoSpan:
    """What `span` yields when OpenTelemetry is absent: accepts attributes, records nothing."""

    def is_recording(self) -> bool:
        return False

    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def set_attributes(self, attributes: dict[str, Any]) -> None:
        pass


_NO_SPAN = _NoSpan()


def available() -> bool:
    """True when ``opentelemetry-api`` is installed (spans are made)."""
    return _trace is not None


_KEEP: Any = object()


def configure(*, tracer_provider: Any = _KEEP, capture_text: bool | None = None, scope_sql: bool | None = None) -> None:
    """Use `tracer_provider` instead of the global one (None: back to the global one), and/or
    turn the capture of query and SQL text on or off (memory text is never captured), and/or
    turn spans for every raw-SQL scope call on or off (for scopes made after this call)."""
    if tracer_provider is not _KEEP:
        _state["provider"] = tracer_provider
        _state["tracer"] = None
    if capture_text is not None:
        _state["capture_text"] = bool(capture_text)
    if scope_sql is not None:
        _state["scope_sql"] = bool(scope_sql)


def scope_sql() -> bool:
    """Whether scopes made now get a span per SQL call (needs ``opentelemetry-api``)."""
    return _trace is not None and bool(_state["scope_sql"])


def capture_text() -> bool:
    """Whether query and SQL text go into spans."""
    return bool(_state["capture_text"])


def _tracer() -> Any:
    tracer = _state["tracer"]
    if tracer is None:
        assert _trace is not None
        # The distribution's version, read without importing the package (which imports us).
        from importlib import metadata

        try:
            __version__ = metadata.version("engramdb")
        except metadata.PackageNotFoundError:
            __version__ = "unknown"
        provider = _state["provider"]
        tracer = (
            provider.get_tracer("engramdb", __version__)
            if provider is not None
            else _trace.get_tracer("engramdb", __version__)
        )
        _state["tracer"] = tracer
    return tracer


def _tracing() -> bool:
    """False while no tracer provider is set (neither by `configure` nor globally, e.g. by
    ``opentelemetry-sdk``): every span would be a non-recording no-op, and making one would still
    add to every call (a recall or remember). Checked at each span, so a provider set later is used at once."""
    if _state["provider"] is not None:
        return True
    assert _trace is not None
    provider = _trace.get_tracer_provider()
    return not isinstance(provider, (_trace.ProxyTracerProvider, _trace.NoOpTracerProvider))


def _clean(attributes: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        if value is None:
            continue
        if isinstance(value, (str, bool, int, float)):
            out[key] = value
        elif isinstance(value, (list, tuple)):
            out[key] = [str(v) for v in value]
        else:
            out[key] = str(value)
    return out


@contextmanager
def span(name: str, **attributes: Any) -> Iterator[Any]:
    """A span named `name` with `attributes` (``engramdb.`` is prefixed to keys without it; None
    values are left out); yields it so callers can add attributes once they know them."""
    if _trace is None or not _tracing():
        yield _NO_SPAN
        return
    attrs = _clean({k if k.startswith("engramdb.") else f"engramdb.{k}": v for k, v in attributes.items()})
    with _tracer().start_as_current_span(name, attributes=attrs) as current:
        yield current


def set_attributes(current: Any, **attributes: Any) -> None:
    """Add attributes to `current` (keys get ``engramdb.`` in front), only when it records."""
    if current.is_recording():
        current.set_attributes(
            _clean({k if k.startswith("engramdb.") else f"engramdb.{k}": v for k, v in attributes.items()})
        )


class TracedScope(MemoryScope):
    """A `MemoryScope` whose SQL calls each run in a span ``engramdb.scope_sql`` (namespace, call,
    statement kind, rows, duration; the SQL text only with ``capture_text``). The engine wraps its
    scopes in it when `scope_sql` is on; everything else is the wrapped scope's."""

    __slots__ = ("_inner",)

    def __init__(self, inner: MemoryScope) -> None:
        self._inner = inner

    @property
    def namespace(self) -> Namespace:
        return self._inner.namespace

    @property
    def embedder(self) -> Embedder | None:
        return self._inner.embedder

    @property
    def row_vectors(self) -> RowVectorStore:
        return self._inner.row_vectors

    def _span(self, call: str, sql: str) -> Any:
        return span(
            "engramdb.scope_sql", namespace=self.label, call=call, sql=sql if capture_text() else None,
            verb=sql.lstrip().split(None, 1)[0].upper() if sql.strip() else None,
        )  # fmt: skip

    def execute(self, sql: str, params: Params = None) -> ExecResult:
        with self._span("execute", sql) as current:
            result = self._inner.execute(sql, params)
            set_attributes(current, rowcount=result.rowcount, rows=len(result.rows))
            return result

    def executemany(self, sql: str, seq_of_params: Iterable[Sequence[Any] | Mapping[str, Any]]) -> ExecResult:
        with self._span("executemany", sql) as current:
            result = self._inner.executemany(sql, seq_of_params)
            set_attributes(current, rowcount=result.rowcount)
            return result

    def query(self, sql: str, params: Params = None) -> list[Row]:
        with self._span("query", sql) as current:
            rows = self._inner.query(sql, params)
            set_attributes(current, rows=len(rows))
            return rows

    def stream(self, sql: str, params: Params = None, *, batch: int = 256) -> Generator[list[Row], None, None]:
        with self._span("stream", sql):
            return self._inner.stream(sql, params, batch=batch)

    def read_page(self, sql: str, params: Params = None, *, limit: int) -> Page:
        with self._span("read_page", sql) as current:
            page = self._inner.read_page(sql, params, limit=limit)
            set_attributes(current, rows=len(page.rows), more=page.more)
            return page

    def begin(self) -> None:
        self._inner.begin()

    def commit(self) -> None:
        self._inner.commit()

    def rollback(self) -> None:
        self._inner.rollback()

    @property
    def in_transaction(self) -> bool:
        return self._inner.in_transaction

    def list_tables(self) -> list[str]:
        return self._inner.list_tables()

    def columns(self, table: str) -> list[str]:
        return self._inner.columns(table)

    def row_key(self, table: str) -> str:
        return self._inner.row_key(table)

    def __repr__(self) -> str:
        return f"TracedScope({self._inner!r})"


__all__ = ["TracedScope", "available", "capture_text", "configure", "scope_sql", "set_attributes", "span"]
