"""Each scoring variant on both development sets, in one run: LoCoMo train/validation and LongMemEval_S dev
(issue #31's rule: a default changes only if it wins, or ties, on both).

For every variant (``--variants``, ``;``-separated ``--set``-style overrides of engramdb's
defaults; ``default`` = none) this runs ``bench_locomo.py --systems engramdb --splits
train,validation --set <variant>`` (one process per variant; LoCoMo's test split is never read
here) and one ``bench_longmemeval.py --variants <all of them>`` (the haystacks built once, every
variant ranked on the same stores), then prints one table — per variant LoCoMo R@10 / R@5 on train
and validation (categories 1-4) and LongMemEval turn R@10 / recall_all@5 with both roles and with
user turns only, each beside the default's — and writes ``ablate_both.json`` with provenance and
both benchmarks' own result files inline.

A verdict column applies the rule: ``wins/ties both`` when no figure of the eight is more than
``--tie`` below the default's (0.005: one LoCoMo validation question is 0.003 of R@10; one
LongMemEval question 0.0105), else the data sets it loses on.

    .venv/bin/python benchmarks/ablate_both.py --variants "default;relevant_share=0.25;sequence_window=0"
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import provenance  # noqa: E402

#: the figures compared, as (label, data set, how to read it from a variant's row)
FIGURES = (
    ("LoCoMo train R@10", "locomo"),
    ("LoCoMo train R@5", "locomo"),
    ("LoCoMo val R@10", "locomo"),
    ("LoCoMo val R@5", "locomo"),
    ("LME both turn R@10", "longmemeval"),
    ("LME both R_all@5", "longmemeval"),
    ("LME user turn R@10", "longmemeval"),
    ("LME user R_all@5", "longmemeval"),
)


def locomo_figures(result: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for split, short in (("train", "train"), ("validation", "val")):
        row = next(r for r in result["splits"][split]["results"] if r["system"] == "engramdb")
        m = row["metrics"]["cat1-4"]
        out[f"LoCoMo {short} R@10"], out[f"LoCoMo {short} R@5"] = m["r@10"], m["r@5"]
    return out


def longmemeval_figures(result: dict[str, Any], variant: str) -> dict[str, float]:
    rows = result["results"][f"engramdb {variant}"]
    out: dict[str, float] = {}
    for mode in ("both", "user"):
        m = rows[mode]["metrics"]
        out[f"LME {mode} turn R@10"], out[f"LME {mode} R_all@5"] = m["turn_r@10"], m["recall_all@5"]
    return out


def verdict(row: dict[str, float], base: dict[str, float], tie: float) -> str:
    lost = sorted({data for label, data in FIGURES if row[label] < base[label] - tie})
    return "wins/ties both" if not lost else "loses on " + " and ".join(lost)


def run(cmd: list[str]) -> None:
    print("  $ " + " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", required=True, help='";"-separated, e.g. "default;relevant_share=0.25"')
    ap.add_argument("--tie", type=float, default=0.005, help="a figure this far below the default's still ties")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(";") if v.strip()]
    if "default" not in variants:
        variants.insert(0, "default")
    block = provenance.provenance(["benchmarks/ablate_both.py", *(argv if argv is not None else sys.argv[1:])])
    py = sys.executable
    figures: dict[str, dict[str, float]] = {}
    raw: dict[str, Any] = {"locomo": {}, "longmemeval": None}
    with tempfile.TemporaryDirectory(prefix="edb-ablate-") as tmp:
        for v in variants:
            where = Path(tmp) / f"locomo-{len(raw['locomo'])}"
            spec = "" if v == "default" else v
            run([py, str(HERE / "bench_locomo.py"), "--systems", "engramdb", "--splits", "train,validation",
                 "--set", spec, "--no-plots", "--out-dir", str(where)])  # fmt: skip
            result = json.loads((where / "locomo.json").read_text(encoding="utf-8"))
            raw["locomo"][v] = result
            figures[v] = locomo_figures(result)
        lme = Path(tmp) / "longmemeval.json"
        run([py, str(HERE / "bench_longmemeval.py"), "--variants", ";".join(variants), "--out", str(lme)])
        raw["longmemeval"] = json.loads(lme.read_text(encoding="utf-8"))
        for v in variants:
            figures[v].update(longmemeval_figures(raw["longmemeval"], v))
    base = figures["default"]
    verdicts = {v: ("(the default)" if v == "default" else verdict(figures[v], base, args.tie)) for v in variants}
    labels = [label for label, _ in FIGURES]
    print("| variant | " + " | ".join(labels) + " | verdict |")
    print("|---|" + "---:|" * len(labels) + "---|")
    for v in variants:
        cells = [
            f"{figures[v][lb]:.3f}" + ("" if v == "default" else f" ({figures[v][lb] - base[lb]:+.3f})")
            for lb in labels
        ]
        print(f"| {v} | " + " | ".join(cells) + f" | {verdicts[v]} |")
    path = provenance.write_json(
        provenance.out_path("ablate_both.json", args.out),
        {"variants": variants, "tie": args.tie, "figures": figures, "verdicts": verdicts, "runs": raw},
        block,
    )
    print(f"wrote {path} ({provenance.summary(block)})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
