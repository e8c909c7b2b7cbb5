"""What each recall lever of issue #15 costs in time: recall p50 / p99 at 10k memories, with and without.

One store of synthetic agent memories (benchmarks/corpus.py, one tenant and agent) written through
the plain API (content and ``created_at`` only, as bench_locomo.py's headline row does), then the
same queries recalled under each scoring setting — the shipped defaults and each lever switched
the other way — in alternating rounds on fresh engines over the same file, so that a slow moment of
the shared machine does not land on one setting only. recall@10 on the corpus' own relevance labels
is printed beside the times (a sanity check, not a quality figure: LoCoMo is that, bench_locomo.py).

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_levers.py [--size 10000] [--queries 300] [--rounds 3] [--out FILE]

Writes levers.json (benchmarks/out/ unless --out).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus
import provenance
from engramdb import DynamicMemoryEngine
from engramdb.memories.scoring import ScoringConfig

BATCH = 1000


def settings() -> dict[str, ScoringConfig]:
    """The shipped defaults and each lever flipped (name focus, the fusion, implicit episodes, temporal
    context, the entity lift, document expansion, the when-question lift). The speaker prefix is read at remember time and costs recall nothing."""
    base = ScoringConfig()
    other = "minmax" if base.fusion == "rank" else "rank"
    return {
        "defaults": base,
        f"name_focus={not base.name_focus}": replace(base, name_focus=not base.name_focus),
        f"fusion={other}": replace(base, fusion=other),
        "sequence_window=0 (no implicit episodes)": replace(base, sequence_window=0.0),
        "w_ctx=0": replace(base, w_ctx=0.0),
        "w_entity=0 (no entity, no name focus)": replace(base, w_entity=0.0),
        "bm25_prev=0 (no document expansion)": replace(base, bm25_prev=0.0),
        "w_dated=0 (no when-question lift)": replace(base, w_dated=0.0),
    }


def _pct(values: list[float], q: float) -> float:
    vals = sorted(values)
    return vals[min(len(vals) - 1, round(q / 100 * (len(vals) - 1)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    items = list(corpus.generate(args.size, seed=args.seed, tenants=1, agents=1))
    queries = corpus.queries(items, args.queries, args.seed)
    configs = settings()
    lat: dict[str, list[float]] = {name: [] for name in configs}
    quality: dict[str, list[float]] = {name: [] for name in configs}
    with tempfile.TemporaryDirectory(prefix="levers-") as tmp:
        path = Path(tmp) / "levers.db"
        engine = DynamicMemoryEngine(path)
        me = engine.agent("bench")
        key_of: dict[str, str] = {}
        t = time.perf_counter()
        for i in range(0, len(items), BATCH):
            chunk = items[i : i + BATCH]
            batch = [{"content": x.content, "created_at": x.created_at} for x in chunk]
            for it, m in zip(chunk, me.remember_many(batch, dedup=False), strict=True):
                key_of[m.id] = it.key
        build_s = time.perf_counter() - t
        engine.close()
        print(f"{args.size:,} memories written in {build_s:.1f} s", flush=True)
        for r in range(args.rounds):
            for name, cfg in configs.items():
                engine = DynamicMemoryEngine(path, scoring=cfg)
                me = engine.agent("bench")
                me.recall("warm up the caches", k=10)  # the first recall loads every vector and posting
                for q in queries:
                    t = time.perf_counter()
                    hits = me.recall(q.text, k=10).hits
                    lat[name].append(time.perf_counter() - t)
                    if r == 0:
                        got = {key_of.get(h.memory.id) for h in hits}
                        quality[name].append(len(got & set(q.relevant_keys)) / len(q.relevant_keys))
                engine.close()
            print(f"round {r + 1}/{args.rounds} done", flush=True)
    rows = {
        name: {
            "recall_ms_p50": round(1000 * statistics.median(lat[name]), 3),
            "recall_ms_p99": round(1000 * _pct(lat[name], 99), 3),
            "corpus_recall_at_10": round(statistics.fmean(quality[name]), 4),
            "scoring": asdict(configs[name]),
        }
        for name in configs
    }
    print(f"\n{'setting':<40}{'p50 ms':>9}{'p99 ms':>9}{'corpus R@10':>13}")
    for name, row in rows.items():
        print(f"{name:<40}{row['recall_ms_p50']:>9.2f}{row['recall_ms_p99']:>9.2f}{row['corpus_recall_at_10']:>13.4f}")
    report: dict[str, Any] = {
        "benchmark": "recall latency of each lever (plain API store, synthetic corpus)",
        "size": args.size,
        "queries": len(queries),
        "rounds": args.rounds,
        "build_s": round(build_s, 1),
        "rows": rows,
    }
    out = provenance.write_json(provenance.out_path("levers.json", args.out), report, provenance.RUN)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
