"""Run the peer memory engines (naqsha, nooa-memory) from the project's own venv.

Stdlib only. The peers live in their own virtualenvs made by
``benchmarks/peers/setup.sh`` (``<repo>/.bench/venvs/{naqsha,nooa}``) and are
driven through the runner scripts beside this file, which speak JSON::

    <venv python> <peer>_runner.py <command> <input.json> <output.json>

Example::

    from benchmarks.peers.client import peer_python, run_peer

    if peer_python("nooa") is not None:
        out = run_peer("nooa", "recall_bench", {"data_dir": d, "memories": [...],
                                                "queries": [...]}, timeout=600)
        print(out["timings"]["recall"]["p50_ms"], out["recall_results"][0]["ranked_ids"])

The input/output fields of each command are documented in docs/peers.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

PEERS_DIR = Path(__file__).resolve().parent
REPO_ROOT = PEERS_DIR.parent.parent

#: peer name -> (venv directory name, runner script, commands it accepts)
PEERS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "naqsha": ("naqsha", "naqsha_runner.py", ("sql_bench",)),
    "nooa": ("nooa", "nooa_runner.py", ("recall_bench", "recall_many", "reflect_bench")),
}


class PeerError(RuntimeError):
    """A peer runner could not be started, failed, timed out or wrote bad output."""


def bench_dir() -> Path:
    """Directory holding ``venvs/`` (``$ENGRAMDB_BENCH_DIR`` or ``<repo>/.bench``)."""
    env = os.environ.get("ENGRAMDB_BENCH_DIR")
    return Path(env) if env else REPO_ROOT / ".bench"


def peer_python_reason(name: str) -> tuple[Path | None, str]:
    """Like :func:`peer_python`, but also returns why the peer is unavailable.

    Returns ``(path, "")`` when the venv interpreter exists, else
    ``(None, reason)``.
    """
    if name not in PEERS:
        return None, f"unknown peer {name!r}; known: {', '.join(sorted(PEERS))}"
    venv = bench_dir() / "venvs" / PEERS[name][0]
    py = venv / "bin" / "python"
    if not py.exists():
        return None, (f"peer {name!r} is not set up ({py} missing); run: bash {PEERS_DIR / 'setup.sh'}")
    return py, ""


def peer_python(name: str) -> Path | None:
    """The Python interpreter of peer ``name``'s venv, or None if setup has not run.

    ``name`` is ``"naqsha"`` or ``"nooa"``. Use :func:`peer_python_reason` to
    get the reason when this returns None.
    """
    return peer_python_reason(name)[0]


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def run_peer(
    name: str,
    command: str,
    payload: dict[str, Any],
    timeout: float,
    *,
    keep_files: bool = False,
) -> dict[str, Any]:
    """Run ``command`` of peer ``name`` on ``payload`` and return its parsed output.

    The payload is written to a temporary JSON file, the peer's runner is run
    in the peer's venv with a ``timeout`` in seconds, and the output JSON is
    returned (``ok`` is True in it). Raises :class:`PeerError` with the tail
    of the runner's stderr when the peer is not set up, the runner exits
    non-zero, times out, or writes no or invalid output. ``keep_files`` leaves
    the temporary input/output files in place (their directory is then in
    ``result["_io_dir"]``).
    """
    py, reason = peer_python_reason(name)
    if py is None:
        raise PeerError(reason)
    _venv, script, commands = PEERS[name]
    if command not in commands:
        raise PeerError(f"peer {name!r} has no command {command!r}; known: {', '.join(commands)}")
    io_dir = Path(tempfile.mkdtemp(prefix=f"peer-{name}-"))
    in_path = io_dir / "input.json"
    out_path = io_dir / "output.json"
    try:
        with open(in_path, "w", encoding="utf-8") as fh:
            json.dump(payload, fh)
        env = dict(os.environ)
        env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        env.pop("PYTHONPATH", None)  # keep the project's path out of the peer venv
        argv = [str(py), str(PEERS_DIR / script), command, str(in_path), str(out_path)]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, check=False)
        except subprocess.TimeoutExpired as exc:
            err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
            raise PeerError(f"{name} {command} timed out after {timeout:g}s; stderr tail:\n{_tail(err)}") from None
        result: dict[str, Any] | None = None
        if out_path.exists():
            try:
                with open(out_path, encoding="utf-8") as fh:
                    result = json.load(fh)
            except ValueError as exc:
                raise PeerError(f"{name} {command}: unreadable output JSON ({exc})") from None
        if proc.returncode != 0 or result is None or not result.get("ok"):
            detail = (result or {}).get("error") or "no output written"
            raise PeerError(
                f"{name} {command} failed (exit {proc.returncode}): {detail}\nstderr tail:\n{_tail(proc.stderr)}"
            )
        if keep_files:
            result["_io_dir"] = str(io_dir)
        return result
    finally:
        if not keep_files:
            for p in (in_path, out_path):
                p.unlink(missing_ok=True)
            try:
                io_dir.rmdir()
            except OSError:
                pass


__all__ = ["PEERS", "PeerError", "bench_dir", "peer_python", "peer_python_reason", "run_peer"]
