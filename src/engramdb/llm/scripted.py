"""A local OpenAI-compatible chat server with scripted answers, for tests and benchmarks.

`ScriptedChatServer` listens on 127.0.0.1 (a free port) and answers ``POST /v1/chat/completions``
with what its `script` says for each request: a function of the request body returning an
`Answer` (a JSON object to send as the message content, raw text, an HTTP status, or a delay
before answering). Every request body is kept in `requests`. `failing` wraps a script so that a
given share of calls fail at random (seeded) with a 500, a 429, malformed JSON or a timeout.

`rule_extractor_script` is a deterministic stand-in for a model, enough to exercise the whole
pipeline: "I live in Paris" → ADD, "I moved to Berlin" → UPDATE of the known "lives in" fact,
"I no longer …" → DELETE of the known fact it names, anything else nothing.

Example::

    with ScriptedChatServer(rule_extractor_script) as server:
        client = ChatClient(server.url, "scripted")
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

__all__ = ["Answer", "ScriptedChatServer", "failing", "rule_extractor_script"]


@dataclass(frozen=True, slots=True)
class Answer:
    """One scripted answer: `content` (a JSON-able object, sent as JSON text) or `text` (sent as
    is), else an HTTP `status` with an error body; `delay` seconds before any of it."""

    content: Any = None
    text: str | None = None
    status: int = 200
    delay: float = 0.0
    raw: bytes | None = None  # a response body sent as is (not a chat completion)


Script = Callable[[Mapping[str, Any]], Answer]


class ScriptedChatServer:
    """A threaded HTTP server on 127.0.0.1 answering chat completions from `script`."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                with outer._lock:
                    outer.requests.append(body)
                if not self.path.endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                answer = outer.script(body)
                if answer.delay:
                    time.sleep(answer.delay)
                if answer.raw is not None:
                    self._send_bytes(answer.status, answer.raw)
                elif answer.status != 200:
                    self._send(answer.status, {"error": {"message": f"scripted failure {answer.status}"}})
                else:
                    text = answer.text if answer.text is not None else json.dumps(answer.content)
                    completion = {
                        "id": "chatcmpl-scripted",
                        "object": "chat.completion",
                        "model": body.get("model", ""),
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                     "finish_reason": "stop"}],
                    }  # fmt: skip
                    self._send(200, completion)

            def _send(self, status: int, payload: Any) -> None:
                self._send_bytes(status, json.dumps(payload).encode())

            def _send_bytes(self, status: int, data: bytes) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (its timeout)
                    pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """The base URL to give `ChatClient` (ends at /v1)."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> ScriptedChatServer:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def failing(script: Script, share: float, *, seed: int = 0, timeout_delay: float = 2.0) -> Script:
    """`script`, with `share` of the calls (seeded) failing as a 500, a 429, malformed JSON or a
    reply slower than `timeout_delay` (a client timeout below it sees a timeout)."""
    rng = random.Random(seed)
    lock = threading.Lock()

    def answer(body: Mapping[str, Any]) -> Answer:
        with lock:
            fail, kind = rng.random() < share, rng.randrange(4)
        if not fail:
            return script(body)
        if kind == 0:
            return Answer(status=500)
        if kind == 1:
            return Answer(status=429)
        if kind == 2:
            return Answer(text='{"decisions": [ {"op": "ADD", "fact": "unterminated')
        return Answer(content={"decisions": []}, delay=timeout_delay)

    return answer


_LIVE = re.compile(r"\bI (?:live|am living) in ([A-Z][\w-]+)")
_MOVE = re.compile(r"\bI (?:moved|have moved|am moving) to ([A-Z][\w-]+)")
_NO_LONGER = re.compile(r"\bI no longer (\w+) ([\w ]+?)[.!]?$")
_LIKE = re.compile(r"\bI (?:like|love|enjoy) ([\w ]+?)[.!]?$")


def _user_input(body: Mapping[str, Any]) -> dict[str, Any]:
    for message in body.get("messages", []):
        if message.get("role") == "user":
            value: dict[str, Any] = json.loads(message["content"])
            return value
    return {}


def rule_extractor_script(body: Mapping[str, Any]) -> Answer:
    """Decisions a careful model would take for the phrasings of the module docstring."""
    given = _user_input(body)
    known = given.get("known_facts", [])
    out: list[dict[str, Any]] = []
    for turn in given.get("turns", []):
        text = str(turn["text"])
        speaker, _, said = text.partition(": ")
        said = said or text
        if m := _LIVE.search(said):
            out.append({"op": "ADD", "fact": f"{speaker} lives in {m.group(1)}", "id": None, "sources": [turn["id"]]})
        elif m := _MOVE.search(said):
            old = next((f for f in known if " lives in " in f["text"] and f["text"].startswith(speaker)), None)
            fact = f"{speaker} lives in {m.group(1)}"
            if old is None:
                out.append({"op": "ADD", "fact": fact, "id": None, "sources": [turn["id"]]})
            else:
                out.append({"op": "UPDATE", "fact": fact, "id": old["id"], "sources": [turn["id"]]})
        elif m := _NO_LONGER.search(said):
            words = m.group(2).split()
            old = next((f for f in known if f["text"].startswith(speaker) and words[-1] in f["text"]), None)
            if old is not None:
                out.append({"op": "DELETE", "fact": "", "id": old["id"], "sources": [turn["id"]]})
        elif m := _LIKE.search(said):
            out.append({"op": "ADD", "fact": f"{speaker} likes {m.group(1)}", "id": None, "sources": [turn["id"]]})
    return Answer(content={"decisions": out})
