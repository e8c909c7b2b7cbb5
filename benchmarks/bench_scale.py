"""Scale benchmark: engramdb's typed memories at 10k, 100k and 1M, against plain SQLite FTS5 and numpy.

Per size, on the synthetic corpus (`corpus.generate(n, seed, tenants=1, agents=8)`: one tenant,
eight agents' topics, ~0.36 typed links per memory), all stored through one agent handle so that
every recall searches all n memories — the hardest case:

- **build**: `remember_many` in batches of ``--batch`` (dedup off), then the last ``--single``
  memories one `remember` call each (dedup off); after each call, the links of what it stored
  (`link`, one call each). Build time = remember + link time; corpus generation is not timed.
- **size**: database bytes per memory (file size after `close`), split with SQLite's ``dbstat``
  into the vector table and everything else; the target is ≤ 3,000 bytes per memory *plus* its
  vector.
- **recall**: `recall(query, k=10, hops=1)` with the engine's defaults (``vector_index="auto"``,
  the shipped static embedder; the query embedding is included), p50 / p99 over ``--queries``
  queries × ``--rounds`` rounds after one untimed first recall (reported on its own: it loads the
  vector cache and trains the ANN index), and recall@10 of the corpus's relevant memories. The
  first recall is timed again at the end in a new process on the same file, as after a restart
  (it adopts the side files the first recall wrote, `engramdb.retrieval.side_files`), with that
  process's own peak RSS.
- **baselines**, in the same run on the same data: plain SQLite FTS5 (a standalone table over the
  same title / content / tags, porter stemming, BM25 top 10, queried with the same stop-word-free
  terms engramdb's lexical channel uses) and numpy brute-force cosine (the same stored vectors,
  one ``einsum`` matrix-vector product and a top 10; the query embedding is included). Each round
  runs engramdb, then FTS5, then numpy over all queries (the order rotates per round), so slow
  drift in the machine's load hits all three alike; ratios are engramdb p50 / baseline p50, and
  the JSON keeps each round's p50 / p99 to show how much the load moved them.
- **dedup**: 200 `remember` calls and one `remember_many` of 1,000 with the default dedup, on
  the full store (after the recalls, so they do not change what is recalled).
- **reflect**: `agent.reflect()` with its defaults, up to ``--reflect-up-to`` memories (1M by
  default, every size; pass a smaller number to skip the larger sizes).
- **peak RSS**: engramdb runs in its own process per size (VmHWM after build and recalls; the
  dedup batch and reflection report their own rise); the baselines run in another process; the
  reopened process reports its own VmHWM.

``--cache-dir`` keeps each built database (keyed by size, seed, schema version, embedder, batch
sizes and the corpus generator's source) and reuses it: the build figures then come from the run
that built it and are marked *cached*. Without it (the default) every number is measured now.

    python benchmarks/bench_scale.py --sizes 10000 100000 1000000   # about 15-25 minutes on 2 cores
    python benchmarks/bench_scale.py --sizes 10000 --name scale-quick  # make bench: under a minute

Writes benchmarks/results/<name>.json, .md and .png (the plot needs matplotlib, the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from itertools import islice
from pathlib import Path
from typing import IO, Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import corpus  # noqa: E402
import provenance  # noqa: E402
from peers._common import latency_stats, rss_peak_kb  # noqa: E402
from scale_report import HOPS, SYSTEMS, TARGETS, TARGETS_15, K, markdown, plot  # noqa: E402

AGENT = "bench"
CORPUS_AGENTS = 8

FTS_TOKENIZE = "porter unicode61 remove_diacritics 2"


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def reset_peak() -> None:
    """Reset VmHWM to the current RSS (Linux), so the next reading is the peak of one step."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
    except OSError:
        pass


def rss_mb() -> float:
    with open("/proc/self/statm", encoding="ascii") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_mb() -> float:
    return rss_peak_kb() / 1024


def summary(seconds: list[float]) -> dict[str, Any]:
    s = latency_stats(seconds)
    return {key: s[key] for key in ("n", "mean_ms", "p50_ms", "p90_ms", "p99_ms", "max_ms")}


def recall_at_k(found: list[int], relevant: list[int]) -> float:
    return len(set(found[:K]) & set(relevant)) / len(relevant) if relevant else 0.0


def chunks(it: Iterator[Any], size: int) -> Iterator[list[Any]]:
    while chunk := list(islice(it, size)):
        yield chunk


