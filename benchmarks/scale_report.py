"""The scale benchmark's report: the markdown tables and the latency plot of `bench_scale.py`'s results.

Kept apart from the measuring code so that `bench_scale.py` stays one concern (run the sizes and
measure) and a report can be re-rendered from a saved JSON: `markdown(json.load(...))`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

K, HOPS = 10, 1  # as bench_scale.py recalls
TARGETS = {"p50_ms": 50.0, "p99_ms": 150.0, "bytes_per_memory": 3000}  # issue #6, at 1M memories
#: issue #15, measured side by side in one run: peak RSS and a new process's first recall at 1M,
#: remember with dedup on at 1M, recall p50 at 10k against FTS5's
TARGETS_15 = {
    "peak_rss_mb": 2048.0,
    "restart_first_recall_s": 3.0,
    "dedup_single_per_s": 1000.0,
    "dedup_batch_per_s": 10000.0,
    "p50_ratio_fts5_10k": 1.0,
}
SYSTEMS = ("engramdb", "fts5", "numpy")


def fmt(x: float | None, spec: str = ",.0f") -> str:
    return "—" if x is None else format(x, spec)


def ratio(x: float) -> str:
    return f"{x:.2f}×" if x < 1 else f"{x:.1f}×"


def markdown(report: dict[str, Any]) -> str:
    rows = report["results"]
    git = report["git"]
    code = f"commit {git['commit']}" + (" with uncommitted changes in src/" if git["src_dirty"] else "")
    if git["engramdb"] != "src/engramdb":
        code = f"engramdb imported from {git['engramdb']} (this repository's HEAD: {git['commit']})"
    out = [
        f"Machine: {report['machine']}; {code}; {report['date']}.",
        f"Command: `{report['command']}`",
        "",
        f"Recall: k = {K}, hops = {HOPS}, engine defaults (vector_index auto, static embedder, query embedding "
        "included); latencies over queries × rounds; ratios are engramdb p50 / baseline p50 from the same run.",
        "",
        "| memories | index | recall p50 / p99 (ms) | FTS5 p50 / p99 (ms) | numpy p50 / p99 (ms) "
        "| p50 ratio vs FTS5 / numpy | recall@10 engramdb / FTS5 / numpy | first recall: after build / reopened (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        rec, d = r["recall"], r["derived"]
        q = "/".join(fmt(rec[s]["recall_at_10"], ".3f") for s in SYSTEMS)
        out.append(
            f"| {r['n']:,} | {r['engramdb']['index']} | {rec['engramdb']['p50_ms']:.1f} / {rec['engramdb']['p99_ms']:.1f} "
            f"| {rec['fts5']['p50_ms']:.2f} / {rec['fts5']['p99_ms']:.2f} | {rec['numpy']['p50_ms']:.2f} / {rec['numpy']['p99_ms']:.2f} "
            f"| {ratio(d['p50_ratio_fts5'])} / {ratio(d['p50_ratio_numpy'])} | {q} "
            f"| {r['engramdb']['first_recall_s']:.1f} / {r['engramdb']['restart_first_recall_s']:.1f} |"
        )
    out += [
        "",
        "Noise: engramdb p50 / p99 (ms) in each round, and the 1-minute load average (2 cores) before each size: "
        + "; ".join(
            f"{r['n']:,}: "
            + ", ".join(f"{x['p50_ms']:.1f} / {x['p99_ms']:.1f}" for x in r["recall"]["engramdb"].get("rounds", []))
            + f" (load {r['load_before'][0]:.1f})"
            for r in rows
        )
        + ".",
    ]
    out += [
        "",
        "| memories | remember one by one / batched (/s) | link (/s) | build (s) | with dedup: one by one / batched (/s) "
        "| DB bytes / memory: total = vectors + rest | peak RSS (MB) | reflect (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        e, d = r["engramdb"], r["derived"]
        b, dd = e["build"], e["dedup"]
        build = f"{b['build_s']:,.0f}" + (" (cached)" if b["cached"] else "")
        refl = f"{e['reflect']['s']:.1f}" if "reflect" in e else "not run"
        out.append(
            f"| {r['n']:,} | {fmt(b['remember_single_per_s'])} / {fmt(b['remember_batch_per_s'])} | {fmt(b['link_per_s'])} "
            f"| {build} | {fmt(dd['single_per_s'])} / {fmt(dd['batch_per_s'])} "
            f"| {d['db_bytes_per_memory']:,.0f} = {d['vector_bytes_per_memory']:,.0f} + {d['other_bytes_per_memory']:,.0f} "
            f"| {e['peak_rss_mb']:,.0f} | {refl} |"
        )
    big = rows[-1]
    rec, d = big["recall"]["engramdb"], big["derived"]
    checks = [
        ("recall p50", f"≤ {TARGETS['p50_ms']:.0f} ms", f"{rec['p50_ms']:.1f} ms", rec["p50_ms"] <= TARGETS["p50_ms"]),
        ("recall p99", f"≤ {TARGETS['p99_ms']:.0f} ms", f"{rec['p99_ms']:.1f} ms", rec["p99_ms"] <= TARGETS["p99_ms"]),
        (
            "DB bytes / memory besides its vector",
            f"≤ {TARGETS['bytes_per_memory']:,}",
            f"{d['other_bytes_per_memory']:,.0f} (+ {d['vector_bytes_per_memory']:,.0f} of vector)",
            d["other_bytes_per_memory"] <= TARGETS["bytes_per_memory"],
        ),
    ]
    out += [
        "",
        f"Targets of issue #6 (set for 1,000,000 memories; measured at {big['n']:,}):",
        "",
        "| target | wanted | measured | met |",
        "|---|---|---|---|",
        *(f"| {name} | {want} | {got} | {'yes' if ok else 'no'} |" for name, want, got, ok in checks),
        "",
        *targets_15(rows),
        "Where the bytes go (per memory, after the build, before any recall; from SQLite's dbstat):",
        "",
    ]
    names = [p for p, size in big["engramdb"]["bytes"]["parts"].items() if size >= 5 * big["n"]]
    out += ["| memories | " + " | ".join(names) + " | other |", "|---|" + "---|" * (len(names) + 1)]
    for r in rows:
        parts = r["engramdb"]["bytes"]["parts"]
        other = sum(size for p, size in parts.items() if p not in names)
        cells = [f"{parts.get(p, 0) / r['n']:,.0f}" for p in names] + [f"{other / r['n']:,.0f}"]
        out.append(f"| {r['n']:,} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def targets_15(rows: list[dict[str, Any]]) -> list[str]:
    """The targets table of issue #15 (peak RSS and restart at 1M, dedup throughput at 1M, p50 at 10k)."""
    t = TARGETS_15
    by_n = {r["n"]: r for r in rows}
    checks: list[tuple[str, str, str, bool | None]] = []
    big = by_n.get(1_000_000)
    if big is not None:
        e = big["engramdb"]
        restart = e.get("restart", {})
        peak = max(e["peak_rss_mb"], restart.get("peak_rss_mb", 0.0))
        checks += [
            (
                "peak RSS at 1M (engine process over build + recalls; reopened process)",
                f"≤ {t['peak_rss_mb']:,.0f} MB",
                f"{e['peak_rss_mb']:,.0f} MB; {fmt(restart.get('peak_rss_mb'))} MB",
                peak <= t["peak_rss_mb"],
            ),
            (
                "first recall of a new process at 1M",
                f"≤ {t['restart_first_recall_s']:.0f} s",
                f"{e['restart_first_recall_s']:.2f} s",
                e["restart_first_recall_s"] <= t["restart_first_recall_s"],
            ),
            (
                "remember with dedup at 1M, one by one",
                f"≥ {t['dedup_single_per_s']:,.0f} /s",
                f"{e['dedup']['single_per_s']:,.0f} /s",
                e["dedup"]["single_per_s"] >= t["dedup_single_per_s"],
            ),
            (
                "remember with dedup at 1M, batched",
                f"≥ {t['dedup_batch_per_s']:,.0f} /s",
                f"{e['dedup']['batch_per_s']:,.0f} /s",
                e["dedup"]["batch_per_s"] >= t["dedup_batch_per_s"],
            ),
        ]
    small = by_n.get(10_000)
    if small is not None:
        rec = small["recall"]
        checks.append(
            (
                "recall p50 at 10k against FTS5's",
                "≤ 1.0×",
                f"{rec['engramdb']['p50_ms']:.2f} / {rec['fts5']['p50_ms']:.2f} ms = {ratio(small['derived']['p50_ratio_fts5'])}",
                small["derived"]["p50_ratio_fts5"] <= t["p50_ratio_fts5_10k"],
            )
        )
    if not checks:
        return []
    return [
        "Targets of issue #15 (measured side by side in this run):",
        "",
        "| target | wanted | measured | met |",
        "|---|---|---|---|",
        *(f"| {name} | {want} | {got} | {'yes' if ok else 'no'} |" for name, want, got, ok in checks),
        "",
    ]


def plot(report: dict[str, Any], path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "plot skipped: matplotlib is not installed (pip install -e '.[bench]')"
    rows = report["results"]
    sizes = [r["n"] for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    styles = {"engramdb": ("tab:blue", "o"), "fts5": ("tab:orange", "s"), "numpy": ("tab:green", "^")}
    labels = {"engramdb": "engramdb recall", "fts5": "SQLite FTS5 BM25", "numpy": "numpy brute-force cosine"}
    for ax, stat, target in zip(axes, ("p50_ms", "p99_ms"), ("p50_ms", "p99_ms"), strict=True):
        for system in SYSTEMS:
            color, marker = styles[system]
            ax.plot(sizes, [r["recall"][system][stat] for r in rows], marker=marker, color=color, label=labels[system])
        ax.axhline(
            TARGETS[target], color="grey", linestyle="--", linewidth=1, label=f"target at 1M ({TARGETS[target]:.0f} ms)"
        )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("memories")
        ax.set_title(f"{stat.split('_')[0]} latency, k = {K}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("ms per query")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"engramdb scale ({report['machine']})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"wrote {path}"
