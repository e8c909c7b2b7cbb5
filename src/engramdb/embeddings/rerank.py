"""Rerankers: a second model that scores (query, memory) pairs, and one that asks a server.

A `Reranker` re-scores recall's best candidates before ACT-R combines relevance with recency,
importance and spreading (`DynamicMemoryEngine(reranker=...)`, `ScoringConfig.rerank_top` and
`rerank_weight`). Cross-encoders (a model reading query and passage together) are the usual ones:
slower than an embedder, better at telling an answer from a passage that shares its words.

Invariants every implementation keeps:

- `score(query, texts)` returns one float per text, in the texts' order, each in ``[0, 1]``
  (higher means more relevant; a cross-encoder's logit goes through a sigmoid).
- The same pair always gets the same score (no sampling).
- A failure raises `engramdb.errors.RerankerError` (the recall it served then logs nothing).

`HttpReranker` talks to any server with the ``/v1/rerank`` API that Cohere and Jina defined and
vLLM, the llama.cpp server, LocalAI and litellm serve, or to Hugging Face's text-embeddings-inference
(``/rerank``), with the standard library alone.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

from engramdb.embeddings.base import Reranker
from engramdb.embeddings.http import JsonEndpoint, endpoint, is_int, is_real, quote
from engramdb.errors import ConfigError, RerankerError

__all__ = ["HttpReranker", "Reranker", "sigmoid"]


def sigmoid(x: float) -> float:
    """A logit as a probability, without overflow for large negative logits."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


