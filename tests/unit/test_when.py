"""Time anchors: which dates a query names, as UTC windows, and how explicit windows are checked."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engramdb import TimeWindow, ValidationError
from engramdb.retrieval.when import resolve_when, windows_in

NOW = dt.datetime(2023, 9, 1, 12, tzinfo=dt.UTC).timestamp()


def days(text: str, now: float = NOW) -> list[tuple[str, dt.date, dt.date]]:
    """(words, first day, day after the last) of each window `text` names."""
    return [
        (w.text, dt.datetime.fromtimestamp(w.start, dt.UTC).date(), dt.datetime.fromtimestamp(w.end, dt.UTC).date())
        for w in windows_in(text, now)
    ]


D = dt.date


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("What did Jolene ask on 13 March, 2023?", [("13 March, 2023", D(2023, 3, 13), D(2023, 3, 14))]),
        ("on the 13th of mar 2023", [("13th of mar 2023", D(2023, 3, 13), D(2023, 3, 14))]),
        ("What did Joanna watch on February 7, 2022?", [("February 7, 2022", D(2022, 2, 7), D(2022, 2, 8))]),
        ("Which country was Evan visiting in May 2023?", [("May 2023", D(2023, 5, 1), D(2023, 6, 1))]),
        ("deploys on 2023-03-13", [("2023-03-13", D(2023, 3, 13), D(2023, 3, 14))]),
        ("the 2023-12 release", [("2023-12", D(2023, 12, 1), D(2024, 1, 1))]),
        ("What happened in 2022?", [("2022", D(2022, 1, 1), D(2023, 1, 1))]),
        # no year: the latest such month or day that has begun by now (2023-09-01)
        ("When did Melanie go camping in June?", [("June", D(2023, 6, 1), D(2023, 7, 1))]),
        ("Plans for December", [("December", D(2022, 12, 1), D(2023, 1, 1))]),
        ("What about 3 September?", [("3 September", D(2022, 9, 3), D(2022, 9, 4))]),
        ("and March 3rd", [("March 3rd", D(2023, 3, 3), D(2023, 3, 4))]),
        (
            "in May 2023 and in June",
            [("May 2023", D(2023, 5, 1), D(2023, 6, 1)), ("June", D(2023, 6, 1), D(2023, 7, 1))],
        ),
    ],
)
def test_dates_named(text: str, expected: list[tuple[str, dt.date, dt.date]]) -> None:
    assert days(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "May I ask what the deploy key is?",  # "May" opening a question is the verb
        "we may 2 of us come along",  # a lower-case month without a year is a word
        "the 1990s were loud",
        "ticket ENG-2023-77",
        "order 12023 shipped",
        "no dates here at all",
        "",
    ],
)
def test_not_dates(text: str) -> None:
    assert windows_in(text, NOW) == ()


@pytest.mark.parametrize(
    ("text", "first", "end"),
    [  # NOW is Friday 1 September 2023
        ("what did we decide yesterday?", D(2023, 8, 31), D(2023, 9, 1)),
        ("anything new today", D(2023, 9, 1), D(2023, 9, 2)),
        ("the deploy last week", D(2023, 8, 21), D(2023, 8, 28)),
        ("standups this week", D(2023, 8, 28), D(2023, 9, 4)),
        ("invoices from last month", D(2023, 8, 1), D(2023, 9, 1)),
        ("goals this year", D(2023, 1, 1), D(2024, 1, 1)),
        ("the offsite last year", D(2022, 1, 1), D(2023, 1, 1)),
        ("3 days ago", D(2023, 8, 29), D(2023, 8, 30)),
        ("two weeks ago", D(2023, 8, 14), D(2023, 8, 21)),
        ("a month ago", D(2023, 8, 1), D(2023, 9, 1)),
        ("Twelve months ago", D(2022, 9, 1), D(2022, 10, 1)),
        ("in the past 7 days", D(2023, 8, 26), D(2023, 9, 2)),
        ("the last 2 weeks", D(2023, 8, 19), D(2023, 9, 2)),
    ],
)
def test_phrases_relative_to_the_query_time(text: str, first: dt.date, end: dt.date) -> None:
    assert [(f, e) for _, f, e in days(text)] == [(first, end)]


@pytest.mark.parametrize("text", ["last weekend", "an hour ago", "9999 years ago", "the last time we met"])
def test_relative_phrases_that_name_no_window(text: str) -> None:
    assert windows_in(text, NOW) == ()


def test_an_impossible_day_falls_back_to_its_month() -> None:
    assert days("on 31 February, 2023") == [("February, 2023", D(2023, 2, 1), D(2023, 3, 1))]


@given(st.text(max_size=80), st.floats(min_value=0, max_value=4e9))
def test_any_text_gives_well_formed_windows(text: str, now: float) -> None:
    for w in windows_in(text, now):
        assert w.end > w.start
        assert w.text and w.text in text
        assert (w.end - w.start) % 86_400 == 0  # whole UTC days


_WORDS = [
    "May", "may", "June", "JUNE", "june", "Jun", "jun", "Sept", "sept.", "March", "mar.", "December", "dec",
    "13", "13th", "1st", "2023", "1999", "2023-03", "2023-03-13", "03", "of", "the", "in", "on", "a", "an",
    "three", "twelve", "day", "days", "week", "weeks", "month", "months", "year", "years", "ago", "AGO", "last",
    "Last", "past", "this", "This", "today", "Yesterday", "what", "did", "Deb", "do", ",", "?", "-", "",
]  # fmt: skip


@given(st.lists(st.sampled_from(_WORDS), max_size=8), st.sampled_from([" ", "", ", "]))
def test_the_shortcut_for_texts_without_a_date_word_reads_the_same_windows(words: list[str], sep: str) -> None:
    from engramdb.retrieval.when import _scan

    text = sep.join(words)
    assert windows_in(text, NOW) == _scan(text, NOW)


@given(st.text(max_size=40))
def test_the_shortcut_on_any_text_reads_the_same_windows(text: str) -> None:
    from engramdb.retrieval.when import _scan

    assert windows_in(text, NOW) == _scan(text, NOW)


def test_resolve_when_forms() -> None:
    assert resolve_when(None, "on 13 March, 2023", NOW) == ()
    assert resolve_when("auto", "on 13 March, 2023", NOW) == windows_in("on 13 March, 2023", NOW)
    w = TimeWindow(10.0, 20.0)
    assert resolve_when(w, "", NOW) == (w,)
    assert resolve_when((10, 20), "", NOW) == (TimeWindow(10.0, 20.0),)
    assert resolve_when([(10, 20), w], "", NOW) == (TimeWindow(10.0, 20.0), w)
    day = resolve_when((D(2023, 3, 13), D(2023, 3, 13)), "", NOW)[0]  # a date as the end includes that day
    named = windows_in("2023-03-13", NOW)[0]
    assert (day.start, day.end) == (named.start, named.end)
    aware = dt.datetime(2023, 3, 13, 6, tzinfo=dt.UTC)
    assert resolve_when((aware, aware + dt.timedelta(hours=1)), "", NOW)[0].end - aware.timestamp() == 3600


@pytest.mark.parametrize(
    ("when", "message"),
    [
        ("yesterday", '"auto", None'),
        ((20, 10), "end after it starts"),
        ((10, 10), "end after it starts"),
        ((dt.datetime(2023, 1, 1), 10), "naive datetime"),
        (("a", "b"), "epoch seconds, a date or an aware datetime"),
        ([(1, 2, 3)], "(start, end) pair"),
        (42, "got int"),
    ],
)
def test_bad_when_is_refused_with_what_to_do(when: object, message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        resolve_when(when, "", NOW)  # type: ignore[arg-type]
