"""Where a benchmark result came from, and where it goes.

Every results file the benchmarks write carries a ``provenance`` block: the commit, whether the tree
was clean (and which files were not), the machine, the load before and after, the command line (paths
inside the repository written relative to it, so no machine path lands in a committed file), the
interpreter and library versions, and the UTC start and end time. A result from a dirty tree says so.

Output goes to ``benchmarks/out/`` (untracked; ``ENGRAMDB_BENCH_OUT`` moves it) unless a script is
given ``--out``. The committed figures in ``benchmarks/results/`` change only when someone passes
``--out benchmarks/results/...`` on purpose, so ``make bench`` never overwrites them.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
#: the committed results (change them only on purpose, with --out)
RESULTS = HERE / "results"
#: where runs go by default: untracked (see .gitignore)
OUT = Path(os.environ.get("ENGRAMDB_BENCH_OUT", HERE / "out"))


def _git(*cmd: str) -> str:
    try:
        done = subprocess.run(["git", *cmd], cwd=REPO, capture_output=True, text=True, check=False, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout


def relative(arg: str) -> str:
    """An argument naming a path inside the repository (or beside it), written relative to the repository."""
    if os.sep not in arg:
        return arg
    head, sep, tail = arg.partition("=")
    value = tail if sep else arg
    try:
        path = Path(value).resolve()
        rel = os.path.relpath(path, REPO)
    except (OSError, ValueError):
        return arg
    if rel.startswith(os.pardir + os.sep + os.pardir):  # two levels up: a machine path, keep only its name
        rel = f"<{path.name}>"
    return f"{head}={rel}" if sep else rel


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float | None:
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None
    return round(pages * size / 2**30, 1)


def _load() -> list[float] | None:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def _version(module: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:
        return None


def provenance(argv: list[str] | None = None) -> dict[str, Any]:
    """The provenance block of a run starting now (call `finish` on it when the run ends)."""
    dirty = [line[3:] for line in _git("status", "--porcelain").splitlines() if line.strip()]
    args = sys.argv if argv is None else argv
    return {
        "commit": _git("rev-parse", "HEAD").strip() or "unknown",
        "tree": "dirty" if dirty else "clean",
        "dirty_files": dirty[:50],
        "command": "python " + shlex.join(relative(a) for a in args),
        "machine": {
            "arch": platform.machine(),
            "cpu": _cpu_model(),
            "cores": os.cpu_count(),
            "memory_gib": _memory_gib(),
            "os": f"{platform.system()} {platform.release()}",
        },
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "versions": {
            "sqlite": sqlite3.sqlite_version,
            "numpy": _version("numpy"),
            "engramdb": _version("engramdb"),
        },
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_before": _load(),
    }


def finish(block: dict[str, Any]) -> dict[str, Any]:
    """Stamp the end of a run: the load after it and the end time."""
    block["load_after"] = _load()
    block["ended_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return block


def summary(block: dict[str, Any]) -> str:
    """One line for a printed table or a markdown report."""
    m = block["machine"]
    return (
        f"commit {block['commit'][:10]} ({block['tree']} tree); {m['arch']}, {m['cores']} cores, {block['python']}, "
        f"SQLite {block['versions']['sqlite']}; load {block.get('load_before')} → {block.get('load_after')}; "
        f"{block['started_utc']}; `{block['command']}`"
    )


def out_path(name: str, out: Path | None = None) -> Path:
    """Where to write the results file `name`: `out` (a file or a folder) if given, else `OUT/name`."""
    if out is None:
        path = OUT / name
    elif out.suffix:  # a file
        path = out
    else:
        path = out / name
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def write_json(path: Path, payload: dict[str, Any], block: dict[str, Any] | None = None) -> Path:
    """Write `payload` with its provenance (`block`, finished now; a fresh one if not given)."""
    block = finish(block if block is not None else provenance())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"provenance": block, **payload}, indent=2) + "\n", encoding="utf-8")
    return path


#: the provenance of this process's run, begun when a benchmark script imports this module
RUN = provenance()


def stamp(payload: dict[str, Any]) -> dict[str, Any]:
    """`payload` with this run's provenance in front (finished now)."""
    return {"provenance": finish(RUN), **payload}
