"""`OpenAICompatibleEmbedder` against a real HTTP server on 127.0.0.1 that speaks ``/v1/embeddings``.

The server (a `ThreadingHTTPServer` in a thread) gives deterministic, unnormalised vectors with a
little meaning in them: words of one concept ("dog", "puppy", …) share an axis, so a recall by
meaning finds a memory that shares no word with the query. It records every request and can be
told to fail the next ones. No network beyond loopback; retries never really sleep.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

np = pytest.importorskip("numpy")

from engramdb import DynamicMemoryEngine, EmbedderError, EngineFailure  # noqa: E402
from engramdb.embeddings.base import Embedder  # noqa: E402
from engramdb.embeddings.openai_compat import OpenAICompatibleEmbedder  # noqa: E402
from engramdb.errors import ConfigError  # noqa: E402

DIM = 16
KEY = "sk-test-secret-0123456789"
CONCEPTS = (
    ("dog", "dogs", "puppy", "canine", "hound", "leash"),
    ("pizza", "pasta", "lasagna", "italian", "restaurant"),
    ("violin", "cello", "orchestra", "concert", "music"),
    ("rain", "umbrella", "storm", "weather", "forecast"),
)


def served_vector(text: str, dim: int = DIM) -> list[float]:
    """The server's vector of `text`: concept axes first, hashed other words after; never unit norm."""
    if text == "zero":
        return [0.0] * dim
    v = [0.0] * dim
    for word in text.lower().replace(".", " ").replace(",", " ").split():
        for axis, words in enumerate(CONCEPTS):
            if word in words:
                v[axis] += 5.0
                break
        else:
            h = hashlib.blake2b(word.encode(), digest_size=2).digest()
            v[len(CONCEPTS) + h[0] % (dim - len(CONCEPTS))] += 0.3 if h[1] % 2 else -0.3
    return v


@dataclass
class Server:
    """What the test server was asked, and what it is told to do with the next requests."""

    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    #: one behaviour per coming request: (status, raw body, extra headers), or a callable of the body
    script: list[Any] = field(default_factory=list)
    delay: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def inputs(self) -> list[list[str]]:
        return [r["body"]["input"] for r in self.requests]


def _answer(server: Server, body: dict[str, Any]) -> tuple[int, bytes, dict[str, str]]:
    texts = body["input"]
    dim = body.get("dimensions", DIM)
    data = [{"object": "embedding", "index": i, "embedding": served_vector(t, dim)} for i, t in enumerate(texts)]
    data.reverse()  # out of order on purpose: the client must follow "index"
    payload = {"object": "list", "data": data, "model": body["model"], "usage": {"prompt_tokens": 1}}
    return 200, json.dumps(payload).encode(), {}


@pytest.fixture
def server() -> Iterator[Server]:
    state = Server(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers["Content-Length"]))
            body = json.loads(raw)
            with state.lock:
                state.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                step = state.script.pop(0) if state.script else None
            if state.delay:
                time.sleep(state.delay)
            status: int
            out: bytes
            extra: dict[str, str]
            if self.path != "/v1/embeddings":
                status, out, extra = 404, b'{"error": {"message": "404 page not found"}}', {}
            elif step is None:
                status, out, extra = _answer(state, body)
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
                pass  # the client gave up first (the timeout test)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    # A proxy from the environment must not take the loopback requests elsewhere.
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def make(server: Server, **kw: Any) -> OpenAICompatibleEmbedder:
    kw.setdefault("sleep", Sleeps())
    return OpenAICompatibleEmbedder(kw.pop("base_url", server.url), kw.pop("model", "test-embed"), **kw)


def unit(text: str, dim: int = DIM) -> Any:
    v = np.asarray(served_vector(text, dim), dtype=np.float64)
    return (v / np.linalg.norm(v)).astype(np.float32)


# -- the Embedder contract ---------------------------------------------------------------------