def fields(spec: corpus.MemorySpec) -> dict[str, Any]:
    return {
        "content": spec.content,
        "type": spec.type,
        "importance": spec.importance,
        "salience": spec.salience,
        "confidence": spec.confidence,
        "tags": list(spec.tags),
        "entities": list(spec.entities),
        "title": spec.title,
        "status": spec.status,
        "created_at": spec.created_at,
        "shared": spec.shared,
    }


def position(key: str) -> int:
    """A corpus key (``c000123``) as its position in the corpus; memory ``n`` is position + 1."""
    return int(key[1:])


def db_bytes(path: Path) -> dict[str, Any]:
    """File bytes, and page bytes per part of the schema from ``dbstat`` (the file must be closed)."""
    files = {p.name: p.stat().st_size for p in path.parent.glob(path.name + "*")}
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        owner = dict(con.execute("SELECT name, tbl_name FROM sqlite_master"))
        parts: dict[str, int] = {}
        for name, size in con.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"):
            table = owner.get(name, name)
            part = (
                "vectors"
                if table == "engram_vectors"
                else "fts"
                if table.startswith("engram_fts")
                else table.removeprefix("engram_")
            )
            if table != name and part not in ("fts", "vectors"):
                part += " indexes"
            parts[part] = parts.get(part, 0) + int(size)
        free = con.execute("PRAGMA freelist_count").fetchone()[0] * con.execute("PRAGMA page_size").fetchone()[0]
    finally:
        con.close()
    parts["free pages"] = int(free)
    return {"files": files, "total": sum(files.values()), "parts": dict(sorted(parts.items(), key=lambda kv: -kv[1]))}


# ---------------------------------------------------------------------------------------------
# Worker processes: a line of JSON in, a line of JSON out
# ---------------------------------------------------------------------------------------------


def serve(handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]]) -> None:
    """Answer commands from the parent on stdin; stdout carries only replies (prints go to stderr)."""
    out: IO[str] = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for line in sys.stdin:
        msg = json.loads(line)
        try:
            reply = handlers[msg["cmd"]](msg)
        except Exception as exc:
            traceback.print_exc()
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(reply) + "\n")
        if msg["cmd"] == "finish" or "error" in reply:
            break


