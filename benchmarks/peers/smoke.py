"""End-to-end smoke test of the peer runners on synthetic data (stdlib only).

    python benchmarks/peers/smoke.py --n 1000 --n-mem 500 --queries 50
    python benchmarks/peers/smoke.py --n 10000 --n-mem 10000 --queries 100 --json out.json

Builds a synthetic conversation-like corpus where every query targets one
known memory (it repeats three of that memory's content words and its unique
entity), runs naqsha ``sql_bench`` and nooa ``recall_bench`` (own hashing
embedder and caller-supplied vectors) and ``reflect_bench``, and prints
latencies, throughput, peak RSS and hit@k of the target memory. hit@k here
only checks that ids round-trip and ranking is sane; it is not a quality
benchmark.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from client import peer_python_reason, run_peer

PEOPLE = [
    "Caroline",
    "Melanie",
    "Jon",
    "Gina",
    "John",
    "Maria",
    "Joanna",
    "Nate",
    "Tim",
    "Audrey",
    "Andrew",
    "James",
    "Deborah",
    "Jolene",
    "Evan",
    "Sam",
    "Calvin",
    "Dave",
]
VERBS = ["mentioned", "said", "explained", "told everyone", "admitted", "remembered"]
WORDS = (
    "painting guitar hiking pottery camping swimming adoption counseling marathon "
    "bakery garden novel violin photography yoga chess sculpture volunteering "
    "museum concert beach mountain lake festival workshop therapy school career "
    "dog cat horse puppy kitten parrot turtle family sister brother mother father "
    "wedding birthday promotion interview scholarship charity shelter library park "
    "recipe lasagna pancakes coffee tea sunrise sunset rainbow bracelet necklace "
    "sneakers jacket bicycle motorcycle airplane train road trip vacation paris "
    "tokyo london sweden boston seattle denver chicago canada mexico brazil"
).split()
BASE_TS = 1_682_900_000.0  # May 2023


def make_corpus(n: int, n_queries: int, seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Synthetic memories (id, content, created_ts, type, importance) and targeted queries."""
    rng = random.Random(seed)
    mems: list[dict[str, Any]] = []
    for i in range(n):
        who = rng.choice(PEOPLE)
        words = rng.sample(WORDS, 6)
        content = (
            f"{who} {rng.choice(VERBS)} the {words[0]} and the {words[1]} near the "
            f"{words[2]}, then talked about {words[3]}, {words[4]} and {words[5]} "
            f"with friend{i}."
        )
        mems.append(
            {
                "id": f"m{i}",
                "content": content,
                "created_ts": BASE_TS + i * 300.0,  # one every 5 minutes
                "type": "info",
                "importance": 5.0,
                "_words": words,
            }
        )
    queries: list[dict[str, Any]] = []
    for j in range(n_queries):
        target = rng.randrange(n)
        m = mems[target]
        w = rng.sample(m["_words"], 3)
        queries.append(
            {
                "id": f"q{j}",
                "text": f"What did they say about {w[0]}, {w[1]} and {w[2]} with friend{target}?",
                "target": m["id"],
            }
        )
    for m in mems:
        del m["_words"]
    return mems, queries


def bow_vector(text: str, dim: int, cache: dict[str, list[float]]) -> list[float]:
    """Deterministic bag-of-words random-projection vector (stands in for a model)."""
    vec = [0.0] * dim
    for tok in text.lower().replace(",", " ").replace(".", " ").replace("?", " ").split():
        wv = cache.get(tok)
        if wv is None:
            r = random.Random(tok)
            wv = [r.gauss(0.0, 1.0) for _ in range(dim)]
            cache[tok] = wv
        for d in range(dim):
            vec[d] += wv[d]
    norm = math.sqrt(sum(x * x for x in vec)) or 1.0
    return [round(x / norm, 5) for x in vec]


def hit_at(results: list[dict[str, Any]], queries: list[dict[str, Any]], k: int) -> float:
    target = {q["id"]: q["target"] for q in queries}
    if not results:
        return math.nan
    hits = sum(1 for r in results if target[r["query_id"]] in r["ranked_ids"][:k])
    return hits / len(results)


