"""Drive naqsha 0.2.0's Dynamic Memory Engine as a black box (run in its own venv).

Usage::

    <repo>/.bench/venvs/naqsha/bin/python naqsha_runner.py sql_bench in.json out.json

Only naqsha's public API is used for the measured numbers:
``naqsha.memory.DynamicMemoryEngine`` (keyword-only ``db_path``),
``engine.get_shared_scope()`` -> ``MemoryScope.execute/query/begin/commit`` and
``naqsha.memory.MemoryRetriever(scope).retrieve(query, token_budget)``.
One extra, clearly labelled reference figure (``insert_raw_executemany``) uses
the engine's exposed sqlite3 connection directly, to show what the scope layer
costs on top of plain SQLite.

See docs/peers.md for the input/output fields.
"""

from __future__ import annotations

import random
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common

TABLE = "memories"  # MemoryRetriever.retrieve's default table_name
AUTOCOMMIT_TABLE = "memories_autocommit"
RAW_TABLE = "memories_raw"

# Columns the retriever reads by default: content / provenance / created_ts.
# ext_id is ours (the caller's id); provenance is set to the same value so the
# provenance line of each wrapped result maps it back (naqsha also de-duplicates
# results by provenance, so provenance must be unique per row).
DDL = (
    "CREATE TABLE IF NOT EXISTS {t} ("
    "id INTEGER PRIMARY KEY, ext_id TEXT NOT NULL, content TEXT NOT NULL, "
    "provenance TEXT NOT NULL, created_ts REAL NOT NULL)"
)
INDEX_DDL = "CREATE INDEX IF NOT EXISTS idx_{t}_created_ts ON {t} (created_ts)"
INSERT = "INSERT INTO {t} (ext_id, content, provenance, created_ts) VALUES (?, ?, ?, ?)"

_PROV_RE = re.compile(r"^provenance:(.*)$", re.MULTILINE)


def _version() -> str:
    from importlib.metadata import version

    return version("naqsha")


def _norm_rows(raw: list[Any]) -> list[tuple[str, str, float]]:
    rows: list[tuple[str, str, float]] = []
    now = time.time()
    for i, r in enumerate(raw):
        if isinstance(r, str):
            rows.append((str(i), r, now))
            continue
        ext = str(r.get("id", i))
        if "\n" in ext:
            raise ValueError(f"row id {ext!r} must not contain a newline")
        rows.append((ext, str(r["content"]), float(r.get("created_ts", now))))
    if len({ext for ext, _, _ in rows}) != len(rows):
        raise ValueError("row ids must be unique (naqsha de-duplicates by provenance)")
    return rows