def test_rows_are_unit_norm_float32_in_order_and_batched(server: Server) -> None:
    e = make(server, batch_size=2)
    texts = ["my dog", "pasta tonight", "a cello concert", "storm warning", "the hound barked"]
    out = e.embed(texts)
    assert isinstance(e, Embedder)
    assert out.dtype == np.float32 and out.flags.c_contiguous and out.shape == (5, DIM)
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-6)
    assert np.allclose(out, np.stack([unit(t) for t in texts]), atol=1e-6)  # "index" order, normalised
    assert server.inputs == [texts[0:2], texts[2:4], texts[4:5]]
    body = server.requests[0]["body"]
    assert body["model"] == "test-embed" and body["encoding_format"] == "float" and "dimensions" not in body
    assert server.requests[0]["headers"]["Content-Type"] == "application/json"
    assert "Authorization" not in server.requests[0]["headers"]
    assert e.dim == DIM and len(server.requests) == 3  # learned from the first response


def test_blank_texts_are_zero_rows_and_never_sent(server: Server) -> None:
    e = make(server)
    out = e.embed(["", "my dog", "   ", "zero"])
    assert server.inputs == [["my dog", "zero"]]
    assert not out[0].any() and not out[2].any()
    assert not out[3].any()  # the server's all-zero vector stays all zero
    assert np.allclose(out[1], unit("my dog"))


def test_dim_is_learned_by_one_probe_and_empty_input_needs_no_request(server: Server) -> None:
    e = make(server)
    assert e.dim == DIM and len(server.requests) == 1
    assert e.dim == DIM and len(server.requests) == 1
    assert e.embed([]).shape == (0, DIM) and e.embed(["", " "]).shape == (2, DIM)
    assert len(server.requests) == 1
    known = make(server, dim=DIM)
    assert known.dim == DIM and known.embed([]).shape == (0, DIM) and len(server.requests) == 1


def test_name_is_the_model_and_dimensions_are_sent_only_when_asked(server: Server) -> None:
    assert make(server).name == "openai-compat:test-embed"
    short = make(server, dimensions=8)
    assert short.name == "openai-compat:test-embed@8" and short.dim == 8
    assert short.embed(["my dog"]).shape == (1, 8)
    assert server.requests[-1]["body"]["dimensions"] == 8
    assert make(server, name="mine@2").name == "mine@2"
    assert make(server, unrelated_cosine=0.3).unrelated_cosine == 0.3


