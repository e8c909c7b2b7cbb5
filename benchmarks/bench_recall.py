"""Recall benchmark: engramdb's typed memories against nooa-memory 0.0.10 on the same corpus.

For each size: `remember` throughput one by one and in batches, recall p50 / p99 (k = 10, hops = 1,
query embedding included, default embedder), recall@10 of the corpus's relevant memories, and
database bytes per memory. nooa runs in its own Python 3.12 venv with its own hashing embedder
(`bash benchmarks/peers/setup.sh` first), on the same memories and queries, at the sizes given by
`--peer-sizes` (nooa's adds are ~2.7 ms each, so 100k takes a long time).

    python benchmarks/bench_recall.py --sizes 10000 100000 --peer-sizes 10000

Writes benchmarks/results/recall.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import corpus  # noqa: E402
import provenance  # noqa: E402
from engramdb import DynamicMemoryEngine  # noqa: E402

SINGLE = 2000  # memories remembered one call each; the rest go in batches of BATCH
BATCH = 1000


def percentile(values: list[float], q: float) -> float:
    vals = sorted(values)
    return vals[min(len(vals) - 1, round(q / 100 * (len(vals) - 1)))]


def recall_at(ranked: list[str], relevant: list[str], k: int = 10) -> float:
    return len(set(ranked[:k]) & set(relevant)) / len(relevant) if relevant else 0.0


def data(n: int, n_queries: int, seed: int) -> tuple[list[corpus.MemorySpec], list[corpus.QuerySpec]]:
    # One tenant and one agent, so both systems search the same set of memories.
    items = list(corpus.generate(n, seed=seed, tenants=1, agents=1))
    queries = corpus.queries(items, n_queries, seed)
    return items, queries


def run_engramdb(
    items: list[corpus.MemorySpec], queries: list[corpus.QuerySpec], workdir: Path, seed: int = 0
) -> dict[str, Any]:
    path = workdir / "engram.db"
    t0 = time.perf_counter()
    engine = DynamicMemoryEngine(path)
    open_s = time.perf_counter() - t0
    me = engine.agent("bench")
    key_of: dict[str, str] = {}

    def fields(it: corpus.MemorySpec) -> dict[str, Any]:
        return {
            "content": it.content,
            "type": it.type,
            "importance": it.importance,
            "salience": it.salience,
            "confidence": it.confidence,
            "tags": list(it.tags),
            "entities": list(it.entities),
            "title": it.title,
            "status": it.status,
            "created_at": it.created_at,
        }

    # Issue-3 figures without dedup-on-write (a lifecycle feature measured on its own below).
    single = items[:SINGLE]
    t = time.perf_counter()
    for it in single:
        key_of[me.remember(**fields(it), dedup=False).id] = it.key
    single_s = time.perf_counter() - t
    rest = items[SINGLE:]
    t = time.perf_counter()
    for i in range(0, len(rest), BATCH):
        chunk = rest[i : i + BATCH]
        for it, m in zip(chunk, me.remember_many([fields(x) for x in chunk], dedup=False), strict=True):
            key_of[m.id] = it.key
    batch_s = time.perf_counter() - t
    # Dedup-on-write on a full store: 500 more memories one by one, then 1,000 in one batch.
    extra = list(corpus.generate(len(items) + 1500, seed=seed + 1, tenants=1, agents=1))[-1500:]
    t = time.perf_counter()
    for it in extra[:500]:
        me.remember(**fields(it))
    dedup_single_s = time.perf_counter() - t
    t = time.perf_counter()
    me.remember_many([fields(x) for x in extra[500:]])
    dedup_batch_s = time.perf_counter() - t
    me.recall("warm up the vector cache", k=10)  # first recall loads every vector once
    lat, quality = [], []
    for q in queries:
        t = time.perf_counter()
        r = me.recall(q.text, k=10, hops=1)
        lat.append(time.perf_counter() - t)
        quality.append(recall_at([key_of.get(h.memory.id, "extra") for h in r], list(q.relevant_keys)))
    engine.close()
    db_bytes = sum(f.stat().st_size for f in workdir.glob("engram.db*") if ".vectors-" not in f.name)
    return {
        "open_s": round(open_s, 3),
        "remember_single_per_s": round(len(single) / single_s, 1),
        "remember_batch_per_s": round(len(rest) / batch_s, 1) if rest else None,
        "remember_dedup_single_per_s": round(500 / dedup_single_s, 1),
        "remember_dedup_batch_per_s": round(1000 / dedup_batch_s, 1),
        "recall_p50_ms": round(percentile(lat, 50) * 1e3, 3),
        "recall_p99_ms": round(percentile(lat, 99) * 1e3, 3),
        "recall_at_10": round(statistics.mean(quality), 4) if quality else None,
        # The database file (with its WAL); the vector side file is a cache, counted apart.
        "db_bytes_per_memory": round(db_bytes / (len(items) + 1500), 1),
        "vector_side_file_bytes_per_memory": round(
            sum(f.stat().st_size for f in workdir.glob("engram.db.vectors-*")) / (len(items) + 1500), 1
        ),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def run_nooa(items: list[corpus.MemorySpec], queries: list[corpus.QuerySpec], workdir: Path) -> dict[str, Any]:
    from peers.client import PeerError, peer_python_reason, run_peer  # type: ignore[import-not-found]

    py, reason = peer_python_reason("nooa")
    if py is None:
        return {"skipped": reason}
    payload = {
        "data_dir": str(workdir / "nooa"),
        "memories": corpus.peer_memories(items),
        "queries": [{"id": str(i), "text": q.text} for i, q in enumerate(queries)],
        "k": 10,
        "hops": 1,
        "embedder": "own",
        "add_mode": "remember",
        "dedup": False,
        "reflect": False,
    }
    try:
        out = run_peer("nooa", "recall_bench", payload, timeout=6 * 3600)
    except PeerError as exc:
        return {"skipped": f"nooa failed: {exc}"}
    t = out["timings"]
    quality = [
        recall_at(res["ranked_ids"], list(q.relevant_keys))
        for res, q in zip(out["recall_results"], queries, strict=True)
    ]
    return {
        "remember_single_per_s": t["add"]["ops_per_s"],
        "recall_p50_ms": t["recall"]["p50_ms"],
        "recall_p99_ms": t["recall"]["p99_ms"],
        "recall_at_10": round(statistics.mean(quality), 4) if quality else None,
        "db_bytes_per_memory": round(out.get("db_bytes", 0) / len(items), 1),
    }


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| memories | system | remember, one by one (/s) | remember, batched (/s) | with dedup: one by one / batched (/s) "
        "| recall p50 (ms) | recall p99 (ms) | recall@10 | DB bytes / memory |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for name, key in (("engramdb", "engramdb"), ("nooa-memory 0.0.10", "nooa")):
            row = r.get(key)
            if not row:
                continue
            if "skipped" in row:
                lines.append(f"| {r['n']:,} | {name} | skipped: {row['skipped']} |||||||")
                continue
            batch = row.get("remember_batch_per_s")
            ds, db_ = row.get("remember_dedup_single_per_s"), row.get("remember_dedup_batch_per_s")
            dedup = f"{ds:,.0f} / {db_:,.0f}" if ds and db_ else "—"
            lines.append(
                f"| {r['n']:,} | {name} | {row['remember_single_per_s']:,.0f} | {f'{batch:,.0f}' if batch else '—'} | {dedup} | "
                f"{row['recall_p50_ms']:.2f} | {row['recall_p99_ms']:.2f} | {row['recall_at_10']:.3f} | {row['db_bytes_per_memory']:,.0f} |"
            )
        if r.get("engramdb") and r.get("nooa") and "skipped" not in r["nooa"]:
            speedup = r["nooa"]["recall_p50_ms"] / r["engramdb"]["recall_p50_ms"]
            lines.append(f"| {r['n']:,} | ratio | | | | nooa / engramdb = {speedup:.1f}× | | | |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000])
    ap.add_argument("--peer-sizes", type=int, nargs="*", default=[10_000])
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=provenance.OUT, help="folder (default: benchmarks/out/)")
    args = ap.parse_args()
    results = []
    for n in args.sizes:
        items, queries = data(n, args.queries, args.seed)
        with tempfile.TemporaryDirectory(prefix="bench-recall-") as tmp:
            row: dict[str, Any] = {"n": n, "queries": len(queries)}
            row["engramdb"] = run_engramdb(items, queries, Path(tmp), args.seed)
            print(f"engramdb n={n}: {row['engramdb']}", file=sys.stderr)
            if n in args.peer_sizes:
                row["nooa"] = run_nooa(items, queries, Path(tmp))
                print(f"nooa n={n}: {row['nooa']}", file=sys.stderr)
            results.append(row)
    machine = f"{platform.machine()}, {os.cpu_count()} cores, CPython {platform.python_version()}"
    md = f"Machine: {machine}; {args.queries} queries per size, k = 10, hops = 1.\n\n" + table(results)
    print(md)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "recall.json").write_text(
        json.dumps(provenance.stamp({"machine": machine, "results": results}), indent=2)
    )
    (args.out / "recall.md").write_text(md + "\n")


if __name__ == "__main__":
    main()