class Worker:
    """A worker subprocess of this script, driven by `call`."""

    def __init__(self, role: str, config: dict[str, Any]) -> None:
        cmd = [sys.executable, __file__, "--worker", role, json.dumps(config)]
        self.role = role
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def call(self, cmd: str, **kw: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"cmd": cmd, **kw}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            raise RuntimeError(f"{self.role} worker died during {cmd!r} (exit code {code}; see stderr)")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"{self.role} worker failed during {cmd!r}: {reply['error']}")
        return reply

    def close(self) -> None:
        """Wait for the worker to exit (it does after ``finish``); kill it after an error."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def load_queries(path: str) -> list[dict[str, Any]]:
    data: dict[str, Any] = json.loads(Path(path).read_text(encoding="utf-8"))
    return list(data["queries"])


class EngineWorker:
    """engramdb in its own process: build (or restore), recall rounds, then dedup and reflect."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.n: int = cfg["n"]
        self.path = Path(cfg["workdir"]) / "engram.db"
        self.queries = load_queries(cfg["queries"])
        self.engine: Any = None
        self.me: Any = None

    def open(self) -> float:
        from engramdb import DynamicMemoryEngine

        t = time.perf_counter()
        self.engine = DynamicMemoryEngine(self.path)  # every default, vector_index="auto" included
        self.me = self.engine.agent(AGENT)
        return time.perf_counter() - t

    def build(self, _msg: dict[str, Any]) -> dict[str, Any]:
        cfg, out = self.cfg, {}
        cached = Path(cfg["cache_db"]) if cfg.get("cache_db") else None
        if cached is not None and cached.exists():
            t = time.perf_counter()
            shutil.copyfile(cached, self.path)
            out["build"] = json.loads(cached.with_suffix(".json").read_text(encoding="utf-8"))["build"]
            out["build"]["cached"] = True
            out["build"]["restore_s"] = round(time.perf_counter() - t, 1)
        else:
            out["build"] = self._build()
            if cached is not None:
                cached.parent.mkdir(parents=True, exist_ok=True)
                tmp = cached.with_suffix(".tmp")
                shutil.copyfile(self.path, tmp)
                meta = {"build": out["build"], "written": time.strftime("%Y-%m-%d %H:%M:%S"), "git": git_state()}
                cached.with_suffix(".json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
                os.replace(tmp, cached)
        out["bytes"] = db_bytes(self.path)
        out["peak_rss_build_mb"] = None if out["build"]["cached"] else round(peak_mb(), 1)
        out["open_s"] = round(self.open(), 3)
        t = time.perf_counter()
        self.me.recall("warm up the vector cache", k=K, hops=HOPS)  # loads vectors, trains the IVF
        out["first_recall_s"] = round(time.perf_counter() - t, 3)
        out["index"] = describe_index(self.engine)
        out["rss_after_first_recall_mb"] = round(rss_mb(), 1)
        return out

    def _build(self) -> dict[str, Any]:
        n, batch, single = self.n, self.cfg["batch"], min(self.cfg["single"], self.n)
        self.open()
        me = self.me
        reader = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
        specs = corpus.generate(n, seed=self.cfg["seed"], tenants=1, agents=CORPUS_AGENTS)
        batch_s = link_s = 0.0
        single_lat: list[float] = []
        links = 0
        started = time.perf_counter()

        def add_links(chunk: list[corpus.MemorySpec], ids: list[str]) -> float:
            nonlocal links
            wanted = [(i, position(key), etype) for i, s in enumerate(chunk) for key, etype in s.links]
            if not wanted:
                return 0.0
            ns = sorted({p + 1 for _, p, _ in wanted})
            id_of: dict[int, str] = {}
            for start in range(0, len(ns), 500):
                part = ns[start : start + 500]
                marks = ",".join("?" * len(part))
                id_of.update(reader.execute(f"SELECT n, id FROM engram_memories WHERE n IN ({marks})", part).fetchall())
            t = time.perf_counter()
            for i, p, etype in wanted:
                me.link(ids[i], id_of[p + 1], etype)
            links += len(wanted)
            return time.perf_counter() - t

        done = 0
        for chunk in chunks(islice(specs, n - single), batch):
            items = [fields(s) for s in chunk]
            t = time.perf_counter()
            mems = me.remember_many(items, dedup=False)
            batch_s += time.perf_counter() - t
            link_s += add_links(chunk, [m.id for m in mems])
            done += len(chunk)
            if done % 100_000 == 0:
                log(f"  built {done:,} / {n:,} ({time.perf_counter() - started:.0f} s)")
        for spec in specs:
            item = fields(spec)
            t = time.perf_counter()
            mem = me.remember(**item, dedup=False)
            single_lat.append(time.perf_counter() - t)
            link_s += add_links([spec], [mem.id])
        count, top = reader.execute("SELECT count(*), max(n) FROM engram_memories").fetchone()
        edges = reader.execute("SELECT count(*) FROM engram_edges").fetchone()[0]
        reader.close()
        assert count == top == n, f"expected memories 1..{n}, found {count} (max n {top})"
        wall = time.perf_counter() - started
        self.engine.close()
        batched = n - single
        single_s = sum(single_lat)
        return {
            "cached": False,
            "memories": n,
            "edges": edges,
            "links_made": links,
            "remember_batch_per_s": round(batched / batch_s, 1) if batched else None,
            "remember_single_per_s": round(single / single_s, 1) if single else None,
            "remember_single_p50_ms": summary(single_lat)["p50_ms"] if single else None,
            "link_per_s": round(links / link_s, 1) if links else None,
            "build_s": round(batch_s + single_s + link_s, 1),
            "build_wall_s": round(wall, 1),
            "corpus_and_harness_s": round(wall - batch_s - single_s - link_s, 1),
        }

    def round(self, msg: dict[str, Any]) -> dict[str, Any]:
        me, lat, found = self.me, [], []
        for q in self.queries:
            t = time.perf_counter()
            hits = me.recall(q["text"], k=K, hops=HOPS)
            lat.append(time.perf_counter() - t)
            found.append([h.memory.id for h in hits])
        out: dict[str, Any] = {"seconds": lat}
        if msg.get("quality"):
            out["recall_at_10"] = quality(self.path, self.queries, found)
        return out

    def finish(self, _msg: dict[str, Any]) -> dict[str, Any]:
        me, out = self.me, {}
        out["peak_rss_mb"] = round(peak_mb(), 1)  # build + first recall + every recall round
        extra = [fields(s) for s in corpus.generate(1200, seed=self.cfg["seed"] + 1, tenants=1, agents=CORPUS_AGENTS)]
        lat = []
        for item in extra[:200]:
            t = time.perf_counter()
            me.remember(**item)
            lat.append(time.perf_counter() - t)
        reset_peak()
        before = rss_mb()
        t = time.perf_counter()
        me.remember_many(extra[200:])
        batch_s = time.perf_counter() - t
        out["dedup"] = {
            "single_per_s": round(len(lat) / sum(lat), 1),
            "single_p50_ms": summary(lat)["p50_ms"],
            "batch_per_s": round(1000 / batch_s, 1),
            "batch_peak_rise_mb": round(peak_mb() - before, 1),
        }
        # A new process on the same file, as after a restart: what the side files beside the database save.
        self.engine.close()
        done = subprocess.run(
            [sys.executable, __file__, "--reopen", str(self.path)], capture_output=True, text=True, check=True
        )
        reopened = json.loads(done.stdout.strip().splitlines()[-1])
        out["restart_first_recall_s"] = reopened["first_recall_s"]
        out["restart"] = reopened
        if self.n <= self.cfg["reflect_up_to"]:
            self.open()
            me = self.me
            reset_peak()
            before = rss_mb()
            t = time.perf_counter()
            report = me.reflect()
            out["reflect"] = {
                "s": round(time.perf_counter() - t, 2),
                "peak_rise_mb": round(peak_mb() - before, 1),
                "steps": {
                    s.step: {"s": round(s.duration_s, 2), "changed": s.changed, "skipped": s.skipped}
                    for s in report.steps
                },
            }
            self.engine.close()
        # Every file of the database at the end, side files of caches included.
        out["final_files"] = {
            p.name: sum(f.stat().st_size for f in p.iterdir()) if p.is_dir() else p.stat().st_size
            for p in self.path.parent.glob(self.path.name + "*")
        }
        return out


def reopen(path: Path) -> dict[str, Any]:
    """A new process's first recall on `path` (run as ``--reopen PATH``): open, first recall, and
    this process's peak RSS, so a restart is measured on its own and not inside the builder's."""
    from engramdb import DynamicMemoryEngine

    t = time.perf_counter()
    engine = DynamicMemoryEngine(path)
    me = engine.agent(AGENT)
    open_s = time.perf_counter() - t
    t = time.perf_counter()
    me.recall("warm up the vector cache", k=K, hops=HOPS)
    first = time.perf_counter() - t
    channel = engine._runtime.vectors
    out = {
        "open_s": round(open_s, 3),
        "first_recall_s": round(first, 3),
        "vectors_restored": bool(channel is not None and channel.restored),
        "lexical_restored": bool(engine._runtime.recaller.lexical.restored),
        "rss_after_first_recall_mb": round(rss_mb(), 1),
        "peak_rss_mb": round(peak_mb(), 1),
    }
    engine.close()
    return out


def describe_index(engine: Any) -> str:
    channel = engine._runtime.vectors
    if channel is None:
        return "none (lexical only)"
    index = channel.index
    name = type(index).__name__
    if getattr(index, "trained", False):
        return f"{name} IVF nlist={index.nlist} nprobe={index.nprobe}"
    if name == "AnnIndex":
        return f"{name} (exact: below its training size)"
    return name


def quality(path: Path, queries: list[dict[str, Any]], found_ids: list[list[str]]) -> float:
    """Mean recall@10, mapping public memory ids back to corpus positions (n - 1), untimed."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        wanted = sorted({i for ids in found_ids for i in ids})
        n_of: dict[str, int] = {}
        for start in range(0, len(wanted), 500):
            part = wanted[start : start + 500]
            marks = ",".join("?" * len(part))
            n_of.update(con.execute(f"SELECT id, n FROM engram_memories WHERE id IN ({marks})", part).fetchall())
    finally:
        con.close()
    scores = [recall_at_k([n_of[i] - 1 for i in ids], q["relevant"]) for q, ids in zip(queries, found_ids, strict=True)]
    return round(sum(scores) / len(scores), 4) if scores else 0.0


class BaselineWorker:
    """Plain SQLite FTS5 and numpy brute force over the texts and vectors of the engramdb store."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.n: int = cfg["n"]
        self.queries = load_queries(cfg["queries"])
        self.fts: sqlite3.Connection | None = None
        self.matrix: Any = None
        self.ns: Any = None
        self.embedder: Any = None

    def load(self, _msg: dict[str, Any]) -> dict[str, Any]:
        import numpy as np

        from engramdb.embeddings.static import default_embedder
        from engramdb.retrieval.keywords import keywords

        self.keywords = keywords
        workdir = Path(self.cfg["workdir"])
        src = sqlite3.connect(f"file:{workdir / 'engram.db'}?mode=ro", uri=True)
        fts_path = workdir / "fts5.db"
        fts_path.unlink(missing_ok=True)
        self.fts = sqlite3.connect(fts_path)
        t = time.perf_counter()
        self.fts.execute(f"CREATE VIRTUAL TABLE docs USING fts5(title, content, tags, tokenize='{FTS_TOKENIZE}')")
        rows = src.execute("SELECT n, title, content, tags FROM engram_memories WHERE n <= ? ORDER BY n", (self.n,))
        with self.fts:
            self.fts.executemany(
                "INSERT INTO docs (rowid, title, content, tags) VALUES (?, ?, ?, ?)",
                ((n, title, content, " ".join(json.loads(tags))) for n, title, content, tags in rows),
            )
        fts_s = time.perf_counter() - t
        self.embedder = default_embedder()
        t = time.perf_counter()
        count, dim = src.execute(
            "SELECT count(*), max(length(vec)) / 4 FROM engram_vectors WHERE model = ? AND n <= ?",
            (self.embedder.name, self.n),
        ).fetchone()
        self.matrix = np.empty((count, dim), dtype=np.float32)
        self.ns = np.empty(count, dtype=np.int64)
        cur = src.execute(
            "SELECT n, vec FROM engram_vectors WHERE model = ? AND n <= ? ORDER BY n", (self.embedder.name, self.n)
        )
        for i, (n, vec) in enumerate(cur):
            self.ns[i] = n
            self.matrix[i] = np.frombuffer(vec, dtype=np.float32)
        load_s = time.perf_counter() - t
        src.close()
        return {
            "fts5_build_s": round(fts_s, 1),
            "fts5_bytes": fts_path.stat().st_size,
            "numpy_load_s": round(load_s, 1),
            "numpy_vectors": int(count),
            "numpy_matrix_mb": round(self.matrix.nbytes / 2**20, 1),
        }

    def search_fts(self, text: str) -> list[int]:
        assert self.fts is not None
        kws = self.keywords(text)
        if not kws:
            return []
        match = " OR ".join('"' + k.replace('"', '""') + '"' for k in kws)
        rows = self.fts.execute("SELECT rowid FROM docs WHERE docs MATCH ? ORDER BY rank LIMIT ?", (match, K))
        return [int(r[0]) for r in rows]

    def search_numpy(self, text: str) -> list[int]:
        import numpy as np

        q = self.embedder.embed([text])[0]
        # numpy's own kernel, not BLAS: `matrix @ q` (OpenBLAS sgemv) measured ~1.7x slower here at 1M.
        sims = np.einsum("nd,d->n", self.matrix, q)
        top = np.argpartition(-sims, K)[:K]
        top = top[np.argsort(-sims[top], kind="stable")]
        return [int(n) for n in self.ns[top]]

    def round(self, msg: dict[str, Any]) -> dict[str, Any]:
        search = self.search_fts if msg["system"] == "fts5" else self.search_numpy
        lat, found = [], []
        for q in self.queries:
            t = time.perf_counter()
            ns = search(q["text"])
            lat.append(time.perf_counter() - t)
            found.append(ns)
        out: dict[str, Any] = {"seconds": lat}
        if msg.get("quality"):
            scores = [
                recall_at_k([n - 1 for n in ns], q["relevant"]) for q, ns in zip(self.queries, found, strict=True)
            ]
            out["recall_at_10"] = round(sum(scores) / len(scores), 4) if scores else 0.0
        return out

    def finish(self, _msg: dict[str, Any]) -> dict[str, Any]:
        if self.fts is not None:
            self.fts.close()
        return {"peak_rss_mb": round(peak_mb(), 1)}


def prepare_queries(n: int, seed: int, count: int, out: Path) -> None:
    """Generate the corpus once and write `count` queries with their relevant corpus positions."""
    t = time.perf_counter()
    # Everything is visible to the one querying agent, so relevance is judged over the whole store.
    items = [
        dataclasses.replace(s, agent=AGENT) for s in corpus.generate(n, seed=seed, tenants=1, agents=CORPUS_AGENTS)
    ]
    gen_s = time.perf_counter() - t
    qs = corpus.queries(items, count, seed)
    data = {
        "corpus": {
            "memories": n,
            "generate_s": round(gen_s, 1),
            "mean_content_chars": round(sum(len(s.content) for s in items) / n, 1),
            "links": sum(len(s.links) for s in items),
            "restatements": sum(s.duplicate_of is not None for s in items),
        },
        "queries": [{"text": q.text, "kind": q.kind, "relevant": [position(k) for k in q.relevant_keys]} for q in qs],
    }
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, out)


