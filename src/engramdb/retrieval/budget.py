"""Token budgets: counting and packing, as pure functions.

A `TokenCounter` is any callable ``str -> int`` (for example ``lambda s: len(enc.encode(s))`` with
tiktoken). Counters need not be additive — the count of a concatenation can differ from the sum of
its parts — so `pack` always measures the assembled text, and the budget is never exceeded.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypeAlias

from engramdb.errors import ValidationError

TokenCounter: TypeAlias = Callable[[str], int]


def approx_tokens(text: str) -> int:
    """About four characters a token, rounded up: ``approx_tokens("abcde") == 2``."""
    if not isinstance(text, str):
        raise ValidationError(f"approx_tokens counts a str, got {type(text).__name__}")
    return math.ceil(len(text) / 4)


def truncate_to(text: str, budget: int, count: TokenCounter, *, ellipsis: str = "…") -> str:
    """The longest prefix of `text` (plus `ellipsis` if cut) whose count is ≤ `budget`; may be ``""``."""
    if count(text) <= budget:
        return text
    lo, hi = 0, len(text)
    # Binary search on characters: counters are monotone in practice, and the result is re-checked.
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(text[:mid] + ellipsis) <= budget:
            lo = mid
        else:
            hi = mid - 1
    cut = text[:lo].rstrip() + ellipsis if lo > 0 else ""
    return cut if cut and count(cut) <= budget else ""


def pack(
    items: Sequence[str],
    budget: int,
    count: TokenCounter = approx_tokens,
    *,
    header: str = "",
    footer: str = "",
    sep: str = "\n",
    truncate_first: bool = True,
) -> tuple[str, int]:
    """Join, in order, every item of `items` that still fits, between `header` and `footer`.

    An item too large for what is left is skipped and smaller later ones may still go in, so the
    budget is filled; the order of the items used is kept.

    Returns ``(text, n_items_used)``. The whole text counts ≤ `budget`. If not even the first item
    fits and `truncate_first` is set, a truncated first item is used. If the frame alone does not
    fit, or no item fits, the result is ``("", 0)``.
    """
    if budget <= 0 or not items:
        return "", 0

    def assemble(parts: Sequence[str]) -> str:
        return sep.join([header, *parts, footer]) if header or footer else sep.join(parts)

    if count(assemble([])) > budget:
        return "", 0
    used: list[str] = []
    for item in items:
        candidate = assemble([*used, item])
        if count(candidate) <= budget:
            used.append(item)
            continue
        if not used and truncate_first:
            frame = count(assemble([""]))
            cut = truncate_to(item, max(budget - frame, 0), count)
            # Shrink until the assembled text fits: the frame and the item may not count additively.
            while cut and count(assemble([cut])) > budget:
                cut = truncate_to(cut[:-2], max(budget - frame, 0), count)
            if cut:
                used.append(cut)
    if not used:
        return "", 0
    return assemble(used), len(used)