def sql_bench(p: dict[str, Any]) -> dict[str, Any]:
    """Insert rows (autocommit + one transaction), point-query them, run retrieve()."""
    keep_raw = bool(p.get("return_latencies", False))
    auto_dir = not p.get("data_dir")
    data_dir = Path(tempfile.mkdtemp(prefix="peer-data-")) if auto_dir else Path(p["data_dir"])
    data_dir.mkdir(parents=True, exist_ok=True)
    db_path = data_dir / "naqsha_memory.db"
    for suffix in ("", "-wal", "-shm"):
        Path(str(db_path) + suffix).unlink(missing_ok=True)

    fsync = _common.fsync_probe(data_dir)
    rows = _norm_rows(p.get("rows", []))
    n = len(rows)
    n_auto = p.get("autocommit_rows")
    n_auto = n if n_auto is None else min(int(n_auto), n)
    token_budget = int(p.get("token_budget", 2000))
    queries = [_common.norm_query(q, i) for i, q in enumerate(p.get("queries", []))]
    rng = random.Random(int(p.get("seed", 0)))
    timings: dict[str, Any] = {}
    rss: dict[str, Any] = {"start_kb": _common.rss_peak_kb()}

    t = time.perf_counter()
    from naqsha.memory import DynamicMemoryEngine, MemoryRetriever

    timings["import_s"] = round(time.perf_counter() - t, 6)
    rss["after_import_kb"] = _common.rss_peak_kb()

    t = time.perf_counter()
    engine = DynamicMemoryEngine(db_path=db_path)  # keyword-only in 0.2.0
    scope = engine.get_shared_scope()
    timings["open_s"] = round(time.perf_counter() - t, 6)

    t = time.perf_counter()
    tables = [TABLE, AUTOCOMMIT_TABLE]
    for tname in tables:
        scope.execute(DDL.format(t=tname))  # DDL safelist + "shared_" prefixing apply
        if p.get("index_created_ts", True):
            scope.execute(INDEX_DDL.format(t=tname))
    timings["create_s"] = round(time.perf_counter() - t, 6)

    # 1. one row per statement; the engine opens sqlite3 with isolation_level=None,
    #    so each INSERT is its own (WAL, synchronous=FULL default) transaction.
    lat: list[float] = []
    sql = INSERT.format(t=AUTOCOMMIT_TABLE)
    t_all = time.perf_counter()
    for ext, content, ts in rows[:n_auto]:
        t = time.perf_counter()
        scope.execute(sql, (ext, content, ext, ts))
        lat.append(time.perf_counter() - t)
    timings["insert_autocommit"] = _common.latency_stats(lat, total_s=time.perf_counter() - t_all, keep_raw=keep_raw)

    # 2. all rows in one transaction: scope.begin(); scope.execute(INSERT) per row;
    #    scope.commit(). MemoryScope has no executemany, so this is the batched form
    #    its API allows. This table is the one retrieve() reads.
    lat = []
    sql = INSERT.format(t=TABLE)
    t_all = time.perf_counter()
    scope.begin()
    for ext, content, ts in rows:
        t = time.perf_counter()
        scope.execute(sql, (ext, content, ext, ts))
        lat.append(time.perf_counter() - t)
    t = time.perf_counter()
    scope.commit()
    commit_s = time.perf_counter() - t
    batch = _common.latency_stats(lat, total_s=time.perf_counter() - t_all, keep_raw=keep_raw)
    batch["commit_s"] = round(commit_s, 6)
    timings["insert_batch_txn"] = batch
    rss["after_insert_kb"] = _common.rss_peak_kb()

    # 3. reference only (not naqsha's API): executemany on engine.connection,
    #    bypassing MemoryScope's regex prefixing.
    if p.get("raw_executemany", True) and n:
        conn = engine.connection
        conn.execute(DDL.format(t="shared_" + RAW_TABLE))
        t = time.perf_counter()
        conn.execute("BEGIN")
        conn.executemany(INSERT.format(t="shared_" + RAW_TABLE), [(e, c, e, ts) for e, c, ts in rows])
        conn.execute("COMMIT")
        dt = time.perf_counter() - t
        timings["insert_raw_executemany"] = {
            "n": n,
            "total_s": round(dt, 6),
            "ops_per_s": round(n / dt, 3) if dt > 0 else None,
            "note": "engine.connection.executemany: plain sqlite3, outside naqsha's scope API",
        }

    # 4. point lookups by primary key through the scope.
    n_point = min(int(p.get("point_queries", 1000)), n)
    lat = []
    misses = 0
    ids = [rng.randint(1, n) for _ in range(n_point)]
    sql = f"SELECT id, ext_id, content, created_ts FROM {TABLE} WHERE id = ?"
    t_all = time.perf_counter()
    for rid in ids:
        t = time.perf_counter()
        got = scope.query(sql, (rid,))
        lat.append(time.perf_counter() - t)
        if len(got) != 1 or got[0]["ext_id"] != rows[rid - 1][0]:
            misses += 1
    point = _common.latency_stats(lat, total_s=time.perf_counter() - t_all, keep_raw=keep_raw)
    point["wrong_or_missing"] = misses
    timings["point_query"] = point

    # 5. keyword + recency retrieval within a token budget.
    retriever = MemoryRetriever(scope)
    lat = []
    results: list[dict[str, Any]] = []
    with_contents = bool(p.get("return_contents", False))
    t_all = time.perf_counter()
    for q in queries:
        t = time.perf_counter()
        got = retriever.retrieve(q["text"], int(q.get("token_budget", token_budget)))
        lat.append(time.perf_counter() - t)
        ranked: list[str] = []
        for wrapped in got:
            m = _PROV_RE.search(wrapped)
            ranked.append(m.group(1) if m else "")
        item: dict[str, Any] = {
            "query_id": q["id"],
            "ranked_ids": ranked,
            "n_returned": len(got),
            "chars": sum(len(w) for w in got),
        }
        if with_contents:
            item["wrapped"] = got
        results.append(item)
    timings["retrieve"] = _common.latency_stats(lat, total_s=time.perf_counter() - t_all, keep_raw=keep_raw)
    rss["after_retrieve_kb"] = _common.rss_peak_kb()

    engine.close()
    out: dict[str, Any] = {
        "n_rows": n,
        "n_autocommit_rows": n_auto,
        "n_queries": len(queries),
        "token_budget": token_budget,
        "tables": {"retrieve": "shared_" + TABLE, "autocommit": "shared_" + AUTOCOMMIT_TABLE},
        "candidate_window": 512,  # MemoryRetriever: newest 512 rows by created_ts only
        "timings": timings,
        "rss_kb": rss,
        "db_bytes": _common.dir_bytes(data_dir),
        "fsync_probe": fsync,
        "retrieve_results": results,
    }
    if p.get("cleanup", auto_dir):
        shutil.rmtree(data_dir, ignore_errors=True)
    return out


if __name__ == "__main__":
    sys.exit(_common.main("naqsha", _version, {"sql_bench": sql_bench}))
