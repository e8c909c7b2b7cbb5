"""Comments and docstrings carry reasons, not timings: a figure measured once rots as the code
moves on (the benchmarks and `benchmarks/results/` carry the figures, with their provenance)."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "engramdb"

#: a duration or a speed-up: "0.4 ms", "~35 ms", "12 µs", "2.4×", "3x faster", "1,000/s"
TIMING = re.compile(
    r"\d(?:[\d.,]*\d)?\s?(?:ms|µs|us|ns)\b|\d(?:[\d.]*\d)?\s?×|\d\s?x\s(?:faster|slower)|\d(?:[\d,]*\d)?\s?/\s?s\b"
)


def _texts(path: Path) -> list[tuple[int, str]]:
    source = path.read_text(encoding="utf-8")
    out = [
        (tok.start[0], tok.string)
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc and node.body:
                out.append((node.body[0].lineno, doc))
    return out


def test_the_pattern_finds_what_it_must() -> None:
    for text in ("took 0.4 ms", "~35 ms of the batch", "12 µs a memory", "2.4× faster", "3x faster", "1,000/s"):
        assert TIMING.search(text), text
    for text in ("2**31 - 1 milliseconds", "10k memories", "4,096 centroids", "1M memories", "a 64-bit id"):
        assert not TIMING.search(text), text


def test_no_comment_or_docstring_under_src_carries_a_timing() -> None:
    found = [
        f"{path.relative_to(SRC.parent)}:{line}: {match.group(0)!r}"
        for path in sorted(SRC.rglob("*.py"))
        for line, text in _texts(path)
        for match in TIMING.finditer(text)
    ]
    assert not found, "timings in comments or docstrings (cite a benchmark instead):\n" + "\n".join(found)
