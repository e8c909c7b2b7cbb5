"""The MCP server through a client nobody here wrote: the official MCP Inspector's CLI (npm
``@modelcontextprotocol/inspector``), over stdio, listing the tools and calling every one.

Each tool must carry a title, the four annotation hints and an output schema, and every call's
``structuredContent`` must validate against that schema. The Inspector is found at
``ENGRAMDB_TEST_MCP_INSPECTOR`` (``.ci/run`` installs it with npm into the virtual environment);
without it the test skips and says how to install it, except under ``CI``, where it fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

pytestmark = pytest.mark.sqlite_only  # the server opens a SQLite file; the tools are the same on both

INSPECTOR = os.environ.get("ENGRAMDB_TEST_MCP_INSPECTOR", "")
ENGRAMDB = Path(sys.executable).with_name("engramdb")
HINTS = {"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"}


@pytest.fixture(scope="module")
def inspector() -> str:
    if INSPECTOR and (Path(INSPECTOR).is_file() or shutil.which(INSPECTOR)) and shutil.which("node"):
        return INSPECTOR
    why = (
        "no MCP Inspector: npm install --prefix .venv/node @modelcontextprotocol/inspector@0.15.0 and set "
        "ENGRAMDB_TEST_MCP_INSPECTOR=.venv/node/node_modules/.bin/mcp-inspector"
    )
    if os.environ.get("CI"):
        pytest.fail(f"the MCP Inspector test cannot run under CI: {why}", pytrace=False)
    pytest.skip(why)


def _inspect(inspector: str, db: Path, method: str, *args: str) -> dict[str, Any]:
    server = [str(ENGRAMDB), "--db", str(db), "--agent", "alice", "--embedder", "fake", "mcp"]
    ran = subprocess.run(
        [inspector, "--cli", *server, "--method", method, *args],
        capture_output=True, text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"},
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    out: dict[str, Any] = json.loads(ran.stdout)
    return out


def test_the_inspector_lists_annotated_tools_and_every_call_matches_its_output_schema(
    inspector: str, tmp_path: Path
) -> None:
    db = tmp_path / "m.db"
    tools = {t["name"]: t for t in _inspect(inspector, db, "tools/list")["tools"]}
    assert len(tools) >= 15
    for name, tool in tools.items():
        assert tool.get("title"), name
        assert set(tool.get("annotations", {})) >= HINTS, name
        assert tool["annotations"]["openWorldHint"] is False, name
        assert tool.get("outputSchema", {}).get("type") == "object", name
    called: set[str] = set()

    def call(name: str, **arguments: str) -> dict[str, Any]:
        pairs = [f"{k}={v}" for k, v in arguments.items()]
        result = _inspect(inspector, db, "tools/call", "--tool-name", name, *(["--tool-arg", *pairs] if pairs else []))
        assert result.get("isError") is not True, (name, result)
        assert result["content"] and result["content"][0]["type"] == "text"  # for older clients
        jsonschema.validate(result["structuredContent"], tools[name]["outputSchema"])
        called.add(name)
        return result["structuredContent"]  # type: ignore[no-any-return]

    a = call("remember", content="Alice is allergic to peanuts")["id"]
    b = call("remember", content="Alice carries an epipen")["id"]
    call("recall", query="peanut allergy")
    call("explain", what="peanut allergy")
    call("update", id=a, content="Alice is severely allergic to peanuts")
    call("link", source=a, target=b, type="supports")
    todo = call("todo_add", content="buy more epipens")["id"]
    call("todo_list")
    call("todo_complete", id=todo)
    call("todo_drop", id=call("todo_add", content="call the allergist")["id"])
    call("intend", content="ask about the allergy", on_event="visit")
    call("due", event="visit")
    call("memory_schema", sql="CREATE TABLE shared_notes (id INTEGER PRIMARY KEY, body TEXT)")
    call("list_memory_tables")
    call("memory_sql", sql="INSERT INTO shared_notes (body) VALUES ('hello')")
    call("memory_sql", sql="SELECT body FROM shared_notes")
    call("forget", id=b)
    assert called == set(tools), sorted(set(tools) - called)
    # a refusal is a tool result the model can read, not a protocol error
    refused = _inspect(inspector, db, "tools/call", "--tool-name", "forget", "--tool-arg", "id=cli:nope")
    assert refused["isError"] is True and "nope" in refused["content"][0]["text"]
