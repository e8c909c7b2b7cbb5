"""The README's Python examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)


def test_readme_has_exactly_two_setup_commands() -> None:
    text = README.read_text(encoding="utf-8")
    setup = text.split("## Set up", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```sh\n(.*?)```", setup, re.DOTALL)
    assert len(commands) == 2
    assert "engramdb.demo" in commands[0] and "pytest" in commands[1]


def test_ci_runs_the_readme_test_command() -> None:
    text = README.read_text(encoding="utf-8")
    setup = text.split("## Set up", 1)[1]
    test_command = re.findall(r"```sh\n(.*?)```", setup, re.DOTALL)[1].strip()
    # CI runs each step of the README's chain as a command of its own, in order (a failing step
    # of an `a && b` chain would not stop a `set -e` script: tests/unit/test_ci_script.py).
    lines = [line.strip() for line in (README.parent / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    steps = [step.strip() for step in test_command.split("&&")]
    found = [next(i for i, line in enumerate(lines) if line in (step, f"run_tests {step}")) for step in steps]
    assert found == sorted(found)


def test_readme_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "engramdb.toml").write_text('[memory]\ndb_path = ".engramdb/memory.db"\n')
    namespace: dict[str, object] = {}
    for block in _blocks():
        exec(compile(block, str(README), "exec"), namespace)
    engine = namespace.get("engine")
    if engine is not None:
        engine.close()  # type: ignore[attr-defined]
