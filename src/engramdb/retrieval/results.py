"""What a recall returns, and what `explain()` returns: typed, frozen records."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, overload

from engramdb.memories.model import Components, Memory
from engramdb.retrieval.budget import TokenCounter, approx_tokens
from engramdb.retrieval.evidence import EvidenceItem, render_evidence

Source = Literal["lexical", "vector", "both", "spread"]


@dataclass(frozen=True, slots=True)
class Hit:
    """One recalled memory with its final score, rank (1-based) and score components."""

    memory: Memory
    score: float
    rank: int
    components: Components
    source: Source
    notes: tuple[str, ...] = ()  # e.g. "contradicted by …"
    #: how well the memory answers the query on an absolute scale in [0, 1], comparable across
    #: queries (unlike `score`, whose parts are normalised per recall): the larger of the share
    #: of the query's words it holds and its cosine above what unrelated texts reach
    relevance: float = 0.0


def _label(m: Memory) -> str:
    when = dt.datetime.fromtimestamp(m.created_at, dt.UTC).strftime("%Y-%m-%d")
    owner = "shared" if m.owner == "" else f"private to {m.owner}"
    return f"memory {m.id} · {m.type.value} · {when} · {owner}"


def evidence_items(hits: Sequence[Hit]) -> list[EvidenceItem]:
    items = []
    for h in hits:
        m = h.memory
        fields: list[tuple[str, str]] = []
        if m.title:
            fields.append(("title", m.title))
        if m.tags:
            fields.append(("tags", ", ".join(m.tags)))
        fields.extend(("note", n) for n in h.notes)
        items.append(EvidenceItem(_label(m), m.content, tuple(fields)))
    return items


@dataclass(frozen=True, slots=True)
class Recall(Sequence[Hit]):
    """The hits of one recall, best first, and the id under which it was logged.

    `recall_id` is None for a dry run (`explain(query)`), which logs nothing. `note` says why
    there are fewer hits than the `k` asked for (None when there are `k`): how many memories were
    candidates at all, and how many `min_relevance` left out.
    """

    query: str
    hits: tuple[Hit, ...]
    recall_id: str | None
    ts: float
    note: str | None = None

    @overload
    def __getitem__(self, i: int) -> Hit: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Hit]: ...
    def __getitem__(self, i: int | slice) -> Hit | Sequence[Hit]:
        return self.hits[i]

    def __len__(self) -> int:
        return len(self.hits)

    def __iter__(self) -> Iterator[Hit]:
        return iter(self.hits)

    @property
    def memories(self) -> list[Memory]:
        return [h.memory for h in self.hits]

    def as_evidence(self, token_budget: int = 512, token_counter: TokenCounter = approx_tokens) -> str:
        """The hits as untrusted evidence within `token_budget` (same wrapper as the SQL retriever)."""
        return render_evidence(evidence_items(self.hits), token_budget, token_counter)


@dataclass(frozen=True, slots=True)
class Explained:
    """Why one memory ranked where it did — or, below the cut, why it did not make it."""

    memory_id: str
    title: str
    rank: int
    score: float
    components: Components
    source: Source
    selected: bool
    relevance: float = 0.0  # see `Hit.relevance`


@dataclass(frozen=True, slots=True)
class Explanation:
    """A recall taken apart: each hit's components and the best candidates just below the cut.

    `recall_id` is None for a dry run. `weights` are the constants the score used. `origins`
    names, for each memory shown that an extractor made or changed, its decisions (extractor
    name — model and prompt version —, verdict and the ids it came from, oldest first), each
    ending with the job it was part of (`engramdb.llm.worker`; undone by ``revert_extraction``).
    """

    recall_id: str | None
    query: str
    reader: str
    ts: float
    k: int
    hops: int
    hits: tuple[Explained, ...]
    near_misses: tuple[Explained, ...]
    weights: dict[str, float] = field(default_factory=dict)
    origins: dict[str, tuple[str, ...]] = field(default_factory=dict)
