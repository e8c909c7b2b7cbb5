"""Progress callbacks for long work (`remember_many`, `reflect`, import).

A callback is any ``callable(stage, done, total)``: `stage` names the part of the work
(``"embed"``, ``"store"``, ``"reflect:merge"`` …), `done` how many of its units are finished and
`total` how many there are (None when unknown). It is called from the working thread, at least
once at the start (``done == 0``) and once at the end (``done == total``) of each stage. A callback
that raises stops the work the way any error would (a `remember_many` then stores nothing).

    def show(stage, done, total):
        print(f"{stage}: {done}/{total}")

    me.remember_many(items, progress=show)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

from engramdb.errors import ValidationError

#: ``progress(stage, done, total)``: see the module docstring.
Progress: TypeAlias = Callable[[str, int, int | None], None]


def check_progress(progress: object) -> Progress | None:
    """`progress` itself when it is None or callable, else `ValidationError` (checked before any work starts)."""
    if progress is not None and not callable(progress):
        raise ValidationError(f"progress must be a callable(stage, done, total) or None, got {type(progress).__name__}")
    return progress


def report(progress: Progress | None, stage: str, done: int, total: int | None) -> None:
    """Call `progress` when there is one."""
    if progress is not None:
        progress(stage, done, total)


__all__ = ["Progress", "check_progress", "report"]
