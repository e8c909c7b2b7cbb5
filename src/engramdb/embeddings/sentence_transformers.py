"""sentence-transformers models as an `Embedder` (`SentenceTransformer`) and a `Reranker` (`CrossEncoder`).

The extra ``sentence-transformers`` installs the library; it needs PyTorch, and PyPI's PyTorch
for Linux brings CUDA's libraries (several GB): on a machine without a GPU install the CPU build
first (``pip install torch --index-url https://download.pytorch.org/whl/cpu``). ::

    pip install "engramdb[sentence-transformers]"

    from engramdb import DynamicMemoryEngine
    from engramdb.embeddings.sentence_transformers import (
        SentenceTransformerEmbedder, SentenceTransformerReranker,
    )

    engine = DynamicMemoryEngine(
        "team.db",
        memory_embedder=SentenceTransformerEmbedder("sentence-transformers/all-MiniLM-L6-v2"),
        reranker=SentenceTransformerReranker("cross-encoder/ms-marco-MiniLM-L6-v2"),
    )

Models come from the Hugging Face Hub on first use, or from a local directory (a path instead of
a name; `local_files_only=True` never goes to the network).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engramdb.embeddings.rerank import sigmoid
from engramdb.errors import ConfigError, EmbedderError, MissingExtra, RerankerError

try:
    import numpy as np
except ImportError as exc:  # numpy comes with the "memory" extra
    raise MissingExtra("engramdb.embeddings.sentence_transformers", "memory") from exc

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["SentenceTransformerEmbedder", "SentenceTransformerReranker"]

_EXTRA = "sentence-transformers"


def _library() -> Any:
    try:
        import sentence_transformers
    except ImportError as exc:
        raise MissingExtra("engramdb.embeddings.sentence_transformers", _EXTRA) from exc
    return sentence_transformers


def _model_id(model: str | Path) -> str:
    """The name a model is known by: a Hub name as given, a local directory by its own name."""
    path = Path(model)
    return path.name if path.is_dir() else str(model)


def _hint(model: str | Path) -> str:
    if Path(model).is_dir():
        return "check that the directory holds a saved model (config.json, the weights, the tokenizer files)"
    return (
        "the model is downloaded from the Hugging Face Hub on first use: without network access, save it to a "
        "directory elsewhere and pass that path (with local_files_only=True)"
    )


def _check(model: object, batch_size: object, name: object) -> str | Path:
    if not isinstance(model, (str, Path)) or not str(model).strip():
        raise ConfigError("model must be a model name or a directory, e.g. 'sentence-transformers/all-MiniLM-L6-v2'")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise ConfigError("name must be a non-empty string or None")
    return model


def _texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str):
        raise TypeError("takes a sequence of texts, not a single str")
    out = list(texts)
    for text in out:
        if not isinstance(text, str):
            raise TypeError(f"takes texts (str), got {type(text).__name__}")
    return out


class SentenceTransformerEmbedder:
    """A `sentence_transformers.SentenceTransformer` as an `Embedder`.

    Args:
        model: a Hub name (``"sentence-transformers/all-MiniLM-L6-v2"``, ``"BAAI/bge-small-en-v1.5"``)
            or a local directory of a saved model.
        device: ``"cpu"`` (default), ``"cuda"``, ``"mps"``, or None for the library's choice.
        batch_size: texts per forward pass (default 64).
        local_files_only, cache_folder, trust_remote_code, revision: passed to the library.
        unrelated_cosine: the typical cosine of two unrelated texts under this model (default 0;
            see `engramdb.embeddings.base`).
        name: stored beside every vector; ``"sentence-transformers:<model>"`` by default (a local
            directory by its own name: pass `name=` when two directories share one).
        options: any other `SentenceTransformer` argument (``model_kwargs=``, ``backend="onnx"``, …).

    One `embed` serves memories and queries alike: models that want a query prefix (e5's
    ``"query: "``) get none. Rows are L2-normalised; blank texts get zero rows without a pass.
    """

    def __init__(
        self,
        model: str | Path,
        *,
        device: str | None = "cpu",
        batch_size: int = 64,
        local_files_only: bool = False,
        cache_folder: str | Path | None = None,
        trust_remote_code: bool = False,
        revision: str | None = None,
        unrelated_cosine: float = 0.0,
        name: str | None = None,
        **options: Any,
    ) -> None:
        st = _library()
        model = _check(model, batch_size, name)
        if isinstance(unrelated_cosine, bool) or not isinstance(unrelated_cosine, (int, float)):
            raise ConfigError(f"unrelated_cosine must be a number in [0, 1), got {unrelated_cosine!r}")
        if not 0.0 <= unrelated_cosine < 1.0:
            raise ConfigError(f"unrelated_cosine must be a number in [0, 1), got {unrelated_cosine!r}")
        try:
            self._model = st.SentenceTransformer(
                str(model),
                device=device,
                local_files_only=local_files_only,
                cache_folder=None if cache_folder is None else str(cache_folder),
                trust_remote_code=trust_remote_code,
                revision=revision,
                **options,
            )
        except Exception as exc:  # a failed download, a missing file, a bad config: the library's many kinds
            raise EmbedderError(f"could not load {model}: {exc}; {_hint(model)}", str(model)) from exc
        self._where = str(model)
        self._batch = batch_size
        self._name = name or f"sentence-transformers:{_model_id(model)}"
        dimension = getattr(self._model, "get_embedding_dimension", None) or getattr(
            self._model, "get_sentence_embedding_dimension", None
        )  # renamed in sentence-transformers 6
        size = dimension() if dimension is not None else None
        self._dim = int(size) if isinstance(size, int) else int(self._vectors(["dimension probe"]).shape[1])
        #: see `engramdb.embeddings.base`; 0 unless given
        self.unrelated_cosine = float(unrelated_cosine)

    def __repr__(self) -> str:
        return f"SentenceTransformerEmbedder({self._where!r})"

    @property
    def name(self) -> str:
        return self._name

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """C-contiguous float32 ``(len(texts), dim)``, rows unit-norm or all zero."""
        texts = _texts(texts)
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        sent = [i for i, text in enumerate(texts) if text.strip()]
        if sent:
            vectors = self._vectors([texts[i] for i in sent])
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            np.divide(vectors, norms, out=vectors, where=norms > 0)
            out[np.asarray(sent, dtype=np.intp)] = vectors
        return out

    def _vectors(self, texts: list[str]) -> npt.NDArray[np.float32]:
        try:
            raw = self._model.encode(texts, batch_size=self._batch, convert_to_numpy=True, show_progress_bar=False)
        except Exception as exc:  # torch's and the tokenizer's errors are not one class
            raise EmbedderError(f"{self._where} failed to embed {len(texts)} texts: {exc}", self._where) from exc
        vectors = np.ascontiguousarray(np.asarray(raw, dtype=np.float32).reshape(len(texts), -1))
        if not np.isfinite(vectors).all():
            raise EmbedderError(f"{self._where} returned non-finite numbers (NaN or infinity)", self._where)
        if len(texts) and hasattr(self, "_dim") and vectors.shape[1] != self._dim:
            raise EmbedderError(
                f"{self._where} returned vectors of {vectors.shape[1]} dimensions, not {self._dim}", self._where
            )
        return vectors


class SentenceTransformerReranker:
    """A `sentence_transformers.CrossEncoder` as a `Reranker`: its logit through a sigmoid.

    Args:
        model: a Hub name (``"cross-encoder/ms-marco-MiniLM-L6-v2"``, ``"BAAI/bge-reranker-base"``)
            or a local directory of a saved cross-encoder with one output.
        device, batch_size (default 32), local_files_only, cache_folder, trust_remote_code, revision,
        options: as `SentenceTransformerEmbedder`'s.
        name: recorded in explanations; ``"cross-encoder:<model>"`` by default.
    """

    def __init__(
        self,
        model: str | Path,
        *,
        device: str | None = "cpu",
        batch_size: int = 32,
        local_files_only: bool = False,
        cache_folder: str | Path | None = None,
        trust_remote_code: bool = False,
        revision: str | None = None,
        name: str | None = None,
        **options: Any,
    ) -> None:
        st = _library()
        model = _check(model, batch_size, name)
        import torch

        try:
            self._model = st.CrossEncoder(
                str(model),
                device=device,
                local_files_only=local_files_only,
                cache_folder=None if cache_folder is None else str(cache_folder),
                trust_remote_code=trust_remote_code,
                revision=revision,
                **options,
            )
        except Exception as exc:
            raise RerankerError(f"could not load {model}: {exc}; {_hint(model)}", str(model)) from exc
        labels = getattr(getattr(self._model, "config", None), "num_labels", 1)
        if labels != 1:
            raise ConfigError(
                f"{model} has {labels} outputs; a reranker needs a cross-encoder with one relevance output"
            )
        self._identity = torch.nn.Identity()  # the raw logit: the sigmoid is applied here, the same for every model
        self._where = str(model)
        self._batch = batch_size
        self._name = name or f"cross-encoder:{_model_id(model)}"

    def __repr__(self) -> str:
        return f"SentenceTransformerReranker({self._where!r})"

    @property
    def name(self) -> str:
        return self._name

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """The sigmoid of the cross-encoder's logit for each (query, text), in order; blank texts get 0."""
        if not isinstance(query, str):
            raise TypeError(f"score() takes the query as a str, got {type(query).__name__}")
        texts = _texts(texts)
        out = [0.0] * len(texts)
        sent = [i for i, text in enumerate(texts) if text.strip()]
        if not sent or not query.strip():
            return out
        try:
            raw = self._model.predict(
                [(query, texts[i]) for i in sent],
                batch_size=self._batch,
                activation_fn=self._identity,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        except Exception as exc:  # torch's and the tokenizer's errors are not one class
            raise RerankerError(f"{self._where} failed to score {len(sent)} texts: {exc}", self._where) from exc
        logits = np.asarray(raw, dtype=np.float64).reshape(-1)
        if len(logits) != len(sent) or not np.isfinite(logits).all():
            raise RerankerError(f"{self._where} returned {len(logits)} scores for {len(sent)} texts", self._where)
        for i, logit in zip(sent, logits.tolist(), strict=True):
            out[i] = sigmoid(logit)
        return out
