"""Implicit episodes: memories remembered one right after the other are neighbours for spreading.

An agent that writes a dialogue, a task or a meeting down one memory at a time lays it down in
order, but rarely links each memory to the one before (``link(a, b, "precedes")``). Recall's
spreading activation can only follow edges, so without links the turn next to a strong match —
often the answer — gets nothing from it. Here two memories that the store holds one after the
other (adjacent keys, or adjacent slots in a cache of one tenant: the order they were written in) and whose ``created_at`` lie within
``ScoringConfig.sequence_window`` seconds of each other count as linked ``precedes`` (weight 1, not
causal) for spreading. The window is a prior, not a fit: one sitting (an hour) lays down an
episode; memories a day apart are not one. Two memories made at the very same instant (one
`remember_many` call without event times, a bulk import, a fixed test clock) carry no order, so
they are no neighbours — the rule temporal context follows too (`scoring.temporal_context`). Visibility comes first, as for real edges: a neighbour
the reader cannot see is never reached, and `LexicalChannel.created_of` answers only for visible keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engramdb.memories.model import Visibility
    from engramdb.retrieval.lexical_channel import LexicalChannel
    from engramdb.retrieval.server_channels import ServerLexical


def sequence_neighbours(
    lexical: LexicalChannel | ServerLexical,
    nodes: Sequence[int],
    vis: Visibility,
    window: float,
    types: frozenset[str] | None = None,
) -> dict[int, list[tuple[int, bool, float]]]:
    """{node: [(adjacent key, causal=False, weight 1.0)]} for the keys next to each of `nodes`
    that `vis` shows (and of `types`) and that were made within `window` seconds of the node (not at
    the same instant)."""
    if window <= 0 or not nodes:
        return {}
    beside = lexical.beside(nodes)
    wanted = sorted({k for n, pair in beside.items() for k in (n, *pair) if k is not None})
    created = lexical.created_of(wanted, vis, types=types)
    out: dict[int, list[tuple[int, bool, float]]] = {}
    for n in nodes:
        t = created.get(n)
        if t is None:
            continue
        near = [
            (m, False, 1.0) for m in beside[n] if m is not None and m in created and 0 < abs(created[m] - t) <= window
        ]
        if near:
            out[n] = near
    return out
