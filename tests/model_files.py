"""Model files the tests build and save locally, for the real fastembed library to load.

`cross_encoder(directory, weights)` writes a cross-encoder in the layout fastembed's
``Xenova/ms-marco-MiniLM-L-6-v2`` has (``onnx/model.onnx``, ``tokenizer.json``,
``tokenizer_config.json``, ``special_tokens_map.json``, ``config.json``): a BERT WordPiece
tokenizer over the vocabulary engramdb ships (pairs encoded ``[CLS] query [SEP] text [SEP]``, the
text's tokens of type 1) and an ONNX graph whose logit is the sum of a weight per token over the
text's tokens (type 1). It has no attention — it is not a good reranker — but it is a real ONNX
model run by onnxruntime through fastembed's tokenisation, batching and padding, and its logits
can be computed here independently (`expected_logit`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

from engramdb.embeddings.static import default_embedder


def _vocab() -> list[str]:
    return default_embedder().tokenizer.vocabulary()


def tokenizer() -> Tokenizer:
    vocab: dict[str, int] = {}
    for i, token in enumerate(_vocab()):
        vocab.setdefault(token, i)
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls, sep = vocab["[CLS]"], vocab["[SEP]"]
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    return tok


def token_weights(weights: dict[str, float]) -> np.ndarray:
    """One weight per vocabulary id: each word's pieces get its weight (lower-cased)."""
    tok = tokenizer()
    table = np.zeros((len(_vocab()), 1), dtype=np.float32)
    for word, w in weights.items():
        for i in tok.encode(word, add_special_tokens=False).ids:
            table[i, 0] = w
    return table


def expected_logit(weights: dict[str, float], query: str, text: str) -> float:
    table = token_weights(weights)
    enc = tokenizer().encode(query, text)
    return float(sum(table[i, 0] for i, t in zip(enc.ids, enc.type_ids, strict=True) if t == 1))


def cross_encoder(directory: Path, weights: dict[str, float]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "onnx").mkdir(exist_ok=True)
    tokenizer().save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(
        json.dumps({"pad_token": "[PAD]", "model_max_length": 512, "do_lower_case": True})
    )
    (directory / "special_tokens_map.json").write_text(
        json.dumps({k: f"[{k.split('_')[0].upper()}]" for k in ("pad_token", "unk_token", "cls_token", "sep_token")})
    )
    (directory / "config.json").write_text(json.dumps({"model_type": "bert", "pad_token_id": 0}))
    table = numpy_helper.from_array(token_weights(weights), name="W")
    axes = numpy_helper.from_array(np.array([1], dtype=np.int64), name="axes")
    squeeze = numpy_helper.from_array(np.array([2], dtype=np.int64), name="last")
    nodes = [
        helper.make_node("Gather", ["W", "input_ids"], ["per_token"], axis=0),  # [B, T, 1]
        helper.make_node("Squeeze", ["per_token", "last"], ["weights"]),  # [B, T]
        helper.make_node("Cast", ["token_type_ids"], ["is_text"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["attention_mask"], ["is_real"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["weights", "is_text"], ["text_weights"]),
        helper.make_node("Mul", ["text_weights", "is_real"], ["counted"]),
        helper.make_node("ReduceSum", ["counted", "axes"], ["logits"], keepdims=1),  # [B, 1]
    ]
    inputs = [
        helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "tokens"])
        for name in ("input_ids", "attention_mask", "token_type_ids")
    ]
    graph = helper.make_graph(
        nodes,
        "bag_of_words_cross_encoder",
        inputs,
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1])],
        initializer=[table, axes, squeeze],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(directory / "onnx" / "model.onnx"))
    return directory
