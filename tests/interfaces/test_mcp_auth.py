"""The HTTP MCP server's walls, attacked over real HTTP: no memory leaves without a valid token
for the agent it belongs to, and no request with a foreign Host or Origin is served.

A uvicorn server runs the app in a thread on a loopback port; requests are raw JSON-RPC over
HTTP (httpx), as any client or attacker would send them.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engramdb import Confidentiality, ConfigError, DynamicMemoryEngine
from engramdb.testing import FixedClock, fake_embedder

pytest.importorskip("mcp", reason="the MCP server needs the mcp extra")
httpx = pytest.importorskip("httpx")
jwt = pytest.importorskip("jwt")
uvicorn = pytest.importorskip("uvicorn")

from engramdb.mcp.auth import Identity, JwtTokens, StaticToken  # noqa: E402
from engramdb.mcp.server import http_app  # noqa: E402

pytestmark = pytest.mark.sqlite_only  # the store under the server is a SQLite file

NOW = 1_900_000_000.0
ISSUER = "https://issuer.test"
STATIC = "s3cret-token-0123456789abcdef-XYZ"
SECRET = b"an-hs256-secret-of-at-least-32-bytes!!"
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
MARKS = {"alice": "alicemarkq", "bob": "bobmarkq", "globex": "globexmarkq", "secret": "confmarkq"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    """A uvicorn server in a thread, on `port`, serving `app`."""

    def __init__(self, app: Any, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}/mcp"
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def __enter__(self) -> Served:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[DynamicMemoryEngine]:
    eng = DynamicMemoryEngine(tmp_path / "m.db", clock=FixedClock(NOW - 3600), memory_embedder=fake_embedder())
    eng.agent("alice", tenant="acme").remember(f"alice private note {MARKS['alice']}")
    eng.agent("bob", tenant="acme").remember(f"bob private note {MARKS['bob']}")
    eng.agent("alice", tenant="globex").remember(f"globex note {MARKS['globex']}", shared=True)
    eng.agent("alice", tenant="acme").remember(
        f"alice confidential note {MARKS['secret']}", confidentiality=Confidentiality.CONFIDENTIAL
    )
    yield eng
    eng.close()


def _events(response: Any) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a response (JSON, or server-sent events)."""
    if response.headers.get("content-type", "").startswith("application/json"):
        return [response.json()]
    out = []
    for line in response.text.splitlines():
        if line.startswith("data:") and line[5:].strip():
            out.append(json.loads(line[5:]))
    return out


def _post(url: str, body: dict[str, Any], headers: dict[str, str]) -> Any:
    return httpx.post(url, json=body, headers={**ACCEPT, **headers}, timeout=30)


def _initialize(url: str, headers: dict[str, str]) -> Any:
    return _post(
        url,
        {
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
        },
        headers,
    )  # fmt: skip


def _recall_text(url: str, headers: dict[str, str], query: str = "note") -> str:
    """Initialise a session and call recall; everything the server answered, as one text."""
    init = _initialize(url, headers)
    if init.status_code != 200:
        return f"HTTP {init.status_code}"
    session = {"Mcp-Session-Id": init.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-06-18", **headers}
    _post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    call = _post(
        url,
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "recall", "arguments": {"query": query}},
        },
        session,
    )
    return json.dumps(_events(call)) if call.status_code == 200 else f"HTTP {call.status_code}"


def _leaked(text: str) -> set[str]:
    return {who for who, mark in MARKS.items() if mark in text}


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _token(key: Any = SECRET, algorithm: str = "HS256", **claims: Any) -> str:
    body = {"iss": ISSUER, "aud": "", "sub": "alice", "tenant": "acme", "exp": NOW + 600, "iat": NOW - 10, **claims}
    token: str = jwt.encode({k: v for k, v in body.items() if v is not None}, key, algorithm=algorithm)
    return token


# -- static token -----------------------------------------------------------------------------------


def test_a_static_token_server_refuses_every_request_without_the_token(engine: DynamicMemoryEngine) -> None:
    port = _free_port()
    app = http_app(engine.agent("alice", tenant="acme"), host="127.0.0.1", port=port, verifier=StaticToken(STATIC))
    with Served(app, port) as srv:
        for headers in ({}, _bearer("wrong"), _bearer(STATIC[:-1]), {"Authorization": STATIC}, _bearer(STATIC + "x")):
            init = _initialize(srv.url, headers)
            assert init.status_code == 401, headers
            assert init.headers["www-authenticate"].lower().startswith("bearer")
            assert _leaked(_recall_text(srv.url, headers)) == set()
        text = _recall_text(srv.url, _bearer(STATIC))
        assert _leaked(text) == {"alice", "secret"}, text


