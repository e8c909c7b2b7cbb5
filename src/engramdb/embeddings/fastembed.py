"""fastembed's models (Qdrant's ONNX and static embedders and cross-encoders) as an `Embedder` and a `Reranker`.

fastembed runs ONNX models on onnxruntime and static (model2vec) models on numpy, without torch,
and downloads them from the Hugging Face Hub on first use (or loads a local directory:
``specific_model_path=``). It is the ``fastembed`` extra::

    pip install "engramdb[fastembed]"

    from engramdb import DynamicMemoryEngine
    from engramdb.embeddings.fastembed import FastEmbedEmbedder, FastEmbedReranker

    engine = DynamicMemoryEngine(
        "team.db",
        memory_embedder=FastEmbedEmbedder("BAAI/bge-small-en-v1.5"),
        reranker=FastEmbedReranker("Xenova/ms-marco-MiniLM-L-6-v2"),
    )

`save_static_model` writes engramdb's shipped static model in model2vec's format (the files
fastembed's and model2vec's static models read), so other tools can make the same vectors.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engramdb.embeddings.rerank import sigmoid
from engramdb.errors import ConfigError, EmbedderError, MissingExtra, RerankerError

try:
    import numpy as np
except ImportError as exc:  # numpy comes with the "memory" extra
    raise MissingExtra("engramdb.embeddings.fastembed", "memory") from exc

if TYPE_CHECKING:
    import numpy.typing as npt

    from engramdb.embeddings.static import StaticEmbedder

__all__ = ["FastEmbedEmbedder", "FastEmbedReranker", "save_static_model"]


def _fastembed() -> Any:
    try:
        import fastembed
    except ImportError as exc:
        raise MissingExtra("engramdb.embeddings.fastembed", "fastembed") from exc
    return fastembed


def _where(model_name: str, specific_model_path: str | None) -> str:
    return specific_model_path or f"fastembed model {model_name}"


def _load_hint(specific_model_path: str | None) -> str:
    if specific_model_path:
        return "check that the directory holds the model's files (model.onnx or model.safetensors, tokenizer.json)"
    return (
        "fastembed downloads models from the Hugging Face Hub on first use: without network access, download "
        "the model's files elsewhere and pass specific_model_path= (or cache_dir= with local_files_only=True)"
    )


class FastEmbedEmbedder:
    """A fastembed `TextEmbedding` as an `Embedder`.

    Args:
        model_name: one of fastembed's text models (``fastembed.TextEmbedding.list_supported_models()``),
            e.g. ``"BAAI/bge-small-en-v1.5"``, ``"sentence-transformers/all-MiniLM-L6-v2"``,
            ``"minishlab/potion-base-8M"``, or one registered with ``TextEmbedding.add_custom_model``.
        specific_model_path: a local directory with the model's files instead of a download.
        cache_dir, local_files_only, threads: passed to fastembed.
        batch_size: texts per forward pass (default 64).
        unrelated_cosine: the typical cosine of two unrelated texts under this model (default 0;
            see `engramdb.embeddings.base`).
        name: the identifier stored beside every vector; ``"fastembed:<model_name>"`` by default
            (change it, then `Agent.reembed`, whenever the model's files change).
        options: any other `fastembed.TextEmbedding` argument (``providers=``, ``cuda=``, …).

    Rows are L2-normalised here (not every fastembed model normalises); empty and blank texts
    are not embedded and get all-zero rows. A model that cannot be loaded raises `EmbedderError`
    here, with what to do; one that fails while embedding raises it from `embed`.
    """

    def __init__(
        self,
        model_name: str,
        *,
        specific_model_path: str | Path | None = None,
        cache_dir: str | Path | None = None,
        local_files_only: bool = False,
        threads: int | None = None,
        batch_size: int = 64,
        unrelated_cosine: float = 0.0,
        name: str | None = None,
        **options: Any,
    ) -> None:
        fastembed = _fastembed()
        if not isinstance(model_name, str) or not model_name.strip():
            raise ConfigError("model_name must be a fastembed model name, e.g. 'BAAI/bge-small-en-v1.5'")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
        if isinstance(unrelated_cosine, bool) or not isinstance(unrelated_cosine, (int, float)):
            raise ConfigError(f"unrelated_cosine must be a number in [0, 1), got {unrelated_cosine!r}")
        if not 0.0 <= unrelated_cosine < 1.0:
            raise ConfigError(f"unrelated_cosine must be a number in [0, 1), got {unrelated_cosine!r}")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ConfigError("name must be a non-empty string or None")
        path = None if specific_model_path is None else str(specific_model_path)
        self._where = _where(model_name, path)
        try:
            self._model = fastembed.TextEmbedding(
                model_name=model_name,
                cache_dir=None if cache_dir is None else str(cache_dir),
                threads=threads,
                local_files_only=local_files_only,
                specific_model_path=path,
                **options,
            )
        except ValueError as exc:
            if "not supported" in str(exc):
                raise ConfigError(
                    f"{model_name!r} is not one of fastembed's text models "
                    "(fastembed.TextEmbedding.list_supported_models(); or add_custom_model)"
                ) from exc
            raise EmbedderError(f"could not load {self._where}: {exc}; {_load_hint(path)}", self._where) from exc
        except Exception as exc:  # a failed download or an unreadable model file: fastembed's many kinds
            raise EmbedderError(f"could not load {self._where}: {exc}; {_load_hint(path)}", self._where) from exc
        self._model_name = model_name
        self._batch = batch_size
        self._name = name or f"fastembed:{model_name}"
        self._dim: int | None = None
        self._local = path is not None
        #: see `engramdb.embeddings.base`; 0 unless given
        self.unrelated_cosine = float(unrelated_cosine)

    def __repr__(self) -> str:
        return f"FastEmbedEmbedder({self._model_name!r})"

    @property
    def name(self) -> str:
        return self._name

    @property
    def dim(self) -> int:
        """Vector dimension (embeds a short text once when the model does not say it)."""
        if self._dim is None:
            # The catalogue's size is the downloaded model's: a local directory may hold another.
            size = None if self._local else getattr(self._model, "embedding_size", None)
            self._dim = int(size) if isinstance(size, int) else int(self._vectors(["dimension probe"]).shape[1])
        return self._dim

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """C-contiguous float32 ``(len(texts), dim)``, rows unit-norm or all zero."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not a single str")
        texts = list(texts)
        for text in texts:
            if not isinstance(text, str):
                raise TypeError(f"embed() takes texts (str), got {type(text).__name__}")
        sent = [i for i, text in enumerate(texts) if text.strip()]
        vectors = self._vectors([texts[i] for i in sent]) if sent else None
        if vectors is not None and self._dim is None:
            self._dim = int(vectors.shape[1])
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if vectors is not None:
            if vectors.shape[1] != out.shape[1]:
                raise EmbedderError(
                    f"{self._where} returned vectors of {vectors.shape[1]} dimensions where {out.shape[1]} were "
                    "expected",
                    self._where,
                )
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            np.divide(vectors, norms, out=vectors, where=norms > 0)
            out[np.asarray(sent, dtype=np.intp)] = vectors
        return out

    def _vectors(self, texts: list[str]) -> npt.NDArray[np.float32]:
        try:
            rows = list(self._model.embed(texts, batch_size=self._batch))
        except Exception as exc:  # onnxruntime's and tokenizers' errors are not one class
            raise EmbedderError(f"{self._where} failed to embed {len(texts)} texts: {exc}", self._where) from exc
        vectors = np.asarray(rows, dtype=np.float32).reshape(len(texts), -1)
        if not np.isfinite(vectors).all():
            raise EmbedderError(f"{self._where} returned non-finite numbers (NaN or infinity)", self._where)
        return np.ascontiguousarray(vectors)


