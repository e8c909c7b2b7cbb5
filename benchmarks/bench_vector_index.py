"""Vector indexes on real embeddings: exact numpy search vs `AnnIndex` (faiss IVF) vs faiss HNSW.

Corpus: the 5,882 LoCoMo dialogue turns (``"speaker: text"``) followed by synthetic agent memories
from ``benchmarks/corpus.py`` (``corpus.generate(n, seed=0)``, their ``.content``) up to the
largest size; each size is a prefix of the same corpus. ``--generator markov`` replaces the
synthetic memories with sentences sampled from a word-trigram chain over the LoCoMo text, and
is also the fallback when ``corpus.py`` is missing. Everything is embedded with the shipped
static embedder (384-d, L2-normalised) and cached as ``.npy`` under ``--cache`` (embedding a
million texts takes a few minutes once).

Queries: half are LoCoMo questions, half are held-out corpus texts that are not in the index.
Per index and size, each measured in a fresh process: build time (one `upsert` of every vector,
including IVF training), resident memory added by the build (RSS delta after it, and the peak
during it),
one-query-at-a-time latency p50/p99, recall@10 against exact search, the same for filtered
searches whose `allowed` mask admits a random 10% and 1% of the rows, and the time to upsert
more vectors into the built index (per 1,000, measured on a second batch of 500: the first batch
may pay for doubling the matrix, recorded as ``first_upsert_ms``). Methods:

- ``exact``: `engramdb.vectors.exact.ExactIndex`, numpy brute force.
- ``ann``: `engramdb.vectors.ann.AnnIndex` with its defaults (exact below 20,000 vectors).
- ``hnsw``: faiss ``IndexHNSWFlat`` (M 32, efConstruction 64) at efSearch 128 and 256, filtered
  with a bitmap selector and no fallback; only up to ``--hnsw-max`` vectors (its build is slow).

The machine has 2 cores; run the benchmark under ``nice`` and read the load average recorded
in the JSON before comparing numbers across runs. When the largest size would not finish within
``--budget`` seconds, 300k is measured instead and the larger size is extrapolated linearly
from it (marked ``extrapolated`` in the table and the JSON).

Usage (from the repository root)::

    nice python benchmarks/bench_vector_index.py [--sizes 10000,100000,1000000] [--queries 300]

It prints a markdown table and writes ``benchmarks/results/vector_index.json``.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import platform
import random
import re
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

import provenance

REPO = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
#: the shared copy beside the repository (as benchmarks/locomo.py); pass another with --data
DEFAULT_DATA = REPO.parent / "shared" / "data" / "locomo" / "locomo10.json"
DEFAULT_CACHE = Path(os.environ.get("ENGRAMDB_BENCH_CACHE", "/tmp/engramdb-bench-cache"))
K = 10
FRACTIONS = (0.1, 0.01)
EXTRA = 1000  # vectors upserted into the built index to time incremental adds
HNSW_M, HNSW_EFC, HNSW_EFS = 32, 64, (128, 256)
SUBSTITUTE = 300_000  # measured instead of a size that would not fit the budget

FloatMatrix = npt.NDArray[np.float32]


# ---------------------------------------------------------------------------------------------
# Corpus and embeddings
# ---------------------------------------------------------------------------------------------


def locomo_texts(path: Path) -> tuple[list[str], list[str]]:
    """LoCoMo dialogue turns (``"speaker: text"``) and every QA question, in file order."""
    turns: list[str] = []
    questions: list[str] = []
    for sample in json.loads(path.read_text(encoding="utf-8")):
        conv = sample["conversation"]
        session = 1
        while f"session_{session}" in conv:
            turns += [f"{t['speaker']}: {t['text']}" for t in conv[f"session_{session}"]]
            session += 1
        questions += [str(qa["question"]) for qa in sample["qa"]]
    return turns, questions


_NAMES = (
    "Caroline Melanie Jon Gina John Maria Joanna Nate Tim Audrey Andrew James Deborah Jolene Evan Sam Calvin "
    "Dave Priya Omar Lena Kenji Sofia Mateo Amara Lars Ines Yusuf Chloe Diego Hana Felix Noor Ravi Elena"
).split()


def markov_texts(seed_texts: list[str], n: int, seed: int) -> Iterator[str]:
    """`n` conversational sentences from a word-trigram chain over `seed_texts`, with random speakers."""
    rng = random.Random(seed)
    chain: dict[tuple[str, str], list[str]] = defaultdict(list)
    for text in seed_texts:
        words = ["<s>", "<s>", *text.split(": ", 1)[-1].split(), "</s>"]
        for i in range(len(words) - 2):
            chain[(words[i], words[i + 1])].append(words[i + 2])
    made = 0
    while made < n:
        a, b, words = "<s>", "<s>", []
        limit = rng.randint(6, 40)
        while len(words) < limit:
            nxt = rng.choice(chain[(a, b)])
            if nxt == "</s>":
                break
            words.append(nxt)
            a, b = b, nxt
        if len(words) >= 3:
            made += 1
            yield f"{rng.choice(_NAMES)}: {' '.join(words)}"


def generated_texts(generator: str, turns: list[str], n: int, seed: int) -> tuple[Iterator[str], str]:
    """`n` synthetic texts and the name of the generator that made them."""
    if generator == "corpus":
        sys.path.insert(0, str(BENCH))
        try:
            import corpus  # benchmarks/corpus.py
        except ImportError:
            print("benchmarks/corpus.py not importable: using the markov generator", file=sys.stderr)
        else:
            return (spec.content for spec in corpus.generate(n, seed=seed)), "corpus"
    return markov_texts(turns, n, seed), "markov"


def prepare(args: argparse.Namespace, largest: int) -> tuple[Path, Path, dict[str, Any]]:
    """Embed (or reuse the cached) corpus of `largest` + held-out texts and the queries."""
    args.cache.mkdir(parents=True, exist_ok=True)
    half = args.queries // 2
    tag = f"{args.generator}-{largest}-{args.queries}-s{args.seed}"
    vec_path, query_path, meta_path = (args.cache / f"{tag}.{ext}" for ext in ("vectors.npy", "queries.npy", "json"))
    if vec_path.exists() and query_path.exists() and meta_path.exists():
        meta: dict[str, Any] = json.loads(meta_path.read_text(encoding="utf-8"))
        return vec_path, query_path, meta
    sys.path.insert(0, str(REPO / "src"))
    from engramdb.embeddings.static import default_embedder

    embedder = default_embedder()
    turns, questions = locomo_texts(args.data)
    n_generated = max(0, largest - len(turns)) + half + EXTRA
    stream, used = generated_texts(args.generator, turns, n_generated, args.seed)
    texts = turns[:largest] + list(stream)
    # Rows: [0, largest) indexed corpus, then EXTRA vectors for the incremental upsert, then half held-out queries.
    started = time.perf_counter()
    out = np.lib.format.open_memmap(
        vec_path.with_suffix(".tmp.npy"), mode="w+", dtype=np.float32, shape=(len(texts), 384)
    )
    for start in range(0, len(texts), 20_000):
        out[start : start + 20_000] = embedder.embed(texts[start : start + 20_000])
    out.flush()
    del out
    os.replace(vec_path.with_suffix(".tmp.npy"), vec_path)
    rng = np.random.default_rng(args.seed)
    chosen = [questions[i] for i in sorted(rng.choice(len(questions), half, replace=False).tolist())]
    matrix = np.load(vec_path, mmap_mode="r")
    queries = np.concatenate([embedder.embed(chosen), np.asarray(matrix[largest + EXTRA :])]).astype(np.float32)
    np.save(query_path, queries)
    meta = {
        "generator": used,
        "locomo_turns": min(len(turns), largest),
        "texts": len(texts),
        "queries": {"locomo_questions": half, "held_out_corpus": len(queries) - half},
        "embed_s": round(time.perf_counter() - started, 1),
        "embedder": embedder.name,
    }
    meta_path.write_text(json.dumps(meta), encoding="utf-8")
    return vec_path, query_path, meta


# ---------------------------------------------------------------------------------------------
# One measurement, in its own process
# ---------------------------------------------------------------------------------------------


def rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_mb() -> float:
    with open("/proc/self/status") as fh:
        match = re.search(r"VmHWM:\s+(\d+) kB", fh.read())
    return int(match.group(1)) / 1024 if match else float("nan")


def truths(vecs: FloatMatrix, queries: FloatMatrix, masks: dict[str, Any]) -> dict[str, list[set[int]]]:
    """Exact top-`K` rows per query for each mask, in chunks (never a full queries x rows matrix)."""
    best: dict[str, list[tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]]] = {name: [] for name in masks}
    for start in range(0, len(vecs), 100_000):
        sims = queries @ vecs[start : start + 100_000].T
        for name, mask in masks.items():
            chunk = sims if mask is None else np.where(mask[start : start + 100_000], sims, -np.inf)
            kk = min(K, chunk.shape[1])
            top = np.argpartition(-chunk, kk - 1, axis=1)[:, :kk]
            best[name].append((np.take_along_axis(chunk, top, axis=1), top + start))
    out: dict[str, list[set[int]]] = {}
    for name, parts in best.items():
        sims = np.concatenate([p[0] for p in parts], axis=1)
        rows = np.concatenate([p[1] for p in parts], axis=1)
        order = np.argsort(-sims, axis=1, kind="stable")[:, :K]
        out[name] = [
            {int(r) for r, s in zip(rr, ss, strict=True) if s > -np.inf}
            for rr, ss in zip(np.take_along_axis(rows, order, 1), np.take_along_axis(sims, order, 1), strict=True)
        ]
    return out


def measure(search: Any, queries: FloatMatrix, truth: list[set[int]], mask: Any, limit: int) -> dict[str, float]:
    """Latency p50/p99 (ms) and recall@10 of `search(query, mask) -> rows` over the first `limit` queries."""
    times, recalls = [], []
    for query, want in zip(queries[:limit], truth[:limit], strict=True):
        started = time.perf_counter()
        rows = search(query, mask)
        times.append(time.perf_counter() - started)
        if mask is not None:
            assert all(mask[r] for r in rows), "a disallowed row came through the filter"
        recalls.append(len(want & set(rows)) / max(1, len(want)))
    return {
        "p50_ms": round(float(np.percentile(times, 50)) * 1e3, 3),
        "p99_ms": round(float(np.percentile(times, 99)) * 1e3, 3),
        "recall": round(float(np.mean(recalls)), 4),
        "queries": len(times),
    }


def worker(method: str, size: int, vec_path: Path, query_path: Path, limit: int, seed: int) -> list[dict[str, Any]]:
    sys.path.insert(0, str(REPO / "src"))
    from engramdb.vectors.exact import ExactIndex

    source = np.load(vec_path, mmap_mode="r")
    vecs = np.array(source[:size])
    extra = np.array(source[size : size + EXTRA]) if len(source) >= size + EXTRA else vecs[:EXTRA].copy()
    queries = np.load(query_path)
    rng = np.random.default_rng(seed + size)
    masks: dict[str, Any] = {"all": None}
    for frac in FRACTIONS:
        masks[f"{frac:.0%}"] = rng.random(size) < frac
    truth = truths(vecs, queries, masks)
    keys = np.arange(size, dtype=np.int64)
    gc.collect()
    try:  # reset the peak (VmHWM) so that it measures the build, not the ground truth above
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass
    rss0 = rss_mb()
    started = time.perf_counter()
    index: Any
    if method == "hnsw":
        faiss: Any = importlib.import_module("faiss")
        index = faiss.IndexHNSWFlat(vecs.shape[1], HNSW_M, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = HNSW_EFC
        index.add(vecs)
    elif method == "ann":
        from engramdb.vectors.ann import AnnIndex

        index = AnnIndex(vecs.shape[1])
        index.upsert(keys, vecs)
    else:
        index = ExactIndex(vecs.shape[1])
        index.upsert(keys, vecs)
    build_s = time.perf_counter() - started
    gc.collect()
    base = {
        "method": method,
        "size": size,
        "build_s": round(build_s, 3),
        "rss_mb": round(rss_mb() - rss0, 1),
        "peak_mb": round(peak_mb() - rss0, 1),
    }
    variants: list[tuple[str, Any]] = []
    if method == "hnsw":
        for ef in HNSW_EFS:

            def hnsw_search(query: FloatMatrix, mask: Any, ef: int = ef) -> list[int]:
                params = faiss.SearchParametersHNSW()
                params.efSearch = ef
                bits = None
                if mask is not None:
                    bits = np.packbits(mask, bitorder="little")
                    params.sel = faiss.IDSelectorBitmap(len(mask), faiss.swig_ptr(bits))
                _, ids = index.search(query[None, :], K, params=params)
                del bits
                return [int(i) for i in ids[0] if i >= 0]

            variants.append((f"hnsw ef={ef}", hnsw_search))
    else:

        def plain_search(query: FloatMatrix, mask: Any) -> list[int]:
            return [int(k) for k in index.search(query, K, mask)[0]]

        label = method
        if method == "ann":
            label = f"ann nprobe={index.nprobe} nlist={index.nlist}" if index.trained else "ann (untrained: exact)"
        variants.append((label, plain_search))
    rows = []
    for label, search in variants:
        row = dict(base, variant=label)
        for name, mask in masks.items():
            row[name] = measure(search, queries, truth[name], mask, limit)
        rows.append(row)
    if method == "ann" and index.trained:  # the recall/latency trade of the probe count, unfiltered only
        auto = index.nprobe
        for nprobe in (max(1, auto // 2), auto * 2):
            index.nprobe = nprobe
            row = dict(base, variant=f"ann nprobe={index.nprobe} nlist={index.nlist}")
            row["all"] = measure(plain_search, queries, truth["all"], None, limit)
            rows.append(row)
        index.nprobe = None
    # Two halves: the first may pay for growing the matrix (a doubling copy), the second is steady state.
    add_ms = []
    for part in np.array_split(np.arange(len(extra)), 2):
        started = time.perf_counter()
        if method == "hnsw":
            index.add(extra[part])
        else:
            index.upsert(part.astype(np.int64) + size, extra[part])
        add_ms.append((time.perf_counter() - started) * 1e3)
    for row in rows:
        row["upsert_1k_ms"] = round(add_ms[1] * 1000 / (len(extra) - len(extra) // 2), 1)
        row["first_upsert_ms"] = round(add_ms[0], 1)
    return rows


# ---------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------


def run_one(args: argparse.Namespace, method: str, size: int, vec_path: Path, query_path: Path) -> list[dict[str, Any]]:
    limit = args.queries if method != "exact" or size < 500_000 else min(args.queries, 100)
    cmd = [sys.executable, __file__, "--one", method, str(size), str(vec_path), str(query_path), str(limit)]
    cmd += ["--seed", str(args.seed)]
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"{method} at {size} failed")
    rows: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    for row in rows:
        row["wall_s"] = round(time.perf_counter() - started, 1)
    print(f"  {method} at {size:,}: {rows[0]['wall_s']} s", file=sys.stderr, flush=True)
    return rows


def extrapolate(rows: list[dict[str, Any]], size: int) -> list[dict[str, Any]]:
    """Linear extrapolation of build time, memory and exact latency from a smaller measured size."""
    out = []
    for row in rows:
        factor = size / row["size"]
        new = {
            "method": row["method"],
            "variant": row["variant"],
            "size": size,
            "extrapolated_from": row["size"],
            "build_s": round(row["build_s"] * factor, 1),
            "rss_mb": round(row["rss_mb"] * factor, 1),
        }
        if row["method"] == "exact":
            new["all"] = {key: round(row["all"][key] * factor, 3) for key in ("p50_ms", "p99_ms")} | {"recall": 1.0}
        out.append(new)
    return out


def cell(row: dict[str, Any], name: str) -> str:
    m = row.get(name)
    if not m:
        return "—"
    recall = f"{m['recall']:.3f} · " if "recall" in m else ""
    return f"{recall}{m['p50_ms']:.2f} / {m['p99_ms']:.2f}"


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| vectors | index | build s | RSS MB | recall@10 · p50 / p99 ms | 10% allowed: recall · p50 / p99 "
        "| 1% allowed: recall · p50 / p99 | upsert 1k ms |\n|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for row in rows:
        size = f"{row['size']:,}" + (
            f" (extrapolated from {row['extrapolated_from']:,})" if "extrapolated_from" in row else ""
        )
        lines.append(
            f"| {size} | {row['variant']} | {row['build_s']} | {row['rss_mb']} | {cell(row, 'all')} | "
            f"{cell(row, '10%')} | {cell(row, '1%')} | {row.get('upsert_1k_ms', '—')} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--queries", type=int, default=300, help="half LoCoMo questions, half held-out texts")
    parser.add_argument("--methods", default="exact,ann,hnsw")
    parser.add_argument("--hnsw-max", type=int, default=100_000, help="largest size HNSW is built at")
    parser.add_argument("--generator", choices=("corpus", "markov"), default="corpus")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--budget", type=float, default=1500.0, help="seconds for all measurements")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=provenance.OUT / "vector_index.json")
    parser.add_argument(
        "--one", nargs=5, metavar=("METHOD", "SIZE", "VECTORS", "QUERIES", "LIMIT"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.one:
        method, size, vec_path, query_path, limit = args.one
        print(json.dumps(worker(method, int(size), Path(vec_path), Path(query_path), int(limit), args.seed)))
        return 0

    sizes = sorted(int(s) for s in args.sizes.split(","))
    methods = args.methods.split(",")
    load_before = os.getloadavg()
    vec_path, query_path, meta = prepare(args, sizes[-1])
    print(f"corpus ready: {meta}", file=sys.stderr, flush=True)
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    last_walls: dict[str, tuple[int, float]] = {}
    for size in sizes:
        todo = [m for m in methods if m != "hnsw" or size <= args.hnsw_max]
        elapsed = time.perf_counter() - started
        estimate = sum(wall * size / prev * 1.2 for prev, wall in (last_walls[m] for m in todo if m in last_walls))
        measured = size
        if size > SUBSTITUTE and elapsed + estimate > args.budget:
            measured = SUBSTITUTE
            print(f"{size:,} would take ~{estimate:.0f} s: measuring {measured:,} and extrapolating", file=sys.stderr)
        for method in todo:
            got = run_one(args, method, measured, vec_path, query_path)
            last_walls[method] = (measured, got[0]["wall_s"])
            rows += got
            if measured != size:
                rows += extrapolate(got, size)
    report: dict[str, Any] = {
        "benchmark": "vector_index",
        "k": K,
        "corpus": meta,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        },
        "hnsw": {"M": HNSW_M, "efConstruction": HNSW_EFC, "efSearch": list(HNSW_EFS)},
        "total_s": round(time.perf_counter() - started, 1),
        "command": "nice python benchmarks/bench_vector_index.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(provenance.stamp(report), indent=2) + "\n", encoding="utf-8")
    print(table(rows))
    print(f"\nwrote {args.out} ({report['total_s']} s; load average {report['machine']['loadavg_after']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