def summarise(label: str, out: dict[str, Any], queries: list[dict[str, Any]], key: str) -> dict[str, Any]:
    t = out["timings"]
    s: dict[str, Any] = {
        "run": label,
        "wall_s": out["wall_s"],
        "rss_peak_mb": round(out["rss_peak_kb"] / 1024, 1),
        "fsync_p50_ms": out.get("fsync_probe", {}).get("p50_ms"),
        "loadavg_start": out.get("loadavg_start"),
        "loadavg_end": out.get("loadavg_end"),
    }
    for name in ("insert_autocommit", "insert_batch_txn", "insert_raw_executemany", "add"):
        if name in t:
            s[f"{name}_ops_s"] = t[name]["ops_per_s"]
            if t[name].get("p50_ms") is not None:
                s[f"{name}_p50_ms"] = t[name]["p50_ms"]
    for name in ("point_query", "retrieve", "recall"):
        if name in t:
            s[f"{name}_p50_ms"] = t[name]["p50_ms"]
            s[f"{name}_p99_ms"] = t[name]["p99_ms"]
    if "reflection" in out:
        r = out["reflection"]
        s["reflect_s"] = r["total_s"]
        s["reflect_steps_s"] = r["steps_s"]
        s["reflect_report"] = {k: r["report"][k] for k in ("merged", "edges_added", "rescored", "pruned")}
    if out.get(key):
        s["hit@1"] = round(hit_at(out[key], queries, 1), 3)
        s["hit@10"] = round(hit_at(out[key], queries, 10), 3)
    if out["timings"].get("add", {}).get("deduplicated"):
        s["deduplicated"] = out["timings"]["add"]["deduplicated"]
    return s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1000, help="naqsha rows")
    ap.add_argument("--n-mem", type=int, default=500, help="nooa memories")
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--token-budget", type=int, default=2000)
    ap.add_argument("--dim", type=int, default=64, help="dim of the supplied vectors")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--only", choices=["naqsha", "nooa"], default=None)
    ap.add_argument(
        "--skip",
        action="append",
        default=[],
        help="skip a run: naqsha, nooa-own, nooa-own-notouch, nooa-vectors, nooa-reflect",
    )
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--json", type=Path, default=None, help="write summaries + raw outputs here")
    args = ap.parse_args()

    summaries: list[dict[str, Any]] = []
    raw: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="peers-smoke-") as tmp:
        if args.only in (None, "naqsha") and "naqsha" not in args.skip:
            py, why = peer_python_reason("naqsha")
            if py is None:
                print("skip naqsha:", why)
            else:
                rows, queries = make_corpus(args.n, args.queries, args.seed)
                payload = {
                    "data_dir": f"{tmp}/naqsha",
                    "rows": rows,
                    "queries": [{"id": q["id"], "text": q["text"]} for q in queries],
                    "token_budget": args.token_budget,
                }
                t = time.perf_counter()
                out = run_peer("naqsha", "sql_bench", payload, args.timeout)
                print(f"naqsha sql_bench n={args.n}: {time.perf_counter() - t:.1f}s")
                raw["naqsha"] = out
                summaries.append(summarise(f"naqsha sql_bench n={args.n}", out, queries, "retrieve_results"))

        if args.only in (None, "nooa"):
            py, why = peer_python_reason("nooa")
            if py is None:
                print("skip nooa:", why)
            else:
                mems, queries = make_corpus(args.n_mem, args.queries, args.seed)
                now_ts = mems[-1]["created_ts"] + 3600.0
                plain_q = [{"id": q["id"], "text": q["text"]} for q in queries]
                runs: list[tuple[str, str, dict[str, Any]]] = [
                    ("nooa-own", "recall_bench", {"embedder": "own"}),
                    ("nooa-own-notouch", "recall_bench", {"embedder": "own", "touch": False}),
                    ("nooa-vectors", "recall_bench", {"embedder": "vectors"}),
                    ("nooa-reflect", "reflect_bench", {"embedder": "own"}),
                ]
                cache: dict[str, list[float]] = {}
                for label, command, extra in runs:
                    if label in args.skip:
                        continue
                    if extra["embedder"] == "vectors":
                        m_in = [dict(m, vector=bow_vector(m["content"], args.dim, cache)) for m in mems]
                        q_in = [dict(q, vector=bow_vector(q["text"], args.dim, cache)) for q in plain_q]
                    else:
                        m_in, q_in = mems, plain_q
                    payload = {
                        "data_dir": f"{tmp}/{label}",
                        "memories": m_in,
                        "queries": q_in,
                        "k": 10,
                        "hops": 1,
                        "now_ts": now_ts,
                        **extra,
                    }
                    t = time.perf_counter()
                    out = run_peer("nooa", command, payload, args.timeout)
                    print(f"{label} {command} n={args.n_mem}: {time.perf_counter() - t:.1f}s")
                    raw[label] = out
                    summaries.append(summarise(f"{label} {command} n={args.n_mem}", out, queries, "recall_results"))

    for s in summaries:
        print(json.dumps(s))
    if args.json:
        args.json.write_text(
            json.dumps(
                {"args": vars(args) | {"json": str(args.json)}, "summaries": summaries, "raw": raw},
                indent=1,
                default=str,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
