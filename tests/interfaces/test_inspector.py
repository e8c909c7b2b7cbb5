"""The web inspector through Starlette's TestClient: the token, what it never shows, and that it
changes nothing (the browser tests in tests/browser/ drive the same pages in Chromium)."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx
import pytest

pytest.importorskip("starlette", reason="the inspect extra is not installed")

from starlette.testclient import TestClient

from engramdb import DynamicMemoryEngine
from engramdb.errors import MissingExtra
from engramdb.inspector import create_app
from engramdb.inspector.app import CSP, cookie_name
from engramdb.testing import FixedClock
from tests.inspector_data import HIDDEN, MARKERS, MARKUP, Store, build, crawl, open_engine, viewer

BASE = "http://127.0.0.1"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    return build(tmp_path_factory.mktemp("inspector") / "memory.db", FixedClock())


@pytest.fixture(scope="module")
def engine(store: Store) -> Iterator[DynamicMemoryEngine]:
    assert store.path is not None
    with open_engine(store.path, FixedClock(1_770_000_000.0)) as e:
        yield e


@pytest.fixture(scope="module")
def client(engine: DynamicMemoryEngine) -> Iterator[TestClient]:
    inspector = create_app(viewer(engine))
    with TestClient(inspector.app, base_url=BASE, follow_redirects=False) as c:
        assert c.get(f"/?token={inspector.token}").status_code == 303
        yield c


def test_every_route_needs_the_token(engine: DynamicMemoryEngine, store: Store) -> None:
    inspector = create_app(viewer(engine))
    routes = [
        "/", "/memory/" + store.ids["deploy"], "/graph/" + store.ids["deploy"], "/recall?q=deploy", "/stats",
        "/tables", "/api/memories", "/api/memory/" + store.ids["deploy"], "/api/graph/" + store.ids["deploy"],
        "/api/recall?q=deploy", "/api/stats", "/api/tables", "/static/inspector.js",
        "/static/vendor/chart-4.6.1.umd.min.js",
    ]  # fmt: skip
    with TestClient(inspector.app, base_url=BASE, follow_redirects=False) as c:
        for route in routes:
            r = c.get(route)
            assert r.status_code == 403, route
            assert "token" in r.text and "Qx7" not in r.text and "deploy key" not in r.text
        assert c.get("/?token=not-the-token").status_code == 403
        other = cookie_name(inspector.token)
        assert c.get("/", headers={"cookie": f"{other}=not-the-token"}).status_code == 403
        # the token once in the address: a cookie, and a redirect that drops the token only
        r = c.get(f"/recall?q=deploy+key&token={inspector.token}")
        assert r.status_code == 303 and r.headers["location"] == "/recall?q=deploy+key"
        cookie = r.headers["set-cookie"]
        assert cookie.startswith(f"{other}={inspector.token};")
        assert "HttpOnly" in cookie and "samesite=strict" in cookie.lower() and "Path=/" in cookie
        for route in routes:
            assert c.get(route).status_code == 200, route
        assert c.get("/api/memory/" + store.ids["deploy"]).json()["memory"]["id"] == store.ids["deploy"]


def test_read_only_methods_headers_and_host(client: TestClient) -> None:
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        assert client.request(method, "/recall?q=x").status_code == 405
    r = client.get("/")
    assert r.headers["content-security-policy"] == CSP
    assert "http" not in CSP and "*" not in CSP and "unsafe" not in CSP  # this origin only, no inline script
    assert r.headers["cache-control"] == "no-store" and r.headers["referrer-policy"] == "no-referrer"
    # another name for this address (DNS rebinding) is not this app
    assert client.get("/", headers={"host": "evil.example:80"}).status_code == 400
    assert "cdn" not in r.text.lower() and not re.search(r'(?:src|href)="(?:https?:)?//', r.text)


def test_a_hidden_memory_appears_nowhere(client: TestClient, store: Store) -> None:
    pages = crawl(client, store)
    assert len(pages) > 60
    for url, r in pages.items():
        assert r.status_code in (200, 400, 404), (url, r.status_code)
        for marker in MARKERS:
            assert marker not in r.text, f"{marker} in {url}"
    for mid in store.hidden_ids:
        for route in ("/memory/", "/api/memory/", "/graph/", "/api/graph/"):
            r = pages.get(f"{route}{mid}?depth=2") or pages[f"{route}{mid}"]
            assert r.status_code == 404
        # the same answer as for an id that never was
        never = client.get("/api/memory/bob:0000000000000000").json()
        assert client.get(f"/api/memory/{mid}").json()["message"] == never["message"].replace(
            "bob:0000000000000000", mid
        )
    assert pages["/tables?table=private_bob_secret"].status_code == 404
    for params in ({"q": "Qx7"}, {"tag": "Qx7Tag"}, {"q": "Qx7", "status": "all"}):
        assert client.get("/api/memories", params=params).json()["total"] == 0
    hits = client.get("/api/recall", params={"q": HIDDEN["private"], "k": 20, "hops": 3}).json()
    assert not {h["id"] for h in hits["hits"] + hits["near_misses"]} & set(store.hidden_ids)
    refused = client.get("/api/tables?sql=SELECT+body+FROM+private_bob_secret").json()["result"]
    assert refused["error"] == "ScopeViolation" and "may only use tables named" in refused["message"]
    # what alice does see is there: her memories, the shared one, the edge from bob's private memory is not
    listed = {m["id"] for m in client.get("/api/memories?status=all").json()["items"]}
    assert listed == set(store.ids.values())
    oncall = client.get(f"/api/memory/{store.ids['oncall']}").json()
    assert {e["other"] for e in oncall["edges"]} == {store.ids["postgres"], store.ids["todo"]}
    # bob's recall touched a shared memory: alice sees that it happened, not what he asked
    readers = [a for a in client.get(f"/api/memory/{store.ids['oncall']}").json()["accesses"] if a["reader"] == "bob"]
    assert readers and all(a["query"] is None for a in readers)


def _snapshot(engine: DynamicMemoryEngine) -> Any:
    a = engine.agent("alice")
    return [
        (m.id, m.strength, m.access_count, m.last_access, a.accesses(m.id)) for m in a.memories(include_archived=True)
    ]


def test_a_full_crawl_changes_nothing(tmp_path: Path, store: Store) -> None:
    path = tmp_path / "copy.db"
    assert store.path is not None
    shutil.copy(store.path, path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    with open_engine(path, FixedClock(1_770_000_000.0)) as engine:
        before = _snapshot(engine)
        inspector = create_app(viewer(engine))
        with TestClient(inspector.app, base_url=BASE, follow_redirects=False) as c:
            c.get(f"/?token={inspector.token}")
            assert len(crawl(c, store)) > 60
        assert _snapshot(engine) == before
        assert engine.agent("alice").stats() == engine.agent("alice").stats()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest  # byte for byte


def test_the_playground_is_a_dry_run_with_its_score_parts(client: TestClient, store: Store) -> None:
    got = client.get("/api/recall?q=when+does+the+deploy+key+rotate&k=3").json()
    top = got["hits"][0]
    assert top["id"] == store.ids["deploy"] and top["rank"] == 1
    assert [h["rank"] for h in got["hits"]] == [1, 2, 3]
    assert got["near_misses"] and all(not h["selected"] for h in got["near_misses"])
    for h in got["hits"] + got["near_misses"]:
        assert sum(h["parts"].values()) == pytest.approx(h["score"], abs=1e-9)
    page = client.get("/recall?q=when+does+the+deploy+key+rotate&k=3").text
    assert 'id="scores"' in page and "rotates every Monday at 10:00 UTC" in page
    assert client.get("/api/recall?q=x&k=0").status_code == 400
    assert client.get("/recall?q=x&k=abc").status_code == 400


def test_filters_paging_and_tables(client: TestClient, store: Store) -> None:
    todo = client.get("/api/memories?type=todo").json()
    assert [m["id"] for m in todo["items"]] == [store.ids["todo"]] and todo["items"][0]["status"] == "open"
    assert {m["id"] for m in client.get("/api/memories?tag=ops").json()["items"]} == {
        store.ids["deploy"],
        store.ids["oncall"],
    }
    archived = client.get("/api/memories?status=archived").json()["items"]
    assert [m["id"] for m in archived] == [store.ids["old"]]
    assert store.ids["old"] not in {m["id"] for m in client.get("/api/memories").json()["items"]}
    stones = client.get("/api/memories?status=forgotten").json()
    assert stones["kind"] == "tombstones" and [s["reason"] for s in stones["items"]] == ["asked to"]
    assert "555-0100" not in client.get("/?status=forgotten").text  # a tombstone keeps no text
    assert client.get("/api/memories?q=PostgreSQL").json()["total"] == 1
    assert client.get("/api/memories?status=bogus").status_code == 400
    assert client.get("/api/memories?page=0").status_code == 400
    deploy = client.get(f"/api/memory/{store.ids['deploy']}").json()
    assert [v["content"] for v in deploy["history"]] == ["The deploy key rotates every Monday at 09:00 UTC"]
    assert sum(sum(s) for s in deploy["timeline"]["series"].values()) == len(deploy["accesses"]) > 0
    graph = client.get(f"/api/graph/{store.ids['postgres']}?depth=2").json()
    nodes = {e["data"]["id"] for e in graph["elements"] if "source" not in e["data"]}
    assert nodes == {store.ids["postgres"], store.ids["oncall"], store.ids["todo"]}
    one = client.get(f"/api/graph/{store.ids['postgres']}?depth=1").json()
    assert one["nodes"] == 2 and one["edges"] == 1
    tables = client.get("/api/tables").json()["scopes"]
    assert [(s["label"], [t["name"] for t in s["tables"]]) for s in tables] == [
        ("shared", ["shared_notes"]),
        ("private:alice", ["private_alice_scratch"]),
    ]
    p1 = client.get("/api/tables?table=shared_notes").json()["rows"]
    p2 = client.get("/api/tables?table=shared_notes&page=2").json()["rows"]
    assert (len(p1["rows"]), p1["more"], len(p2["rows"]), p2["more"]) == (50, True, 10, False)
    assert p1["columns"] == ["id", "agent_id", "content"] and p2["rows"][-1][2] == "note number 59"
    ok = client.get("/api/tables?sql=SELECT+value+FROM+private_alice_scratch").json()["result"]
    assert ok["scope"] == "private:alice" and ok["rows"] == [["fsync, not the cache"]]
    for sql in ("DELETE FROM shared_notes", "DROP TABLE shared_notes", "SELECT * FROM engram_memories"):
        refused = client.get("/api/tables", params={"sql": sql}).json()["result"]
        assert refused["error"] in ("ValidationError", "ScopeViolation", "ForbiddenDDLError"), refused
    assert client.get("/api/tables?table=shared_notes").json()["rows"]["rows"][0][2] == "note number 0"


def test_without_the_extra_it_says_which(monkeypatch: pytest.MonkeyPatch) -> None:
    from engramdb import inspector

    monkeypatch.setitem(sys.modules, "starlette", None)
    with pytest.raises(MissingExtra) as info:
        inspector.create_app(object())  # type: ignore[arg-type]
    assert info.value.extra == "inspect" and "engramdb[inspect]" in str(info.value)
    from click.testing import CliRunner

    from engramdb.cli.app import cli

    result = CliRunner().invoke(cli, ["--db", "x.db", "inspect"])
    assert result.exit_code == 5 and "inspect" in result.output


def test_the_command_prints_a_tokened_address_on_localhost(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "cli.db"
    assert store.path is not None
    shutil.copy(store.path, path)
    cmd = [sys.executable, "-m", "engramdb", "--embedder", "fake", "inspect", "--db", str(path), "--agent", "alice"]
    proc = subprocess.Popen([*cmd, "--cap", "internal"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        m = re.fullmatch(r"engramdb inspector: (http://127\.0\.0\.1:(\d+)/)\?token=([A-Za-z0-9_-]{43})", line)
        assert m, line
        with httpx.Client(follow_redirects=True, timeout=10) as http:
            assert http.get(m.group(1)).status_code == 403
            page = http.get(line.removeprefix("engramdb inspector: "))
            assert (
                page.status_code == 200
                and "viewing as <b>alice</b>" in page.text
                and "cap <b>internal</b>" in page.text
            )
            assert str(page.url) == m.group(1)
            assert "Qx7" not in http.get(m.group(1) + "api/memories?status=all").text
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
    missing = subprocess.run([*cmd[:6], "--db", str(tmp_path / "nothing.db")], capture_output=True, text=True)
    assert missing.returncode == 4 and "no store at" in missing.stderr
    assert not (tmp_path / "nothing.db").exists()


def test_memory_text_is_data_never_markup(client: TestClient, store: Store) -> None:
    mid = store.ids["markup"]
    for url in ("/", f"/memory/{mid}", f"/graph/{mid}", "/recall?q=pasted+from+a+chat+alert"):
        html = client.get(url).text
        assert "<script>alert" not in html and "<img src=x" not in html and "<b>bold?</b>" not in html, url
        assert "&lt;b&gt;bold?&lt;/b&gt;" in html or url.startswith("/graph/"), url  # shown, as text
    assert "&lt;/script&gt;&lt;script&gt;alert(1)" in client.get(f"/memory/{mid}").text
    api = client.get(f"/api/memory/{mid}")  # JSON keeps the text as it is, served as JSON
    assert api.json()["memory"]["content"] == MARKUP and api.headers["content-type"] == "application/json"
    # inside the page's JSON data block, no closing tag can end the block early
    data = client.get("/recall?q=pasted+from+a+chat+alert").text.split('id="page-data">', 1)[1].split("</script>")[0]
    assert "alert(1)" in data and "<" not in data


@pytest.mark.parametrize(
    "path",
    [
        "//evil.example/",
        "///evil.example/x",
        "/\\evil.example/",
        "/%2F%2Fevil.example/",
        "/%2F/evil.example/",
        "/%5Cevil.example/",
        "/%5C%5Cevil.example/",
        "/%09/evil.example/",
        "/%0A/evil.example/",
        "/https://evil.example/",
    ],
)
def test_the_token_redirect_stays_on_this_server(engine: DynamicMemoryEngine, path: str) -> None:
    """The redirect that takes the token out of the address keeps the path: a path that a browser
    reads as another host (`//evil.example/`, a backslash, a tab) was an open redirect."""
    inspector = create_app(viewer(engine))
    with TestClient(inspector.app, base_url=BASE, follow_redirects=False) as c:
        r = c.get(f"{path}?token={inspector.token}&q=1")
    assert r.status_code == 303
    location = r.headers["location"]
    assert location.startswith("/") and not location.startswith("//")
    assert not any(ch in location for ch in "\\\t\n\r")
    assert urlsplit(urljoin(BASE + "/", location)).netloc == urlsplit(BASE).netloc
    assert location.endswith("?q=1")
