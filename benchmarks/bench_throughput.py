"""Throughput benchmark: `remember` with dedup on at 10k / 100k / 1M, and recall p50 at 10k against FTS5.

For each size, on a database built by ``bench_scale.py`` (its ``--cache-dir`` copies are reused, never
written: every run works on a copy) or, when none is cached, built here the same way (the synthetic
corpus, one agent, `remember_many` in batches of 1,000 with dedup off; built and first opened by the
``--before`` code when there is one, so that a newer code's schema migration cannot lock the older out):

- **remember, dedup on** (the default: cosine >= ``dedup_threshold`` against visible memories of the
  same type and owner, then the text check): two untimed `remember` calls (the first writes of a
  process grow the vector matrix restored from the side file: reported as ``first_two_remember_s``), then
  ``--single`` `remember` calls one at a time, then
  ``--batches`` `remember_many` calls of ``--batch`` items each, all new corpus items (seed + 1), in a
  fresh process on the copy after one untimed recall (which loads the vector cache). Single: calls
  per second over the calls and their p50; batched: the median batch's items per second.
- **recall** at the ``--recall-sizes``: `recall(query, k=10, hops=1)` p50 over ``--queries`` queries x
  ``--rounds`` rounds, against plain SQLite FTS5 (the same texts, porter stemming, BM25 top 10, the
  same stop-word-free query terms; as in ``bench_scale.py``) in the same run; each round runs every
  system once, the order rotating per round.
- **before / after**: with ``--before DIR`` (a worktree of an older commit with its own ``.venv``),
  every engramdb measurement also runs on that code, on an equal copy, in the same run.
  Each copy is flushed to disk (`os.sync`) before it is measured; with ``--repeats R`` the writes
  run R times per code in the order A B B A ... and each figure is the median (every run is kept).

    python benchmarks/bench_throughput.py --cache-dir ../bench-cache/scale --before ../wt-scale-before

``--prepared DIR`` keeps each size's prepared copy (with its trained IVF side file) for later runs.

Prints a table; writes ``throughput.json`` (with the provenance block) to benchmarks/out/ or ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import IO, Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import corpus  # noqa: E402
import provenance  # noqa: E402
from peers._common import rss_peak_kb  # noqa: E402

AGENT = "bench"
CORPUS_AGENTS = 8
K, HOPS = 10, 1
FTS_TOKENIZE = "porter unicode61 remove_diacritics 2"
MEDIAN_KEYS = ("single_per_s", "single_p50_ms", "single_cpu_p50_ms", "batch_per_s", "batch_per_cpu_s")
TARGETS = {"single_per_s": 1000, "batch_per_s": 10000, "recall_p50_vs_fts5": 1.0}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def fields(spec: corpus.MemorySpec) -> dict[str, Any]:
    return {
        "content": spec.content, "type": spec.type, "importance": spec.importance, "salience": spec.salience,
        "confidence": spec.confidence, "tags": list(spec.tags), "entities": list(spec.entities), "title": spec.title,
        "status": spec.status, "created_at": spec.created_at, "shared": spec.shared,
    }  # fmt: skip


def p50_ms(seconds: list[float]) -> float:
    return round(statistics.median(seconds) * 1000, 4) if seconds else float("nan")


# ---------------------------------------------------------------------------------------------
# Workers: one process each, a line of JSON in, a line of JSON out
# ---------------------------------------------------------------------------------------------


class EngineWorker:
    """engramdb (whichever the interpreter imports) on its own copy of the database."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.tmp = Path(tempfile.mkdtemp(prefix="bench-throughput-", dir=cfg.get("workdir")))
        self.engine: Any = None
        self.me: Any = None
        self.queries: list[str] = [q["text"] for q in json.loads(Path(cfg["queries"]).read_text())["queries"]]

    def open(self, _msg: dict[str, Any]) -> dict[str, Any]:
        from engramdb import DynamicMemoryEngine

        src = Path(self.cfg["db"])
        t = time.perf_counter()
        for f in src.parent.glob(src.name + "*"):  # the database and its side files' folder, if prepared
            to = self.tmp / f.name.replace(src.name, "engram.db", 1)
            if f.is_dir():
                shutil.copytree(f, to)
            else:
                shutil.copyfile(f, to)
        copy_s = time.perf_counter() - t
        # The copy's gigabytes are dirty pages until the kernel writes them back: flush them now, so
        # that writeback does not compete with the commits measured next (the first system of a run
        # paid for it, up to 4x one by one at 1M).
        t = time.perf_counter()
        os.sync()
        sync_s = time.perf_counter() - t
        self.engine = DynamicMemoryEngine(self.tmp / "engram.db")
        self.me = self.engine.agent(AGENT)
        t = time.perf_counter()
        self.me.recall("warm up the vector cache", k=K, hops=HOPS)
        return {
            "copy_s": round(copy_s, 1),
            "sync_s": round(sync_s, 1),
            "first_recall_s": round(time.perf_counter() - t, 3),
        }

    def round(self, _msg: dict[str, Any]) -> dict[str, Any]:
        lat, cpu = [], []
        for q in self.queries:
            c, t = time.process_time(), time.perf_counter()
            self.me.recall(q, k=K, hops=HOPS)
            lat.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        return {"seconds": lat, "cpu": cpu}

    def write(self, _msg: dict[str, Any]) -> dict[str, Any]:
        cfg, me = self.cfg, self.me
        single, batches, batch = cfg["single"], cfg["batches"], cfg["batch"]
        specs = corpus.generate(2 + single + batches * batch, seed=cfg["seed"] + 1, tenants=1, agents=CORPUS_AGENTS)
        items = [fields(s) for s in specs]
        # The first writes of a process: the second refreshes the vector cache with the first,
        # which grows the matrix restored from the side file (a copy of every vector, once; seconds
        # at 1M). Reported on their own, not in the per-call figures.
        t = time.perf_counter()
        me.remember(**items.pop())
        me.remember(**items.pop())
        first_s = time.perf_counter() - t
        lat, cpu, ids = [], [], set()
        for item in items[:single]:
            c, t = time.process_time(), time.perf_counter()
            got_one = me.remember(**item)
            if got_one.access_count == 1:  # new; a duplicate returns the memory it reinforced
                ids.add(got_one.id)
            lat.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        rates, cpu_rates, stored = [], [], 0
        for b in range(batches):
            chunk = items[single + b * batch : single + (b + 1) * batch]
            c, t = time.process_time(), time.perf_counter()
            got = me.remember_many(chunk)
            rates.append(len(chunk) / (time.perf_counter() - t))
            cpu_rates.append(len(chunk) / max(time.process_time() - c, 1e-9))
            stored += len({m.id for m in got if m.access_count == 1})  # new ones, not the reinforced
        check = self.dedup_check(cfg.get("check", 0))
        return {
            "dedup_check": check,
            "first_two_remember_s": round(first_s, 3),
            "single_per_s": round(len(lat) / sum(lat), 1),
            "single_p50_ms": p50_ms(lat),
            "single_cpu_p50_ms": p50_ms(cpu),
            "single_new": len(ids),
            "batch_per_s": round(statistics.median(rates), 1),
            "batch_rates": [round(r, 1) for r in rates],
            "batch_per_cpu_s": round(statistics.median(cpu_rates), 1),
            "batch_new": stored,
        }

    def dedup_check(self, count: int) -> dict[str, Any]:
        """Dedup's batched lookup against the exact filtered scan on `count` more corpus items
        (seed + 2, not written): the same memory (or none) for each? Engine internals, on
        purpose: this checks the shortcut, not the API."""
        if count <= 0:
            return {}
        from engramdb.memories import writing

        rt, who = self.engine._runtime, self.me._principal
        channel = rt.vectors
        specs = corpus.generate(count, seed=self.cfg["seed"] + 2, tenants=1, agents=CORPUS_AGENTS)
        prepared = [writing._prepare(who, fields(s), rt.clock(), rt.limits) for s in specs]
        texts = [p["content"] if not p["title"] else f"{p['title']}. {p['content']}" for p in prepared]
        vecs = rt.embedder.embed(texts)
        filters = [(p["type"].value, p["owner"], int(p["level"])) for p in prepared]
        channel.refresh(rt.store)
        t = time.perf_counter()
        got = channel.near_duplicates(vecs, who.visibility(), filters, rt.dedup_threshold)
        lookup_s = time.perf_counter() - t
        exact = channel.best_matches(vecs, who.visibility(), filters)
        want = [b if b is not None and b[1] >= rt.dedup_threshold else None for b in exact]
        # One item a call too, as a single `remember` asks (a call of few queries may take another path).
        t = time.perf_counter()
        one = [channel.near_duplicates(vecs[i : i + 1], who.visibility(), filters[i : i + 1], rt.dedup_threshold)[0]
               for i in range(count)]  # fmt: skip
        one_s = time.perf_counter() - t

        def agree(got: list[Any]) -> tuple[int, int]:
            pairs = list(zip(got, want, strict=True))
            same = sum((g is None) == (w is None) and (g is None or g[0] == w[0]) for g, w in pairs)
            return same, sum((g is None) == (w is None) for g, w in pairs)  # a match or none, as the exact scan

        (same, found), (same_one, found_one) = agree(got), agree(one)
        return {"items": count, "with_match": sum(w is not None for w in want), "same": same,
                "same_found": found, "lookup_ms": round(lookup_s * 1000, 1), "one_by_one_same": same_one,
                "one_by_one_same_found": found_one, "one_by_one_ms": round(one_s * 1000 / max(count, 1), 3),
                "approximate": channel.approximate}  # fmt: skip

    def finish(self, _msg: dict[str, Any]) -> dict[str, Any]:
        if self.engine is not None:
            self.engine.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        return {"peak_rss_mb": round(rss_peak_kb() / 1024, 1)}


