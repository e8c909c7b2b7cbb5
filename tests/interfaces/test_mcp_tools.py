"""Every MCP tool as a current client sees it: a title, behaviour hints, an output schema, and a
structured result that validates against it (with the text block for older clients)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from engramdb import DynamicMemoryEngine
from engramdb.testing import FixedClock, fake_embedder

pytest.importorskip("mcp", reason="the MCP server needs the mcp extra")
jsonschema = pytest.importorskip("jsonschema")

from mcp import Client  # noqa: E402

from engramdb.mcp import build_server  # noqa: E402
from engramdb.tools.specs import ALL_TOOL_SPECS  # noqa: E402

pytestmark = pytest.mark.sqlite_only


def _text(result: Any) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


def _calls() -> list[tuple[str, Callable[[dict[str, str]], dict[str, Any]]]]:
    """One valid call of every tool, in an order where each finds what it needs."""
    return [
        ("remember", lambda ids: {"content": "The release train leaves on Thursdays", "importance": 6}),
        ("remember", lambda ids: {"content": "The canteen serves soup on Mondays"}),
        ("recall", lambda ids: {"query": "when does the release train leave?", "k": 3}),
        ("update", lambda ids: {"id": ids["a"], "content": "The release train leaves on Thursdays at nine"}),
        ("link", lambda ids: {"source": ids["a"], "target": ids["b"], "type": "related"}),
        ("todo_add", lambda ids: {"content": "Book the train"}),
        ("todo_list", lambda ids: {}),
        ("todo_complete", lambda ids: {"id": ids["todo"]}),
        ("todo_add", lambda ids: {"content": "Bring snacks"}),
        ("todo_drop", lambda ids: {"id": ids["todo2"]}),
        ("intend", lambda ids: {"content": "Ask about the train", "on_event": "standup"}),
        ("due", lambda ids: {"event": "standup"}),
        ("explain", lambda ids: {"what": "release train"}),
        ("memory_schema", lambda ids: {"sql": "CREATE TABLE shared_facts (id INTEGER PRIMARY KEY, topic TEXT)"}),
        ("memory_sql", lambda ids: {"sql": "INSERT INTO shared_facts (topic) VALUES (?)", "params": ["tls"]}),
        ("memory_sql", lambda ids: {"sql": "SELECT id, topic FROM shared_facts"}),
        ("list_memory_tables", lambda ids: {}),
        ("forget", lambda ids: {"id": ids["b"], "reason": "wrong"}),
    ]


def test_every_tool_has_a_title_hints_and_a_schema_its_results_validate_against(tmp_path: Path) -> None:
    with DynamicMemoryEngine(
        tmp_path / "m.db", clock=FixedClock(1_800_000_000.0), memory_embedder=fake_embedder()
    ) as eng:
        server = build_server(eng.agent("alice"))
        seen: dict[str, dict[str, Any]] = {}

        async def session() -> None:
            async with Client(server) as client:
                listed = (await client.list_tools()).tools
                assert [t.name for t in listed] == [s.name for s in ALL_TOOL_SPECS]  # a fixed order
                tools = {t.name: t for t in listed}
                for t in listed:
                    assert t.title and t.annotations is not None and t.annotations.title == t.title
                    assert t.annotations.open_world_hint is False
                    assert t.output_schema and t.output_schema["type"] == "object"
                    jsonschema.Draft202012Validator.check_schema(t.output_schema)
                a = tools["forget"].annotations
                assert a is not None and a.destructive_hint and not a.read_only_hint
                r = tools["list_memory_tables"].annotations
                assert r is not None and r.read_only_hint and not r.destructive_hint
                ids: dict[str, str] = {}
                for name, make in _calls():
                    out = await client.call_tool(name, make(ids))
                    assert not out.is_error, (name, _text(out))
                    data = out.structured_content
                    assert data is not None, name
                    jsonschema.validate(data, tools[name].output_schema)
                    assert _text(out)  # the text block for older clients
                    seen.setdefault(name, data)
                    if name == "remember":
                        ids.setdefault("a" if "a" not in ids else "b", data["id"])
                    if name == "todo_add":
                        ids["todo" if "todo" not in ids else "todo2"] = data["id"]

        anyio.run(session)
        recall = seen["recall"]
        assert recall["memories"][0]["content"].startswith("The release train")
        assert 0 <= recall["memories"][0]["relevance"] <= 1 and recall["recall_id"].startswith("rc_")
        assert seen["memory_sql"]["changed"] == 1
        assert {s["scope"] for s in seen["list_memory_tables"]["scopes"]} == {"shared", "private:alice"}


def test_a_refusal_names_only_what_the_model_can_do(tmp_path: Path) -> None:
    with DynamicMemoryEngine(
        tmp_path / "m.db", clock=FixedClock(1_800_000_000.0), memory_embedder=fake_embedder()
    ) as eng:
        server = build_server(eng.agent("alice"))

        async def session() -> None:
            async with Client(server) as client:
                made = await client.call_tool("remember", {"content": "Bob's phone number is 555-0100"})
                assert made.structured_content is not None
                await client.call_tool("forget", {"id": made.structured_content["id"]})
                again = await client.call_tool("remember", {"content": "Bob's phone number is 555-0100"})
                assert again.is_error and again.structured_content is None
                said = _text(again)
                assert '"force": true' in said
                forced = await client.call_tool(
                    "remember", {"content": "Bob's phone number is 555-0100", "force": True}
                )
                assert not forced.is_error, _text(forced)
                two = await client.call_tool("memory_sql", {"sql": "SELECT 1; SELECT 2"})
                assert two.is_error and "execute()" not in _text(two)

        anyio.run(session)


def test_recall_leaves_out_weak_matches_with_min_relevance(tmp_path: Path) -> None:
    with DynamicMemoryEngine(
        tmp_path / "m.db", clock=FixedClock(1_800_000_000.0), memory_embedder=fake_embedder()
    ) as eng:
        me = eng.agent("alice")
        me.remember("Dana owns the grammar spec")
        me.remember("The customer wants the release before Friday", importance=9)
        server = build_server(me)

        async def session() -> None:
            async with Client(server) as client:
                loose = await client.call_tool("recall", {"query": "who owns the grammar?", "k": 5})
                strict = await client.call_tool(
                    "recall", {"query": "who owns the grammar?", "k": 5, "min_relevance": 0.3}
                )
                assert loose.structured_content is not None and strict.structured_content is not None
                kept = strict.structured_content["memories"]
                assert [m["content"] for m in kept] == ["Dana owns the grammar spec"]
                assert all(m["relevance"] >= 0.3 for m in kept)
                assert len(loose.structured_content["memories"]) >= len(kept)
                assert "relevance 0–1" in _text(strict)

        anyio.run(session)
