"""The parts of reflection that are not the run itself: its steps, configuration, model protocols,
reports, and small helpers (see `engramdb.memories.reflection`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeAlias, runtime_checkable

from engramdb.errors import ConfigError, ValidationError
from engramdb.memories.model import Confidentiality, Memory, check_many
from engramdb.memories.text import pack_times, unpack_times

#: The steps in the order a run takes them.
STEPS: tuple[str, ...] = ("merge", "reconcile", "link", "rescore", "abstract", "prune")

#: Something to ask "stop now?" between items: a ``threading.Event`` or a callable.
StopSignal: TypeAlias = "threading.Event | Callable[[], bool]"

_INTERRUPTED = "interrupted before this step"


@dataclass(frozen=True, slots=True)
class ReflectionConfig:
    """Every constant of a reflection run. Defaults are nooa-memory's where it has one."""

    merge_threshold: float = 0.95  # cosine at or above which two memories are near-duplicates
    #: merge only when the two make the same statement (`same_statement`: the same words, numbers
    #: and order, case, punctuation, articles and contractions aside) about the same entities: a
    #: merge must never archive a fact. False merges every pair above merge_threshold, keeping the
    #: older: that can archive a correction, and is for stores whose writers never restate.
    merge_requires_containment: bool = True
    #: cosine from which two memories are neighbours; near-duplicates the merge left apart are
    #: linked too
    link_threshold: float = 0.80
    max_new_edges: int = 5  # new related edges touching any one memory, per run
    reconcile_threshold: float = 0.6  # cosine from which memories are clustered for the reconciler
    reconcile_max_cluster: int = 6
    max_reconcile_clusters: int = 10  # reconciler calls per run (an LLM cost ceiling)
    gist_min_episodes: int = 3
    gist_max_episodes: int = 8
    max_gists: int = 10  # reasoner calls per run (an LLM cost ceiling)
    #: memories above this level are never sent to the reconciler or the reasoner
    llm_cap: Confidentiality = Confidentiality.RESTRICTED
    importance_weight: float = 0.5
    salience_weight: float = 3.0
    recency_weight: float = 2.0  # times σ(base level)
    importance_floor: float = 8.0  # a memory at or above it is never rescored below it
    include_shared: bool = True  # cover the tenant's shared memories as well as the agent's own
    center: bool | None = None  # None: centre the vectors when the embedder is anisotropic
    anisotropy_limit: float = 0.3  # probe mean pairwise cosine above which `center=None` centres
    candidates: int = 32  # nearest candidates kept per memory for merge and link
    block_bytes: int = 64 * 2**20  # bound of one block of the similarity matrix
    #: merge, reconcile and link compare every pair of up to this many memories (of one owner and
    #: level); above, only memories that share a cluster (k-means, `cluster_size` memories per
    #: centroid, each memory in the clusters of its `cluster_probes` nearest centroids)
    exact_pairs_up_to: int = 50_000
    cluster_size: int = 1_000
    cluster_probes: int = 2
    batch: int = 1  # memories per transaction in link and rescore: each item commits on its own
    measure: bool = True  # put the reflection rows / reads shares (`Agent.stats`) in the report

    def __post_init__(self) -> None:
        for name in ("merge_threshold", "link_threshold", "reconcile_threshold", "anisotropy_limit"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not -1 <= value <= 1:
                raise ConfigError(f"{name} must be a cosine in [-1, 1], got {value!r}")
        if self.link_threshold >= self.merge_threshold:
            raise ConfigError("link_threshold must be below merge_threshold")
        for name in (
            "max_new_edges", "reconcile_max_cluster", "max_reconcile_clusters", "gist_min_episodes",
            "gist_max_episodes", "max_gists", "candidates", "batch", "block_bytes", "exact_pairs_up_to",
            "cluster_size", "cluster_probes",
        ):  # fmt: skip
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name.startswith("max_") else 1):
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.gist_min_episodes > self.gist_max_episodes:
            raise ConfigError("gist_min_episodes must not exceed gist_max_episodes")
        floor = self.importance_floor
        if isinstance(floor, bool) or not isinstance(floor, (int, float)) or not 0 <= floor <= 10:
            raise ConfigError(f"importance_floor must be a number from 0 to 10, got {floor!r}")


@runtime_checkable
class Reconciler(Protocol):
    """Decides which memories of a cluster state a fact that a newer one has replaced (usually an LLM).

    Invariants: `reconcile` gets 2 to `reconcile_max_cluster` memories of one owner, oldest first,
    that are near each other or joined by ``contradicts`` edges, none above the run's `llm_cap`. It
    returns ``{outdated id: id of the memory that replaces it}`` over ids of that cluster (empty:
    nothing is outdated); an outdated memory is never also a replacement. Any other id, or a
    raised exception, rejects the whole verdict and changes nothing. It must not write memories.
    """

    @property
    def name(self) -> str:
        """Identifies the reconciler (model and prompt version) in the access stream."""
        ...

    def reconcile(self, cluster: Sequence[Memory]) -> Mapping[str, str]:
        """``{outdated id: replacing id}`` for the cluster; see the class invariants."""
        ...


