"""Before / after a refactor, in one run: `bench_recall.py` and `bench_sql_engine.py` of two checkouts.

Each round runs the old checkout's benchmarks with its own Python, then this checkout's, one
process each (alternating, so drift of a shared machine hits both alike); the table shows the
median over rounds of each figure and the ratio after / before. Used for the storage seam
(issue 12: recall p50 and remember throughput within 10%).

    git worktree add /tmp/before 26a857f && (cd /tmp/before && python3 -m venv .venv && .venv/bin/pip install -e ".[test]")
    python benchmarks/bench_seam.py --before /tmp/before --rounds 3 --sizes 10000 100000

Writes benchmarks/results/seam.json (or --out).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import provenance  # noqa: E402

ROOT = HERE.parent

RECALL = ("remember_single_per_s", "remember_batch_per_s", "recall_p50_ms", "recall_p99_ms", "recall_at_10")
SQL = ("autocommit", "txn_rows", "executemany", "point", "range")


def git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True, check=True).stdout.strip()


def run(tree: Path, python: Path, script: str, args: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(
            [str(python), str(tree / "benchmarks" / script), *args, "--out", out],
            check=True,
            cwd=tree,
            stdout=subprocess.DEVNULL,
        )
        name = {"bench_recall.py": "recall.json", "bench_sql_engine.py": "sql_engine.json"}[script]
        return json.loads((Path(out) / name).read_text())


def figures(recall: dict[str, Any], sql: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in recall["results"]:
        for key in RECALL:
            if r["engramdb"].get(key) is not None:  # no batched figure below the one-by-one count
                out[f"recall {r['n']:,} {key}"] = r["engramdb"][key]
    for r in sql["results"]:
        for key in SQL:
            out[f"sql {r['n']:,} {key} µs/op"] = r[f"{key}.scope"]["us_per_op"]
        out[f"sql {r['n']:,} retrieve p50 ms"] = r["retrieve.scope"]["p50_ms"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, required=True, help="the old checkout (with its own .venv)")
    ap.add_argument("--before-python", type=Path, help="default: <before>/.venv/bin/python")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000])
    ap.add_argument("--sql-repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=provenance.OUT, help="folder (default: benchmarks/out/)")
    args = ap.parse_args()
    trees = {
        "before": (args.before.resolve(), (args.before_python or args.before / ".venv" / "bin" / "python").absolute()),
        "after": (ROOT, Path(sys.executable).absolute()),
    }
    sizes = [str(n) for n in args.sizes]
    rounds: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    started = time.time()
    for i in range(args.rounds):
        for side, (tree, python) in trees.items():
            t0 = time.perf_counter()
            recall = run(tree, python, "bench_recall.py", ["--sizes", *sizes, "--peer-sizes"])
            sql = run(
                tree,
                python,
                "bench_sql_engine.py",
                ["--sizes", *sizes, "--repeats", str(args.sql_repeats), "--no-peer"],
            )
            rounds[side].append(figures(recall, sql))
            print(f"round {i + 1}/{args.rounds} {side}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    keys = list(rounds["after"][0])
    table = []
    for key in keys:
        before = statistics.median(r[key] for r in rounds["before"])
        after = statistics.median(r[key] for r in rounds["after"])
        table.append({"figure": key, "before": before, "after": after, "ratio": after / before if before else None})
    print("| figure | before (median) | after (median) | after / before |")
    print("|---|---|---|---|")
    for row in table:
        print(f"| {row['figure']} | {row['before']:,.3f} | {row['after']:,.3f} | {row['ratio']:.3f} |")
    load = os.getloadavg()
    result = {
        "command": provenance.RUN["command"],
        "before": {"commit": git(trees["before"][0], "rev-parse", "HEAD")},
        "after": {"commit": git(ROOT, "rev-parse", "HEAD"), "clean": git(ROOT, "status", "--porcelain", "src") == ""},
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, CPython {platform.python_version()}",
        "load_avg_at_end": [round(x, 2) for x in load],
        "duration_s": round(time.time() - started, 1),
        "rounds": rounds,
        "table": table,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "seam.json").write_text(json.dumps(provenance.stamp(result), indent=1) + "\n")


if __name__ == "__main__":
    main()
