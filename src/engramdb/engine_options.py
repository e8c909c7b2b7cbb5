"""The argument checks of `DynamicMemoryEngine`: every option refused before a file is opened.

A wrong option is a `ConfigError` (a `CallerError`, so also a `ValueError`) naming the option,
what it got and what it takes; nothing is created on disk when one is wrong.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from typing import Any

from engramdb.embeddings.base import Embedder, Reranker
from engramdb.errors import ConfigError
from engramdb.memories.forgetting import ForgettingPolicy
from engramdb.memories.model import Confidentiality, Limits, check_path
from engramdb.memories.scoring import ScoringConfig

#: SQLite takes its busy timeout in int milliseconds (2**31 - 1 milliseconds is 24.8 days)
MAX_SECONDS = 24 * 86400.0


def check_seconds(name: str, value: object) -> float:
    """`value` as a positive, finite number of seconds up to `MAX_SECONDS`, else `ConfigError`."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0 < value <= MAX_SECONDS
    ):
        raise ConfigError(f"{name} must be a positive number of seconds (at most 24 days), got {value!r}")
    return float(value)


def _instance(name: str, value: object, kind: type, what: str) -> None:
    if value is not None and not isinstance(value, kind):
        raise ConfigError(f"{name} must be {what} or None, got {type(value).__name__}")


def check_engine_options(path: object, options: Mapping[str, Any]) -> None:
    """Refuse a wrong `DynamicMemoryEngine` argument with a `ConfigError` that names it."""
    if not isinstance(path, (str, os.PathLike)) and not all(
        callable(getattr(path, method, None)) for method in ("migrate", "close", "scope")
    ):
        raise ConfigError(
            f"path must be a database file path, a postgresql:// URL or a storage Backend, got {type(path).__name__}"
        )
    if isinstance(path, (str, os.PathLike)):
        check_path("path", path, ConfigError)
    if options.get("queue_extraction") is not None and not isinstance(options["queue_extraction"], bool):
        raise ConfigError(f"queue_extraction must be True, False or None, got {options['queue_extraction']!r}")
    extractor = options.get("extractor")
    if extractor is not None and not (
        callable(getattr(extractor, "extract", None)) and isinstance(getattr(extractor, "name", None), str)
    ):
        raise ConfigError(
            f"extractor must have a name and an extract(turns, known) method (engramdb.llm.LLMExtractor), "
            f"got {type(extractor).__name__}"
        )
    for flag in ("enable_embeddings", "vector_file"):
        if not isinstance(options[flag], bool):
            raise ConfigError(f"{flag} must be True or False, got {options[flag]!r}")
    if not callable(options["clock"]):
        raise ConfigError(f"clock must be a callable returning epoch seconds, got {type(options['clock']).__name__}")
    for name in ("busy_timeout", "statement_timeout"):
        check_seconds(name, options[name])
    interval = options["checkpoint_interval"]
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not 0 <= interval <= 60:
        raise ConfigError(
            f"checkpoint_interval must be seconds from 0 to 60 (0: SQLite checkpoints inside the writer), got {interval!r}"
        )
    size = options["max_value_bytes"]
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ConfigError(f"max_value_bytes must be a whole number of bytes >= 1, got {size!r}")
    _instance("embedder", options["embedder"], Embedder, "an Embedder")
    memory_embedder = options["memory_embedder"]
    if memory_embedder != "default" and memory_embedder is not None and not isinstance(memory_embedder, Embedder):
        raise ConfigError(f'memory_embedder must be "default", an Embedder, or None, got {memory_embedder!r}')
    _instance("reranker", options["reranker"], Reranker, "a Reranker (e.g. engramdb.embeddings.rerank.HttpReranker)")
    if not isinstance(options["rerank_cap"], Confidentiality):
        raise ConfigError(f"rerank_cap must be a Confidentiality, got {options['rerank_cap']!r}")
    _instance("scoring", options["scoring"], ScoringConfig, "a ScoringConfig")
    _instance("forgetting", options["forgetting"], ForgettingPolicy, "a ForgettingPolicy")
    _instance("limits", options["limits"], Limits, "a Limits")
    threshold = options["dedup_threshold"]
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not math.isfinite(threshold):
        raise ConfigError(
            f"dedup_threshold must be a cosine (a finite number; above 1 never merges), got {threshold!r}"
        )
    budget = options["cache_budget"]
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 0):
        raise ConfigError(
            f"cache_budget must be a whole number of bytes (0 or more) or None for no budget, got {budget!r}"
        )
    vector_index: str | Callable[[int], object] = options["vector_index"]
    if not callable(vector_index) and vector_index not in ("auto", "exact", "ann"):
        raise ConfigError(
            f'vector_index must be "auto", "exact", "ann" or a callable making an index, got {vector_index!r}'
        )


__all__ = ["check_engine_options", "check_seconds"]
