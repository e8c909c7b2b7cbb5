"""What a `min_relevance` threshold costs in recall@10 and saves in irrelevant hits, on LoCoMo.

For each conversation (stored as `bench_locomo.py` stores it), every question of categories 1–4
is asked as a dry run (`explain`, k large enough to hold every candidate), and the ranking is cut
the way ``recall(min_relevance=t)`` cuts it: keep the hits at or above `t`, then the first 10.
Reported per threshold:

- recall@10 of the evidence turns (categories 1–4), and the share of questions left with no hit;
- hits returned per question, and of those the ones that are not evidence ("irrelevant");
- off-topic questions — each conversation asked the questions of the next one, whose every hit is
  irrelevant by construction: hits returned per question, and the share that get none.

    python benchmarks/bench_relevance.py [--conversations 0-9] [--thresholds 0 0.1 0.2 0.3 0.5]

Writes benchmarks/results/relevance.json (or --out). No threshold is chosen here on the figures
it reports: the table is the trade-off a caller picks from.
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

import locomo  # noqa: E402
import provenance  # noqa: E402
from bench_locomo import QUERY_DELAY, build_all  # noqa: E402
from engramdb import DynamicMemoryEngine  # noqa: E402
from engramdb.testing import FixedClock  # noqa: E402

K = 10
POOL = 400  # explain's k: more than any question's candidates, so the cut below is the engine's


def ranked(hay: Any, questions: list[str]) -> list[list[tuple[int, float]]]:
    """Each question's full ranking as (turn position, relevance), best first."""
    clock = FixedClock(hay.conv.last_ts + QUERY_DELAY)
    engine = DynamicMemoryEngine(hay.path, clock=clock)
    me = engine.agent("bench")
    out = []
    for q in questions:
        ex = me.explain(q, k=POOL)
        out.append([(hay.position[e.memory_id], e.relevance) for e in (*ex.hits, *ex.near_misses)])
    engine.close()
    return out


def cut(ranking: list[tuple[int, float]], t: float) -> list[int]:
    return [pos for pos, rel in ranking if rel >= t][:K]


def git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=False, cwd=HERE).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=locomo.DEFAULT_DATA)
    ap.add_argument("--conversations", default="all")
    ap.add_argument("--thresholds", type=float, nargs="+", default=[0.0, 0.1, 0.2, 0.3, 0.4, 0.5])
    ap.add_argument("--out", type=Path, default=provenance.OUT, help="folder (default: benchmarks/out/)")
    args = ap.parse_args()
    if not args.data.exists():
        sys.exit(locomo.missing_data_message(args.data))
    started = time.time()
    convs = locomo.select(locomo.load_locomo(args.data, categories=(1, 2, 3, 4)), args.conversations)
    with tempfile.TemporaryDirectory() as tmp:
        hays = build_all(convs, Path(tmp))
        on_topic = [ranked(h, [q.question for q in h.conv.questions]) for h in hays]
        off_topic = [
            ranked(h, [q.question for q in hays[(i + 1) % len(hays)].conv.questions]) for i, h in enumerate(hays)
        ]
    rows = []
    for t in args.thresholds:
        recalls, empty, returned, irrelevant = [], 0, [], []
        for hay, rankings in zip(hays, on_topic, strict=True):
            for q, r in zip(hay.conv.questions, rankings, strict=True):
                got = cut(r, t)
                recalls.append(locomo.recall_at(got, q.gold, K))
                empty += not got
                returned.append(len(got))
                irrelevant.append(sum(pos not in q.gold for pos in got))
        off = [len(cut(r, t)) for rankings in off_topic for r in rankings]
        rows.append(
            {
                "min_relevance": t,
                "recall_at_10": statistics.fmean(recalls),
                "questions_with_no_hit": empty / len(recalls),
                "hits_per_question": statistics.fmean(returned),
                "irrelevant_hits_per_question": statistics.fmean(irrelevant),
                "off_topic_hits_per_question": statistics.fmean(off),
                "off_topic_with_no_hit": sum(n == 0 for n in off) / len(off),
            }
        )
    base = rows[0]
    print(f"LoCoMo categories 1–4, {len(hays)} conversations, {sum(len(h.conv.questions) for h in hays)} questions")
    print(
        "| min_relevance | R@10 | ΔR@10 | no hit | hits / q | irrelevant / q | off-topic hits / q | off-topic: none |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['min_relevance']:g} | {r['recall_at_10']:.3f} | {r['recall_at_10'] - base['recall_at_10']:+.3f} "
            f"| {r['questions_with_no_hit']:.3f} | {r['hits_per_question']:.2f} | {r['irrelevant_hits_per_question']:.2f} "
            f"| {r['off_topic_hits_per_question']:.2f} | {r['off_topic_with_no_hit']:.3f} |"
        )
    meta = {
        "command": provenance.RUN["command"],
        "commit": git("rev-parse", "HEAD"),
        "clean": git("status", "--porcelain", "--", "src", "benchmarks") == "",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, CPython {platform.python_version()}",
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "duration_s": round(time.time() - started, 1),
        "conversations": [h.conv.sample_id for h in hays],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "relevance.json").write_text(
        json.dumps(provenance.stamp({"meta": meta, "rows": rows}), indent=1) + "\n"
    )


if __name__ == "__main__":
    main()
