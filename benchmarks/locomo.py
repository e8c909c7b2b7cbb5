"""LoCoMo, loaded once for every benchmark that uses it, and its retrieval metrics.

LoCoMo (Maharana et al., ACL 2024, https://github.com/snap-research/locomo, CC BY-NC 4.0) is ten
long two-person conversations (19-32 sessions each, 5,882 dialogue turns) with 1,986 questions
whose ``evidence`` names the turns (``dia_id`` ``D<session>:<turn>``) that hold the answer.

Each conversation is its own haystack: every dialogue turn is a document ``"speaker: text"``
timestamped at its session's date (``session_<n>_date_time``, e.g. ``"1:56 pm on 8 May, 2023"``,
read as UTC) plus ``TURN_SPACING`` seconds per turn, so turns keep their order; every question with
usable evidence is a query. LoCoMo gives a time per session only, so the spacing is the harness's
choice: 30 s, a prior for turns of one chat sitting (short messages, typed in turn), not a figure
fitted to anything. ``load_locomo(spacing=...)`` changes it; bench_locomo.py ``--spacings 1,30,120``
shows what depends on it (no scorer default may be tuned to it).

The split (``SPLITS``), fixed once for issue #15: the ten sample ids sorted, shuffled by
``random.Random(15)`` (the issue's number, chosen before any result was seen), then the first four
are train, the next three validation, the last three test. Train fits constants, validation chooses
among fits and levers, and test is read once, for the report. Every session before issue #15 saw
all ten conversations (the defaults then were chosen on conversations 7-9), so "test" means
untouched by this method from now on, not never seen.

Malformed evidence, as released, is normalised here and only here:

- a string naming several ids (``"D8:6; D9:17"``, ``"D9:1 D4:4 D4:6"``) is split on ``;`` and white
  space;
- ``"D:11:26"`` (a stray colon) is read as ``D11:26`` and ``"D30:05"`` (a leading zero) as ``D30:5``;
- an id naming no turn (``"D"``; ``D10:19`` in conv-42 and ``D4:36`` in conv-47, past the end of
  their session) is dropped;
- a question left with no evidence is not a query (4 of category 3).

Metrics (LoCoMo's definition of retrieval recall): recall@k = |gold ∩ top k| / |gold| for one
question, averaged over questions; session recall@k = the share of the question's evidence sessions
that have at least one turn in the top k, averaged likewise.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

#: the shared copy beside the repository (`shared/data/locomo/`); pass another with --data
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo10.json"
SOURCE = "https://github.com/snap-research/locomo (data/locomo10.json, CC BY-NC 4.0)"
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
TURN_SPACING = 30.0  # seconds between consecutive turns of one session (the data gives no times; a prior)

#: sorted(sample ids), random.Random(15).shuffle, then 4 / 3 / 3 (see the module docstring)
SPLITS: dict[str, tuple[str, ...]] = {
    "train": ("conv-44", "conv-50", "conv-41", "conv-43"),
    "validation": ("conv-48", "conv-47", "conv-30"),
    "test": ("conv-49", "conv-26", "conv-42"),
}

# One evidence id: "D<session>:<turn>", tolerating the released typos "D:11:26" and "D30:05".
_EVIDENCE = re.compile(r"^D:?(\d+):0*(\d+)$")
_SESSION_TIME = "%I:%M %p on %d %B, %Y"


@dataclass(frozen=True, slots=True)
class Turn:
    """One dialogue turn: a document of the haystack."""

    position: int  # 0-based index in the conversation
    dia_id: str  # "D<session>:<turn>"
    session: int
    speaker: str
    text: str
    ts: float  # epoch seconds (UTC): the session's date + TURN_SPACING per turn
    caption: str = ""  # the BLIP caption of the image the speaker shared in this turn, if any

    @property
    def content(self) -> str:
        shared = f" [shares {self.caption}]" if self.caption else ""
        return f"{self.speaker}: {self.text}{shared}"


@dataclass(frozen=True, slots=True)
class Question:
    """One query with the positions of its gold turns (normalised, never empty)."""

    question: str
    category: int
    gold: frozenset[int]
    gold_sessions: frozenset[int]


@dataclass(frozen=True, slots=True)
class Conversation:
    sample_id: str
    speakers: tuple[str, str]
    turns: tuple[Turn, ...]
    questions: tuple[Question, ...]
    session_times: dict[int, float]

    @property
    def last_ts(self) -> float:
        return max(t.ts for t in self.turns)


def missing_data_message(path: Path) -> str:
    return (
        f"LoCoMo data not found at {path}. Get data/locomo10.json from {SOURCE} "
        "and pass its path with --data (it is not redistributed with engramdb: the license is non-commercial)."
    )


def session_time(text: str) -> float:
    """``"1:56 pm on 8 May, 2023"`` as epoch seconds, read as UTC."""
    when = dt.datetime.strptime(text.strip(), _SESSION_TIME)
    return when.replace(tzinfo=dt.UTC).timestamp()


def evidence_ids(entry: str) -> list[str]:
    """The well-formed ``D<s>:<t>`` ids in one evidence string (see the module docstring)."""
    out = []
    for part in re.split(r"[;\s]+", entry.strip()):
        match = _EVIDENCE.match(part)
        if match:
            out.append(f"D{int(match.group(1))}:{int(match.group(2))}")
    return out


def load_locomo(
    path: Path = DEFAULT_DATA, categories: Iterable[int] = (1, 2, 3, 4, 5), *, spacing: float = TURN_SPACING
) -> list[Conversation]:
    """Every conversation of the file, with the questions of `categories` that have usable evidence;
    turn i of a session is said `spacing` seconds × i after the session's time."""
    if not path.exists():
        raise FileNotFoundError(missing_data_message(path))
    wanted = frozenset(categories)
    conversations: list[Conversation] = []
    for sample in json.loads(path.read_text(encoding="utf-8")):
        conv = sample["conversation"]
        turns: list[Turn] = []
        times: dict[int, float] = {}
        session = 1
        while f"session_{session}" in conv:
            start = session_time(conv[f"session_{session}_date_time"])
            times[session] = start
            for i, t in enumerate(conv[f"session_{session}"]):
                ts = start + i * spacing
                caption = t.get("blip_caption", "")
                turns.append(Turn(len(turns), t["dia_id"], session, t["speaker"], t["text"], ts, caption))
            session += 1
        position = {t.dia_id: t.position for t in turns}
        questions: list[Question] = []
        for qa in sample["qa"]:
            if qa["category"] not in wanted:
                continue
            gold = frozenset(
                position[i] for entry in qa.get("evidence", []) for i in evidence_ids(entry) if i in position
            )
            if gold:
                sessions = frozenset(turns[p].session for p in gold)
                questions.append(Question(qa["question"], int(qa["category"]), gold, sessions))
        conversations.append(
            Conversation(
                sample["sample_id"], (conv["speaker_a"], conv["speaker_b"]), tuple(turns), tuple(questions), times
            )
        )
    return conversations


