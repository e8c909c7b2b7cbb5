"""`HashingEmbedder`: deterministic feature hashing of words and character n-grams (numpy only).

No model file and no training: a text becomes the signed, hashed sum of its lowercased word
unigrams and of the character n-grams of each word padded with ``<`` and ``>`` (so ``"cat"``
gives ``"<ca"``, ``"cat"``, ``"at>"``, ``"<cat"``, …). Character n-grams let inflections and
typos (``"painting"`` / ``"paintings"`` / ``"paiting"``) share most features, and since every
n-gram adds its own weight, long (rarer, more specific) words weigh more than short ones, a
crude stand-in for IDF that needs no corpus statistics. Common English function words are
skipped by default, since without IDF they would dominate every vector.

Hashes come from BLAKE2b with the seed as salt, never from Python's per-process salted
``hash()``, so a text maps to the same vector in every process, on every platform and in every
Python version. That makes the embedder usable as a fallback that can be persisted and as a test
double whose outputs can be hard-coded.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from engramdb.errors import MissingExtra

try:
    import numpy as np
except ImportError as exc:  # numpy comes with the "memory" extra, not with the core package
    raise MissingExtra("engramdb.embeddings.hashing", "memory") from exc

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["ENGLISH_STOPWORDS", "HashingEmbedder"]

# Unicode word characters; apostrophes and hyphens split words ("don't" -> "don", "t").
_WORD = re.compile(r"\w+")
# Bounds the per-word feature cache so adversarial input cannot grow memory without limit.
_CACHE_LIMIT = 100_000
# Texts per bincount call: bounds the float64 scratch buffer at _CHUNK * dim * 8 bytes.
_CHUNK = 512

# Common English function words (and the fragments "don't" / "I'm" split into). Skipping them is
# worth +0.03 recall@10 on LoCoMo for this embedder (and +0.05 for FTS5 BM25 OR-queries), because
# without corpus statistics nothing else down-weights them.
_STOPWORD_TEXT = """
a about above after again against all am an and any are as at be because been before being below
between both but by can could did do does doing down during each few for from further had has have
having he her here hers herself him himself his how i if in into is it its itself just me more most
my myself no nor not now of off on once only or other our ours ourselves out over own same she should
so some such than that the their theirs them themselves then there these they this those through to
too under until up very was we were what when where which while who whom why will with would you
your yours yourself yourselves s t d ll m re ve don im ive
"""
#: Lowercase English function words that `HashingEmbedder` skips by default (136 words).
ENGLISH_STOPWORDS = frozenset(_STOPWORD_TEXT.split())

_Features = tuple["npt.NDArray[np.int64]", "npt.NDArray[np.float64]"]


class HashingEmbedder:
    """Signed feature-hashing embedder over word unigrams and character n-grams.

    Args:
        dim: number of hash buckets = vector dimension (>= 2).
        seed: salt of the hash; embedders with different seeds give unrelated vectors.
        ngram_range: inclusive (min, max) length of the character n-grams of each padded word;
            ``(0, 0)`` turns n-grams off.
        ngram_weight: weight of each n-gram relative to the weight 1 of the word's unigram.
        sublinear_tf: weight a word seen ``c`` times in a text by ``1 + ln c`` instead of ``c``.
        stopwords: skip common English function words, unless a text has nothing else (then
            all its words are used, so "who are you?" still gets a non-zero vector).

    Every row of `embed` is L2-normalised float32, or all zeros for a text without any word
    character. Collisions are signed (each feature adds ``+w`` or ``-w``), so they cancel in
    expectation instead of biasing every dot product upwards.
    """

    def __init__(
        self,
        dim: int = 1024,
        seed: int = 0,
        *,
        ngram_range: tuple[int, int] = (3, 5),
        ngram_weight: float = 0.5,
        sublinear_tf: bool = True,
        stopwords: bool = True,
    ) -> None:
        if dim < 2:
            raise ValueError(f"dim must be at least 2, got {dim}")
        if not 0 <= seed < 2**64:
            raise ValueError(f"seed must be in [0, 2**64), got {seed}")
        lo, hi = ngram_range
        if (lo, hi) != (0, 0) and not 1 <= lo <= hi:
            raise ValueError(f"ngram_range must be (0, 0) or 1 <= min <= max, got {ngram_range}")
        if ngram_weight < 0:
            raise ValueError(f"ngram_weight must be >= 0, got {ngram_weight}")
        self._dim = dim
        self._seed = seed
        self._salt = seed.to_bytes(16, "little")
        self._ngram_range = (lo, hi)
        self._ngram_weight = float(ngram_weight)
        self._sublinear_tf = sublinear_tf
        self._stopwords: frozenset[str] = ENGLISH_STOPWORDS if stopwords else frozenset()
        self._cache: dict[str, _Features] = {}

    #: the typical cosine of two unrelated texts (median over 1,525 docstring sentences at the
    #: default settings; p90 0.15); see `StaticEmbedder.unrelated_cosine`
    unrelated_cosine: float = 0.03

    @property
    def name(self) -> str:
        """Identifier of the configuration; every parameter that changes vectors is in it."""
        lo, hi = self._ngram_range
        tf = "log" if self._sublinear_tf else "raw"
        sw = "-sw" if self._stopwords else ""
        return f"hashing-blake2b-d{self._dim}-s{self._seed}-ng{lo}{hi}w{self._ngram_weight:g}-{tf}{sw}@1"

    @property
    def dim(self) -> int:
        """Vector dimension (number of hash buckets)."""
        return self._dim

    def _hash(self, feature: str) -> tuple[int, float]:
        """Bucket and sign of one feature: 64 stable bits, low bits pick the bucket, top bit the sign."""
        h = int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8, salt=self._salt).digest(), "little")
        return h % self._dim, (1.0 if h >> 63 else -1.0)

    def _word_features(self, word: str) -> _Features:
        """Buckets and signed weights of one word occurrence (unigram plus its n-grams), cached."""
        cached = self._cache.get(word)
        if cached is not None:
            return cached
        acc: dict[int, float] = {}
        # The "w:" prefix keeps the unigram "cat" apart from the inner 3-gram "cat".
        bucket, sign = self._hash("w:" + word)
        acc[bucket] = sign
        lo, hi = self._ngram_range
        if hi and self._ngram_weight:
            padded = f"<{word}>"
            grams = [padded[i : i + n] for n in range(lo, hi + 1) for i in range(len(padded) - n + 1)]
            for gram in grams:
                bucket, sign = self._hash("c:" + gram)
                acc[bucket] = acc.get(bucket, 0.0) + sign * self._ngram_weight
        feats: _Features = (
            np.fromiter(acc.keys(), dtype=np.int64, count=len(acc)),
            np.fromiter(acc.values(), dtype=np.float64, count=len(acc)),
        )
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[word] = feats
        return feats

    def _embed_chunk(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        index_parts: list[npt.NDArray[np.int64]] = []
        weight_parts: list[npt.NDArray[np.float64]] = []
        for row, text in enumerate(texts):
            offset = row * self._dim
            words = _WORD.findall(text.lower())
            content = [w for w in words if w not in self._stopwords]
            for word, count in Counter(content or words).items():
                buckets, values = self._word_features(word)
                tf = 1.0 + math.log(count) if self._sublinear_tf else float(count)
                index_parts.append(buckets + offset)
                weight_parts.append(values * tf)
        size = len(texts) * self._dim
        if index_parts:
            flat = np.bincount(np.concatenate(index_parts), np.concatenate(weight_parts), minlength=size)
        else:
            flat = np.zeros(size, dtype=np.float64)
        out = flat.reshape(len(texts), self._dim)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        # Rows whose features all cancelled (or that had none) stay exactly zero.
        np.divide(out, norms, out=out, where=norms > 0)
        return np.ascontiguousarray(out, dtype=np.float32)

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed texts: C-contiguous float32 ``(len(texts), dim)``, rows unit-norm or all zero."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not a single str")
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        parts = [self._embed_chunk(texts[i : i + _CHUNK]) for i in range(0, len(texts), _CHUNK)]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)
