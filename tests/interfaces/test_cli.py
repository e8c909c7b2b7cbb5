"""The `engramdb` command line: every command, --json output, exit codes, and its documentation."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from engramdb.cli import Exit, cli

pytestmark = pytest.mark.sqlite_only  # the command line opens SQLite files

DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def _run(db: Path, *args: str, agent: str = "alice", input: str | None = None) -> Result:
    env = {"ENGRAMDB_URL": str(db), "ENGRAMDB_EMBEDDER": "fake", "ENGRAMDB_AGENT": agent}
    return CliRunner().invoke(cli, list(args), env=env, input=input, catch_exceptions=False)


def _json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _commands(group: click.Group, prefix: str = "engramdb") -> list[str]:
    out = []
    for name, cmd in group.commands.items():
        out.append(f"{prefix} {name}")
        if isinstance(cmd, click.Group):
            out.extend(_commands(cmd, f"{prefix} {name}"))
    return out


def test_every_command_is_documented() -> None:
    """Adding a command without a ``## engramdb <command>`` section in docs/cli.md fails here."""
    headings = set(re.findall(r"^## (engramdb [a-z -]+)$", DOCS.read_text(), flags=re.M))
    commands = _commands(cli)
    assert {"engramdb mcp", "engramdb import", "engramdb todos add"} <= set(commands)
    assert sorted(set(commands) - headings) == []
    assert sorted(headings - set(commands)) == []  # and no section for a command that is gone


