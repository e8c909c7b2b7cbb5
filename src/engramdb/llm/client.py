"""A chat client for any OpenAI-compatible ``/chat/completions`` endpoint, standard library only.

OpenAI, Azure OpenAI's v1 route, Ollama, vLLM, llama.cpp's server, LM Studio and a litellm proxy
all take the same request. `ChatClient.json` asks for one JSON object matching a JSON schema
(``response_format: {"type": "json_schema", …}``; servers that only know ``json_object`` — or
none — still get the schema in the prompt, and the answer is parsed and checked here either way)
and returns it parsed. Connection errors, timeouts, HTTP 408/429/5xx are retried with exponential
backoff (`engramdb.embeddings.http.JsonEndpoint`, ``Retry-After`` honoured up to a minute); at most
`concurrency` requests of one client are in flight at once, across threads. Anything else — a
refused key, a 404, an answer that is not JSON or not the schema's object — is an `LLMError` that
says what was wrong.

Example::

    from engramdb.llm import ChatClient

    llm = ChatClient("http://localhost:11434/v1", "qwen2.5:3b")     # Ollama
    llm = ChatClient("https://api.openai.com/v1", "gpt-4o-mini", api_key_env="OPENAI_API_KEY")
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from engramdb.embeddings.http import JsonEndpoint, endpoint, is_int, is_real, quote
from engramdb.errors import ConfigError, LLMError

__all__ = ["ChatClient"]

#: a fenced block some models wrap JSON in despite being asked not to
_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


class ChatClient:
    """One model behind one OpenAI-compatible endpoint; safe to share between threads.

    Args:
        base_url: the server's API root, ending at ``/v1`` (requests go to ``base_url + '/chat/completions'``).
        model: the model name the server knows.
        api_key / api_key_env: a key sent as ``Authorization: Bearer``, or the environment
            variable holding it (read once, here); neither for a local server without keys.
        timeout: seconds to wait for one answer (default 60: a small local model on a CPU is slow).
        retries: further tries after a connection error, a timeout, 408, 429 or a 5xx (default 2).
        backoff: seconds before the first retry, doubled after each (default 1).
        concurrency: the most requests in flight at once (default 4).
        temperature: sampling temperature sent with every request (default 0: repeatable answers).
        schema_mode: ``"json_schema"`` (default: strict structured output), ``"json_object"``
            (servers without schema support) or ``"none"`` (send no response_format at all).
        max_tokens: the longest answer asked for.
        sleep: how to wait between retries (tests pass a fake).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        api_key_env: str | None = None,
        timeout: float = 60.0,
        retries: int = 2,
        backoff: float = 1.0,
        concurrency: int = 4,
        temperature: float = 0.0,
        schema_mode: str = "json_schema",
        max_tokens: int = 1024,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._url, self._shown = endpoint(base_url, "/chat/completions", "http://localhost:11434/v1")
        if not isinstance(model, str) or not model.strip():
            raise ConfigError("model must be a non-empty model name, e.g. 'qwen2.5:3b' or 'gpt-4o-mini'")
        if api_key is not None and api_key_env is not None:
            raise ConfigError("give api_key or api_key_env, not both")
        if api_key_env is not None:
            api_key = os.environ.get(api_key_env)
            if not api_key:
                raise ConfigError(f"the environment variable {api_key_env} (api_key_env) is unset or empty")
        if api_key is not None and (not isinstance(api_key, str) or not api_key):
            raise ConfigError("api_key must be a non-empty string (or None for a server without keys)")
        if not is_real(timeout) or not timeout > 0:
            raise ConfigError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if not is_int(retries) or retries < 0:
            raise ConfigError(f"retries must be a non-negative integer, got {retries!r}")
        if not is_real(backoff) or not backoff >= 0:
            raise ConfigError(f"backoff must be a non-negative number of seconds, got {backoff!r}")
        if not is_int(concurrency) or concurrency < 1:
            raise ConfigError(f"concurrency must be a positive integer, got {concurrency!r}")
        if not is_real(temperature) or not 0 <= temperature <= 2:
            raise ConfigError(f"temperature must be a number in [0, 2], got {temperature!r}")
        if schema_mode not in ("json_schema", "json_object", "none"):
            raise ConfigError(f"schema_mode must be 'json_schema', 'json_object' or 'none', got {schema_mode!r}")
        if not is_int(max_tokens) or max_tokens < 16:
            raise ConfigError(f"max_tokens must be an integer of at least 16, got {max_tokens!r}")
        self.model = model
        self.temperature = float(temperature)
        self.schema_mode = schema_mode
        self.max_tokens = max_tokens
        self._gate = threading.BoundedSemaphore(concurrency)
        self._http = JsonEndpoint(
            self._url, self._shown, key=api_key, timeout=float(timeout), retries=retries, backoff=float(backoff),
            sleep=sleep, error=lambda message, status: LLMError(f"the chat endpoint {self._shown} {message}",
                                                                self._shown, status),
            not_found=f"base_url should end at /v1 (requests go to base_url + '/chat/completions'), and the server "
            f"must have the model {model!r}",
        )  # fmt: skip

    def __repr__(self) -> str:
        return f"ChatClient({self._shown!r}, {self.model!r})"

    @property
    def url(self) -> str:
        """The endpoint, without its query string."""
        return self._shown

    def complete(
        self, messages: Sequence[Mapping[str, str]], *, response_format: Mapping[str, Any] | None = None
    ) -> str:
        """The text of the first choice's message for `messages`; `LLMError` on any failure."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [dict(m) for m in messages],
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        if response_format is not None:
            body["response_format"] = dict(response_format)
        with self._gate:
            raw = self._http.post(body)
        try:
            payload = json.loads(raw)
            content = payload["choices"][0]["message"]["content"]
        except (ValueError, UnicodeDecodeError, KeyError, IndexError, TypeError):
            raise LLMError(
                f"the chat endpoint {self._shown} answered with something that is not a chat completion: {quote(raw)}",
                self._shown,
            ) from None
        if not isinstance(content, str):
            raise LLMError(f"the chat endpoint {self._shown} answered without message text", self._shown)
        return content

    def json(self, system: str, user: str, *, name: str, schema: Mapping[str, Any]) -> dict[str, Any]:
        """Ask for one JSON object matching `schema` (named `name`); the object, or `LLMError`
        when the answer is not a JSON object (the schema's finer rules are the caller's to check)."""
        if self.schema_mode == "json_schema":
            fmt: dict[str, Any] | None = {
                "type": "json_schema",
                "json_schema": {"name": name, "schema": dict(schema), "strict": True},
            }
        elif self.schema_mode == "json_object":
            fmt = {"type": "json_object"}
        else:
            fmt = None
        prompt = f"{system}\n\nAnswer with one JSON object only, matching this JSON schema:\n{json.dumps(schema)}"
        text = self.complete([{"role": "system", "content": prompt}, {"role": "user", "content": user}],
                             response_format=fmt)  # fmt: skip
        return parse_object(text, self._shown)


def parse_object(text: str, url: str) -> dict[str, Any]:
    """`text` as one JSON object (a fenced ```json block unwrapped), else `LLMError` quoting it."""
    fenced = _FENCE.match(text)
    body = fenced.group(1) if fenced else text
    try:
        value = json.loads(body)
    except ValueError:
        raise LLMError(f"the model at {url} answered with text that is not JSON: {quote(text)}", url) from None
    if not isinstance(value, dict):
        raise LLMError(f"the model at {url} answered JSON that is not an object: {quote(text)}", url)
    return value