def test_the_key_is_sent_as_a_bearer_and_never_shown(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    e = make(server, api_key=KEY)
    e.embed(["my dog"])
    assert server.requests[-1]["headers"]["Authorization"] == f"Bearer {KEY}"
    assert KEY not in repr(e) and KEY not in str(vars(e).get("_shown"))
    monkeypatch.setenv("TEST_EMBED_KEY", "from-env")
    make(server, api_key_env="TEST_EMBED_KEY").embed(["rain"])
    assert server.requests[-1]["headers"]["Authorization"] == "Bearer from-env"
    monkeypatch.delenv("TEST_EMBED_KEY")
    with pytest.raises(ConfigError, match="TEST_EMBED_KEY"):
        make(server, api_key_env="TEST_EMBED_KEY")


# -- a failing endpoint ------------------------------------------------------------------------


def test_a_refused_key_says_so_without_showing_it(server: Server) -> None:
    server.script = [(401, b'{"error": {"message": "Incorrect API key provided"}}', {})]
    with pytest.raises(EmbedderError, match="API key was refused") as caught:
        make(server, api_key=KEY).embed(["my dog"])
    assert caught.value.status == 401 and caught.value.url == server.url + "/embeddings"
    assert "Incorrect API key provided" in str(caught.value) and KEY not in str(caught.value)
    assert isinstance(caught.value, EngineFailure) and len(server.requests) == 1  # not retried
    server.script = [(403, b"", {})]
    with pytest.raises(EmbedderError, match="HTTP 403: it wants an API key and none was given"):
        make(server).embed(["my dog"])


def test_a_wrong_path_says_the_url_should_end_at_v1(server: Server) -> None:
    root = server.url.removesuffix("/v1")
    with pytest.raises(EmbedderError, match="should end at /v1") as caught:
        make(server, base_url=root).embed(["my dog"])
    assert caught.value.status == 404 and f"{root}/embeddings" in str(caught.value)
    assert server.requests[0]["path"] == "/embeddings"


def test_server_errors_and_rate_limits_are_retried_with_backoff(server: Server) -> None:
    sleeps = Sleeps()
    server.script = [(500, b"boom", {}), (429, b"{}", {"Retry-After": "3"})]
    out = make(server, sleep=sleeps).embed(["my dog"])
    assert np.allclose(out[0], unit("my dog")) and len(server.requests) == 3
    assert sleeps == [0.5, 3.0]  # the backoff, then what Retry-After asked for
    server.script = [(503, b'{"error": "loading model"}', {})] * 3
    sleeps.clear()
    with pytest.raises(EmbedderError, match="HTTP 503 after 3 tries; the server said: 'loading model'"):
        make(server, sleep=sleeps).embed(["my dog"])
    assert sleeps == [0.5, 1.0]
    server.script = [(400, b'{"error": {"message": "input too long"}}', {})]
    with pytest.raises(EmbedderError, match="HTTP 400; the server said: 'input too long'"):
        make(server).embed(["my dog"])
    assert len(server.requests) == 7  # 3 + 3 + 1: a 400 is not retried


def test_an_unreachable_server_says_so() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    sleeps = Sleeps()
    e = OpenAICompatibleEmbedder(f"http://127.0.0.1:{port}/v1", "m", sleep=sleeps, retries=1)
    with pytest.raises(EmbedderError, match="not reachable: the connection was refused") as caught:
        e.embed(["my dog"])
    assert f"http://127.0.0.1:{port}/v1/embeddings" in str(caught.value) and caught.value.status is None
    assert sleeps == [0.5]


def test_a_slow_server_times_out(server: Server) -> None:
    server.delay = 0.3
    with pytest.raises(EmbedderError, match=re.escape("did not answer within 0.05 s")):
        make(server, timeout=0.05, retries=0).embed(["my dog"])


def _reply(**changes: Any) -> Any:
    def answer(body: dict[str, Any]) -> dict[str, Any]:
        data = [{"index": i, "embedding": served_vector(t)} for i, t in enumerate(body["input"])]
        payload: dict[str, Any] = {"data": data}
        for key, value in changes.items():
            if key == "data":
                payload["data"] = value(data)
            else:
                payload[key] = value
        return payload

    return answer


@pytest.mark.parametrize(
    ("step", "message"),
    [
        ((200, b"<html>busy</html>", {}), "not JSON: '<html>busy</html>'"),
        (_reply(data=lambda d: None), 'without a "data" list'),
        (_reply(data=lambda d: d[:1]), "returned 1 embeddings for 2 texts"),
        (_reply(data=lambda d: [d[0], {**d[1], "embedding": [1.0] * 5}]), "different lengths"),
        (
            _reply(data=lambda d: [d[0], {**d[1], "embedding": ["x"] * DIM}]),
            "embedding 1 that is not a list of numbers",
        ),
        (_reply(data=lambda d: [d[0], {**d[1], "index": 0}]), '"index" values'),
        (_reply(data=lambda d: [d[0], {**d[1], "embedding": []}]), "no numbers"),
    ],
)
def test_a_malformed_response_is_an_embedder_error(server: Server, step: Any, message: str) -> None:
    server.script = [step]
    with pytest.raises(EmbedderError, match=re.escape("the embedding endpoint http://127.0.0.1:")) as caught:
        make(server).embed(["my dog", "rain"])
    assert message in str(caught.value) and caught.value.status is None


def test_non_finite_numbers_are_refused(server: Server) -> None:
    server.script = [(200, b'{"data": [{"index": 0, "embedding": [NaN, 1.0]}]}', {})]
    with pytest.raises(EmbedderError, match="non-finite"):
        make(server).embed(["my dog"])


def test_a_length_other_than_the_expected_dim_is_refused(server: Server) -> None:
    with pytest.raises(EmbedderError, match=f"vectors of {DIM} dimensions where 8 were expected"):
        make(server, dim=8).embed(["my dog"])
    e = make(server)
    e.embed(["my dog"])
    server.script = [_reply(data=lambda d: [{**x, "embedding": [1.0] * 4} for x in d])]
    with pytest.raises(EmbedderError, match=f"of 4 dimensions where {DIM} were expected"):
        e.embed(["rain"])


def test_bad_arguments_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="http"):
        OpenAICompatibleEmbedder("localhost:11434", "m")
    with pytest.raises(ConfigError, match="credentials") as caught:
        OpenAICompatibleEmbedder("http://user:hunter2@localhost/v1", "m")
    assert "hunter2" not in str(caught.value)
    bad: tuple[dict[str, Any], ...] = (
        {"dim": 0},
        {"batch_size": 0},
        {"retries": -1},
        {"timeout": 0},
        {"dim": 8, "dimensions": 4},
    )
    for kw in bad:
        with pytest.raises(ConfigError):
            OpenAICompatibleEmbedder("http://localhost/v1", "m", **kw)
    with pytest.raises(ConfigError, match="model"):
        OpenAICompatibleEmbedder("http://localhost/v1", " ")
    with pytest.raises(ConfigError, match="not both"):
        OpenAICompatibleEmbedder("http://localhost/v1", "m", api_key="k", api_key_env="K")


