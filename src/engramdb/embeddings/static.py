"""`StaticEmbedder`: the default offline embedder, a static token table distilled from MiniLM.

A model2vec-style static embedding of sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0): every
WordPiece token of MiniLM's uncased vocabulary has one fixed 384-d vector (the teacher's output
for that token alone, scaled by a SIF frequency weight, stored as int8 with a float32 scale per
row). Embedding a text is: WordPiece-tokenise, average the token vectors, L2-normalise. There is
no transformer at run time, so it needs only numpy, embeds fast on one core (measured by
benchmarks/bench_embedders.py, benchmarks/results/embedders.json), and adds ~16 MB resident (the
11.7 MB int8 table plus the vocabulary). It gives up some of the teacher's paraphrase-level
accuracy for that speed, yet on LoCoMo evidence retrieval it ranks better than the teacher
(recall@10 0.537 against 0.454; see benchmarks/bench_embedders.py).

The model files ship inside the package (``engramdb/embeddings/data/``) and are read with
`importlib.resources`; nothing is downloaded. See ``data/NOTICE`` for attribution and
``scripts/distill_static_embedder.py`` for how they were made.
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any

from engramdb.embeddings.wordpiece import WordPieceTokenizer
from engramdb.errors import MissingExtra

try:
    import numpy as np
except ImportError as exc:  # numpy comes with the "memory" extra, not with the core package
    raise MissingExtra("engramdb.embeddings.static", "memory") from exc

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["MODEL_BASENAME", "StaticEmbedder", "default_embedder"]

#: Stem of the shipped files: ``<stem>.npz`` (table), ``<stem>.json`` (metadata), ``<stem>_vocab.txt``.
MODEL_BASENAME = "minilm_l6_v2_static"
_DATA_PACKAGE = "engramdb.embeddings"
_SUPPORTED_FORMAT = 1

_default: StaticEmbedder | None = None
_default_lock = threading.Lock()


class StaticEmbedder:
    """Mean of int8 static token vectors, L2-normalised; implements `engramdb.embeddings.base.Embedder`.

    Args:
        vectors: int8 ``(vocab_size, dim)`` token table, indexed by the tokenizer's ids.
        scales: float32 ``(vocab_size,)``; row ``i`` of the real table is ``vectors[i] * scales[i]``.
            Rows of tokens that must not count ([PAD], [UNK], …) are zero.
        tokenizer: maps text to ids in ``range(vocab_size)``.
        name: identifier recorded next to every stored vector (bump its ``@N`` when vectors change).

    `embed` never fails on content: empty, blank or all-unknown text gives an all-zero row.
    The instance is immutable apart from the tokenizer's word cache, so one instance can be
    shared by threads.
    """

    def __init__(
        self,
        vectors: npt.NDArray[np.int8],
        scales: npt.NDArray[np.float32],
        tokenizer: WordPieceTokenizer,
        name: str,
    ) -> None:
        if vectors.ndim != 2 or vectors.dtype != np.int8:
            raise ValueError(f"vectors must be a 2-d int8 array, got {vectors.dtype} {vectors.shape}")
        if scales.shape != (vectors.shape[0],):
            raise ValueError(f"scales must have shape ({vectors.shape[0]},), got {scales.shape}")
        if tokenizer.vocab_size > vectors.shape[0]:
            raise ValueError(f"tokenizer has {tokenizer.vocab_size} ids but the table only {vectors.shape[0]} rows")
        self._vectors = vectors
        self._scales = scales.astype(np.float32, copy=False)
        self._tokenizer = tokenizer
        self._name = name

    @classmethod
    def load(cls, basename: str = MODEL_BASENAME) -> StaticEmbedder:
        """Load the shipped model from package data (no network). Each call reads the files again;
        use `default_embedder` for the shared instance.

        Raises:
            FileNotFoundError: the package was installed without its data files.
            ValueError: the files are of an unknown format or inconsistent with each other.
        """
        data = resources.files(_DATA_PACKAGE).joinpath("data")
        meta: dict[str, Any] = json.loads(data.joinpath(f"{basename}.json").read_text(encoding="utf-8"))
        if meta.get("format") != _SUPPORTED_FORMAT:
            raise ValueError(f"unsupported static model format {meta.get('format')!r} in {basename}.json")
        vocab = data.joinpath(f"{basename}_vocab.txt").read_text(encoding="utf-8").splitlines()
        # Read the bytes first: the resource may live in a zip (zipimport) rather than on disk.
        with np.load(io.BytesIO(data.joinpath(f"{basename}.npz").read_bytes()), allow_pickle=False) as npz:
            vectors: npt.NDArray[np.int8] = npz["vectors"]
            scales: npt.NDArray[np.float32] = npz["scales"]
        if vectors.shape != (len(vocab), int(meta["dim"])):
            raise ValueError(f"table shape {vectors.shape} does not match vocab {len(vocab)} x dim {meta['dim']}")
        tokenizer = WordPieceTokenizer(vocab, unk_token=str(meta["tokenizer"]["unk_token"]))
        return cls(vectors, scales, tokenizer, name=str(meta["name"]))

    #: the typical cosine of two unrelated texts (median over 1,525 first sentences of the standard
    #: library's docstrings; p90 0.83): static vectors are anisotropic, so raw cosines sit high.
    #: Recall's absolute relevance counts only similarity above it (`Hit.relevance`).
    unrelated_cosine: float = 0.76

    @property
    def name(self) -> str:
        """Model identifier and version, e.g. ``"static-minilm-l6-v2-384-int8@1"``."""
        return self._name

    @property
    def dim(self) -> int:
        """Vector dimension (384 for the shipped model)."""
        return int(self._vectors.shape[1])

    def table(self) -> npt.NDArray[np.float32]:
        """The token table as float32 ``(vocab_size, dim)`` (the int8 rows times their scales; a new
        array of ~47 MB for the shipped model)."""
        table: npt.NDArray[np.float32] = self._vectors.astype(np.float32) * self._scales[:, None]
        return table

    @property
    def tokenizer(self) -> WordPieceTokenizer:
        """The WordPiece tokenizer whose ids index the table."""
        return self._tokenizer

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed texts: C-contiguous float32 ``(len(texts), dim)``, rows unit-norm or all zero."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not a single str")
        n, dim = len(texts), self.dim
        out = np.zeros((n, dim), dtype=np.float32)
        if n == 0:
            return out
        # Gathering every token vector of a large batch at once builds an array far larger than the
        # CPU caches (at 2,000 texts, slower than one by one); chunks keep it in cache.
        if n > _CHUNK:
            for start in range(0, n, _CHUNK):
                out[start : start + _CHUNK] = self.embed(texts[start : start + _CHUNK])
            return out
        encode = self._tokenizer.encode
        flat: list[int] = []
        starts: list[int] = []
        rows: list[int] = []
        for row, text in enumerate(texts):
            ids = encode(text)
            if ids:  # texts without tokens keep their zero row
                starts.append(len(flat))
                rows.append(row)
                flat.extend(ids)
        if not flat:
            return out
        index = np.fromiter(flat, dtype=np.intp, count=len(flat))
        # Dequantise only the gathered rows; the int8 table itself is never expanded (~47 MB as float32).
        token_vectors = self._vectors[index].astype(np.float32)
        token_vectors *= self._scales[index, None]
        # Sums per text; the mean differs only by a positive factor that normalisation removes.
        sums = np.add.reduceat(token_vectors, np.asarray(starts, dtype=np.intp), axis=0)
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        # A text made only of zero rows ([UNK], …) has norm 0 and stays an all-zero row.
        np.divide(sums, norms, out=sums, where=norms > 0)
        out[np.asarray(rows, dtype=np.intp)] = sums
        return out


_CHUNK = 64


def default_embedder() -> StaticEmbedder:
    """The process-wide shared `StaticEmbedder` over the shipped model, loaded on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = StaticEmbedder.load()
        return _default
