"""`OpenAICompatibleEmbedder`: vectors from any server that speaks OpenAI's ``/v1/embeddings``.

OpenAI, Ollama, vLLM, the llama.cpp server, LM Studio and others answer ``POST
{base_url}/embeddings`` with ``{"model": ..., "input": [texts]}`` by ``{"data": [{"index": i,
"embedding": [floats]}, ...]}``. This module talks to them with the standard library alone
(`urllib.request` and `json`): HTTP with JSON needs nothing more, so there is no new dependency
and no extra beyond ``memory`` (numpy, for the arrays).

Usage::

    from engramdb import DynamicMemoryEngine
    from engramdb.embeddings.openai_compat import OpenAICompatibleEmbedder

    ollama = OpenAICompatibleEmbedder("http://localhost:11434/v1", "nomic-embed-text")
    engine = DynamicMemoryEngine("team.db", memory_embedder=ollama)

Unlike the shipped embedders this one makes network requests; the server's vectors are taken as
deterministic (embedding models are), and the same text must give the same vector every time.
"""

from __future__ import annotations

import base64
import json
import math
import os
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from engramdb.errors import ConfigError, EmbedderError, MissingExtra

try:
    import numpy as np
except ImportError as exc:  # numpy comes with the "memory" extra, not with the core package
    raise MissingExtra("engramdb.embeddings.openai_compat", "memory") from exc

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["OpenAICompatibleEmbedder"]

#: HTTP statuses worth another try: rate limited, or the server failed or is starting up.
_RETRIED = frozenset({408, 429, 500, 502, 503, 504})
#: the longest wait one retry honours from a ``Retry-After`` header, in seconds
_MAX_RETRY_AFTER = 60.0
#: the most characters of a server's error body quoted in a message
_QUOTE = 300
#: the text embedded to learn the dimension when it is asked for before any embedding
_PROBE = "dimension probe"