class HttpReranker:
    """Scores through a rerank endpoint; a `Reranker`.

    Args:
        base_url: the API root: ``"http://localhost:8000/v1"`` (vLLM, the llama.cpp server with
            ``--reranking``, LocalAI, a litellm proxy), ``"https://api.jina.ai/v1"``,
            ``"https://api.cohere.com/v1"``; for text-embeddings-inference its root,
            ``"http://localhost:8080"``, with ``api="tei"``.
        model: the model the server should use, sent as ``"model"`` (e.g. ``"BAAI/bge-reranker-base"``);
            text-embeddings-inference serves one model and is not sent one.
        api: ``"v1"`` (default): ``POST base_url/rerank`` with ``{"model", "query", "documents"}``,
            answered by ``{"results": [{"index", "relevance_score"}, ...]}``; ``"tei"``: ``POST
            base_url/rerank`` with ``{"query", "texts", "raw_scores": false}``, answered by
            ``[{"index", "score"}, ...]``.
        scores: what the server's numbers are: ``"probability"`` (default; Cohere, Jina, vLLM,
            text-embeddings-inference answer in [0, 1]) — a number outside [0, 1] is then a
            `RerankerError` that says to pass ``"logit"``; ``"logit"`` (the llama.cpp server
            answers a cross-encoder's raw logit): mapped to [0, 1] by a sigmoid.
        api_key / api_key_env: as `OpenAICompatibleEmbedder`'s.
        timeout, retries, backoff, sleep: as `OpenAICompatibleEmbedder`'s (timeout 30 s, 2 retries).
        name: the identifier recorded in explanations; ``"rerank:<model>"`` by default.

    Texts that are empty or blank are not sent (some servers refuse them) and score 0; a text the
    server leaves out of its answer (a server-side ``top_n``) scores 0 too. One instance may be
    shared by threads.
    """

    def __init__(
        self,
        base_url: str,
        model: str = "",
        *,
        api: Literal["v1", "tei"] = "v1",
        scores: Literal["probability", "logit"] = "probability",
        api_key: str | None = None,
        api_key_env: str | None = None,
        timeout: float = 30.0,
        retries: int = 2,
        backoff: float = 0.5,
        name: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if api not in ("v1", "tei"):
            raise ConfigError(f"api must be 'v1' (Cohere/Jina/vLLM/llama.cpp) or 'tei', got {api!r}")
        if scores not in ("probability", "logit"):
            raise ConfigError(f"scores must be 'probability' or 'logit', got {scores!r}")
        if not isinstance(model, str) or (api == "v1" and not model.strip()):
            raise ConfigError("model must be a non-empty model name for api='v1', e.g. 'BAAI/bge-reranker-base'")
        if api_key is not None and api_key_env is not None:
            raise ConfigError("give api_key or api_key_env, not both")
        if api_key_env is not None:
            api_key = os.environ.get(api_key_env)
            if not api_key:
                raise ConfigError(f"the environment variable {api_key_env} (api_key_env) is unset or empty")
        if api_key is not None and (not isinstance(api_key, str) or not api_key):
            raise ConfigError("api_key must be a non-empty string (or None for a server without keys)")
        if not is_int(retries) or retries < 0:
            raise ConfigError(f"retries must be a non-negative integer, got {retries!r}")
        if not is_real(timeout) or not timeout > 0:
            raise ConfigError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if not is_real(backoff) or not backoff >= 0:
            raise ConfigError(f"backoff must be a non-negative number of seconds, got {backoff!r}")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ConfigError("name must be a non-empty string or None")
        example = "http://localhost:8080" if api == "tei" else "http://localhost:8000/v1"
        url, self._shown = endpoint(base_url, "/rerank", example)
        self._model, self._api, self._logit = model, api, scores == "logit"
        self._name = name or f"rerank:{model or 'tei'}"
        self._http = JsonEndpoint(
            url, self._shown, key=api_key, timeout=float(timeout), retries=retries, backoff=float(backoff),
            sleep=sleep, error=self._error,
            not_found="requests go to base_url + '/rerank' (base_url ends at /v1 for api='v1', is the server's "
            "root for api='tei'), and the server must serve a reranking model (llama.cpp: --reranking)",
        )  # fmt: skip

    def __repr__(self) -> str:
        return f"HttpReranker({self._shown!r}, {self._model!r}, api={self._api!r})"

    @property
    def name(self) -> str:
        return self._name

    @property
    def url(self) -> str:
        """The endpoint requests go to (without its query string)."""
        return self._shown

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """Scores in [0, 1], one per text, in order (see the class for blank and omitted texts).

        Raises:
            RerankerError: the server is not reachable, refused the request or the key, or
                answered with something that is not a valid rerank response.
        """
        if not isinstance(query, str):
            raise TypeError(f"score() takes the query as a str, got {type(query).__name__}")
        if isinstance(texts, str):
            raise TypeError("score() takes a sequence of texts, not a single str")
        texts = list(texts)
        for text in texts:
            if not isinstance(text, str):
                raise TypeError(f"score() takes texts (str), got {type(text).__name__}")
        out = [0.0] * len(texts)
        sent = [i for i, text in enumerate(texts) if text.strip()]
        if not sent or not query.strip():
            return out
        docs = [texts[i] for i in sent]
        body: dict[str, Any]
        if self._api == "tei":
            body = {"query": query, "texts": docs, "raw_scores": False}
        else:
            body = {"model": self._model, "query": query, "documents": docs, "top_n": len(docs)}
        for position, value in self._parse(self._http.post(body), len(docs)).items():
            out[sent[position]] = value
        return out

    def _parse(self, raw: bytes, count: int) -> dict[int, float]:
        try:
            payload = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise self._error(f"answered with something that is not JSON: {quote(raw)}") from None
        results = payload.get("results", payload.get("data")) if isinstance(payload, dict) else payload
        if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
            expected = (
                "a list of {index, score}" if self._api == "tei" else 'a "results" list of {index, relevance_score}'
            )
            raise self._error(f"answered without {expected}: {quote(raw)}")
        scored: dict[int, float] = {}
        for r in results:
            index = r.get("index")
            value = r.get("relevance_score", r.get("score"))
            if not is_int(index) or not 0 <= index < count or index in scored:
                raise self._error(f"returned index {index!r}, not one of 0..{count - 1} once each")
            if not is_real(value) or not math.isfinite(value):
                raise self._error(f"returned score {value!r} for text {index}, not a finite number")
            if self._logit:
                value = sigmoid(float(value))
            elif not 0.0 <= value <= 1.0:
                raise self._error(
                    f"returned score {value!r} for text {index}, outside [0, 1]: this server answers logits; "
                    "pass scores='logit'"
                )
            scored[index] = float(value)
        return scored

    def _error(self, what: str, status: int | None = None) -> RerankerError:
        model = f" (model {self._model!r})" if self._model else ""
        return RerankerError(f"the rerank endpoint {self._shown}{model} {what}", self._shown, status)
