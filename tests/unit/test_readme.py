"""The Python examples of the README and of the guide pages it links run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
#: pages whose every Python block runs, each page in a namespace of its own (blocks in order)
PAGES = ("README.md", "docs/memories.md", "docs/interfaces.md")


def _blocks(page: Path = README) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.DOTALL)


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


def test_the_readme_stays_short() -> None:
    # a newcomer's page: the pitch, the two set-up commands, the quickstarts, links (issue #34)
    assert len(README.read_bytes()) <= 10_240


@pytest.mark.parametrize("page", PAGES)
def test_examples_run(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "engramdb.toml").write_text('[memory]\ndb_path = ".engramdb/memory.db"\n')
    namespace: dict[str, object] = {}
    blocks = _blocks(ROOT / page)
    assert blocks, f"{page} has no Python examples any more: drop it from PAGES"
    for block in blocks:
        exec(compile(block, page, "exec"), namespace)
    engine = namespace.get("engine")
    if engine is not None:
        engine.close()  # type: ignore[attr-defined]