class OpenAICompatibleEmbedder:
    """Embeds texts through an OpenAI-compatible ``/v1/embeddings`` endpoint; an `Embedder`.

    Args:
        base_url: the API root, ending at ``/v1``: ``"http://localhost:11434/v1"`` (Ollama),
            ``"https://api.openai.com/v1"``, ``"http://localhost:8000/v1"`` (vLLM). Requests go
            to ``base_url + "/embeddings"``.
        model: the model the server should use, sent as ``"model"`` (e.g. ``"nomic-embed-text"``,
            ``"text-embedding-3-small"``).
        api_key: sent as ``Authorization: Bearer <key>``; none by default (local servers).
        api_key_env: instead of `api_key`, the name of an environment variable to read it from,
            once, here (e.g. ``"OPENAI_API_KEY"``); `ConfigError` when it is unset or empty.
        dim: the dimension the vectors must have; None (default) learns it from the first
            response, and a later response of another length is an `EmbedderError`.
        dimensions: ask the server for vectors of this length (sent as ``"dimensions"``, which
            only some models honour, e.g. OpenAI's ``text-embedding-3-*``); not sent by default.
        batch_size: texts per request (default 64).
        timeout: seconds to wait for one response (default 30).
        retries: further tries after a connection error, a timeout, HTTP 429 or a 5xx (default 2),
            waiting `backoff` seconds, then twice that, and so on (or what ``Retry-After`` says, up
            to a minute).
        backoff: seconds before the first retry (default 0.5).
        unrelated_cosine: the typical cosine of two unrelated texts under this model (default 0);
            recall's absolute relevance counts only similarity above it (see `Hit.relevance`).
            Models differ widely (roughly 0.1 to 0.5): measure yours on texts you know to be
            unrelated.
        name: the identifier stored beside every vector, instead of the derived one (below).
        sleep: how to wait between retries (tests pass a function that records and returns).

    **The name.** ``"openai-compat:<model>"``, plus ``"@<dimensions>"`` when `dimensions` is
    given (a shortened vector is another vector). The server's address is not part of it: the model
    name identifies the vectors, and two servers serving one model give vectors that may be
    compared, so a store can move from one to another (a laptop's Ollama, a team's vLLM) without
    re-embedding. Pass `name` when that is not so — a quantised copy of a model, or a tag such as
    Ollama's ``:latest`` that may come to mean another model — and change it whenever the
    vectors change, then `Agent.reembed`.

    **The dimension.** Reading `dim` before anything was embedded, with no `dim` or `dimensions`
    given, makes one request (embedding a short probe text) to learn it.

    Every row is L2-normalised here (many servers return unnormalised vectors); an all-zero
    vector stays all zero. Empty and blank texts are not sent (OpenAI refuses them): their rows are
    all zero. A failing endpoint raises `EmbedderError` naming the URL (never the key) and what
    was wrong. One instance may be shared by threads.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        api_key_env: str | None = None,
        dim: int | None = None,
        dimensions: int | None = None,
        batch_size: int = 64,
        timeout: float = 30.0,
        retries: int = 2,
        backoff: float = 0.5,
        unrelated_cosine: float = 0.0,
        name: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._url, self._shown = _endpoint(base_url)
        if not isinstance(model, str) or not model.strip():
            raise ConfigError("model must be a non-empty model name, e.g. 'nomic-embed-text'")
        if api_key is not None and api_key_env is not None:
            raise ConfigError("give api_key or api_key_env, not both")
        if api_key_env is not None:
            api_key = os.environ.get(api_key_env)
            if not api_key:
                raise ConfigError(f"the environment variable {api_key_env} (api_key_env) is unset or empty")
        if api_key is not None and (not isinstance(api_key, str) or not api_key):
            raise ConfigError("api_key must be a non-empty string (or None for a server without keys)")
        for label, value in (("dim", dim), ("dimensions", dimensions)):
            if value is not None and (not _is_int(value) or value < 1):
                raise ConfigError(f"{label} must be a positive integer or None, got {value!r}")
        if dim is not None and dimensions is not None and dim != dimensions:
            raise ConfigError(f"dim={dim} and dimensions={dimensions} disagree; give one of them")
        if not _is_int(batch_size) or batch_size < 1:
            raise ConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
        if not _is_int(retries) or retries < 0:
            raise ConfigError(f"retries must be a non-negative integer, got {retries!r}")
        if not _is_real(timeout) or not timeout > 0:
            raise ConfigError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if not _is_real(backoff) or not backoff >= 0:
            raise ConfigError(f"backoff must be a non-negative number of seconds, got {backoff!r}")
        if not _is_real(unrelated_cosine) or not 0.0 <= unrelated_cosine < 1.0:
            raise ConfigError(f"unrelated_cosine must be a number in [0, 1), got {unrelated_cosine!r}")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ConfigError("name must be a non-empty string or None")
        self._model = model
        self._key = api_key
        self._dimensions = dimensions
        self._dim = dim if dim is not None else dimensions
        self._dim_lock = threading.Lock()
        self._batch = batch_size
        self._timeout = float(timeout)
        self._retries = retries
        self._backoff = float(backoff)
        self._sleep = sleep
        self._name = name or (f"openai-compat:{model}" + (f"@{dimensions}" if dimensions else ""))
        #: see `engramdb.embeddings.base`; 0 unless given
        self.unrelated_cosine = float(unrelated_cosine)

    def __repr__(self) -> str:
        return f"OpenAICompatibleEmbedder({self._shown!r}, {self._model!r}, dim={self._dim!r})"

    @property
    def name(self) -> str:
        """Identifier stored beside every vector: ``"openai-compat:<model>"`` unless given."""
        return self._name

    @property
    def model(self) -> str:
        """The model name sent to the server."""
        return self._model

    @property
    def url(self) -> str:
        """The endpoint requests go to (without its query string)."""
        return self._shown

    @property
    def dim(self) -> int:
        """Vector dimension; the first read makes one request when it is not known yet."""
        dim = self._dim
        if dim is None:
            dim = self._learn(self._request([_PROBE]))
        return dim

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed texts: C-contiguous float32 ``(len(texts), dim)``, rows unit-norm or all zero.

        Texts are sent `batch_size` at a time, in order; blank texts are not sent.

        Raises:
            EmbedderError: the server is not reachable, refused the request or the key, or
                answered with something that is not a valid embedding response.
        """
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not a single str")
        texts = list(texts)
        for text in texts:
            if not isinstance(text, str):
                raise TypeError(f"embed() takes texts (str), got {type(text).__name__}")
        sent = [i for i, text in enumerate(texts) if text.strip()]
        parts: list[npt.NDArray[np.float64]] = []
        for start in range(0, len(sent), self._batch):
            part = self._request([texts[i] for i in sent[start : start + self._batch]])
            self._learn(part)
            parts.append(part)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if parts:
            vectors = np.concatenate(parts)
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            np.divide(vectors, norms, out=vectors, where=norms > 0)
            out[np.asarray(sent, dtype=np.intp)] = vectors
        return out

    # -- one request ---------------------------------------------------------------------------

    def _learn(self, vectors: npt.NDArray[np.float64]) -> int:
        """Take the dimension from the first response (and return it); refuse another one."""
        with self._dim_lock:
            if self._dim is None:
                self._dim = int(vectors.shape[1])
            dim = self._dim
        if vectors.shape[1] != dim:
            raise self._error(
                f"returned vectors of {vectors.shape[1]} dimensions where {dim} were expected "
                "(another model behind the same name? give that model a name of its own and reembed)"
            )
        return dim

    def _request(self, batch: list[str]) -> npt.NDArray[np.float64]:
        """The server's vectors of `batch` (float64, in `batch`'s order, not yet normalised)."""
        body: dict[str, Any] = {"model": self._model, "input": batch, "encoding_format": "float"}
        if self._dimensions is not None:
            body["dimensions"] = self._dimensions
        payload = self._post(body)
        return self._parse(payload, len(batch))

    def _post(self, body: dict[str, Any]) -> bytes:
        """POST `body` to the endpoint, retrying what may pass; the response body."""
        data = json.dumps(body).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._key is not None:
            headers["Authorization"] = f"Bearer {self._key}"
        for attempt in range(self._retries + 1):
            last = attempt == self._retries
            wait = self._backoff * 2**attempt
            request = urllib.request.Request(self._url, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self._timeout) as response:
                    raw: bytes = response.read()
                    return raw
            except urllib.error.HTTPError as exc:
                status, said, retry_after = exc.code, _server_said(exc), exc.headers.get("Retry-After")
                exc.close()
                if status in _RETRIED and not last:
                    self._sleep(_retry_after(retry_after, wait))
                    continue
                raise self._http_error(status, said, attempts=attempt + 1) from None
            except OSError as exc:  # URLError, refused or reset connections, timeouts
                if not last:
                    self._sleep(wait)
                    continue
                tries = f" ({attempt + 1} tries)" if attempt else ""
                raise self._error(_unreachable(exc, self._timeout) + tries) from None
        raise AssertionError("unreachable: the last try returns or raises")

    def _http_error(self, status: int, said: str, *, attempts: int) -> EmbedderError:
        quoted = f"; the server said: {said}" if said else ""
        if status in (401, 403):
            key = "the API key was refused" if self._key is not None else "it wants an API key and none was given"
            return self._error(f"answered HTTP {status}: {key} (pass api_key= or api_key_env=){quoted}", status)
        if status == 404:
            return self._error(
                "answered HTTP 404: base_url should end at /v1 (requests go to base_url + '/embeddings'), "
                f"and the server must have the model (Ollama: ollama pull {self._model}){quoted}",
                status,
            )
        tries = f" after {attempts} tries" if attempts > 1 else ""
        return self._error(f"answered HTTP {status}{tries}{quoted}", status)

    def _parse(self, raw: bytes, count: int) -> npt.NDArray[np.float64]:
        try:
            payload = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise self._error(f"answered with something that is not JSON: {_quote(raw)}") from None
        data = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(data, list):
            raise self._error(f'answered without a "data" list of embeddings: {_quote(raw)}')
        if len(data) != count:
            raise self._error(f"returned {len(data)} embeddings for {count} texts")
        if not all(isinstance(item, dict) for item in data):
            raise self._error('returned a "data" list whose items are not objects')
        indexes = [item.get("index") for item in data]
        if all(i is None for i in indexes):
            order = list(range(count))  # a server that omits "index" answers in order
        elif sorted(i for i in indexes if _is_int(i)) == list(range(count)):
            order = [int(i) for i in indexes if i is not None]
        else:
            raise self._error(f'returned "index" values {indexes[:10]} that are not 0..{count - 1} each once')
        rows: list[npt.NDArray[np.float64]] = [np.empty(0)] * count
        for position, item in zip(order, data, strict=True):
            rows[position] = self._vector(item.get("embedding"), position)
        lengths = {len(row) for row in rows}
        if len(lengths) != 1:
            raise self._error(f"returned embeddings of different lengths {sorted(lengths)} in one response")
        return np.stack(rows)

    def _vector(self, embedding: object, position: int) -> npt.NDArray[np.float64]:
        if isinstance(embedding, str):  # encoding_format "base64": little-endian float32
            try:
                vector = np.frombuffer(base64.b64decode(embedding, validate=True), dtype="<f4").astype(np.float64)
            except ValueError:
                raise self._error(f"returned embedding {position} as a string that is not base64 float32") from None
        elif isinstance(embedding, list) and all(_is_real(x) for x in embedding):
            try:
                vector = np.asarray(embedding, dtype=np.float64)
            except OverflowError:  # an integer past float64's range
                raise self._error(f"returned embedding {position} with a number out of range") from None
        else:
            raise self._error(f"returned embedding {position} that is not a list of numbers")
        if vector.size == 0:
            raise self._error(f"returned embedding {position} with no numbers")
        if not np.isfinite(vector).all():
            raise self._error(f"returned embedding {position} with non-finite numbers (NaN or infinity)")
        return vector

    def _error(self, what: str, status: int | None = None) -> EmbedderError:
        return EmbedderError(
            f"the embedding endpoint {self._shown} (model {self._model!r}) {what}", self._shown, status
        )


