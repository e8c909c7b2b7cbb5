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
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from engramdb.embeddings.http import JsonEndpoint, endpoint, is_int, is_real, quote
from engramdb.errors import ConfigError, EmbedderError, MissingExtra

try:
    import numpy as np
except ImportError as exc:  # numpy comes with the "memory" extra, not with the core package
    raise MissingExtra("engramdb.embeddings.openai_compat", "memory") from exc

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["OpenAICompatibleEmbedder"]

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
        self._url, self._shown = endpoint(base_url, "/embeddings", "http://localhost:11434/v1")
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
            if value is not None and (not is_int(value) or value < 1):
                raise ConfigError(f"{label} must be a positive integer or None, got {value!r}")
        if dim is not None and dimensions is not None and dim != dimensions:
            raise ConfigError(f"dim={dim} and dimensions={dimensions} disagree; give one of them")
        if not is_int(batch_size) or batch_size < 1:
            raise ConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
        if not is_int(retries) or retries < 0:
            raise ConfigError(f"retries must be a non-negative integer, got {retries!r}")
        if not is_real(timeout) or not timeout > 0:
            raise ConfigError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if not is_real(backoff) or not backoff >= 0:
            raise ConfigError(f"backoff must be a non-negative number of seconds, got {backoff!r}")
        if not is_real(unrelated_cosine) or not 0.0 <= unrelated_cosine < 1.0:
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
        self._http = JsonEndpoint(
            self._url, self._shown, key=api_key, timeout=self._timeout, retries=retries, backoff=self._backoff,
            sleep=sleep, error=self._error,
            not_found="base_url should end at /v1 (requests go to base_url + '/embeddings'), "
            f"and the server must have the model (Ollama: ollama pull {model})",
        )  # fmt: skip
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
        payload = self._http.post(body)
        return self._parse(payload, len(batch))

    def _parse(self, raw: bytes, count: int) -> npt.NDArray[np.float64]:
        try:
            payload = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise self._error(f"answered with something that is not JSON: {quote(raw)}") from None
        data = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(data, list):
            raise self._error(f'answered without a "data" list of embeddings: {quote(raw)}')
        if len(data) != count:
            raise self._error(f"returned {len(data)} embeddings for {count} texts")
        if not all(isinstance(item, dict) for item in data):
            raise self._error('returned a "data" list whose items are not objects')
        indexes = [item.get("index") for item in data]
        if all(i is None for i in indexes):
            order = list(range(count))  # a server that omits "index" answers in order
        elif sorted(i for i in indexes if is_int(i)) == list(range(count)):
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
        elif isinstance(embedding, list) and all(is_real(x) for x in embedding):
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
