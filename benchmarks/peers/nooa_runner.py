"""Drive nooa-memory 0.0.10 as a black box (run in its own Python 3.12 venv).

Usage::

    <repo>/.bench/venvs/nooa/bin/python nooa_runner.py recall_bench in.json out.json
    <repo>/.bench/venvs/nooa/bin/python nooa_runner.py reflect_bench in.json out.json
    <repo>/.bench/venvs/nooa/bin/python nooa_runner.py recall_many in.json out.json

The measured path is nooa's own ``MemoryManager`` (``remember`` / ``recall`` /
``reflect``), built on a minimal stand-in host object: ``MemoryManager`` only
needs ``agent.event_manager`` from its host when ``MemoryConfig.enabled`` is
False (no agent hooks are installed; the conscious operations are unchanged).

What is *not* public API, and is said so in the output ``notes``:

* ``add_mode="store"`` builds ``Memory`` records (with our timestamps) and calls
  ``manager.store.add(memory, embedding)`` directly: no dedup-on-write.
* With ``add_mode="remember"`` and ``set_timestamps``, each new memory's
  ``created_at``/``last_accessed_at``/creation access record are rewritten to the
  caller's ``created_ts`` after ``remember`` (``store.save``); that rewrite is
  timed separately and not included in the add latency.
* ``now_ts`` monkeypatches the module-level ``_now`` clock of
  ``nooa_memory.{schema,retrieval,reflection,forgetting}``: nooa has no clock
  injection.
* ``reflect`` per-step timings wrap the ``ReflectionEngine`` instance's step
  methods; the pass itself is the public ``manager.reflect()``.

See docs/peers.md for the input/output fields.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common

# nooa_memory imports nooa -> litellm, which otherwise tries to download a model
# price map at import time (network). Use its bundled copy.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

OWNER = "bench"


def _version() -> str:
    from importlib.metadata import version

    return version("nooa-memory")


class _EventSink:
    """The only piece of a nooa Agent that MemoryManager touches when disabled."""

    def add(self, *args: Any, **kwargs: Any) -> None:
        return None


class BenchHost:
    """Minimal host object standing in for a nooa ``Agent``."""

    def __init__(self) -> None:
        self.event_manager = _EventSink()


class VectorEmbedder:
    """nooa ``Embedder`` protocol over caller-supplied vectors.

    The runner ``push``es the vector for the next ``embed`` call (one memory
    or one query); lacking that, the exact text is looked up in ``by_text``.
    Vectors are L2-normalised here, as nooa assumes (cosine == dot product).
    """

    def __init__(self, dim: int) -> None:
        self._dim = dim
        self._next: Any = None
        self.by_text: dict[str, Any] = {}
        self.calls = 0

    @property
    def dim(self) -> int:
        return self._dim

    def push(self, vec: Any) -> None:
        self._next = vec

    def clear(self) -> None:
        self._next = None

    def embed(self, text: str) -> Any:
        self.calls += 1
        if self._next is not None:
            vec, self._next = self._next, None
            return vec
        try:
            return self.by_text[text]
        except KeyError:
            raise KeyError(f"VectorEmbedder: no vector supplied for text {text[:60]!r}") from None

    def embed_batch(self, texts: list[str]) -> list[Any]:
        return [self.embed(t) for t in texts]


def _normalise_rows(np: Any, mat: Any) -> Any:
    mat = np.asarray(mat, dtype=np.float32)
    if mat.ndim != 2:
        raise ValueError("vectors must form a 2-D array")
    norms = np.linalg.norm(mat, axis=1, keepdims=True)
    norms[norms == 0.0] = 1.0
    return mat / norms


def _load_vectors(np: Any, items: list[dict[str, Any]], npy: str | None, what: str) -> Any:
    if npy:
        mat = np.load(npy)
        if mat.shape[0] != len(items):
            raise ValueError(f"{what}: {npy} has {mat.shape[0]} rows, expected {len(items)}")
    else:
        missing = [i for i, it in enumerate(items) if "vector" not in it]
        if missing:
            raise ValueError(
                f"{what}: embedder='vectors' needs a 'vector' on every item "
                f"(or {what}_vectors_npy); missing at index {missing[0]}"
            )
        mat = [it["vector"] for it in items]
    return _normalise_rows(np, mat)


def _patch_clock(now_ts: float) -> list[str]:
    import nooa_memory.forgetting as forgetting
    import nooa_memory.reflection as reflection
    import nooa_memory.retrieval as retrieval
    import nooa_memory.schema as schema

    def fixed() -> float:
        return now_ts

    patched = []
    for mod in (schema, retrieval, reflection, forgetting):
        if hasattr(mod, "_now"):
            mod._now = fixed
            patched.append(mod.__name__)
    return patched


def _importance(nm: Any, v: Any, default: float) -> float:
    if v is None:
        return default
    if isinstance(v, str):
        return float(nm.to_numeric("importance", v))
    return float(v)


def _run(p: dict[str, Any], *, reflect_default: bool) -> dict[str, Any]:
    keep_raw = bool(p.get("return_latencies", False))
    notes: list[str] = []
    timings: dict[str, Any] = {}
    rss: dict[str, Any] = {"start_kb": _common.rss_peak_kb()}

    t = time.perf_counter()
    import nooa_memory as nm
    import numpy as np
    from nooa_memory.schema import AccessRecord, Memory, MemoryType

    timings["import_s"] = round(time.perf_counter() - t, 6)
    rss["after_import_kb"] = _common.rss_peak_kb()

    auto_dir = not p.get("data_dir")
    data_dir = Path(tempfile.mkdtemp(prefix="peer-data-")) if auto_dir else Path(p["data_dir"])
    data_dir.mkdir(parents=True, exist_ok=True)
    db_path = data_dir / "nooa_memory.sqlite"
    for suffix in ("", "-wal", "-shm"):
        Path(str(db_path) + suffix).unlink(missing_ok=True)

    fsync = _common.fsync_probe(data_dir)
    mems: list[dict[str, Any]] = list(p.get("memories", []))
    queries = [_common.norm_query(q, i) for i, q in enumerate(p.get("queries", []))]
    ext_ids = [str(m.get("id", i)) for i, m in enumerate(mems)]
    if len(set(ext_ids)) != len(ext_ids):
        raise ValueError("memory ids must be unique")
    embedder_kind = p.get("embedder", "own")
    add_mode = p.get("add_mode", "remember")
    if add_mode not in ("remember", "store"):
        raise ValueError("add_mode must be 'remember' or 'store'")
    set_ts = bool(p.get("set_timestamps", True))
    dedup = bool(p.get("dedup", True))
    k = int(p.get("k", 10))
    hops = int(p.get("hops", 1))
    touch = bool(p.get("touch", True))
    do_reflect = bool(p.get("reflect", reflect_default))
    default_imp = float(p.get("default_importance", 5.0))

    # ---- embedder ----
    mem_vecs = q_vecs = None
    if embedder_kind == "own":
        embedder: Any = nm.HashingEmbedder(dim=int(p.get("hashing_dim", 256)))
    elif embedder_kind == "vectors":
        mem_vecs = _load_vectors(np, mems, p.get("memory_vectors_npy"), "memories")
        if queries:
            q_vecs = _load_vectors(np, queries, p.get("query_vectors_npy"), "queries")
        dim = int(mem_vecs.shape[1]) if len(mems) else int(p.get("dim", 1))
        embedder = VectorEmbedder(dim)
        notes.append(
            "embedder=vectors: caller vectors plugged through MemoryManager(embedder=...), L2-normalised by the runner"
        )
    else:
        raise ValueError("embedder must be 'own' or 'vectors'")

    if p.get("now_ts") is not None:
        patched = _patch_clock(float(p["now_ts"]))
        notes.append(f"clock fixed at now_ts via monkeypatch of _now in {patched}")

    # ---- manager ----
    t = time.perf_counter()
    # enabled=False: no agent hooks (spontaneous injection, write-on-event,
    # post-task reflection); remember/recall/reflect behave the same.
    # config_overrides: any MemoryConfig sub-config, e.g. {"retrieval": {"n_dense": 100}}
    overrides = dict(p.get("config_overrides") or {})
    for key in ("enabled", "path", "owner"):
        overrides.pop(key, None)
    if overrides:
        notes.append(f"MemoryConfig overrides: {sorted(overrides)}")
    cfg = nm.MemoryConfig.model_validate({**overrides, "enabled": False, "path": str(db_path), "owner": OWNER})
    manager = nm.MemoryManager(BenchHost(), cfg, embedder=embedder)
    timings["open_s"] = round(time.perf_counter() - t, 6)

    # ---- add ----
    nooa_to_ext: dict[str, str] = {}
    merged_into: dict[str, str] = {}
    lat: list[float] = []
    patch_s = 0.0
    t_all = time.perf_counter()
    for i, m in enumerate(mems):
        mtype = MemoryType(m.get("type", "info"))
        imp = _importance(nm, m.get("importance"), default_imp)
        ts = float(m["created_ts"]) if (set_ts and m.get("created_ts") is not None) else None
        if mem_vecs is not None:
            embedder.push(mem_vecs[i])
        if add_mode == "remember":
            t = time.perf_counter()
            nid = manager.remember(m["content"], type=mtype, importance=imp, dedup=dedup)
            lat.append(time.perf_counter() - t)
            if nid in nooa_to_ext:  # dedup-on-write reinforced an existing memory
                merged_into[ext_ids[i]] = nooa_to_ext[nid]
            else:
                nooa_to_ext[nid] = ext_ids[i]
                if ts is not None:
                    t = time.perf_counter()
                    rec = manager.store.get(nid)
                    rec.created_at = ts
                    rec.last_accessed_at = ts
                    rec.access_log = [AccessRecord(ts=ts, channel="created")]
                    manager.store.save(rec)
                    patch_s += time.perf_counter() - t
        else:
            t = time.perf_counter()
            mem = Memory(
                content=m["content"],
                type=mtype,
                importance=imp,
                owner=manager.owner,
                created_at=ts if ts is not None else time.time(),
                last_accessed_at=ts if ts is not None else time.time(),
            )
            emb = embedder.embed(mem.embedding_text())
            manager.store.add(mem, emb)
            lat.append(time.perf_counter() - t)
            nooa_to_ext[mem.id] = ext_ids[i]
        if mem_vecs is not None:
            embedder.clear()
    add_total = time.perf_counter() - t_all - patch_s
    add = _common.latency_stats(lat, total_s=add_total, keep_raw=keep_raw)
    add["mode"] = add_mode
    add["dedup"] = dedup if add_mode == "remember" else False
    add["deduplicated"] = len(merged_into)
    if add_mode == "remember" and set_ts:
        add["timestamp_rewrite_s"] = round(patch_s, 6)
    # cumulative throughput per tenth of the run, to expose growth with store size
    if lat:
        step = max(1, len(lat) // 10)
        add["ops_per_s_by_decile"] = [
            round(len(lat[j : j + step]) / max(sum(lat[j : j + step]), 1e-12), 2) for j in range(0, len(lat), step)
        ]
    timings["add"] = add
    rss["after_add_kb"] = _common.rss_peak_kb()

    out: dict[str, Any] = {
        "n_memories": len(mems),
        "n_stored": manager.store.count(),
        "embedder": embedder_kind,
        "embedding_dim": embedder.dim,
        "add_mode": add_mode,
        "k": k,
        "hops": hops,
        "touch": touch,
    }

    # ---- reflect ----
    if do_reflect:
        out["reflection"] = _reflect(manager, nooa_to_ext)
        rss["after_reflect_kb"] = _common.rss_peak_kb()

    # ---- recall ----
    if queries:
        lat = []
        results: list[dict[str, Any]] = []
        with_contents = bool(p.get("return_contents", False))
        t_all = time.perf_counter()
        for i, q in enumerate(queries):
            if q_vecs is not None:
                embedder.push(q_vecs[i])
            qk = int(q.get("k", k))
            t = time.perf_counter()
            if touch:
                got = manager.recall(q["text"], k=qk, hops=hops)
            else:
                got = manager.retrieval.recall(q["text"], k=qk, hops=hops, touch=False, owner=manager.role)
            lat.append(time.perf_counter() - t)
            if q_vecs is not None:
                embedder.clear()
            item: dict[str, Any] = {
                "query_id": q["id"],
                "ranked_ids": [nooa_to_ext.get(m.id, "nooa:" + m.id) for m in got],
            }
            if with_contents:
                item["contents"] = [m.content for m in got]
            results.append(item)
        timings["recall"] = _common.latency_stats(lat, total_s=time.perf_counter() - t_all, keep_raw=keep_raw)
        out["recall_results"] = results
        rss["after_recall_kb"] = _common.rss_peak_kb()

    if merged_into:
        out["merged_into"] = merged_into
    out["timings"] = timings
    out["rss_kb"] = rss
    manager.store.close()
    out["db_bytes"] = _common.dir_bytes(data_dir)
    out["fsync_probe"] = fsync
    if add_mode == "store":
        notes.append("add_mode=store: MemoryStore.add directly (not MemoryManager.remember; no dedup)")
    if add_mode == "remember" and set_ts:
        notes.append("created_ts applied after remember() via store.save (timed apart)")
    out["notes"] = notes
    if p.get("cleanup", auto_dir):
        shutil.rmtree(data_dir, ignore_errors=True)
    return out


def _reflect(manager: Any, nooa_to_ext: dict[str, str]) -> dict[str, Any]:
    """Run ``manager.reflect()`` with per-step timings."""
    engine = manager.reflection_engine
    steps: dict[str, float] = {}

    def timed(name: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                steps[name] = round(steps.get(name, 0.0) + time.perf_counter() - t, 6)

        return wrapper

    # instance attributes shadow the bound methods consolidate() calls
    for attr, name in (
        ("_merge_duplicates", "merge_duplicates"),
        ("_reconsolidate", "reconsolidate"),
        ("_form_edges", "form_edges"),
        ("_rescore_importance", "rescore_importance"),
        ("_abstract_episodes", "abstract"),
    ):
        setattr(engine, attr, timed(name, getattr(engine, attr)))
    forgetting = engine._forgetting
    forgetting.prune = timed("prune", forgetting.prune)

    rss_before = _common.rss_peak_kb()
    rss_now_before = _common.rss_now_kb()
    t = time.perf_counter()
    report = manager.reflect(trigger="manual")
    total = time.perf_counter() - t
    for attr in ("_merge_duplicates", "_reconsolidate", "_form_edges", "_rescore_importance", "_abstract_episodes"):
        engine.__dict__.pop(attr, None)
    forgetting.__dict__.pop("prune", None)
    edges = 0
    with manager.store._lock:
        edges = int(manager.store._conn.execute("SELECT COUNT(*) FROM memory_edges").fetchone()[0])
    archived = manager.store.count(include_archived=True) - manager.store.count()
    return {
        "total_s": round(total, 6),
        "report": report.model_dump(),
        "steps_s": steps,
        "edges_total": edges,
        "archived_total": archived,
        "rss_peak_before_kb": rss_before,
        "rss_peak_after_kb": _common.rss_peak_kb(),
        "rss_now_before_kb": rss_now_before,
        "rss_now_after_kb": _common.rss_now_kb(),
        "note": "no reasoner/reconciler (those need an LLM): steps are merge_duplicates, "
        "form_edges, rescore_importance, prune",
    }


def recall_bench(p: dict[str, Any]) -> dict[str, Any]:
    """Add memories, optionally reflect (``reflect``: false), then recall each query."""
    return _run(p, reflect_default=False)


def recall_many(p: dict[str, Any]) -> dict[str, Any]:
    """``recall_bench`` on each payload of ``haystacks`` in turn, each in its own fresh store,
    in one process (nooa's import alone takes seconds). Returns ``{"runs": [output, ...]}``."""
    return {"runs": [_run(dict(h), reflect_default=False) for h in p.get("haystacks", [])]}


def reflect_bench(p: dict[str, Any]) -> dict[str, Any]:
    """Add memories, run one reflection pass, then recall any queries given."""
    return _run(p, reflect_default=True)


if __name__ == "__main__":
    sys.exit(
        _common.main(
            "nooa-memory",
            _version,
            {"recall_bench": recall_bench, "recall_many": recall_many, "reflect_bench": reflect_bench},
        )
    )