# ---------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------


def git_state() -> dict[str, Any]:
    """The commit checked out, where engramdb was imported from, and whether that is this
    repository's src/ with uncommitted changes (read-only git commands)."""
    import engramdb

    def git(*cmd: str) -> str:
        done = subprocess.run(["git", *cmd], cwd=HERE.parent, capture_output=True, text=True, check=False)
        return done.stdout.strip()

    where = Path(engramdb.__file__).resolve().parent
    in_repo = where == (HERE.parent / "src" / "engramdb").resolve()
    return {
        "commit": git("rev-parse", "--short", "HEAD"),
        "engramdb": "src/engramdb" if in_repo else str(where),
        "src_dirty": bool(git("status", "--porcelain", "src")) if in_repo else None,
    }


def cache_key(args: argparse.Namespace, n: int) -> str:
    from engramdb.embeddings.static import default_embedder
    from engramdb.storage.sqlite.migrations import code_version

    source = hashlib.sha256((HERE / "corpus.py").read_bytes()).hexdigest()[:10]
    emb = default_embedder().name.replace("@", "-")
    return f"n{n}-s{args.seed}-schema{code_version()}-{emb}-b{args.batch}-single{args.single}-corpus{source}"


def run_size(args: argparse.Namespace, n: int) -> dict[str, Any]:
    row: dict[str, Any] = {"n": n, "load_before": [round(x, 2) for x in os.getloadavg()]}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"bench-scale-{n}-", dir=args.workdir) as tmp:
        workdir = Path(tmp)
        key = cache_key(args, n) if args.cache_dir else None
        queries = workdir / "queries.json"
        if key is not None:
            queries = args.cache_dir / f"queries-{key}-q{args.queries}.json"
        if not queries.exists():
            log(f"n={n:,}: generating the corpus and {args.queries} queries")
            prepare = [sys.executable, __file__, "--prepare", str(n), str(args.seed), str(args.queries), str(queries)]
            queries.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(prepare, check=True)
        meta = json.loads(queries.read_text(encoding="utf-8"))
        row["corpus"] = meta["corpus"]
        row["queries"] = len(meta["queries"])
        cfg = {
            "n": n,
            "seed": args.seed,
            "batch": args.batch,
            "single": args.single,
            "workdir": str(workdir),
            "queries": str(queries),
            "reflect_up_to": args.reflect_up_to,
            "cache_db": str(args.cache_dir / f"engram-{key}.db") if key else None,
        }
        engine = Worker("engine", cfg)
        baselines: Worker | None = None
        try:
            log(f"n={n:,}: building engramdb")
            row["engramdb"] = engine.call("build")
            b = row["engramdb"]["build"]
            log(
                f"n={n:,}: built in {b['build_s']} s{' (cached)' if b['cached'] else ''}; "
                f"first recall {row['engramdb']['first_recall_s']} s; index {row['engramdb']['index']}"
            )
            baselines = Worker("baselines", cfg)
            row["baselines"] = baselines.call("load")
            log(f"n={n:,}: baselines ready {row['baselines']}")
            seconds: dict[str, list[float]] = {s: [] for s in SYSTEMS}
            quality_of: dict[str, float] = {}
            rounds: dict[str, list[dict[str, Any]]] = {s: [] for s in SYSTEMS}
            for r in range(args.rounds):
                for system in SYSTEMS[r % 3 :] + SYSTEMS[: r % 3]:
                    t = time.perf_counter()
                    if system == "engramdb":
                        got = engine.call("round", quality=r == 0)
                    else:
                        got = baselines.call("round", system=system, quality=r == 0)
                    seconds[system] += got["seconds"]
                    rounds[system].append(
                        {k: v for k, v in summary(got["seconds"]).items() if k in ("p50_ms", "p99_ms")}
                    )
                    if "recall_at_10" in got:
                        quality_of[system] = got["recall_at_10"]
                    log(f"n={n:,}: round {r + 1} {system}: {time.perf_counter() - t:.1f} s")
            row["recall"] = {
                s: {**summary(seconds[s]), "recall_at_10": quality_of.get(s), "rounds": rounds[s]} for s in SYSTEMS
            }
            row["baselines"].update(baselines.call("finish"))
            log(f"n={n:,}: dedup and reflection")
            row["engramdb"].update(engine.call("finish"))
        finally:
            engine.close()
            if baselines is not None:
                baselines.close()
    row["load_after"] = [round(x, 2) for x in os.getloadavg()]
    row["wall_s"] = round(time.perf_counter() - started, 1)
    return row