def test_a_static_token_must_be_long(engine: DynamicMemoryEngine) -> None:
    for weak in ("", "short", " " + STATIC):
        with pytest.raises(ConfigError):
            StaticToken(weak)


# -- JWTs that name the agent ------------------------------------------------------------------------


@pytest.fixture
def jwt_server(engine: DynamicMemoryEngine) -> Iterator[Served]:
    port = _free_port()
    audience = f"http://127.0.0.1:{port}/mcp"
    verifier = JwtTokens(SECRET, algorithms=["HS256"], issuer=ISSUER, audience=audience, clock=lambda: NOW)
    ceiling = engine.agent("server", tenant="acme", cap=Confidentiality.CONFIDENTIAL)

    def agents(who: Identity) -> Any:
        return engine.agent(who.agent_id, tenant=who.tenant, cap=who.cap)

    app = http_app(ceiling, host="127.0.0.1", port=port, verifier=verifier, agents=agents)
    with Served(app, port) as srv:
        yield srv


def test_each_token_reads_as_the_agent_it_names_and_no_other(jwt_server: Served) -> None:
    aud = jwt_server.url
    text = _recall_text(aud, _bearer(_token(aud=aud)))
    assert _leaked(text) == {"alice", "secret"}, text
    assert _leaked(_recall_text(aud, _bearer(_token(aud=aud, sub="bob")))) == {"bob"}
    assert _leaked(_recall_text(aud, _bearer(_token(aud=aud, tenant="globex")))) == {"globex"}
    assert _leaked(_recall_text(aud, _bearer(_token(aud=aud, cap="public")))) == {"alice"}
    # a cap above the server's (confidential) is held to it: still only what alice may read there
    assert _leaked(_recall_text(aud, _bearer(_token(aud=aud, cap="restricted")))) == {"alice", "secret"}


BAD_TOKENS: dict[str, Callable[[str], str | None]] = {
    "missing": lambda aud: None,
    "garbage": lambda aud: "not.a.jwt",
    "forged-key": lambda aud: _token(key=b"another-secret-of-at-least-32-bytes!!!", aud=aud),
    "expired": lambda aud: _token(aud=aud, exp=NOW - 3600),
    "wrong-audience": lambda aud: _token(aud="http://127.0.0.1:1/mcp"),
    "no-audience": lambda aud: _token(aud=None),
    "wrong-issuer": lambda aud: _token(aud=aud, iss="https://evil.example"),
    "no-subject": lambda aud: _token(aud=aud, sub=None),
    "no-expiry": lambda aud: _token(aud=aud, exp=None),
    "bad-agent-id": lambda aud: _token(aud=aud, sub="Alice_Admin"),
    "bad-cap": lambda aud: _token(aud=aud, cap="everything"),
    "bad-tenant": lambda aud: _token(aud=aud, tenant=""),
    "not-yet-valid": lambda aud: _token(aud=aud, nbf=NOW + 3600),
    "issued-in-the-future": lambda aud: _token(aud=aud, iat=NOW + 3600),
    "text-expiry": lambda aud: _token(aud=aud, exp=str(NOW + 600)),
    "alg-none": lambda aud: jwt.encode(
        {"iss": ISSUER, "aud": aud, "sub": "alice", "tenant": "acme", "exp": NOW + 600}, None, algorithm="none"
    ),
}


@pytest.mark.parametrize("kind", sorted(BAD_TOKENS))
def test_a_bad_token_reads_nothing(jwt_server: Served, kind: str) -> None:
    token = BAD_TOKENS[kind](jwt_server.url)
    headers = {} if token is None else _bearer(token)
    assert _initialize(jwt_server.url, headers).status_code == 401
    assert _leaked(_recall_text(jwt_server.url, headers)) == set()


def test_a_session_opened_with_one_token_cannot_be_used_with_another(jwt_server: Served) -> None:
    aud = jwt_server.url
    alice = _bearer(_token(aud=aud))
    init = _initialize(aud, alice)
    assert init.status_code == 200
    hijack = {"Mcp-Session-Id": init.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-06-18"}
    bob = _bearer(_token(aud=aud, sub="bob"))
    call = _post(
        aud,
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "recall", "arguments": {"query": "note"}},
        },
        {**hijack, **bob},
    )
    assert call.status_code in (403, 404)
    assert _leaked(call.text) == set()