def split(conversations: Sequence[Conversation], name: str) -> list[Conversation]:
    """The conversations of split `name` (``SPLITS``), in the split's order."""
    if name not in SPLITS:
        raise ValueError(f"no split {name!r}; there are {', '.join(SPLITS)}")
    by_id = {c.sample_id: c for c in conversations}
    return [by_id[i] for i in SPLITS[name] if i in by_id]


def select(conversations: Sequence[Conversation], spec: str | None) -> list[Conversation]:
    """Pick conversations by split name (``"train"``, ``"validation"``, ``"test"``, comma-separated),
    by sample id (``"conv-26,conv-30"``) or by index: ``"0-6"``, ``"7,8,9"``, ``"0-2,5"`` (None or ``"all"``: every one)."""
    if spec is None or spec == "all":
        return list(conversations)
    names = [p.strip() for p in spec.split(",")]
    if all(n in SPLITS for n in names):
        return [c for n in names for c in split(conversations, n)]
    by_id = {c.sample_id: c for c in conversations}
    if all(n in by_id for n in names):  # sample ids: "conv-26,conv-30"
        return [by_id[n] for n in dict.fromkeys(names)]
    picked: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.strip().partition("-")
        picked += range(int(lo), int(hi or lo) + 1)
    bad = [i for i in picked if not 0 <= i < len(conversations)]
    if bad:
        raise ValueError(f"no conversation {bad[0]}; there are {len(conversations)} (0-{len(conversations) - 1})")
    return [conversations[i] for i in dict.fromkeys(picked)]


# -- metrics ------------------------------------------------------------------------------------


def recall_at(ranked: Sequence[int], gold: frozenset[int], k: int) -> float:
    """|gold ∩ top k| / |gold| (LoCoMo's retrieval recall)."""
    return len(gold.intersection(ranked[:k])) / len(gold)


def session_recall_at(ranked: Sequence[int], q: Question, turns: Sequence[Turn], k: int = 5) -> float:
    """The share of the question's evidence sessions with a turn in the top k."""
    hit = {turns[p].session for p in ranked[:k]}
    return len(q.gold_sessions & hit) / len(q.gold_sessions)


KS = (1, 5, 10, 20)


def score_question(ranked: Sequence[int], q: Question, turns: Sequence[Turn]) -> dict[str, float]:
    out = {f"r@{k}": recall_at(ranked, q.gold, k) for k in KS}
    out["session_r@5"] = session_recall_at(ranked, q, turns, 5)
    return out


def summarise(rows: Sequence[tuple[int, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Mean metrics over (category, per-question metrics) rows: "cat1-4", "all", and "cat<n>" per category."""

    def mean(sel: list[dict[str, float]]) -> dict[str, float]:
        if not sel:
            return {}
        return {key: sum(r[key] for r in sel) / len(sel) for key in sel[0]} | {"n": float(len(sel))}

    out = {
        "cat1-4": mean([m for c, m in rows if c in (1, 2, 3, 4)]),
        "all": mean([m for _, m in rows]),
    }
    for cat in sorted({c for c, _ in rows}):
        out[f"cat{cat}"] = mean([m for c, m in rows if c == cat])
    return out