class FastEmbedReranker:
    """A fastembed `TextCrossEncoder` as a `Reranker`: the cross-encoder's logit through a sigmoid.

    Args:
        model_name: one of fastembed's cross-encoders (``fastembed.rerank.cross_encoder.TextCrossEncoder
            .list_supported_models()``), e.g. ``"Xenova/ms-marco-MiniLM-L-6-v2"``,
            ``"BAAI/bge-reranker-base"``, ``"jinaai/jina-reranker-v1-tiny-en"``.
        specific_model_path, cache_dir, local_files_only, threads, options: as `FastEmbedEmbedder`'s.
        batch_size: pairs per forward pass (default 32).
        name: recorded in explanations; ``"fastembed-rerank:<model_name>"`` by default.
    """

    def __init__(
        self,
        model_name: str,
        *,
        specific_model_path: str | Path | None = None,
        cache_dir: str | Path | None = None,
        local_files_only: bool = False,
        threads: int | None = None,
        batch_size: int = 32,
        name: str | None = None,
        **options: Any,
    ) -> None:
        _fastembed()
        from fastembed.rerank.cross_encoder import TextCrossEncoder

        if not isinstance(model_name, str) or not model_name.strip():
            raise ConfigError("model_name must be a fastembed cross-encoder, e.g. 'Xenova/ms-marco-MiniLM-L-6-v2'")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ConfigError("name must be a non-empty string or None")
        path = None if specific_model_path is None else str(specific_model_path)
        self._where = _where(model_name, path)
        try:
            self._model = TextCrossEncoder(
                model_name=model_name,
                cache_dir=None if cache_dir is None else str(cache_dir),
                threads=threads,
                local_files_only=local_files_only,
                specific_model_path=path,
                **options,
            )
        except ValueError as exc:
            if "not supported" in str(exc):
                raise ConfigError(
                    f"{model_name!r} is not one of fastembed's cross-encoders "
                    "(TextCrossEncoder.list_supported_models(); or add_custom_model)"
                ) from exc
            raise RerankerError(f"could not load {self._where}: {exc}; {_load_hint(path)}", self._where) from exc
        except Exception as exc:
            raise RerankerError(f"could not load {self._where}: {exc}; {_load_hint(path)}", self._where) from exc
        self._model_name = model_name
        self._batch = batch_size
        self._name = name or f"fastembed-rerank:{model_name}"

    def __repr__(self) -> str:
        return f"FastEmbedReranker({self._model_name!r})"

    @property
    def name(self) -> str:
        return self._name

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """The sigmoid of the cross-encoder's logit of each (query, text), in order; blank texts
        are not scored and get 0."""
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
        try:
            logits = [float(x) for x in self._model.rerank(query, [texts[i] for i in sent], batch_size=self._batch)]
        except Exception as exc:  # onnxruntime's and tokenizers' errors are not one class
            raise RerankerError(f"{self._where} failed to score {len(sent)} texts: {exc}", self._where) from exc
        if len(logits) != len(sent) or not all(np.isfinite(logits)):
            raise RerankerError(f"{self._where} returned {len(logits)} scores for {len(sent)} texts", self._where)
        for i, logit in zip(sent, logits, strict=True):
            out[i] = sigmoid(logit)
        return out