def test_the_server_publishes_where_tokens_come_from(jwt_server: Served) -> None:
    init = _initialize(jwt_server.url, {})
    assert "resource_metadata=" in init.headers["www-authenticate"]
    meta = httpx.get(f"http://127.0.0.1:{jwt_server.port}/.well-known/oauth-protected-resource/mcp", timeout=30)
    assert meta.status_code == 200
    assert meta.json()["authorization_servers"] == [ISSUER + "/"] or meta.json()["authorization_servers"] == [ISSUER]


def test_rs256_tokens_from_the_issuers_public_key(engine: DynamicMemoryEngine) -> None:
    pytest.importorskip("cryptography")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    port = _free_port()
    aud = f"http://127.0.0.1:{port}/mcp"
    verifier = JwtTokens(public, algorithms=["RS256"], issuer=ISSUER, audience=aud, clock=lambda: NOW)
    app = http_app(
        engine.agent("server", tenant="acme"), host="127.0.0.1", port=port, verifier=verifier,
        agents=lambda who: engine.agent(who.agent_id, tenant=who.tenant, cap=who.cap),
    )  # fmt: skip
    with Served(app, port) as srv:
        assert _leaked(_recall_text(srv.url, _bearer(_token(private, "RS256", aud=aud)))) == {"alice", "secret"}
        # the public key used as an HS secret (the classic algorithm confusion) is refused
        confused = jwt.api_jws.PyJWS().encode(
            json.dumps({"iss": ISSUER, "aud": aud, "sub": "alice", "exp": NOW + 600}).encode(), b"x" * 32, "HS256"
        )
        assert _initialize(srv.url, _bearer(confused)).status_code == 401
    with pytest.raises(ConfigError, match="PEM"):
        JwtTokens(public, algorithms=["HS256"], issuer=ISSUER, audience=aud)


# -- Host, Origin, and where the server may listen ----------------------------------------------------


def test_foreign_host_and_origin_are_refused_before_anything_runs(engine: DynamicMemoryEngine) -> None:
    port = _free_port()
    app = http_app(
        engine.agent("alice", tenant="acme"), host="127.0.0.1", port=port, verifier=StaticToken(STATIC),
        allowed_origins=["https://app.example"],
    )  # fmt: skip
    with Served(app, port) as srv:
        ok = _bearer(STATIC)
        assert _initialize(srv.url, {**ok, "Host": "evil.example"}).status_code == 421
        assert _initialize(srv.url, {**ok, "Host": f"evil.example:{port}"}).status_code == 421
        assert _initialize(srv.url, {**ok, "Origin": "http://evil.example"}).status_code == 403
        assert _initialize(srv.url, {**ok, "Origin": f"http://127.0.0.1.evil.example:{port}"}).status_code == 403
        assert _initialize(srv.url, {**ok, "Origin": "https://app.example"}).status_code == 200
        assert _initialize(srv.url, {**ok, "Origin": f"http://localhost:{port}"}).status_code == 200


def test_loopback_without_a_token_still_checks_host_and_origin(engine: DynamicMemoryEngine) -> None:
    port = _free_port()
    app = http_app(engine.agent("alice", tenant="acme"), host="127.0.0.1", port=port)
    with Served(app, port) as srv:
        assert _initialize(srv.url, {"Host": "evil.example"}).status_code == 421
        assert _initialize(srv.url, {"Origin": "http://evil.example"}).status_code == 403
        assert _leaked(_recall_text(srv.url, {})) == {"alice", "secret"}


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.10", "mem.example"])
def test_listening_beyond_loopback_without_a_token_is_refused(engine: DynamicMemoryEngine, host: str) -> None:
    with pytest.raises(ConfigError, match="without authentication"):
        http_app(engine.agent("alice"), host=host, port=8765)


def test_the_cli_refuses_to_listen_beyond_loopback_without_a_token(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from engramdb.cli.app import cli

    base = ["--db", str(tmp_path / "m.db"), "--agent", "alice", "--embedder", "none", "mcp", "--transport", "http"]
    cases = [
        (["--host", "0.0.0.0"], {}, "without authentication"),
        (["--token-env", "EDB_TOKEN"], {}, "EDB_TOKEN"),
        (["--token-env", "EDB_TOKEN"], {"EDB_TOKEN": "short"}, "at least 32 bytes"),
        (["--issuer", ISSUER], {}, "--jwt-key"),
    ]
    for extra, env, said in cases:
        result = CliRunner().invoke(cli, [*base, *extra], env=env)
        assert result.exit_code != 0, extra
        assert said in result.output, (extra, result.output)