# -- through the engine ------------------------------------------------------------------------

MEMORIES = [
    "Our dog sleeps on the sofa every afternoon.",
    "We ordered lasagna at the Italian restaurant.",
    "She plays the cello in a concert on Fridays.",
    "Bring an umbrella: the forecast says storm.",
]


def test_an_engine_recalls_by_meaning_through_the_served_vectors(server: Server, tmp_path: Path) -> None:
    e = make(server)
    with DynamicMemoryEngine(tmp_path / "m.db", memory_embedder=e) as engine:
        agent = engine.agent("writer")
        for text in MEMORIES:
            agent.remember(text)
        hits = agent.recall("walking the puppy on a leash", k=1)  # no word in common with the memory
        assert [h.memory.content for h in hits] == [MEMORIES[0]]
        assert agent.recall("music tonight", k=1)[0].memory.content == MEMORIES[2]
    assert all(r["body"]["model"] == "test-embed" for r in server.requests)


def test_reembed_gives_a_store_of_another_model_the_served_vectors(server: Server, tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with DynamicMemoryEngine(path) as engine:  # the shipped default embedder
        engine.agent("writer").remember_many([{"content": text} for text in MEMORIES])
    assert server.requests == []
    e = make(server)
    stages: list[tuple[str, int, int | None]] = []
    with DynamicMemoryEngine(path, memory_embedder=e) as engine:
        agent = engine.agent("writer")
        assert agent.reembed(progress=lambda stage, done, total: stages.append((stage, done, total))) == 4
        assert stages[0] == ("embed", 0, 4) and stages[-1] == ("embed", 4, 4)
        sent = [t for batch in server.inputs for t in batch]
        assert sorted(t for t in sent if t != "dimension probe") == sorted(MEMORIES)
        assert sent.count("dimension probe") <= 1  # the engine read `dim` before anything was embedded
        store = engine._runtime.store
        keys = store.memories.visible_keys(agent._principal.visibility(include_archived=True))
        rows = store.vectors.cache_rows_for(e.name, keys)
        assert len(rows) == 4 and all(row[9] is not None for row in rows)
        assert agent.reembed() == 0  # every memory has a vector of this model now
        assert agent.recall("walking the puppy on a leash", k=1)[0].memory.content == MEMORIES[0]


def test_a_failed_embedding_stores_nothing_and_fails_the_recall(server: Server, tmp_path: Path) -> None:
    with DynamicMemoryEngine(tmp_path / "m.db", memory_embedder=make(server, retries=0)) as engine:
        agent = engine.agent("writer")
        agent.remember(MEMORIES[0])
        server.script = [(500, b"", {})]
        with pytest.raises(EmbedderError, match="HTTP 500"):
            agent.remember(MEMORIES[1])
        assert [m.content for m in agent.memories()] == [MEMORIES[0]]
        server.script = [(500, b"", {})]
        with pytest.raises(EmbedderError, match="HTTP 500"):
            agent.recall("walking the puppy")