def save_static_model(directory: str | Path, embedder: StaticEmbedder | None = None) -> Path:
    """Write a `StaticEmbedder` (the shipped one by default) as a model2vec model: the token table
    as float32 ``embeddings`` in ``model.safetensors``, its WordPiece tokenizer (BERT's uncased
    normalisation and pre-tokenizer) as ``tokenizer.json``, and ``config.json``. fastembed loads the
    directory as a static model (``FastEmbedEmbedder("minishlab/potion-base-8M",
    specific_model_path=directory)``), and model2vec's ``StaticModel.from_pretrained`` reads the same
    files; both give this embedder's vectors. Returns the directory (created if missing; the three
    files are overwritten)."""
    from engramdb.embeddings.static import StaticEmbedder, default_embedder

    model = embedder or default_embedder()
    if not isinstance(model, StaticEmbedder):
        raise ConfigError(f"save_static_model takes a StaticEmbedder, got {type(model).__name__}")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    table = model.table()
    header = {"embeddings": {"dtype": "F32", "shape": list(table.shape), "data_offsets": [0, table.nbytes]}}
    raw_header = json.dumps(header, separators=(",", ":")).encode()
    raw_header += b" " * (-len(raw_header) % 8)  # the data starts 8-byte aligned
    with open(out / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(raw_header)))
        f.write(raw_header)
        f.write(np.ascontiguousarray(table, dtype="<f4").tobytes())
    tok = model.tokenizer
    vocab: dict[str, int] = {}
    for i, token in enumerate(tok.vocabulary()):
        vocab.setdefault(token, i)  # a token listed twice keeps its first id, as the tokenizer does
    tokenizer: dict[str, Any] = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": {
            "type": "BertNormalizer",
            "clean_text": True,
            "handle_chinese_chars": True,
            "strip_accents": True,
            "lowercase": True,
        },
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": None,
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {
            "type": "WordPiece",
            "unk_token": tok.unk_token,
            "continuing_subword_prefix": "##",
            "max_input_chars_per_word": tok.max_input_chars_per_word,
            "vocab": vocab,
        },
    }
    (out / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False), encoding="utf-8")
    config = {"model_type": "model2vec", "hidden_dim": int(table.shape[1]), "normalize": True, "name": model.name}
    (out / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    return out