def test_memory_commands_with_json(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    assert _json(_run(db, "--json", "init"))["db"] == str(db)
    m = _json(_run(db, "remember", "The release train leaves on Thursdays", "--tag", "ops", "--json"))
    mid = m["id"]
    assert m["tags"] == ["ops"] and m["owner"] == "alice"
    assert _run(db, "remember", "Stand-up is at 9:30", "--shared", agent="bob").exit_code == 0
    hits = _json(_run(db, "--json", "recall", "when does the release train leave?", "-k", "2"))
    assert hits["hits"][0]["memory"]["id"] == mid and hits["recall_id"].startswith("rc_")
    text = _run(db, "recall", "release train", "--evidence").stdout
    assert "UNTRUSTED EVIDENCE START" in text and "Thursdays" in text
    why = _json(_run(db, "--json", "explain", hits["recall_id"]))
    assert why["hits"][0]["memory_id"] == mid and "rel" in why["hits"][0]["components"]
    todo = _json(_run(db, "--json", "todos", "add", "Renew the certificate"))["id"]
    assert [t["id"] for t in _json(_run(db, "--json", "todos"))] == [todo]
    assert _run(db, "todos", "done", todo).stdout.strip() == f"done: {todo}"
    assert _json(_run(db, "--json", "todos")) == []
    assert _run(db, "todos", "--status", "done").stdout.startswith(todo)
    stats = _json(_run(db, "--json", "stats"))
    assert stats["memories"] == 3 and stats["recalls"] >= 1
    assert _json(_run(db, "--json", "forget", mid, "--reason", "moved"))["memory_id"] == mid
    refused = _run(db, "--json", "remember", "The release train leaves on Thursdays")
    assert refused.exit_code == Exit.REFUSED
    assert json.loads(refused.stderr)["error"] == "Forgotten"
    assert _run(db, "forget", mid).exit_code == Exit.OK  # forgetting twice is harmless
    assert _run(db, "forget", "alice:00000000deadbeef").exit_code == Exit.NOT_FOUND
    assert _json(_run(db, "--json", "compact"))["compacted"] is True
    assert _json(_run(db, "--json", "stats"))["memories"] == 2
    rep = _json(_run(db, "--json", "reflect", "--step", "rescore"))
    assert [s["step"] for s in rep["steps"]] == ["rescore"]


def test_sql_and_tables(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    assert _run(db, "sql", "CREATE TABLE shared_facts (id INTEGER PRIMARY KEY, topic TEXT)").exit_code == 0
    assert _run(db, "sql", "INSERT INTO shared_facts (topic) VALUES (?)", "tls").stdout.startswith("1 row(s) changed")
    assert _run(db, "sql", "CREATE TABLE private_alice_notes (v TEXT)").exit_code == 0
    _run(db, "sql", "INSERT INTO private_alice_notes VALUES ('secret')")
    out = _json(_run(db, "--json", "sql", "SELECT id, topic FROM shared_facts", agent="bob"))
    assert out == {"scope": "shared", "columns": ["id", "topic"], "rows": [[1, "tls"]], "more": False}
    assert _run(db, "sql", "SELECT * FROM shared_facts", agent="bob").stdout == "id | topic\n1 | tls\n"
    stolen = _run(db, "--json", "sql", "SELECT * FROM private_alice_notes", agent="bob")
    assert stolen.exit_code == Exit.REFUSED and "secret" not in stolen.output
    assert json.loads(stolen.stderr)["error"] == "ScopeViolation"
    assert _run(db, "sql", "DROP TABLE shared_facts").exit_code == Exit.REFUSED
    tables = _json(_run(db, "--json", "tables", agent="bob"))
    assert tables == {"shared": {"shared_facts": ["id", "topic"]}, "private:bob": {}, "dialect": "SQLite 3"}
    assert _run(db, "tables").stdout.startswith("SQL dialect: SQLite 3")


def test_export_import_round_trip(tmp_path: Path) -> None:
    src, dst, path = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "a.jsonl"
    for text in ("Ada leads payments", "Grace leads search", "Bob's phone is 555-0100"):
        _run(src, "remember", text)
    gone = _json(_run(src, "--json", "recall", "phone", "-k", "1"))["hits"][0]["memory"]["id"]
    _run(src, "forget", gone)
    assert _run(src, "export", str(path)).stdout.strip() == f"4 lines written to {path}"
    stdout_export = _run(src, "export").stdout
    assert stdout_export.splitlines()[1:] == path.read_text().splitlines()[1:]
    first = _json(_run(dst, "--json", "import", str(path)))
    assert first["memories"] == 2 and first["tombstones"] == 1
    second = _json(_run(dst, "--json", "import", "-", input=path.read_text()))
    assert second["memories"] == 0 and second["memories_present"] == 2
    assert _run(dst, "remember", "Bob's phone is 555-0100").exit_code == Exit.REFUSED
    assert _run(dst, "import", str(tmp_path / "nope.jsonl")).exit_code in (Exit.NOT_FOUND, Exit.USAGE)
    # another agent cannot take over alice's private memories
    assert _run(dst, "--agent", "bob", "import", str(path)).exit_code == Exit.REFUSED


def test_import_into_another_tenant_of_the_same_file(tmp_path: Path) -> None:
    """On main: ``UNIQUE constraint failed: engram_memories.id``, an engine table in the user's error."""
    db, path = tmp_path / "a.db", tmp_path / "acme.jsonl"
    for text in ("Ada leads payments", "Grace leads search"):
        _run(db, "--tenant", "acme", "remember", text)
    _run(db, "--tenant", "acme", "export", str(path))
    out = _run(db, "--tenant", "globex", "import", str(path))
    assert out.exit_code == 0, out.output
    assert "imported 2 memories" in out.stdout and "2 memories under new ids" in out.stdout
    again = _json(_run(db, "--json", "--tenant", "globex", "import", str(path)))
    assert again["memories"] == 0 and again["memories_present"] == 2
    hits = _json(_run(db, "--json", "--tenant", "globex", "recall", "who leads payments", "-k", "1"))
    assert hits["hits"][0]["memory"]["content"] == "Ada leads payments"


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(cli, ["recall", "x"], env={"ENGRAMDB_URL": ""}).exit_code == Exit.USAGE
    assert runner.invoke(cli, ["--db", str(tmp_path / "x.db"), "recall"]).exit_code == Exit.USAGE
    assert runner.invoke(cli, ["--db", str(tmp_path / "x.db"), "nope"]).exit_code == Exit.USAGE
    bad = runner.invoke(cli, ["--db", "mysql://h/db", "init"])
    assert bad.exit_code == Exit.REFUSED and "not mysql:// URLs" in bad.stderr


def test_python_dash_m_and_the_console_script_agree(tmp_path: Path) -> None:
    env = dict(os.environ, ENGRAMDB_URL=str(tmp_path / "m.db"), ENGRAMDB_EMBEDDER="fake")
    ran = subprocess.run([sys.executable, "-m", "engramdb", "--json", "remember", "hello there"], env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["content"] == "hello there"
    missing = subprocess.run([sys.executable, "-m", "engramdb", "forget", "cli:0"], env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert missing.returncode == Exit.NOT_FOUND and "NotFound" in missing.stderr


def test_reembed_after_switching_embedders(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    assert _run(db, "--embedder", "none", "remember", "no vector yet").exit_code == 0
    assert _json(_run(db, "--json", "reembed")) == {"embedded": 1}
    assert _json(_run(db, "--json", "reembed")) == {"embedded": 0}
    refused = _run(db, "--embedder", "none", "reembed")
    assert refused.exit_code == Exit.REFUSED and "no memory embedder" in refused.stderr


def test_the_reference_page_is_the_programs_own_help() -> None:
    """docs/cli-reference.md is rendered from --help; run ``python -m engramdb.cli.reference --write``
    after changing a command's options or text."""
    from engramdb.cli.reference import render

    page = (DOCS.parent / "cli-reference.md").read_text(encoding="utf-8")
    assert page == render()
    assert set(re.findall(r"^## (engramdb[a-z -]*)$", page, flags=re.M)) == {"engramdb", *_commands(cli)}


def test_show_list_update_link(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    a = _run(db, "remember", "Alice is allergic to peanuts", "--tag", "health").stdout.strip()
    b = _run(db, "remember", "Alice carries an epipen").stdout.strip()
    edge = _json(_run(db, "--json", "link", a, b, "--type", "supports", "--weight", "0.5"))
    assert edge == {"source": a, "target": b, "type": "supports", "weight": 0.5, "created_at": edge["created_at"]}
    changed = _json(_run(db, "--json", "update", a, "--content", "Alice is severely allergic to peanuts", "--no-tags"))
    assert changed["version"] == 2 and changed["tags"] == []
    shown = _json(_run(db, "--json", "show", a))
    assert shown["memory"]["content"] == "Alice is severely allergic to peanuts"
    assert [v["content"] for v in shown["history"]] == ["Alice is allergic to peanuts"]
    assert [(e["source"], e["target"]) for e in shown["edges"]] == [(a, b)]
    before = shown["memory"]["access_count"]
    text = _run(db, "show", a).stdout
    assert "earlier versions:" in text and f"{a} -supports 0.5-> {b}" in text
    assert _json(_run(db, "--json", "show", a))["memory"]["access_count"] == before  # a look, not a use
    page = _json(_run(db, "--json", "list", "--limit", "1"))
    assert page["total"] == 2 and page["has_more"] and [m["id"] for m in page["memories"]] == [b]
    found = _json(_run(db, "--json", "list", "--contains", "EPIPEN"))
    assert [m["id"] for m in found["memories"]] == [b]
    assert "1-1 of 2; next page: --offset 1" in _run(db, "list", "--limit", "1").stdout
    # another agent cannot see, change or link alice's private memories
    assert _run(db, "show", a, agent="bob").exit_code == Exit.NOT_FOUND
    assert _run(db, "update", a, "--title", "x", agent="bob").exit_code == Exit.NOT_FOUND
    assert _run(db, "link", b, a, agent="bob").exit_code == Exit.NOT_FOUND
    assert _json(_run(db, "--json", "list", agent="bob"))["total"] == 0
    nothing = _run(db, "--json", "update", a)
    assert nothing.exit_code == Exit.REFUSED and json.loads(nothing.stderr)["error"] == "ValidationError"
    assert _json(_run(db, "--json", "show", a))["memory"]["version"] == 2  # changed nothing


def test_intend_and_due(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    past = _run(db, "intend", "water the plants", "--when", "2020-01-01T00:00:00Z").stdout.strip()
    event = _run(db, "intend", "tell Bob the build is green", "--on-event", "build-green").stdout.strip()
    cue = _run(db, "intend", "mention the offsite", "--cue", "planning").stdout.strip()
    assert [m["id"] for m in _json(_run(db, "--json", "due"))] == [past]
    assert _json(_run(db, "--json", "due")) == []  # one-shot: fired once
    assert [m["id"] for m in _json(_run(db, "--json", "due", "--event", "build-green"))] == [event]
    assert [m["id"] for m in _json(_run(db, "--json", "due", "--text", "Q3 planning call"))] == [cue]
    bad = _run(db, "--json", "intend", "x", "--when", "next tuesday")
    assert bad.exit_code == Exit.REFUSED and json.loads(bad.stderr)["error"] == "ValidationError"


def test_usage_errors_are_json_under_json(tmp_path: Path) -> None:
    db = str(tmp_path / "x.db")
    for args in (["--json", "recall", "x", "--bogus"], ["recall", "x", "-k", "0", "--json"], ["--json", "nope"]):
        out = CliRunner().invoke(cli, ["--db", db, *args])
        assert out.exit_code == Exit.USAGE, args
        err = json.loads(out.stderr)
        assert err["error"] == "UsageError" and err["exit_code"] == Exit.USAGE and err["message"], args
        assert out.stdout == ""
    missing = CliRunner().invoke(cli, ["--json", "recall", "x"], env={"ENGRAMDB_URL": ""})
    assert missing.exit_code == Exit.USAGE and "--db" in json.loads(missing.stderr)["message"]
    plain = CliRunner().invoke(cli, ["--db", db, "recall", "x", "--bogus"])
    assert plain.exit_code == Exit.USAGE and "No such option" in plain.stderr and not plain.stderr.startswith("{")
    # a word after -- is an argument, not the flag
    assert CliRunner().invoke(cli, ["--db", db, "remember", "--bogus", "--", "--json"]).stderr.startswith("Usage")


def test_recall_reports_relevance_and_min_relevance_leaves_out_the_weak(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    _run(db, "remember", "The release train leaves on Thursdays")
    _run(db, "remember", "Lunch is served at noon")
    hits = _json(_run(db, "--json", "recall", "when does the release train leave", "-k", "2"))["hits"]
    rels = [h["relevance"] for h in hits]
    assert all(0.0 <= r <= 1.0 for r in rels) and rels[0] > rels[-1]
    strict = _json(_run(db, "--json", "recall", "when does the release train leave", "--min-relevance", str(rels[0])))
    assert [h["memory"]["content"] for h in strict["hits"]] == ["The release train leaves on Thursdays"]
    assert "rel " in _run(db, "recall", "release train").stdout


def test_export_reports_progress_by_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from engramdb.cli import support

    db = tmp_path / "m.db"
    for i in range(3):
        _run(db, "remember", f"fact number {i}")
    heard: list[tuple[str, int, int | None]] = []

    class Bars:
        def __enter__(self) -> object:
            return lambda stage, done, total: heard.append((stage, done, total))

        def __exit__(self, *exc: object) -> None:
            return None

    monkeypatch.setattr("engramdb.cli.app.progress_bars", Bars)
    assert support is not None
    out = _json(_run(db, "--json", "export", str(tmp_path / "out.jsonl")))
    assert heard[0] == ("export", 0, out["lines"]) and heard[-1] == ("export", out["lines"], out["lines"])


def test_model_adapters_from_the_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--embedder and --reranker name the adapters; a wrong form is refused (3), a server that
    fails is a store-side failure (5), and a working reranker decides the order."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    db = tmp_path / "m.db"
    for args, code, said in (
        (["--embedder", "bogus"], Exit.REFUSED, "is none of: default, hashing"),
        (["--embedder", "openai-compat:nomic-embed-text"], Exit.REFUSED, "MODEL@BASE_URL"),
        (["--embedder", "fastembed:nobody/no-such-model"], Exit.REFUSED, "not one of fastembed's text models"),
        (["--reranker", "cohere"], Exit.REFUSED, "is none of: none, fastembed:MODEL"),
        (["--embedder", "openai-compat:m@http://127.0.0.1:9/v1"], Exit.BACKEND, "connection was refused"),
    ):
        r = _run(db, *args, "remember", "Dana owns the grammar spec")
        assert (r.exit_code, said in r.stderr) == (code, True), r.stderr
    for text in ("Dana owns the grammar spec", "The grammar tests are flaky", "Grammar lunch is on Friday"):
        assert _run(db, "remember", text).exit_code == 0

    plain = _json(_run(db, "--json", "recall", "grammar", "-k", "3"))
    assert isinstance(plain, dict) and plain["hits"][0]["memory"]["content"] != "Grammar lunch is on Friday"
    asked: list[dict[str, object]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            asked.append(body)
            docs = body["documents"]
            out = {
                "results": [{"index": i, "relevance_score": 0.9 if "lunch" in d else 0.1} for i, d in enumerate(docs)]
            }
            raw = json.dumps(out).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
        hits = _json(_run(db, "--json", "--reranker", f"http:bge-reranker@{url}", "recall", "grammar", "-k", "3"))
        assert isinstance(hits, dict)
        assert hits["hits"][0]["memory"]["content"] == "Grammar lunch is on Friday"
        assert asked and asked[0]["model"] == "bge-reranker" and asked[0]["query"] == "grammar"
    finally:
        httpd.shutdown()
        httpd.server_close()
    down = _run(db, "--reranker", "http:m@http://127.0.0.1:9/v1", "recall", "grammar")
    assert down.exit_code == Exit.BACKEND and "rerank endpoint" in down.stderr


def test_sessions_metadata_conversations_and_bulk_forget(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    m = _json(
        _run(
            db,
            "--json",
            "remember",
            "Dana owns the grammar spec",
            "--session",
            "s1",
            "--metadata",
            '{"project": "apollo"}',
        )
    )
    assert m["session"] == "s1" and m["metadata"] == {"project": "apollo"}
    chat = json.dumps([{"role": "user", "content": "I moved to Berlin"}, {"role": "assistant", "content": "Noted"}])
    turns = _json(_run(db, "--json", "remember", "--messages", "-", "--session", "s2", input=chat))
    assert [t["content"] for t in turns] == ["user: I moved to Berlin", "assistant: Noted"]
    hits = _json(_run(db, "--json", "recall", "who owns what", "--where", '{"project": "apollo"}'))
    assert [h["memory"]["id"] for h in hits["hits"]] == [m["id"]]
    listed = _json(_run(db, "--json", "list", "--session", "s2"))
    assert listed["total"] == 2
    dry = _json(_run(db, "--json", "forget", "--session", "s2", "--dry-run"))
    assert dry["count"] == 2 and dry["dry_run"] is True
    assert _json(_run(db, "--json", "list"))["total"] == 3
    assert _json(_run(db, "--json", "forget", "--session", "s2"))["count"] == 2
    assert _json(_run(db, "--json", "list"))["total"] == 1
    bad = _run(db, "recall", "x", "--where", "{not json")
    assert bad.exit_code == Exit.REFUSED and "--where is not valid JSON" in bad.stderr
    both = _run(db, "forget", m["id"], "--session", "s1")
    assert both.exit_code == Exit.REFUSED and "not both" in both.stderr
    assert "session: s1" in _run(db, "show", m["id"]).stdout


def test_extraction_from_the_shell(tmp_path: Path) -> None:
    from engramdb.llm.scripted import ScriptedChatServer, rule_extractor_script

    db = tmp_path / "m.db"
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps([{"role": "user", "name": "maya", "content": "I live in Paris"}]))
    assert _run(db, "remember", "--messages", str(chat), "--session", "c1", "--extract").exit_code == 0
    jobs = _json(_run(db, "--json", "pending"))
    assert isinstance(jobs, list) and len(jobs) == 1 and jobs[0]["status"] == "pending"
    with ScriptedChatServer(rule_extractor_script) as server:
        out = _run(db, "--json", "worker", "--base-url", server.url, "--model", "scripted", "--once")
    assert out.exit_code == 0, out.output
    report = _json(out)
    assert isinstance(report, dict) and (report["done"], report["added"]) == (1, 1)
    assert "no extraction jobs pending" in _run(db, "pending").output
    recalled = _json(_run(db, "--json", "recall", "where does maya live"))
    assert isinstance(recalled, dict) and any("maya lives in Paris" in str(h) for h in recalled["hits"])
    done = _json(_run(db, "--json", "pending", "--done"))
    assert isinstance(done, list)
    undone = _json(_run(db, "--json", "revert-extraction", done[0]["job_id"]))
    assert undone == {"job_id": done[0]["job_id"], "undone": 1}
    refused = _run(db, "remember", "one fact", "--extract")
    assert refused.exit_code == 3 and "--messages" in refused.output