def _unreachable(exc: BaseException, timeout: float) -> str:
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return f"did not answer within {timeout:g} s (a slow model? raise timeout=)"
    if isinstance(reason, ConnectionRefusedError):
        return "is not reachable: the connection was refused (is the server running, at that host and port?)"
    if isinstance(reason, socket.gaierror):
        return f"is not reachable: its host name does not resolve ({reason})"
    return f"is not reachable: {reason}"


def _server_said(exc: urllib.error.HTTPError) -> str:
    """The error message of an HTTP error's body (OpenAI's ``{"error": {"message": ...}}``)."""
    try:
        raw = exc.read()
    except OSError:
        return ""
    try:
        payload = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return _quote(raw) if raw.strip() else ""
    error = payload.get("error", payload) if isinstance(payload, dict) else payload
    message = error.get("message", error) if isinstance(error, dict) else error
    return _quote(message if isinstance(message, str) else json.dumps(message))


def _retry_after(header: str | None, default: float) -> float:
    try:
        seconds = float(header) if header is not None else default
    except ValueError:  # an HTTP date: rare for these servers; keep the backoff
        return default
    return min(max(seconds, 0.0), _MAX_RETRY_AFTER) if math.isfinite(seconds) else default


def _endpoint(base_url: object) -> tuple[str, str]:
    """The endpoint URL, and the same without its query (which may hold a key) for messages."""
    if not isinstance(base_url, str):
        raise ConfigError(f"base_url must be a URL string, got {type(base_url).__name__}")
    parts = urllib.parse.urlsplit(base_url.strip())
    if "@" in parts.netloc:  # never echoed: it holds a password
        raise ConfigError("base_url must not carry credentials (user:password@host); pass api_key= or api_key_env=")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        shown = urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
        raise ConfigError(
            f"base_url must be an http(s) URL ending at /v1, e.g. http://localhost:11434/v1; got {shown!r}"
        )
    path = parts.path.rstrip("/") + "/embeddings"
    url = urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))
    return url, urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def _quote(text: object) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    s = " ".join(str(text).split())
    return repr(s if len(s) <= _QUOTE else s[:_QUOTE] + "…")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
