"""Helpers shared by the peer runner scripts (stdlib only).

The runners execute inside the peers' own virtualenvs (Python 3.11 for
naqsha, 3.12 for nooa-memory), so this module must not import engramdb or
anything outside the standard library.
"""

from __future__ import annotations

import json
import math
import os
import platform
import resource
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

PROTOCOL_VERSION = 1


def ru_maxrss_kb() -> int:
    """``getrusage(RUSAGE_SELF).ru_maxrss`` in KiB.

    On Linux this value survives ``execve``: a runner spawned by a parent
    holding a large data set starts with the parent's RSS as its "peak".
    """
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if sys.platform == "darwin":  # bytes there
        peak //= 1024
    return int(peak)


def rss_peak_kb() -> int:
    """Peak RSS of this process image in KiB.

    Linux: ``VmHWM`` from /proc/self/status (reset by ``execve``, so not
    inflated by the spawning parent); elsewhere ``ru_maxrss``.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return ru_maxrss_kb()


def rss_now_kb() -> int | None:
    """Current resident set size in KiB (from /proc), or None where unavailable."""
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            pages = int(fh.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") // 1024
    except (OSError, ValueError, IndexError):
        return None


def fsync_probe(directory: Path, n: int = 20) -> dict[str, Any]:
    """Time ``n`` small write+fsync calls in ``directory``.

    Commit-per-operation paths (autocommit inserts, nooa's per-memory commits)
    are bounded by this; on shared virtual disks it drifts between runs, so
    each output carries the value seen at the time.
    """
    path = Path(directory) / ".fsync_probe"
    lat: list[float] = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for _ in range(n):
            os.write(fd, b"x" * 512)
            t = time.perf_counter()
            os.fsync(fd)
            lat.append(time.perf_counter() - t)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    vals = sorted(lat)
    return {"n": n, "p50_ms": round(1000 * percentile(vals, 50), 4), "max_ms": round(1000 * vals[-1], 4)}


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default) of pre-sorted values."""
    if not sorted_values:
        return math.nan
    if len(sorted_values) == 1:
        return float(sorted_values[0])
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = math.ceil(pos)
    if lo == hi:
        return float(sorted_values[lo])
    frac = pos - lo
    return float(sorted_values[lo] * (1.0 - frac) + sorted_values[hi] * frac)


def latency_stats(seconds: Sequence[float], *, total_s: float | None = None, keep_raw: bool = False) -> dict[str, Any]:
    """Summarise per-op latencies (given in seconds) as milliseconds.

    ``total_s`` is the wall time of the whole loop when known (it includes the
    harness overhead between ops); otherwise the sum of the ops is used.
    """
    vals = sorted(seconds)
    n = len(vals)
    total = float(sum(vals)) if total_s is None else float(total_s)
    out: dict[str, Any] = {
        "n": n,
        "total_s": round(total, 6),
        "ops_per_s": round(n / total, 3) if total > 0 else None,
        "mean_ms": round(1000.0 * sum(vals) / n, 4) if n else None,
        "p50_ms": round(1000.0 * percentile(vals, 50), 4) if n else None,
        "p90_ms": round(1000.0 * percentile(vals, 90), 4) if n else None,
        "p99_ms": round(1000.0 * percentile(vals, 99), 4) if n else None,
        "max_ms": round(1000.0 * vals[-1], 4) if n else None,
    }
    if keep_raw:
        out["latencies_ms"] = [round(1000.0 * s, 4) for s in seconds]
    return out


def dir_bytes(path: Path) -> int:
    """Total size of the regular files under ``path``."""
    total = 0
    for p in path.rglob("*"):
        if p.is_file():
            total += p.stat().st_size
    return total


def norm_query(q: Any, i: int) -> dict[str, Any]:
    """Accept a query as a plain string or as {"id", "text", ...}."""
    if isinstance(q, str):
        return {"id": str(i), "text": q}
    if not isinstance(q, dict) or "text" not in q:
        raise ValueError(f"query #{i} must be a string or an object with 'text'")
    out = dict(q)
    out["id"] = str(q.get("id", i))
    return out


def _loadavg() -> list[float] | None:
    """1/5/15-minute load averages: other processes on a small machine skew timings."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def main(
    peer: str,
    version_of: Callable[[], str],
    commands: dict[str, Callable[[dict[str, Any]], dict[str, Any]]],
    argv: list[str] | None = None,
) -> int:
    """Entry point: ``runner.py <command> <input.json> <output.json>``.

    Writes the command's result dict (plus an envelope) to ``output.json``.
    On failure the output holds ``ok: false`` with the error and traceback,
    the traceback also goes to stderr, and the exit code is 2.
    """
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 3 or argv[0] not in commands:
        cmds = ", ".join(sorted(commands))
        print(f"usage: {Path(sys.argv[0]).name} <{cmds}> <input.json> <output.json>", file=sys.stderr)
        return 64
    command, in_path, out_path = argv
    envelope: dict[str, Any] = {
        "protocol": PROTOCOL_VERSION,
        "peer": peer,
        "command": command,
        "python": platform.python_version(),
        "executable": sys.executable,
    }
    envelope["loadavg_start"] = _loadavg()
    envelope["cpu_count"] = os.cpu_count()
    t0 = time.perf_counter()
    try:
        with open(in_path, encoding="utf-8") as fh:
            payload = json.load(fh)
        if not isinstance(payload, dict):
            raise ValueError("input JSON must be an object")
        envelope["peer_version"] = version_of()
        result = commands[command](payload)
        envelope.update(result)
        envelope["ok"] = True
        code = 0
    except Exception as exc:  # report every failure through the output file
        tb = traceback.format_exc()
        print(tb, file=sys.stderr)
        envelope.update({"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": tb})
        code = 2
    envelope["wall_s"] = round(time.perf_counter() - t0, 6)
    envelope["loadavg_end"] = _loadavg()
    envelope["rss_peak_kb"] = rss_peak_kb()
    envelope["ru_maxrss_kb"] = ru_maxrss_kb()
    tmp = out_path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(envelope, fh)
    os.replace(tmp, out_path)
    return code