class Fts5Worker:
    """Plain SQLite FTS5 over the same texts (as `bench_scale.BaselineWorker`)."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        from engramdb.retrieval.keywords import keywords

        self.keywords = keywords
        self.cfg = cfg
        self.tmp = Path(tempfile.mkdtemp(prefix="bench-throughput-fts-", dir=cfg.get("workdir")))
        self.fts: sqlite3.Connection | None = None
        self.queries: list[str] = [q["text"] for q in json.loads(Path(cfg["queries"]).read_text())["queries"]]

    def open(self, _msg: dict[str, Any]) -> dict[str, Any]:
        src = sqlite3.connect(f"file:{self.cfg['db']}?mode=ro", uri=True)
        self.fts = sqlite3.connect(self.tmp / "fts5.db")
        t = time.perf_counter()
        self.fts.execute(f"CREATE VIRTUAL TABLE docs USING fts5(title, content, tags, tokenize='{FTS_TOKENIZE}')")
        rows = src.execute("SELECT n, title, content, tags FROM engram_memories ORDER BY n")
        with self.fts:
            self.fts.executemany(
                "INSERT INTO docs (rowid, title, content, tags) VALUES (?, ?, ?, ?)",
                ((n, title, content, " ".join(json.loads(tags))) for n, title, content, tags in rows),
            )
        src.close()
        return {"build_s": round(time.perf_counter() - t, 1)}

    def round(self, _msg: dict[str, Any]) -> dict[str, Any]:
        assert self.fts is not None
        lat, cpu = [], []
        for text in self.queries:
            c, t = time.process_time(), time.perf_counter()
            kws = self.keywords(text)
            if kws:
                match = " OR ".join('"' + k.replace('"', '""') + '"' for k in kws)
                sql = "SELECT rowid FROM docs WHERE docs MATCH ? ORDER BY rank LIMIT ?"
                self.fts.execute(sql, (match, K)).fetchall()
            lat.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        return {"seconds": lat, "cpu": cpu}

    def finish(self, _msg: dict[str, Any]) -> dict[str, Any]:
        if self.fts is not None:
            self.fts.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        return {"peak_rss_mb": round(rss_peak_kb() / 1024, 1)}


def serve(worker: Any) -> None:
    """Answer commands on stdin; stdout carries only replies (prints go to stderr)."""
    out: IO[str] = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for line in sys.stdin:
        msg = json.loads(line)
        try:
            reply = getattr(worker, msg["cmd"])(msg)
        except Exception as exc:
            traceback.print_exc()
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(reply) + "\n")
        if msg["cmd"] == "finish" or "error" in reply:
            break


class Worker:
    """A worker subprocess of this script under `python` (another tree's venv for "before")."""

    def __init__(self, python: str, role: str, cfg: dict[str, Any]) -> None:
        self.role = role
        cmd = [python, __file__, "--worker", role, json.dumps(cfg)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def call(self, cmd: str) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"cmd": cmd}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.role} worker died during {cmd!r} (exit code {self.proc.wait()}; see stderr)")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"{self.role} worker failed during {cmd!r}: {reply['error']}")
        return reply

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# ---------------------------------------------------------------------------------------------
# Databases
# ---------------------------------------------------------------------------------------------


