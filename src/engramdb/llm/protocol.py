"""What an extractor is asked and may answer, and the check that rejects a bad answer whole.

An `Extractor` is given the turns of one conversation (episodes, oldest first, none above the
worker's `llm_cap`) and the facts already known that are most related to them (same owner,
valid now, none above `llm_cap`), and answers with `Decision` s:

- ``add``     a new fact, stated by `sources` (ids among the turns);
- ``update``  the known fact `target` no longer holds and `text` replaces it: the new fact is
              stored and the old one *superseded* (its validity closed when the source turn was
              said, a ``refines`` edge from the new one), never overwritten;
- ``delete``  the known fact `target` stopped being true (validity closed; nothing is erased);
- ``noop``    the turns restate `target`, or say nothing worth keeping (`target` may be None).

`check_decisions` refuses the whole answer — nothing of it is applied — if any decision names
an id that was not in its input, a target twice, a known fact as a source, or has an empty or
over-long text. Every id in an answer is one the extractor was given.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from engramdb.memories.model import Memory

__all__ = ["OPS", "Decision", "Extractor", "RejectedAnswer", "check_decisions"]

#: the operations an extractor may decide
OPS = ("add", "update", "delete", "noop")
#: the most decisions taken from one answer
MAX_DECISIONS = 64


class RejectedAnswer(ValueError):
    """An extractor's answer broke a rule of `check_decisions`; none of it was applied."""


@dataclass(frozen=True, slots=True)
class Decision:
    """One decision of an extractor (see the module docstring); ids are memory ids."""

    op: str
    text: str | None = None
    sources: tuple[str, ...] = ()
    target: str | None = None


@runtime_checkable
class Extractor(Protocol):
    """Turns conversation turns into decisions about facts (usually an LLM).

    Invariants: `extract` gets 1 or more turns and 0 or more known facts, none above the
    worker's `llm_cap`, and returns decisions over their ids only; it must not write memories.
    A raised exception (an `engramdb.errors.LLMError` for a model that failed) leaves the job
    queued for a retry.
    """

    @property
    def name(self) -> str:
        """Identifies the extractor (model and prompt version) on the access stream."""
        ...

    def extract(self, turns: Sequence[Memory], known: Sequence[Memory]) -> Sequence[Decision]:
        """The decisions for `turns` given `known`; see the class invariants."""
        ...


def check_decisions(decisions: object, turns: Sequence[str], known: Sequence[str], *, max_chars: int) -> list[Decision]:
    """`decisions` as a list if every rule holds, else `RejectedAnswer` saying which broke."""
    if isinstance(decisions, (str, bytes)) or not isinstance(decisions, Sequence):
        raise RejectedAnswer(f"an extractor returns a list of Decision, got {type(decisions).__name__}")
    if len(decisions) > MAX_DECISIONS:
        raise RejectedAnswer(f"{len(decisions)} decisions in one answer; at most {MAX_DECISIONS}")
    turn_ids, known_ids = set(turns), set(known)
    targets: set[str] = set()
    out: list[Decision] = []
    for i, d in enumerate(decisions):
        at = f"decision {i}"
        if not isinstance(d, Decision):
            raise RejectedAnswer(f"{at} is a {type(d).__name__}, not a Decision")
        if d.op not in OPS:
            raise RejectedAnswer(f"{at} has the unknown op {d.op!r}; ops are {', '.join(OPS)}")
        for s in d.sources:
            if s not in turn_ids:
                raise RejectedAnswer(f"{at} names the source {s!r}, which is not among the turns it was given")
        if d.op in ("add", "update", "delete") and not d.sources:
            raise RejectedAnswer(f"{at} ({d.op}) names no source turn")
        if d.op in ("add", "update"):
            if not isinstance(d.text, str) or not d.text.strip():
                raise RejectedAnswer(f"{at} ({d.op}) has no fact text")
            if len(d.text) > max_chars:
                raise RejectedAnswer(f"{at} ({d.op}) has a fact of {len(d.text):,} characters; at most {max_chars:,}")
        if d.op == "add" and d.target is not None:
            raise RejectedAnswer(f"{at} (add) names a target; an add makes a new fact")
        if d.op in ("update", "delete") and d.target is None:
            raise RejectedAnswer(f"{at} ({d.op}) names no known fact to {d.op}")
        if d.target is not None:
            if d.target not in known_ids:
                raise RejectedAnswer(
                    f"{at} names the fact {d.target!r}, which is not among the known facts it was given"
                )
            if d.target in targets:
                raise RejectedAnswer(f"{at} names the fact {d.target!r} a second time")
            targets.add(d.target)
        out.append(d)
    return out
