"""Reflection benchmark: engramdb's `reflect()` against nooa-memory 0.0.10's on the same corpus and vectors.

For each size: time, peak memory and counts per step (merge, reconcile, link, rescore, abstract,
prune; no reconciler or reasoner, so the two model steps are skipped on both sides), then a few
hundred recalls to measure reflection output's share of rows against its share of reads.

Both systems get the same memories (`corpus.generate(n, seed, tenants=1, agents=1)`), the same
vectors (engramdb's offline hashing embedder, 256-d, exported to nooa through its ``vectors``
embedder), the same timestamps and the same clock, and neither deduplicates on write, so the
corpus's ~3% restatements are left for reflection to find. Peak memory is the rise of the
process's peak RSS over its level before the step (VmHWM reset between steps on Linux).

    python benchmarks/bench_reflection.py --sizes 10000 100000 --peer-sizes 10000

nooa runs in its own Python 3.12 venv (`bash benchmarks/peers/setup.sh` first). Its merge and
edge steps each run one exact k-NN scan per memory, so its pass grows with n²: at the sizes in
`--peer-sizes` only (the JSON records the 100k estimate from the 10k run). Prints a markdown
table and writes benchmarks/results/reflection.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402

import corpus  # noqa: E402
import provenance  # noqa: E402
from engramdb import DynamicMemoryEngine  # noqa: E402
from engramdb.memories.reflection import STEPS, ReflectionConfig, Reflector  # noqa: E402
from engramdb.memories.text import pack_times  # noqa: E402
from engramdb.testing import FixedClock  # noqa: E402

DAY = 86_400.0
BATCH = 1000
NOOA_STEPS = {
    "merge": "merge_duplicates",
    "reconcile": "reconsolidate",
    "link": "form_edges",
    "rescore": "rescore_importance",
    "abstract": "abstract",
    "prune": "prune",
}


def _status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux ≥ 4.0); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def peak_kb() -> int:
    hwm = _status_kb("VmHWM")
    return hwm if hwm is not None else int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def rss_kb() -> int:
    return _status_kb("VmRSS") or 0


def embedder(kind: str) -> Any:
    if kind == "static":
        from engramdb.embeddings.static import default_embedder

        return default_embedder()
    from engramdb.embeddings.hashing import HashingEmbedder

    return HashingEmbedder(dim=256)


def load_engramdb(
    items: list[corpus.MemorySpec], path: Path, kind: str
) -> tuple[DynamicMemoryEngine, Any, dict[str, Any]]:
    """A store holding `items` with their own creation times as first access (not timed as reflection)."""
    clock = FixedClock(items[0].created_at)
    engine = DynamicMemoryEngine(path, clock=clock, memory_embedder=embedder(kind))
    me = engine.agent("bench")
    t = time.perf_counter()
    ids: list[str] = []
    for i in range(0, len(items), BATCH):
        chunk = items[i : i + BATCH]
        clock.set(chunk[-1].created_at)
        mems = me.remember_many(
            [
                {
                    "content": it.content, "type": it.type, "importance": it.importance, "salience": it.salience,
                    "confidence": it.confidence, "tags": list(it.tags), "title": it.title, "status": it.status,
                    "created_at": it.created_at,
                }
                for it in chunk
            ],
            dedup=False,
        )  # fmt: skip
        ids.extend(m.id for m in mems)
    load_s = time.perf_counter() - t
    # Not public API: make each memory's first (creation) access its own timestamp, as nooa's runner
    # does for nooa, so recency, rescoring and forgetting see the corpus's real ages.
    conn = engine._backend.connection("engine")
    with engine._backend.atomic(conn):
        conn.raw.executemany(
            "UPDATE engram_memories SET recorded_at = ?, last_access = ?, ring = ? WHERE id = ?",
            [
                (it.created_at, it.created_at, pack_times([it.created_at]), mid)
                for it, mid in zip(items, ids, strict=True)
            ],
        )
        conn.raw.execute("UPDATE engram_counters SET value = value + 1 WHERE name = 'memories'")
    clock.set(items[-1].created_at + DAY)
    return engine, me, {"load_s": round(load_s, 3), "ids": ids}


def run_engramdb(items: list[corpus.MemorySpec], workdir: Path, kind: str, n_queries: int) -> dict[str, Any]:
    engine, me, info = load_engramdb(items, workdir / "engram.db", kind)
    ids: list[str] = info.pop("ids")
    reflector = Reflector(me, ReflectionConfig(measure=False))
    steps: dict[str, Any] = {}
    base = rss_kb()
    peaks: list[int] = []
    t0 = time.perf_counter()
    # The steps one at a time in reflect()'s order: the same work as one reflect() call, with a
    # peak-memory reading per step.
    for name in STEPS:
        can_reset = reset_peak()
        before = rss_kb()
        report = reflector.reflect(steps=[name])
        s = report.step(name)
        peak = peak_kb() if can_reset else None
        if peak is not None:
            peaks.append(peak)
        steps[name] = {
            "s": s.duration_s, "changed": s.changed, "examined": s.examined, "skipped": s.skipped, "note": s.note,
            "peak_rise_mb": round((peak - before) / 1024, 1) if peak is not None else None,
        }  # fmt: skip
    total = time.perf_counter() - t0
    # Vectors for nooa, in corpus order (the engine's own, so both sides compare the same cosines).
    vec_path = workdir / "vectors.npy"
    rows = dict(
        engine._backend.connection("engine")
        .raw.execute(
            "SELECT m.id, v.vec FROM engram_memories m JOIN engram_vectors v ON v.n = m.n WHERE v.model = ?",
            (engine.memory_embedder.name if engine.memory_embedder else "",),
        )
        .fetchall()
    )
    np.save(vec_path, np.stack([np.frombuffer(rows[i], dtype=np.float32) for i in ids]))
    del rows
    # Reads after reflection: what share of them go to reflection memories?
    queries = corpus.queries(items, n_queries, 0)
    lat = []
    for q in queries:
        t = time.perf_counter()
        me.recall(q.text, k=10)
        lat.append(time.perf_counter() - t)
    stats = me.stats()
    engine.close()
    return {
        **info,
        "embedder": engine.memory_embedder.name if engine.memory_embedder else None,
        "total_s": round(total, 3),
        "steps": steps,
        "peak_rise_mb": round((max(peaks) - base) / 1024, 1) if peaks else None,
        "merged": steps["merge"]["changed"],
        "edges_added": steps["link"]["changed"],
        "rescored": steps["rescore"]["changed"],
        "pruned": steps["prune"]["changed"],
        "recalls": len(queries),
        # the first recall refreshes the vector cache, since rescoring changed (almost) every row
        "first_recall_ms": round(lat[0] * 1e3, 1) if lat else None,
        "recall_p50_ms": round(sorted(lat[1:])[len(lat[1:]) // 2] * 1e3, 2) if len(lat) > 1 else None,
        "reflection_rows_share": round(stats.reflection_rows_share, 4),
        "reflection_reads_share": round(stats.reflection_reads_share, 4),
        "db_bytes": sum(f.stat().st_size for f in workdir.glob("engram.db*") if ".vectors-" not in f.name),
        "_vectors": str(vec_path),
    }


def run_nooa(items: list[corpus.MemorySpec], workdir: Path, vectors: str) -> dict[str, Any]:
    from peers.client import PeerError, peer_python_reason, run_peer  # type: ignore[import-not-found]

    py, reason = peer_python_reason("nooa")
    if py is None:
        return {"skipped": reason}
    payload = {
        "data_dir": str(workdir / "nooa"),
        "memories": corpus.peer_memories(items),
        "embedder": "vectors",
        "memory_vectors_npy": vectors,
        "add_mode": "store",
        "set_timestamps": True,
        "now_ts": items[-1].created_at + DAY,
        "reflect": True,
    }
    try:
        out = run_peer("nooa", "reflect_bench", payload, timeout=6 * 3600)
    except PeerError as exc:
        return {"skipped": f"nooa failed: {exc}"}
    r = out["reflection"]
    rep = r["report"]
    steps = {ours: {"s": r["steps_s"].get(theirs)} for ours, theirs in NOOA_STEPS.items()}
    return {
        "peer_version": out.get("peer_version"),
        "load_s": out["timings"]["add"]["total_s"],
        "total_s": r["total_s"],
        "steps": steps,
        "peak_rise_mb": round((r["rss_peak_after_kb"] - r["rss_now_before_kb"]) / 1024, 1)
        if r.get("rss_now_before_kb")
        else None,
        "merged": rep["merged"],
        "edges_added": rep["edges_added"],
        "rescored": rep["rescored"],
        "pruned": rep["pruned"],
        "notes": [*out.get("notes", []), r.get("note", "")],
    }


def _fmt(v: Any, spec: str = ",.2f") -> str:
    return "—" if v is None else format(v, spec)


def table(results: list[dict[str, Any]]) -> str:
    head = "| memories | system | total (s) | " + " | ".join(f"{s} (s)" for s in STEPS)
    head += " | peak RSS rise (MB) | merged | edges added | rescored | pruned |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        for name, key in (("engramdb", "engramdb"), ("nooa-memory 0.0.10", "nooa")):
            row = r.get(key)
            if not row:
                continue
            if "skipped" in row:
                lines.append(f"| {r['n']:,} | {name} | skipped: {row['skipped']} |" + " |" * 12)
                continue
            step_cells = []
            for s in STEPS:
                cell = row["steps"].get(s, {})
                step_cells.append("skipped" if cell.get("skipped") else _fmt(cell.get("s")))
            lines.append(
                f"| {r['n']:,} | {name} | {_fmt(row['total_s'])} | " + " | ".join(step_cells) + " | "
                f"{_fmt(row.get('peak_rise_mb'), ',.1f')} | {row['merged']:,} | {row['edges_added']:,} | "
                f"{row['rescored']:,} | {row['pruned']:,} |"
            )
        if "nooa" in r and "skipped" not in r["nooa"] and r["engramdb"]["total_s"]:
            ratio = r["nooa"]["total_s"] / r["engramdb"]["total_s"]
            lines.append(f"| {r['n']:,} | ratio | nooa / engramdb = {ratio:.1f}× |" + " |" * 12)
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000])
    ap.add_argument("--peer-sizes", type=int, nargs="*", default=[10_000])
    ap.add_argument("--embedder", choices=["hashing", "static"], default="hashing")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=provenance.OUT, help="folder (default: benchmarks/out/)")
    args = ap.parse_args()
    results = []
    for n in args.sizes:
        items = list(corpus.generate(n, seed=args.seed, tenants=1, agents=1))
        with tempfile.TemporaryDirectory(prefix="bench-reflect-") as tmp:
            row: dict[str, Any] = {"n": n, "duplicates_in_corpus": sum(1 for it in items if it.duplicate_of)}
            row["engramdb"] = run_engramdb(items, Path(tmp), args.embedder, args.queries)
            vectors = row["engramdb"].pop("_vectors")
            print(f"engramdb n={n}: {json.dumps(row['engramdb'])}", file=sys.stderr, flush=True)
            if n in args.peer_sizes:
                row["nooa"] = run_nooa(items, Path(tmp), vectors)
                print(f"nooa n={n}: {json.dumps(row['nooa'])}", file=sys.stderr, flush=True)
            results.append(row)
    # nooa's merge and edge steps each run one exact k-NN query (a scan of every vector) per memory.
    # Its merge step is nearly all scan, so: scans (merge time, twice) grow with n², the rest with n.
    for r in results:
        if "nooa" not in r and args.peer_sizes:
            ref = next((x for x in results if "nooa" in x and "skipped" not in x["nooa"]), None)
            if ref is not None:
                st = {k: v["s"] or 0.0 for k, v in ref["nooa"]["steps"].items()}
                scans = 2 * st["merge"]
                rest = ref["nooa"]["total_s"] - scans
                f = r["n"] / ref["n"]
                r["nooa_estimate_s"] = round(scans * f * f + rest * f, 1)
                r["nooa_estimate_note"] = (
                    f"from the {ref['n']:,} run: one k-NN scan per memory in merge and in link (≈ the merge time each) "
                    "grows with n², the rest with n"
                )
    machine = f"{platform.machine()}, {os.cpu_count()} cores, CPython {platform.python_version()}, load {os.getloadavg()[0]:.1f}"
    md = (
        f"Machine: {machine}. Embedder: {results[0]['engramdb']['embedder']} for both systems (same vectors). "
        "No reconciler or reasoner (both model steps skipped on both sides). Peak RSS rise: over the level before "
        "each step (engramdb: the largest step; nooa: the whole pass).\n\n" + table(results)
    )
    for r in results:
        if "nooa_estimate_s" in r:
            md += f"\n\nnooa at {r['n']:,} not run: estimated {r['nooa_estimate_s'] / 60:.0f} min ({r['nooa_estimate_note']})."
        e = r["engramdb"]
        md += (
            f"\n\n{r['n']:,}: after {e['recalls']} recalls, reflections are {e['reflection_rows_share']:.1%} of rows "
            f"and {e['reflection_reads_share']:.1%} of reads."
        )
    print(md)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "reflection.json").write_text(
        json.dumps(provenance.stamp({"machine": machine, "results": results}), indent=2)
    )


if __name__ == "__main__":
    main()