def cached_db(cache_dir: Path | None, n: int) -> Path | None:
    """bench_scale.py's cached database of `n` memories (its default build settings), if there is one."""
    if cache_dir is None:
        return None
    import bench_scale

    key = bench_scale.cache_key(argparse.Namespace(seed=0, batch=1000, single=1000), n)
    path = cache_dir / f"engram-{key}.db"
    return path if path.exists() else None


def build_db(n: int, path: Path) -> None:
    """A database of the synthetic corpus as bench_scale.py builds one (batches of 1,000, dedup off)."""
    from engramdb import DynamicMemoryEngine

    engine = DynamicMemoryEngine(path)
    me = engine.agent(AGENT)
    specs = corpus.generate(n, seed=0, tenants=1, agents=CORPUS_AGENTS)
    batch: list[dict[str, Any]] = []
    for spec in specs:
        batch.append(fields(spec))
        if len(batch) == 1000:
            me.remember_many(batch, dedup=False)
            batch = []
    if batch:
        me.remember_many(batch, dedup=False)
    engine.close()


class PrepareWorker:
    """Builds (or copies) and first opens a size's database under the oldest code of the run, so
    that every code can open it: a newer code's schema migration would make it unreadable to
    the older one (`SchemaVersionError`); each engine worker then migrates its own copy."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg

    def prepare(self, _msg: dict[str, Any]) -> dict[str, Any]:
        from engramdb import DynamicMemoryEngine

        path, source = Path(self.cfg["db"]), self.cfg["source"]
        if source is not None:
            shutil.copyfile(source, path)
        else:
            log(f"n={self.cfg['n']:,}: no cached database; building one (dedup off)")
            build_db(int(self.cfg["n"]), path)
        engine = DynamicMemoryEngine(path)
        engine.agent(AGENT).recall("prepare the vector side file", k=K, hops=HOPS)
        engine.close()
        return {}


def prepare(n: int, args: argparse.Namespace, workdir: Path, python: str) -> Path:
    """A private copy of the size's database, opened once (by `python`: the oldest code's, see
    `PrepareWorker`) so its vector side file (the trained IVF at 100k and beyond) sits beside it:
    each worker then copies both and skips the training. With ``--prepared DIR`` the copy is kept
    there and reused by later runs (it is never written to after its first recall: workers write
    to copies of it)."""
    keep = args.prepared is not None
    base = args.prepared if keep else workdir
    path = base / f"n{n}" / "engram.db"
    source = cached_db(args.cache_dir, n)
    stamp = path.parent / "source.json"
    want = {"source": str(source.resolve()) if source else None, "bytes": source.stat().st_size if source else None}
    if keep and path.exists() and stamp.exists() and json.loads(stamp.read_text(encoding="utf-8")) == want:
        return path
    shutil.rmtree(path.parent, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    w = Worker(python, "prepare", {"db": str(path), "n": n, "source": str(source) if source else None})
    try:
        w.call("prepare")
    finally:
        w.close()
    stamp.write_text(json.dumps(want), encoding="utf-8")
    return path


def queries_file(n: int, args: argparse.Namespace, workdir: Path) -> Path:
    import bench_scale

    out = workdir / f"queries-n{n}.json"
    bench_scale.prepare_queries(n, 0, args.queries, out)
    return out


# ---------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------


def run_size(n: int, args: argparse.Namespace, workdir: Path, systems: dict[str, str]) -> dict[str, Any]:
    row: dict[str, Any] = {"n": n, "load_before": [round(x, 2) for x in os.getloadavg()]}
    log(f"n={n:,}: preparing the database")
    db = prepare(n, args, workdir, next(iter(systems.values())))  # "before" comes first when given
    recall = n in args.recall_sizes
    queries = queries_file(n, args, workdir) if recall else workdir / "no-queries.json"
    if not recall:
        queries.write_text(json.dumps({"queries": []}), encoding="utf-8")
    cfg = {"db": str(db), "workdir": str(workdir), "queries": str(queries), "seed": 0, "single": args.single,
           "batches": args.batches, "batch": args.batch, "check": args.dedup_check}  # fmt: skip
    if recall:
        # The recall comparison needs every system alive at once (rounds interleave); at 10k that is small.
        engines = {name: Worker(python, "engine", cfg) for name, python in systems.items()}
        fts = Worker(sys.executable, "fts5", cfg)
        try:
            for name, w in engines.items():
                row[name] = w.call("open")
            row["fts5"] = fts.call("open")
            order = [*engines, "fts5"]
            seconds: dict[str, list[float]] = {s: [] for s in order}
            cpu: dict[str, list[float]] = {s: [] for s in order}
            rounds: dict[str, list[float]] = {s: [] for s in order}
            for r in range(args.rounds):
                for s in order[r % len(order) :] + order[: r % len(order)]:
                    got = (fts if s == "fts5" else engines[s]).call("round")
                    seconds[s] += got["seconds"]
                    cpu[s] += got["cpu"]
                    rounds[s].append(p50_ms(got["seconds"]))
            row["recall"] = {
                s: {"p50_ms": p50_ms(seconds[s]), "cpu_p50_ms": p50_ms(cpu[s]), "round_p50_ms": rounds[s]}
                for s in order
            }
            for s in engines:
                mine, fts5 = row["recall"][s], row["recall"]["fts5"]
                mine["vs_fts5"] = round(mine["p50_ms"] / fts5["p50_ms"], 3)
                mine["cpu_vs_fts5"] = round(mine["cpu_p50_ms"] / fts5["cpu_p50_ms"], 3)
            log(f"n={n:,}: recall {row['recall']}")
            for name, w in engines.items():  # one at a time: writes are what is measured
                row[name].update(w.call("write"))
                row[name].update(w.call("finish"))
                log(f"n={n:,}: {name}: {row[name]}")
            row["fts5"].update(fts.call("finish"))
        finally:
            for w in [*engines.values(), fts]:
                w.close()
    else:
        # One process at a time (a 1M engine holds GBs), in the order A B B A ... over --repeats, so
        # neither code always goes first; each figure is the median over its runs, each run is kept.
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in systems}
        for r in range(args.repeats):
            for name in list(systems) if r % 2 == 0 else list(systems)[::-1]:
                w = Worker(systems[name], "engine", cfg)
                try:
                    got = w.call("open")
                    got.update(w.call("write"))
                    got.update(w.call("finish"))
                finally:
                    w.close()
                runs[name].append(got)
                log(f"n={n:,}: {name} (run {r + 1}): {got}")
        for name, got in runs.items():
            row[name] = dict(got[0])
            for key in MEDIAN_KEYS:
                row[name][key] = round(statistics.median(g[key] for g in got), 4)
            row[name]["runs"] = got
    if args.prepared is None:
        shutil.rmtree(db.parent, ignore_errors=True)
    row["load_after"] = [round(x, 2) for x in os.getloadavg()]
    return row


def table(report: dict[str, Any]) -> str:
    """Wall clock first; CPU time of the process in brackets (steadier on a shared machine)."""
    systems = report["systems"]
    lines = [
        "| n | code | remember one by one: /s, p50 ms [CPU ms] | remember_many: /s [per CPU s] "
        "| recall p50 ms [CPU] | FTS5 p50 ms [CPU] | recall / FTS5 [CPU] |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in report["results"]:
        for s in systems:
            e, rec = row[s], row.get("recall", {})
            mine, fts = rec.get(s), rec.get("fts5")
            cells = ["", "", ""]
            if mine and fts:
                cells = [
                    f"{mine['p50_ms']:.2f} [{mine['cpu_p50_ms']:.2f}]",
                    f"{fts['p50_ms']:.2f} [{fts['cpu_p50_ms']:.2f}]",
                    f"{mine['vs_fts5']:.2f} [{mine['cpu_vs_fts5']:.2f}]",
                ]
            lines.append(
                f"| {row['n']:,} | {s} | {e['single_per_s']:,.0f}, {e['single_p50_ms']:.2f} [{e['single_cpu_p50_ms']:.2f}] "
                f"| {e['batch_per_s']:,.0f} [{e['batch_per_cpu_s']:,.0f}] | {' | '.join(cells)} |"
            )
    for row in report["results"]:
        for s in systems:
            c = row[s].get("dedup_check") or {}
            if c:
                lines.append(
                    f"\nn={row['n']:,} {s}: dedup lookup against the exact filtered scan on {c['items']} items "
                    f"({c['with_match']} with a match): a match or none as it for {c['same_found']}, the same "
                    f"memory for {c['same']} (IVF: {c['approximate']}; lookup {c['lookup_ms']} ms); one item a "
                    f"call: {c.get('one_by_one_same_found')} and {c.get('one_by_one_same')} "
                    f"({c.get('one_by_one_ms')} ms a call)"
                )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--recall-sizes", type=int, nargs="*", default=[10_000], help="sizes with the recall comparison")
    ap.add_argument("--single", type=int, default=200, help="remember calls one at a time, per size")
    ap.add_argument("--batches", type=int, default=3, help="remember_many calls per size")
    ap.add_argument("--batch", type=int, default=1000, help="items per remember_many call")
    ap.add_argument(
        "--dedup-check",
        type=int,
        default=300,
        help="items whose dedup lookup is checked against the exact scan (0: none)",
    )
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cache-dir", type=Path, default=None, help="bench_scale.py's --cache-dir (read only)")
    ap.add_argument(
        "--repeats", type=int, default=1, help="runs of each code's writes (without recall), A B B A ...; medians"
    )
    ap.add_argument("--before", type=Path, default=None, help="a worktree of older code with its own .venv")
    ap.add_argument("--workdir", type=Path, default=None, help="where copies go (default: $TMPDIR)")
    ap.add_argument("--prepared", type=Path, default=None, help="keep prepared copies here for later runs")
    ap.add_argument("--out", type=Path, default=provenance.OUT, help="folder (default: benchmarks/out/)")
    ap.add_argument("--name", default="throughput", help="results file stem")
    ap.add_argument("--worker", nargs=2, metavar=("ROLE", "CONFIG"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        role, config = args.worker
        cfg = json.loads(config)
        serve(EngineWorker(cfg) if role == "engine" else PrepareWorker(cfg) if role == "prepare" else Fts5Worker(cfg))
        return 0
    systems = {"after": sys.executable}
    if args.before is not None:
        python = args.before / ".venv" / "bin" / "python"
        if not python.exists():
            ap.error(f"--before {args.before}: no {python} (make the tree's venv first)")
        systems = {"before": str(python), "after": sys.executable}
    report: dict[str, Any] = {"benchmark": "throughput", "targets": TARGETS, "systems": list(systems), "results": []}
    if args.before is not None:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=args.before, capture_output=True, text=True, check=False
        )
        report["before_commit"] = done.stdout.strip()
    args.out.mkdir(parents=True, exist_ok=True)
    stamped: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-throughput-", dir=args.workdir) as tmp:
        for n in sorted(args.sizes):
            report["results"].append(run_size(n, args, Path(tmp), systems))
            stamped = provenance.stamp(report)  # written after every size: a failure at 1M keeps the rest
            (args.out / f"{args.name}.json").write_text(json.dumps(stamped, indent=2) + "\n", encoding="utf-8")
    print(table(report))
    print(provenance.summary(stamped["provenance"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
