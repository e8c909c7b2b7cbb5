"""The OpenAI-compatible chat client against a local scripted server: the request it sends, the
answers it takes, the failures it retries and the ones it reports."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from engramdb.errors import ConfigError, LLMError
from engramdb.llm import ChatClient
from engramdb.llm.scripted import Answer, ScriptedChatServer

SCHEMA = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}


def serve(*answers: Answer) -> ScriptedChatServer:
    """A server giving `answers` in turn (the last one again when they run out)."""
    given = list(answers)
    lock = threading.Lock()

    def script(body: Mapping[str, Any]) -> Answer:
        with lock:
            return given.pop(0) if len(given) > 1 else given[0]

    return ScriptedChatServer(script)


@pytest.fixture
def waits() -> list[float]:
    return []


def client(server: ScriptedChatServer, waits: list[float], **options: Any) -> ChatClient:
    options.setdefault("timeout", 5.0)
    return ChatClient(server.url, "tiny", sleep=waits.append, **options)


@pytest.fixture
def ok() -> Iterator[ScriptedChatServer]:
    with serve(Answer(content={"x": 1})) as server:
        yield server


def test_json_sends_the_schema_and_returns_the_object(ok: ScriptedChatServer, waits: list[float]) -> None:
    assert client(ok, waits).json("be brief", "hello", name="thing", schema=SCHEMA) == {"x": 1}
    body = ok.requests[0]
    assert body["model"] == "tiny" and body["temperature"] == 0.0
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "thing", "schema": SCHEMA, "strict": True},
    }
    assert body["messages"][0]["role"] == "system" and json.dumps(SCHEMA) in body["messages"][0]["content"]
    assert body["messages"][1] == {"role": "user", "content": "hello"}


@pytest.mark.parametrize(("mode", "expected"), [("json_object", {"type": "json_object"}), ("none", None)])
def test_schema_modes_for_servers_without_structured_output(
    ok: ScriptedChatServer, waits: list[float], mode: str, expected: object
) -> None:
    assert client(ok, waits, schema_mode=mode).json("s", "u", name="n", schema=SCHEMA) == {"x": 1}
    assert ok.requests[0].get("response_format") == expected


def test_a_fenced_json_answer_is_unwrapped(waits: list[float]) -> None:
    with serve(Answer(text='```json\n{"x": 2}\n```')) as server:
        assert client(server, waits).json("s", "u", name="n", schema=SCHEMA) == {"x": 2}


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (Answer(text='{"x": 1'), "not JSON"),
        (Answer(text="[1, 2]"), "not an object"),
        (Answer(raw=b"<html>gateway</html>"), "not a chat completion"),
    ],
)
def test_malformed_answers_are_llm_errors_quoting_them(waits: list[float], answer: Answer, said: str) -> None:
    with serve(answer) as server, pytest.raises(LLMError, match=said) as caught:
        client(server, waits).json("s", "u", name="n", schema=SCHEMA)
    assert caught.value.url == server.url + "/chat/completions"
    assert waits == []  # a malformed answer is not retried by the client (the worker retries the job)


def test_429_and_500_are_retried_with_backoff(waits: list[float]) -> None:
    with serve(Answer(status=429), Answer(status=500), Answer(content={"x": 3})) as server:
        got = client(server, waits, retries=2, backoff=0.5).json("s", "u", name="n", schema=SCHEMA)
    assert got == {"x": 3} and len(server.requests) == 3
    assert waits == [0.5, 1.0]


def test_retries_run_out_with_the_status_in_the_error(waits: list[float]) -> None:
    with serve(Answer(status=503)) as server, pytest.raises(LLMError, match="HTTP 503 after 3 tries") as caught:
        client(server, waits, retries=2).json("s", "u", name="n", schema=SCHEMA)
    assert caught.value.status == 503


def test_a_refused_key_is_not_retried(waits: list[float]) -> None:
    with serve(Answer(status=401)) as server, pytest.raises(LLMError, match="API key") as caught:
        client(server, waits, api_key="sk-wrong", retries=3).json("s", "u", name="n", schema=SCHEMA)
    assert caught.value.status == 401 and len(server.requests) == 1 and waits == []
    assert "sk-wrong" not in str(caught.value)


def test_a_slow_server_is_a_timeout(waits: list[float]) -> None:
    with serve(Answer(content={"x": 1}, delay=1.0)) as server, pytest.raises(LLMError, match="did not answer within"):
        client(server, waits, timeout=0.2, retries=0).json("s", "u", name="n", schema=SCHEMA)


def test_at_most_concurrency_requests_are_in_flight() -> None:
    inside, most = 0, 0
    lock = threading.Lock()

    def script(body: Mapping[str, Any]) -> Answer:
        nonlocal inside, most
        with lock:
            inside += 1
            most = max(most, inside)
        time.sleep(0.1)
        with lock:
            inside -= 1
        return Answer(content={"x": 1})

    with ScriptedChatServer(script) as server:
        llm = ChatClient(server.url, "tiny", concurrency=2, timeout=5.0)
        threads = [threading.Thread(target=llm.json, args=("s", "u"), kwargs={"name": "n", "schema": SCHEMA})
                   for _ in range(6)]  # fmt: skip
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(server.requests) == 6 and most == 2


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"base_url": "ftp://x/v1"}, "http"),
        ({"base_url": "http://u:p@host/v1"}, "credentials"),
        ({"model": " "}, "model"),
        ({"timeout": 0}, "timeout"),
        ({"retries": -1}, "retries"),
        ({"concurrency": 0}, "concurrency"),
        ({"temperature": 3}, "temperature"),
        ({"schema_mode": "xml"}, "schema_mode"),
        ({"api_key": "a", "api_key_env": "B"}, "not both"),
        ({"api_key_env": "ENGRAMDB_TEST_SURELY_UNSET"}, "unset"),
    ],
)
def test_bad_settings_are_config_errors(options: dict[str, Any], said: str) -> None:
    args = {"base_url": "http://localhost:1/v1", "model": "m", **options}
    with pytest.raises(ConfigError, match=said):
        ChatClient(args.pop("base_url"), args.pop("model"), **args)