def derived(row: dict[str, Any]) -> dict[str, Any]:
    """Per-memory sizes and baseline ratios of one size's results."""
    n, e, rec = row["n"], row["engramdb"], row["recall"]
    parts = e["bytes"]["parts"]
    vectors = parts.get("vectors", 0)
    return {
        "db_bytes_per_memory": round(e["bytes"]["total"] / n, 1),
        "vector_bytes_per_memory": round(vectors / n, 1),
        "other_bytes_per_memory": round((e["bytes"]["total"] - vectors) / n, 1),
        "p50_ratio_fts5": round(rec["engramdb"]["p50_ms"] / rec["fts5"]["p50_ms"], 3),
        "p50_ratio_numpy": round(rec["engramdb"]["p50_ms"] / rec["numpy"]["p50_ms"], 3),
    }


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, CPython {platform.python_version()}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--queries", type=int, default=300, help="distinct queries per size")
    ap.add_argument("--rounds", type=int, default=3, help="passes over the queries, per system")
    ap.add_argument("--batch", type=int, default=1000, help="memories per remember_many call")
    ap.add_argument("--single", type=int, default=1000, help="memories remembered one call each")
    ap.add_argument("--reflect-up-to", type=int, default=1_000_000, help="largest size at which reflect() runs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache-dir", type=Path, default=None, help="reuse built databases kept here")
    ap.add_argument("--workdir", type=Path, default=None, help="where the databases are built (default: $TMPDIR)")
    ap.add_argument("--out", type=Path, default=provenance.OUT, help="folder (default: benchmarks/out/)")
    ap.add_argument("--name", default="scale", help="results file stem")
    ap.add_argument("--worker", nargs=2, metavar=("ROLE", "CONFIG"), help=argparse.SUPPRESS)
    ap.add_argument("--prepare", nargs=4, metavar=("N", "SEED", "QUERIES", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--reopen", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.reopen:
        print(json.dumps(reopen(args.reopen)))
        return 0
    if args.prepare:
        n, seed, count, out = args.prepare
        prepare_queries(int(n), int(seed), int(count), Path(out))
        return 0
    if args.worker:
        role, config = args.worker
        cfg = json.loads(config)
        if role == "engine":
            ew = EngineWorker(cfg)
            serve({"build": ew.build, "round": ew.round, "finish": ew.finish})
        else:
            bw = BaselineWorker(cfg)
            serve({"load": bw.load, "round": bw.round, "finish": bw.finish})
        return 0

    started = time.perf_counter()
    command = provenance.provenance(["benchmarks/bench_scale.py", *(argv if argv is not None else sys.argv[1:])])[
        "command"
    ]
    report: dict[str, Any] = {
        "benchmark": "scale",
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "git": git_state(),
        "command": command,
        "params": {
            k: (provenance.relative(str(v)) if isinstance(v, Path) else v)
            for k, v in vars(args).items()
            if k not in ("worker", "prepare", "reopen")
        },
        "targets": TARGETS,
        "targets_15": TARGETS_15,
        "results": [],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    for n in sorted(args.sizes):
        row = run_size(args, n)
        row["derived"] = derived(row)
        report["results"].append(row)
        report["total_s"] = round(time.perf_counter() - started, 1)
        # Written after every size, so a failure at 1M keeps the smaller sizes.
        (args.out / f"{args.name}.json").write_text(
            json.dumps(provenance.stamp(report), indent=2) + "\n", encoding="utf-8"
        )
        md = markdown(report)
        (args.out / f"{args.name}.md").write_text(md, encoding="utf-8")
        log(f"n={n:,} done in {row['wall_s']} s")
    print(md)
    print(plot(report, args.out / f"{args.name}.png"))
    print(f"total {report['total_s']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
