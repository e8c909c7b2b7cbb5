"""The fastembed adapters with the real library and real model files, built here (no download).

- `FastEmbedEmbedder` loads engramdb's shipped static model written by `save_static_model` in
  model2vec's format, through fastembed's static-model code (its safetensors reader and a
  `tokenizers` WordPiece): the vectors must be the shipped embedder's.
- `FastEmbedReranker` loads an ONNX cross-encoder built by `tests.model_files` and runs it on
  onnxruntime through fastembed's pair tokenisation, padding and batching: the scores must be the
  sigmoid of the logits computed here independently.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from engramdb import ConfigError, DynamicMemoryEngine, Embedder, EmbedderError, MissingExtra, Reranker, RerankerError
from engramdb.embeddings.fastembed import FastEmbedEmbedder, FastEmbedReranker, save_static_model
from engramdb.embeddings.rerank import sigmoid
from engramdb.embeddings.static import StaticEmbedder, default_embedder
from tests.model_files import cross_encoder, expected_logit

TEXTS = [
    "Dana owns the grammar spec.",
    "Café, résumé and naïve — accents are stripped; 東京 is split per character!",
    "The customer wants the release on Friday, the 3rd of May (2026).",
    "unbelievably antidisestablishmentarianism",
    "x" * 150,  # one word past max_input_chars_per_word: [UNK] alone, an all-zero row
    "",
    "   ",
]
WEIGHTS = {"grammar": 1.5, "owns": 2.0, "spec": 0.5, "friday": -1.0, "lunch": -2.0}
#: fastembed's registry name whose layout the local files follow
STATIC, CROSS = "minishlab/potion-base-8M", "Xenova/ms-marco-MiniLM-L-6-v2"


@pytest.fixture(scope="module")
def static_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_static_model(tmp_path_factory.mktemp("static"))


@pytest.fixture(scope="module")
def cross_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cross_encoder(tmp_path_factory.mktemp("cross"), WEIGHTS)


def test_the_shipped_static_model_through_fastembed_gives_the_same_vectors(static_dir: Path) -> None:
    fe = FastEmbedEmbedder(STATIC, specific_model_path=static_dir)
    assert isinstance(fe, Embedder)
    assert fe.name == f"fastembed:{STATIC}"
    assert fe.dim == 384  # the files' dimension, not the catalogue's 256 for that name
    ours = default_embedder().embed(TEXTS)
    theirs = fe.embed(TEXTS)
    assert theirs.dtype == np.float32 and theirs.flags["C_CONTIGUOUS"] and theirs.shape == (len(TEXTS), 384)
    cosines = (ours * theirs).sum(axis=1)
    assert np.all(cosines[:4] > 0.9999), cosines
    assert not theirs[4:].any()  # all-unknown and blank texts: zero rows (blank ones not even sent)
    assert np.allclose(np.linalg.norm(theirs[:4], axis=1), 1.0, atol=1e-5)


def test_the_engine_recalls_the_same_with_either(static_dir: Path, tmp_path: Path) -> None:
    facts = [
        "Dana owns the grammar spec.",
        "The release slipped to Friday.",
        "Lunch is at the Italian place.",
        "Omar reviews every parser change.",
    ]
    ranked = []
    for label, embedder in (
        ("shipped", default_embedder()),
        ("fastembed", FastEmbedEmbedder(STATIC, specific_model_path=static_dir)),
    ):
        with DynamicMemoryEngine(tmp_path / f"{label}.db", memory_embedder=embedder, clock=lambda: 1.8e9) as engine:
            ada = engine.agent("ada")
            for fact in facts:
                ada.remember(fact)
            r = ada.recall("who is responsible for the language specification?", k=4)
            ranked.append([(h.memory.content, round(h.components.cos, 4)) for h in r.hits])
    assert ranked[0] == ranked[1]


def test_save_static_model_refuses_other_embedders(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="StaticEmbedder"):
        save_static_model(tmp_path, object())  # type: ignore[arg-type]
    out = save_static_model(tmp_path / "new" / "dir", StaticEmbedder.load())
    assert {p.name for p in out.iterdir()} == {"model.safetensors", "tokenizer.json", "config.json"}


def test_the_cross_encoder_scores_are_the_sigmoid_of_its_logits(cross_dir: Path) -> None:
    r = FastEmbedReranker(CROSS, specific_model_path=cross_dir, batch_size=2)  # batches padded to their longest
    assert isinstance(r, Reranker) and r.name == f"fastembed-rerank:{CROSS}"
    query = "who owns the grammar?"
    docs = [
        "Dana owns the grammar spec.",
        "Lunch on Friday.",
        "",
        "The grammar, the grammar and the grammar spec were reviewed by the owner of the grammar.",
        "Nothing in common here.",
    ]
    got = r.score(query, docs)
    want = [sigmoid(expected_logit(WEIGHTS, query, d)) if d.strip() else 0.0 for d in docs]
    assert got == pytest.approx(want, abs=1e-6)
    assert got[3] > got[0] > got[4] > got[1]  # the weights decide, not the order given
    assert r.score(" ", docs) == [0.0] * len(docs)


def test_recall_with_the_fastembed_reranker(cross_dir: Path, tmp_path: Path) -> None:
    reranker = FastEmbedReranker(CROSS, specific_model_path=cross_dir)
    with DynamicMemoryEngine(tmp_path / "r.db", reranker=reranker, clock=lambda: 1.8e9) as engine:
        ada = engine.agent("ada")
        for fact in ("Grammar lunch on Friday.", "Dana owns the grammar spec.", "The grammar tests are flaky."):
            ada.remember(fact)
        r = ada.recall("grammar", k=3)
    assert r.hits[0].memory.content == "Dana owns the grammar spec."
    for h in r.hits:
        assert h.components.rerank == pytest.approx(sigmoid(expected_logit(WEIGHTS, "grammar", h.memory.content)))
    assert r.hits[-1].memory.content == "Grammar lunch on Friday."  # -2 - 1 + 1.5: the lowest logit


def test_models_that_cannot_load_are_typed_errors(tmp_path: Path) -> None:
    with pytest.raises(EmbedderError, match=r"could not load .*check that the directory holds"):
        FastEmbedEmbedder("BAAI/bge-small-en-v1.5", specific_model_path=tmp_path / "missing")
    with pytest.raises(EmbedderError, match="specific_model_path="):
        FastEmbedEmbedder("BAAI/bge-small-en-v1.5", cache_dir=tmp_path, local_files_only=True)
    with pytest.raises(ConfigError, match="not one of fastembed's text models"):
        FastEmbedEmbedder("nobody/no-such-model")
    with pytest.raises(RerankerError, match="could not load"):
        FastEmbedReranker(CROSS, specific_model_path=tmp_path / "missing")
    with pytest.raises(ConfigError, match="not one of fastembed's cross-encoders"):
        FastEmbedReranker("nobody/no-such-model")
    for make in (FastEmbedEmbedder, FastEmbedReranker):
        with pytest.raises(ConfigError, match="batch_size"):
            make(STATIC, batch_size=0)


def test_without_fastembed_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fastembed", None)  # import fastembed now raises ImportError
    makers: list[Callable[..., object]] = [FastEmbedEmbedder, FastEmbedReranker]
    for make in makers:
        with pytest.raises(MissingExtra, match=r'pip install "engramdb\[fastembed\]"'):
            make(STATIC)