@runtime_checkable
class Reasoner(Protocol):
    """Distils episodes into one gist (usually an LLM).

    Invariants: `abstract` gets the texts (``"title. content"``) of `gist_min_episodes` to
    `gist_max_episodes` (3–8) episodes of one owner not yet distilled, oldest first, none above the
    run's `llm_cap`, and returns the gist as plain text, or None to
    write nothing. The gist is stored as a ``reflection`` memory owned like its episodes, at least
    as confidential as the most confidential of them. It must not write memories.
    """

    @property
    def name(self) -> str:
        """Identifies the reasoner (model and prompt version) in the access stream."""
        ...

    def abstract(self, episodes: Sequence[str]) -> str | None:
        """One gist of the episodes, or None; see the class invariants."""
        ...


@dataclass(frozen=True, slots=True)
class StepReport:
    """What one step did.

    `changed` counts the step's effect: duplicates archived (merge), memories superseded
    (reconcile), edges added (link), importances changed (rescore), gists written (abstract),
    memories archived (prune). `examined` counts the items it looked at: candidate pairs,
    clusters, memories, episode batches. `calls` counts reconciler / reasoner calls, `errors` the
    calls that failed or gave an unusable answer. `skipped` says why the step did not run; `note`
    carries anything else worth knowing (vector centring, the prune path used).
    """

    step: str
    changed: int = 0
    examined: int = 0
    calls: int = 0
    errors: int = 0
    duration_s: float = 0.0
    interrupted: bool = False
    skipped: str | None = None
    note: str | None = None


@dataclass(frozen=True, slots=True)
class ReflectionReport:
    """What a run did, step by step, and what reflection output weighs afterwards.

    `reflection_rows_share` / `reflection_reads_share` are the share of the agent's visible
    memories that are reflections and their share of deliberate reads (spec 001 reports 22% of
    rows but ~1% of reads); None when `ReflectionConfig.measure` is off.
    """

    run_id: str
    agent: str
    tenant: str
    started_at: float  # engine clock
    steps: tuple[StepReport, ...]
    duration_s: float
    interrupted: bool
    stopped_in: str | None
    reflection_rows_share: float | None = None
    reflection_reads_share: float | None = None

    def step(self, name: str) -> StepReport:
        """The report of step `name`; a step that was not asked for reports ``skipped="not requested"``."""
        for s in self.steps:
            if s.step == name:
                return s
        if name not in STEPS:
            raise ValidationError(f"unknown reflection step {name!r}; steps are {', '.join(STEPS)}")
        return StepReport(name, skipped="not requested")

    @property
    def merged(self) -> int:
        return self.step("merge").changed

    @property
    def reconciled(self) -> int:
        return self.step("reconcile").changed

    @property
    def linked(self) -> int:
        return self.step("link").changed

    @property
    def rescored(self) -> int:
        return self.step("rescore").changed

    @property
    def abstracted(self) -> int:
        return self.step("abstract").changed

    @property
    def pruned(self) -> int:
        return self.step("prune").changed


# -- small helpers ---------------------------------------------------------------------------------


def _mergeable(a: Memory, b: Memory) -> bool:
    """Same owner, tenant and type; the same status and validity (a merge must not change either);
    the same session and metadata (a merge must not move a memory out of what a filter finds)."""
    return (
        a.tenant == b.tenant
        and a.owner == b.owner
        and a.type is b.type
        and a.status == b.status
        and (a.valid_from, a.valid_to) == (b.valid_from, b.valid_to)
        and a.session == b.session
        and a.metadata == b.metadata
    )


def _text(m: Memory) -> str:
    return f"{m.title}. {m.content}" if m.title else m.content


def _union(*parts: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(x for part in parts for x in part))


def _times(blob: bytes | None) -> tuple[float, ...]:
    return unpack_times(blob)


def _fold_accesses(keep: Memory, dup: Memory, ring_size: int) -> tuple[bytes, int, float | None, float | None]:
    """Both access histories as one: the newest `ring_size` exactly, the rest in the older summary."""
    times = sorted(keep.recent_accesses + dup.recent_accesses)
    count = keep.older_count + dup.older_count
    newest = [t for t in (keep.older_newest, dup.older_newest) if t is not None]
    oldest = [t for t in (keep.older_oldest, dup.older_oldest) if t is not None]
    while len(times) > ring_size:
        t = times.pop(0)
        count += 1
        newest.append(t)
        oldest.append(t)
    return pack_times(times), count, max(newest) if newest else None, min(oldest) if oldest else None


def _check_steps(steps: Sequence[str] | None) -> frozenset[str]:
    if steps is None:
        return frozenset(STEPS)
    if isinstance(steps, str):
        steps = (steps,)
    steps = tuple(check_many("steps", steps, "a step name or a list of them"))
    unknown = [s for s in steps if s not in STEPS]
    if unknown:
        raise ValidationError(
            f"unknown reflection step(s) {', '.join(map(repr, unknown))}; steps are {', '.join(STEPS)}"
        )
    return frozenset(steps)


def _stopper(signal: StopSignal | None) -> Callable[[], bool]:
    if signal is None:
        return lambda: False
    if isinstance(signal, threading.Event):
        return signal.is_set
    if callable(signal):
        return lambda: bool(signal())
    raise ValidationError("should_stop must be a threading.Event or a callable returning a bool")
