"""The MCP server end to end: the SDK's own client talks to ``engramdb mcp`` over stdio."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from engramdb import DynamicMemoryEngine
from engramdb.testing import fake_embedder

mcp = pytest.importorskip("mcp", reason="the MCP server needs the mcp extra")

from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

pytestmark = pytest.mark.sqlite_only  # the server process opens a SQLite file


def _text(result: Any) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


def test_stdio_end_to_end(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    with DynamicMemoryEngine(db, memory_embedder=fake_embedder()) as eng:
        bob = eng.get_private_scope("bob")
        bob.execute("CREATE TABLE private_bob_diary (entry TEXT)")
        bob.execute("INSERT INTO private_bob_diary VALUES ('bob secret entry')")
        eng.agent("bob").remember("Bob's private plan for the merger")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "engramdb", "--db", str(db), "--agent", "alice", "--embedder", "fake", "mcp"],
        cwd=str(tmp_path),
    )

    async def session() -> None:
        async with Client(params, read_timeout_seconds=60) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert {"remember", "recall", "forget", "memory_sql", "memory_schema", "todo_add"} <= set(tools)
            assert tools["recall"].input_schema["properties"]["k"]["maximum"] == 20
            assert "tenant" not in json.dumps([t.input_schema for t in tools.values()])

            out = await client.call_tool("remember", {"content": "The release train leaves on Thursdays"})
            assert not out.is_error and _text(out).startswith("OK: remembered as alice:")
            mid = _text(out).split()[3]
            found = await client.call_tool("recall", {"query": "when does the release train leave?", "k": 3})
            assert "Thursdays" in _text(found) and mid in _text(found) and "merger" not in _text(found)

            made = await client.call_tool("memory_schema", {"sql": "CREATE TABLE shared_facts (id INTEGER PRIMARY KEY, topic TEXT)"})  # fmt: skip
            assert not made.is_error, _text(made)
            ins = await client.call_tool("memory_sql", {"sql": "INSERT INTO shared_facts (topic) VALUES (?)", "params": ["tls"]})  # fmt: skip
            assert _text(ins).startswith("OK (scope 'shared'): 1 row(s) changed")
            rows = await client.call_tool("memory_sql", {"sql": "SELECT id, topic FROM shared_facts"})
            assert "id | topic" in _text(rows) and "1 | tls" in _text(rows)

            stolen = await client.call_tool("memory_sql", {"sql": "SELECT entry FROM private_bob_diary"})
            assert stolen.is_error and _text(stolen).startswith("REFUSED (ScopeViolation)")
            assert "secret" not in _text(stolen)
            spoof = await client.call_tool("recall", {"query": "merger", "agent_id": "bob"})
            assert spoof.is_error and "unknown argument" in _text(spoof)

            resources = await client.list_resources()
            assert [str(r.uri) for r in resources.resources] == ["engramdb://recent"]
            recent = await client.read_resource("engramdb://recent")
            assert "Thursdays" in recent.contents[0].text and "merger" not in recent.contents[0].text  # type: ignore[union-attr]
            one = await client.read_resource(f"engramdb://memory/{mid}")
            assert json.loads(one.contents[0].text)["id"] == mid  # type: ignore[union-attr]
            templates = await client.list_resource_templates()
            assert templates.resource_templates[0].uri_template == "engramdb://memory/{id}"

    anyio.run(session)

    # What the server wrote is in the store, as alice.
    with DynamicMemoryEngine(db, memory_embedder=fake_embedder()) as eng:
        assert [m.content for m in eng.agent("alice").memories()] == ["The release train leaves on Thursdays"]
        assert eng.get_shared_scope().query("SELECT topic FROM shared_facts") == [("tls",)]


def test_build_server_in_process(tmp_path: Path) -> None:
    from engramdb.mcp import build_server

    with DynamicMemoryEngine(tmp_path / "m.db", memory_embedder=fake_embedder()) as eng:
        server = build_server(eng.agent("alice"))

        async def session() -> None:
            async with Client(server) as client:
                out = await client.call_tool("todo_add", {"content": "Renew the certificate"})
                assert _text(out).startswith("OK: todo alice:")
                listing = await client.call_tool("todo_list", {})
                assert "Renew the certificate" in _text(listing)
                missing = await client.call_tool("forget", {"id": "alice:0"})
                assert missing.is_error and "NotFound" in _text(missing)

        anyio.run(session)


def test_streamable_http(tmp_path: Path) -> None:
    import os
    import socket
    import subprocess
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = ["-m", "engramdb", "--db", str(tmp_path / "m.db"), "--agent", "alice", "--embedder", "fake"]
    proc = subprocess.Popen(
        [sys.executable, *args, "mcp", "--transport", "http", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(os.environ),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the HTTP server did not start"
            time.sleep(0.1)

        async def session() -> None:
            async with Client(f"http://127.0.0.1:{port}/mcp", read_timeout_seconds=60) as client:
                assert "memory_sql" in {t.name for t in (await client.list_tools()).tools}
                out = await client.call_tool("remember", {"content": "Served over streamable HTTP"})
                assert _text(out).startswith("OK: remembered as alice:")
                found = await client.call_tool("recall", {"query": "streamable HTTP"})
                assert "Served over streamable HTTP" in _text(found)

        anyio.run(session)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if proc.stderr:
            proc.stderr.close()
