"""Try scoring settings on LoCoMo's train and validation splits through the plain API, quickly.

The plain-API stores of each conversation are built once (cached in --workdir) and every setting
(``--set`` of bench_locomo.py, one per argument) is run on them with real ``agent.recall`` calls,
as bench_locomo.py's headline row does. It refuses the test split: that is read once, by
bench_locomo.py, for the report. The cached stores are the engine's as it was when they were built:
delete --workdir once the write path changes.

    .venv/bin/python benchmarks/sweep_locomo.py "" "bm25_b=0.5" "w_ctx=1.0,mu=0.2"
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo
import provenance
from bench_locomo import Haystack, build_plain, parse_set, rank_engramdb
from engramdb.memories.scoring import ScoringConfig

SPLITS = ("train", "validation")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("settings", nargs="*", default=[""], help='bench_locomo.py --set specs ("" = defaults)')
    parser.add_argument("--data", type=Path, default=locomo.DEFAULT_DATA)
    parser.add_argument("--splits", default="train,validation", help="train and/or validation (never test)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/engramdb-sweep"))
    parser.add_argument("--api", default="recall", choices=("recall", "explain"))
    parser.add_argument("--out", type=Path, help="results file or folder (default benchmarks/out/locomo-sweep.json)")
    args = parser.parse_args(argv)
    splits = [s.strip() for s in args.splits.split(",") if s.strip()]
    if any(s not in SPLITS for s in splits):
        parser.error("only train and validation: the test split is read once, by bench_locomo.py, for the report")
    convs = locomo.load_locomo(args.data)
    args.workdir.mkdir(parents=True, exist_ok=True)
    hays: dict[str, list[Haystack]] = {}
    for s in splits:
        hays[s] = []
        for c in locomo.split(convs, s):
            path = args.workdir / f"{c.sample_id}-plain.db"
            if path.exists():  # built by an earlier sweep: the same plain-API store
                hays[s].append(Haystack(c, path, _positions(path, c), 0.0, "plain"))
            else:
                hay = build_plain(c, path)
                with path.with_suffix(".positions.json").open("w", encoding="utf-8") as f:  # a cache, not a result
                    json.dump(hay.position, f)
                hays[s].append(hay)
    results: list[dict[str, object]] = []
    for spec in args.settings:
        cfg = parse_set(spec, ScoringConfig())
        line = [f"{spec or 'defaults':<40}"]
        for s in splits:
            rows: list[tuple[int, dict[str, float]]] = []
            lat: list[float] = []
            for hay in hays[s]:
                ranked = rank_engramdb(
                    hay, cfg, 1, True, [q.question for q in hay.conv.questions], latencies=lat, api=args.api
                )
                rows += [
                    (q.category, locomo.score_question(r, q, hay.conv.turns))
                    for q, r in zip(hay.conv.questions, ranked, strict=True)
                ]
            m = locomo.summarise(rows)
            cats = " ".join(f"{m[f'cat{c}']['r@10']:.3f}" for c in (1, 2, 3, 4))
            p50 = 1000 * statistics.median(lat)
            line.append(f"{s[:5]} R@10 {m['cat1-4']['r@10']:.3f} R@5 {m['cat1-4']['r@5']:.3f} [{cats}] {p50:.1f}ms")
            results.append({"set": spec, "split": s, "metrics": m, "query_ms_p50": p50})
        print(" | ".join(line), flush=True)
    path = provenance.write_json(
        provenance.out_path("locomo-sweep.json", args.out), {"results": results}, provenance.RUN
    )
    print(f"wrote {path}")
    return 0


def _positions(path: Path, conv: locomo.Conversation) -> dict[str, int]:
    """memory id -> turn position of a cached store (the sidecar json build_plain's run wrote)."""
    return {k: int(v) for k, v in json.loads(path.with_suffix(".positions.json").read_text()).items()}


if __name__ == "__main__":
    raise SystemExit(main())
