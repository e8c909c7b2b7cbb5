"""OpenTelemetry spans, checked with the SDK's in-memory exporter: names, attributes, no memory text."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from engramdb import DynamicMemoryEngine, MemoryToolbox
from engramdb.observability import otel

sdk = pytest.importorskip("opentelemetry.sdk.trace", reason="needs opentelemetry-sdk (the test extra)")
from opentelemetry import trace  # noqa: E402  # the module otel reads the global provider from
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402

SECRET = "The vault combination is 31-41-59"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel.configure(tracer_provider=provider, capture_text=False)
    yield exporter
    otel.configure(tracer_provider=None, capture_text=False)


def _by_name(exporter: InMemorySpanExporter, name: str) -> list[Any]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def test_spans_and_their_attributes(eng: DynamicMemoryEngine, spans: InMemorySpanExporter) -> None:
    assert otel.available()
    me = eng.agent("alice", tenant="acme")
    m = me.remember(SECRET, importance=9)
    me.remember_many([{"content": "vault opening hours are 9 to 5"}, {"content": "the vault is in the basement"}])
    hits = me.recall("vault combination", k=2)
    assert hits.recall_id is not None
    me.explain(hits.recall_id)
    me.explain("vault")  # a dry run
    me.reflect(steps=["rescore"])
    box = MemoryToolbox(me)
    box.call("memory_schema", {"sql": "CREATE TABLE shared_t (v TEXT)"})
    box.call("memory_sql", {"sql": "INSERT INTO shared_t VALUES (?)", "params": [SECRET]})
    box.call("memory_sql", {"sql": "SELECT v FROM shared_t"})

    remember = _by_name(spans, "engramdb.remember")
    assert [s.attributes["engramdb.items"] for s in remember] == [1, 2]
    assert remember[0].attributes["engramdb.tenant"] == "acme" and remember[0].attributes["engramdb.agent"] == "alice"
    recalls = _by_name(spans, "engramdb.recall")
    live = [s for s in recalls if not s.attributes["engramdb.dry_run"]]
    assert len(live) == 1
    a = live[0].attributes
    assert a["engramdb.k"] == 2 and a["engramdb.hits"] == 2 and a["engramdb.channel"] == "recalled"
    assert a["engramdb.recall_id"] == hits.recall_id and a["engramdb.duration_ms"] > 0
    assert a["engramdb.top.score"] == pytest.approx(hits[0].score)
    for part in ("rel", "rec", "imp", "spread", "cos", "bm25", "when", "entity", "ctx"):
        assert f"engramdb.top.{part}" in a
    explains = _by_name(spans, "engramdb.explain")
    assert [s.attributes["engramdb.replayed"] for s in explains] == [True, False]
    # The dry run of explain(query) is a recall span inside the explain span.
    dry = [s for s in recalls if s.attributes["engramdb.dry_run"]]
    assert dry and dry[0].parent is not None and dry[0].parent.span_id == explains[1].context.span_id
    reflect = _by_name(spans, "engramdb.reflect")[0].attributes
    assert reflect["engramdb.steps"] == ("rescore",) and "engramdb.reflect.rescore.changed" in reflect
    sql = _by_name(spans, "engramdb.sql")
    assert [s.attributes["engramdb.statement"] for s in sql] == ["write", "read"]
    assert sql[1].attributes["engramdb.rows"] == 1 and sql[1].attributes["engramdb.scope"] == "shared"

    # Never memory text; no query or SQL text unless asked for.
    dump = repr([(s.name, dict(s.attributes or {})) for s in spans.get_finished_spans()])
    assert "31-41-59" not in dump and "vault combination" not in dump and "INSERT" not in dump
    assert m.id  # ids are fine to show, text is not


def test_query_text_only_when_asked(eng: DynamicMemoryEngine, spans: InMemorySpanExporter) -> None:
    otel.configure(capture_text=True)
    eng.agent("alice").recall("where is the vault?")
    (span,) = _by_name(spans, "engramdb.recall")
    assert span.attributes["engramdb.query"] == "where is the vault?"


def test_a_failure_is_recorded_on_its_span(eng: DynamicMemoryEngine, spans: InMemorySpanExporter) -> None:
    with pytest.raises(Exception, match="content is empty"):
        eng.agent("alice").remember("")
    (span,) = _by_name(spans, "engramdb.remember")
    assert span.status.status_code is StatusCode.ERROR
    assert span.events[0].name == "exception"


def test_scope_sql_spans_are_opt_in_and_carry_no_sql_text(make_engine: Any, spans: InMemorySpanExporter) -> None:
    plain = make_engine("plain").get_shared_scope()
    plain.execute("CREATE TABLE shared_t (v TEXT)")
    assert _by_name(spans, "engramdb.scope_sql") == []  # off by default: a span costs more than the call
    otel.configure(scope_sql=True)
    try:
        traced = make_engine("traced").get_shared_scope()
        traced.execute("CREATE TABLE shared_t (v TEXT)")
        traced.executemany("INSERT INTO shared_t VALUES (?)", [(SECRET,), ("b",)])
        assert traced.query("SELECT v FROM shared_t ORDER BY v") == [(SECRET,), ("b",)]
        assert [len(b) for b in traced.stream("SELECT v FROM shared_t", batch=1)] == [1, 1]
        with traced.transaction():
            traced.execute("INSERT INTO shared_t VALUES ('c')")
    finally:
        otel.configure(scope_sql=False)
    got = _by_name(spans, "engramdb.scope_sql")
    calls = [s.attributes["engramdb.call"] for s in got]
    assert calls == ["execute", "executemany", "query", "stream", "execute"]
    assert got[2].attributes["engramdb.rows"] == 2 and got[0].attributes["engramdb.namespace"] == "shared"
    assert all("engramdb.sql" not in s.attributes and SECRET not in repr(dict(s.attributes)) for s in got)


def test_no_tracer_provider_makes_no_span_and_a_global_one_is_used_at_once(
    eng: DynamicMemoryEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without any provider (none configured, none set globally) spans are skipped: each would be
    # a non-recording no-op costing ~7 µs a recall or remember.
    otel.configure(tracer_provider=None)
    with otel.span("engramdb.recall", k=1) as current:
        assert current is otel._NO_SPAN
    me = eng.agent("alice")
    me.remember("the vault is in the basement")
    # A provider the application sets globally later is picked up by the next call.
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    try:
        me.recall("vault", k=1)
    finally:
        otel.configure(tracer_provider=None)  # drops the tracer cached from that provider
    assert [s.name for s in exporter.get_finished_spans()] == ["engramdb.recall"]
