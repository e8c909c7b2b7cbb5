"""`HttpReranker` against a real HTTP server on 127.0.0.1 that speaks ``/v1/rerank`` or TEI's ``/rerank``.

The server scores a document by the share of the query's words it holds (deterministic, a little
meaning), answers in the shape of the API it plays, and can be told to fail the next requests. No
network beyond loopback; retries never really sleep.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from engramdb import EngineFailure, Reranker, RerankerError
from engramdb.embeddings.rerank import HttpReranker, sigmoid
from engramdb.errors import ConfigError

KEY = "rk-test-secret-0123456789"


def overlap(query: str, text: str) -> float:
    """The server's score: the share of the query's words found in the text."""
    q = set(query.lower().replace("?", "").split())
    return len(q & set(text.lower().replace(".", "").split())) / max(len(q), 1)


@dataclass
class Server:
    root: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    #: one behaviour per coming request: (status, raw body, extra headers), or a callable of the body
    script: list[Any] = field(default_factory=list)
    #: "v1" answers {"results": [...]}, "tei" a bare list, "logit" v1 with raw logits
    mode: str = "v1"
    delay: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return self.root + "/v1"


def _answer(server: Server, body: dict[str, Any]) -> bytes:
    if server.mode == "tei":
        docs = body["texts"]
        out: Any = [{"index": i, "score": overlap(body["query"], d)} for i, d in enumerate(docs)]
    else:
        docs = body["documents"]
        scored = [(i, overlap(body["query"], d)) for i, d in enumerate(docs)]
        if server.mode == "logit":
            scored = [(i, 8.0 * s - 4.0) for i, s in scored]
        scored.sort(key=lambda p: -p[1])  # best first, as these servers answer: the client follows "index"
        out = {"model": body["model"], "results": [{"index": i, "relevance_score": s} for i, s in scored]}
    out_raw: bytes = json.dumps(out).encode()
    return out_raw


@pytest.fixture
def server() -> Iterator[Server]:
    state = Server(root="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with state.lock:
                state.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                step = state.script.pop(0) if state.script else None
            if state.delay:
                time.sleep(state.delay)
            expected = "/rerank" if state.mode == "tei" else "/v1/rerank"
            status: int
            out: bytes
            extra: dict[str, str]
            if self.path != expected:
                status, out, extra = 404, b'{"error": {"message": "no route"}}', {}
            elif step is None:
                status, out, extra = 200, _answer(state, body), {}
            elif callable(step):
                status, out, extra = 200, json.dumps(step(body)).encode(), {}
            else:
                status, out, extra = step
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            for k, v in extra.items():
                self.send_header(k, v)
            self.end_headers()
            try:
                self.wfile.write(out)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    state.root = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def make(server: Server, **kw: Any) -> HttpReranker:
    kw.setdefault("sleep", Sleeps())
    return HttpReranker(kw.pop("base_url", server.url), kw.pop("model", "bge-reranker-test"), **kw)


DOCS = ["Dana owns the grammar spec.", "The customer wants the release on Friday.", "The grammar owners meet Monday."]


def test_scores_follow_the_index_not_the_answer_order(server: Server) -> None:
    r = make(server)
    assert isinstance(r, Reranker)
    assert r.name == "rerank:bge-reranker-test"
    got = r.score("who owns the grammar?", DOCS)
    assert got == [pytest.approx(overlap("who owns the grammar?", d)) for d in DOCS]
    assert got[0] > got[2] > got[1]
    (req,) = server.requests
    assert req["path"] == "/v1/rerank"
    assert req["body"] == {
        "model": "bge-reranker-test",
        "query": "who owns the grammar?",
        "documents": DOCS,
        "top_n": 3,
    }


def test_tei_shape(server: Server) -> None:
    server.mode = "tei"
    r = make(server, base_url=server.root, model="", api="tei")
    assert r.name == "rerank:tei"
    assert r.score("grammar spec", DOCS) == [pytest.approx(overlap("grammar spec", d)) for d in DOCS]
    assert server.requests[0]["body"] == {"query": "grammar spec", "texts": DOCS, "raw_scores": False}


def test_logits_go_through_a_sigmoid_and_are_refused_as_probabilities(server: Server) -> None:
    server.mode = "logit"
    got = make(server, scores="logit").score("grammar spec", DOCS)
    assert got == [pytest.approx(sigmoid(8.0 * overlap("grammar spec", d) - 4.0)) for d in DOCS]
    assert all(0.0 < x < 1.0 for x in got)
    with pytest.raises(RerankerError, match=r"outside \[0, 1\].*scores='logit'"):
        make(server).score("grammar spec", DOCS)


def test_sigmoid_does_not_overflow() -> None:
    assert sigmoid(-1000.0) == 0.0 and sigmoid(1000.0) == 1.0 and sigmoid(0.0) == 0.5
    assert math.isclose(sigmoid(2.0) + sigmoid(-2.0), 1.0)


def test_blank_texts_are_not_sent_and_omitted_texts_score_zero(server: Server) -> None:
    server.script = [lambda body: {"results": [{"index": 1, "relevance_score": 0.9}]}]
    got = make(server).score("grammar", ["", "Dana owns the grammar spec.", "  ", "Friday release"])
    assert got == [0.0, 0.0, 0.0, 0.9]  # index 1 of what was sent is the fourth text
    assert server.requests[0]["body"]["documents"] == ["Dana owns the grammar spec.", "Friday release"]
    assert make(server).score("grammar", ["", " "]) == [0.0, 0.0]
    assert make(server).score(" ", ["some text"]) == [0.0]
    assert len(server.requests) == 1  # nothing to score: no request


def test_retries_429_and_5xx_honouring_retry_after(server: Server) -> None:
    sleeps = Sleeps()
    server.script = [(429, b'{"error": {"message": "slow down"}}', {"Retry-After": "3"}), (503, b"", {})]
    got = make(server, sleep=sleeps).score("grammar", DOCS)
    assert len(got) == 3 and len(server.requests) == 3
    assert sleeps == [3.0, 1.0]


def test_failures_are_typed_and_say_what_to_do(server: Server) -> None:
    server.script = [(500, b'{"error": {"message": "model crashed"}}', {})] * 3
    with pytest.raises(RerankerError, match=r"HTTP 500 after 3 tries.*model crashed") as info:
        make(server).score("q", DOCS)
    assert isinstance(info.value, EngineFailure) and info.value.status == 500
    server.script = [(401, b'{"error": {"message": "bad key"}}', {})]
    with pytest.raises(RerankerError, match="API key was refused") as info:
        make(server, api_key=KEY).score("q", DOCS)
    assert KEY not in str(info.value)
    assert server.requests[-1]["headers"]["Authorization"] == f"Bearer {KEY}"
    with pytest.raises(RerankerError, match="HTTP 404: requests go to base_url \\+ '/rerank'"):
        make(server, base_url=server.root + "/v2").score("q", DOCS)
    for bad, match in (
        (b"<html>", "not JSON"),
        (b'{"results": 3}', '"results" list'),
        (b'{"results": [{"index": 7, "relevance_score": 0.5}]}', "index 7"),
        (b'{"results": [{"index": 0, "relevance_score": 0.5}, {"index": 0, "relevance_score": 0.4}]}', "index 0"),
        (b'{"results": [{"index": 0, "relevance_score": "high"}]}', "not a finite number"),
    ):
        server.script = [(200, bad, {})]
        with pytest.raises(RerankerError, match=match):
            make(server).score("q", DOCS)


def test_an_unreachable_or_slow_server(server: Server) -> None:
    with pytest.raises(RerankerError, match="connection was refused"):
        HttpReranker("http://127.0.0.1:9/v1", "m", retries=0).score("q", DOCS)
    server.delay = 0.5
    with pytest.raises(RerankerError, match=r"did not answer within 0\.1 s"):
        make(server, timeout=0.1, retries=0).score("q", DOCS)


def test_bad_arguments_are_config_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    for kw, match in (
        ({"model": ""}, "non-empty model"),
        ({"api": "cohere2"}, "api must be"),
        ({"scores": "raw"}, "scores must be"),
        ({"timeout": 0}, "timeout"),
        ({"retries": -1}, "retries"),
        ({"api_key": KEY, "api_key_env": "X"}, "not both"),
        ({"api_key_env": "ENGRAMDB_TEST_UNSET_KEY"}, "unset or empty"),
        ({"base_url": "ftp://host/v1"}, "http\\(s\\) URL"),
        ({"base_url": "http://u:p@host/v1"}, "credentials"),
    ):
        monkeypatch.delenv("ENGRAMDB_TEST_UNSET_KEY", raising=False)
        args: dict[str, Any] = {"base_url": "http://localhost:8000/v1", "model": "m", **kw}
        with pytest.raises(ConfigError, match=match):
            HttpReranker(args.pop("base_url"), args.pop("model"), **args)
    r = HttpReranker("http://localhost:8000/v1", "m")
    with pytest.raises(TypeError):
        r.score("q", "one text")
    with pytest.raises(TypeError):
        r.score("q", [1])  # type: ignore[list-item]
