"""The benchmarks' results files say where they came from, and runs never overwrite committed results."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks"
SCRIPTS = sorted(BENCH.glob("*.py"))


def _provenance() -> ModuleType:
    spec = importlib.util.spec_from_file_location("provenance", BENCH / "provenance.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("provenance_under_test", module)
    spec.loader.exec_module(module)
    return module


def test_no_benchmark_defaults_to_the_committed_results() -> None:
    offenders = []
    for path in SCRIPTS:
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"default\s*=\s*[^,)]*\"results\"", text):
            offenders.append(f"{path.name}: {m.group(0)}")
    assert not offenders, "benchmarks must default to benchmarks/out/ (provenance.OUT): " + "; ".join(offenders)


def test_no_machine_paths_in_benchmark_code() -> None:
    offenders = []
    for path in [*SCRIPTS, *sorted((BENCH / "peers").glob("*"))]:
        if path.is_file():
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if re.search(r"[\"'](/work|/root|/home)/", line):
                    offenders.append(f"{path.name}:{n}")
    assert not offenders, offenders


def test_every_results_writer_stamps_provenance() -> None:
    unstamped = []
    for path in SCRIPTS:
        text = path.read_text(encoding="utf-8")
        if path.name == "provenance.py":
            continue
        writes_results = re.search(r"\.(json|md)[\"']\)?\.write_text|args\.out\.write_text", text)
        if writes_results and "provenance." not in text:
            unstamped.append(path.name)
    assert not unstamped, unstamped


def test_the_untracked_output_folder_is_ignored() -> None:
    assert "benchmarks/out/" in (REPO / ".gitignore").read_text(encoding="utf-8").splitlines()


def test_provenance_block(tmp_path: Path) -> None:
    prov = _provenance()
    block = prov.provenance(
        ["benchmarks/bench_x.py", f"--data={REPO / 'benchmarks' / 'x.json'}", "/elsewhere/far/away.json"]
    )
    assert len(block["commit"]) in (7, 40) or block["commit"] == "unknown"
    assert block["tree"] in ("clean", "dirty")
    assert block["machine"]["cores"] >= 1
    assert "--data=benchmarks/x.json" in block["command"]
    assert "/elsewhere" not in block["command"]  # a machine path outside the repository keeps only its name
    out = prov.write_json(tmp_path / "r.json", {"rows": [1]}, block)
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["rows"] == [1]
    assert data["provenance"]["load_after"] is None or len(data["provenance"]["load_after"]) == 3
    assert data["provenance"]["ended_utc"] >= data["provenance"]["started_utc"]
    assert prov.out_path("a.json", tmp_path / "folder") == tmp_path / "folder" / "a.json"
    assert prov.out_path("a.json", tmp_path / "file.json") == tmp_path / "file.json"
