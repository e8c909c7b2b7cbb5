"""benchmarks/bench_longmemeval.py: dates, haystacks and metrics on a tiny made-up example (no data file)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_longmemeval as lme
from engramdb.memories.scoring import ScoringConfig


def _raw(qid: str, qtype: str, answer: list[str]) -> dict[str, Any]:
    return {
        "question_id": qid,
        "question_type": qtype,
        "question": "Where did I park the car?",
        "question_date": "2023/05/30 (Tue) 23:40",
        "answer_session_ids": answer,
        "haystack_session_ids": ["s1", "s2"],
        "haystack_dates": ["2023/05/01 (Mon) 10:00", "2023/05/02 (Tue) 09:30"],
        "haystack_sessions": [
            [
                {"role": "user", "content": "I parked the car on level 3.", "has_answer": True},
                {"role": "assistant", "content": "Noted: level 3."},
            ],
            [
                {"role": "user", "content": "  "},
                {"role": "user", "content": "What is for dinner?"},
                {"role": "assistant", "content": "Your car is on level 3.", "has_answer": True},
            ],
        ],
    }


def test_parse_date_is_utc() -> None:
    assert lme.parse_date("1970/01/02 (Fri) 00:01") == 86_460.0
    with pytest.raises(ValueError):
        lme.parse_date("30 May 2023")


def test_haystacks_per_mode() -> None:
    both = lme.question_of(_raw("q1", "single-session-user", ["s1", "s2"]), "both")
    assert [t.content for t in both.turns] == [
        "user: I parked the car on level 3.",
        "assistant: Noted: level 3.",
        "user: What is for dinner?",
        "assistant: Your car is on level 3.",
    ]
    assert both.skipped_empty == 1
    start2 = lme.parse_date("2023/05/02 (Tue) 09:30")
    assert [t.ts for t in both.turns[2:]] == [start2 + 1, start2 + 2]  # turn i at date + i s (the empty one too)
    assert both.gold == {0, 3}
    user = lme.question_of(_raw("q1", "single-session-user", ["s1", "s2"]), "user")
    assert [t.content for t in user.turns] == ["I parked the car on level 3.", "What is for dinner?"]
    assert user.gold == {0}


def test_metrics_on_two_questions() -> None:
    q1 = lme.question_of(_raw("q1", "single-session-user", ["s1", "s2"]), "both")
    raw2 = _raw("q2", "multi-session", ["s2"])
    del raw2["haystack_sessions"][0][0]["has_answer"]  # evidence only in an assistant turn
    q2 = lme.question_of(raw2, "user")  # user mode: no gold turn stored
    r1 = lme.score(q1, [3, 1, 2, 0])  # sessions s2, s1: both answer sessions in the top 5
    assert r1 == {"qid": "q1", "type": "single-session-user", "turn_r@10": 1.0, "any@5": 1.0, "all@5": 1.0}
    assert lme.turn_recall([3, 1, 2, 0], q1.gold, k=2) == 0.5
    r2 = lme.score(q2, [0])  # only s1 ranked
    assert r2["turn_r@10"] is None and r2["any@5"] == 0.0 and r2["all@5"] == 0.0
    s = lme.summarise([r1, r2])
    assert s["questions"] == 2 and s["turn_counted"] == 1 and s["turn_r@10"] == 1.0
    assert s["recall_any@5"] == 0.5 and s["recall_all@5"] == 0.5
    assert s["per_type"]["multi-session"]["turn_r@10"] is None


def test_session_collapse_and_recall() -> None:
    assert lme.ranked_sessions([0, 1, 2, 3], ["a", "a", "b", "a"]) == ["a", "b"]
    assert lme.session_recall(["a", "b", "c", "d", "e", "f"], {"a", "f"}) == (1.0, 0.0)
    assert lme.session_recall(["x"], set()) == (0.0, 0.0)


def test_variants_parse() -> None:
    base = ScoringConfig()
    got = lme.parse_variants("default; w_ctx=0 ;w_ctx=0,sequence_window=0", base)
    assert list(got) == ["default", "w_ctx=0", "w_ctx=0,sequence_window=0"]
    assert got["default"] == base
    assert got["w_ctx=0,sequence_window=0"].sequence_window == 0.0 and got["w_ctx=0"].w_ctx == 0.0
