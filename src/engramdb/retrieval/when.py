"""Time anchors: the calendar dates a query names, as windows of time (pure).

"What did Jolene ask Deb on 13 March, 2023?" names a day; the memories made that day deserve a
lift over equally relevant ones from other days. Recall turns such a query into windows and adds
``w_when`` to the base score of every candidate created inside one (a boost, never a filter: a
memory from another day still ranks on its relevance). On LoCoMo, 203 of 1,536 questions name a
calendar date and 81% of their evidence lies in the window named (see docs/locomo.md); 10 more
use a phrase relative to now, which LoCoMo means relative to the dialogue (they neither help nor
hurt there: 78% of all 213 questions' evidence lies in the windows read).

Read, in English, case-insensitively unless said otherwise:

- ``2023-03-13`` and ``2023-03`` (ISO 8601 day and month);
- a day with a month and a year in either order: ``13 March, 2023``, ``13th Mar 2023``,
  ``March 13, 2023``;
- a month with a year: ``May 2023``, ``May, 2023``;
- a day with a month, no year: ``13 March``, ``March 13th`` — the latest such day not after now;
- a month alone, capitalised (``June``; ``May`` not at the start of the text, where it is more
  often the verb) — the latest such month that has started by now;
- a year alone, 1900-2099, as a whole number: ``2022``.

and, relative to the time of the query (an agent asking "what did we decide yesterday?" means the
day before now):

- ``today``, ``yesterday``;
- ``this`` / ``last`` ``week`` (Monday to Sunday), ``month``, ``year``;
- ``N days|weeks|months|years ago`` (N a number or a word up to twelve, "a" for one): that day,
  or the calendar week, month or year it falls in;
- ``the last|past N days|weeks`` (up to and including today).

A first name that is a month ("April", "June") reads as that month; pass ``when=None`` to
`Agent.recall` when the query names such a person, or an explicit window when the caller knows
better (a question about a conversation, where "last week" was relative to when it was said).

Every window is half-open ``[start, end)`` in epoch seconds, on UTC calendar days (the same days
`Recall.as_evidence` prints).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass

from engramdb.errors import ValidationError

__all__ = ["TimeWindow", "resolve_when", "windows_in"]

_MONTHS = {
    name: i
    for i, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sept", "sep"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
_FULL_MONTH = {name: i for name, i in _MONTHS.items() if len(name) > 4 or name in ("may", "june", "july")}
_CAPITALISED = {name.capitalize(): i for name, i in _FULL_MONTH.items()}  # a month alone must be capitalised
_MON = "(?P<mon>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_B, _E = r"(?<![\w-])", r"(?![\w-])"
# Longest forms first: a span taken by one form is not read again by a shorter one.
_FORMS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("iso-day", re.compile(rf"{_B}{_YEAR}-(?P<m>[01]\d)-(?P<day>[0-3]\d){_E}")),
    ("iso-month", re.compile(rf"{_B}{_YEAR}-(?P<m>[01]\d){_E}")),
    ("day-month-year", re.compile(rf"{_B}{_DAY}(?: of)? {_MON},? {_YEAR}{_E}", re.IGNORECASE)),
    ("month-day-year", re.compile(rf"{_B}{_MON} {_DAY},? {_YEAR}{_E}", re.IGNORECASE)),
    ("month-year", re.compile(rf"{_B}{_MON},? {_YEAR}{_E}", re.IGNORECASE)),
    ("day-month", re.compile(rf"{_B}{_DAY}(?: of)? {_MON}{_E}", re.IGNORECASE)),
    ("month-day", re.compile(rf"{_B}{_MON} {_DAY}{_E}", re.IGNORECASE)),
    ("month", re.compile(r"(?<![\w-])(?P<mon>[A-Z][a-z]+)(?![\w-])")),
    ("year", re.compile(rf"{_B}{_YEAR}{_E}")),
)
_COUNT = r"(?P<count>\d{1,3}|a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
_NUMBERS = {w: i for i, w in enumerate("one two three four five six seven eight nine ten eleven twelve".split(), 1)}
_RELATIVE: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("ago", re.compile(rf"{_B}{_COUNT} (?P<unit>day|week|month|year)s? ago{_E}", re.IGNORECASE)),
    ("past", re.compile(rf"{_B}(?:the )?(?:last|past) {_COUNT} (?P<unit>day|week)s?{_E}", re.IGNORECASE)),
    ("this", re.compile(rf"{_B}(?P<which>this|last) (?P<unit>week|month|year){_E}", re.IGNORECASE)),
    ("day", re.compile(rf"{_B}(?P<which>today|yesterday){_E}", re.IGNORECASE)),
)

# Every form above names a window only with a digit, a capitalised month name (the month alone)
# or one of the relative words in it (a match that names none takes no span from another form):
# a text with none of them names no window, and most queries are read without the 13 patterns
# (the costly part of the read). A new form needs its words here too; a property test holds the two
# equal.
_MAYBE = re.compile(r"\d|(?i:ago|last|past|this|today|yesterday)|" + "|".join(_CAPITALISED))


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """``[start, end)`` in epoch seconds; `text` is what named it (the query's words, or "given")."""

    start: float
    end: float
    text: str = "given"

    def __contains__(self, ts: object) -> bool:
        return isinstance(ts, (int, float)) and self.start <= ts < self.end


def _ts(d: dt.date) -> float:
    return dt.datetime(d.year, d.month, d.day, tzinfo=dt.UTC).timestamp()


def _month_window(year: int, month: int) -> tuple[dt.date, dt.date]:
    nxt = dt.date(year + (month == 12), month % 12 + 1, 1)
    return dt.date(year, month, 1), nxt


def _window(form: str, m: re.Match[str], today: dt.date) -> tuple[dt.date, dt.date] | None:
    """The [first day, day after last) a matched form names, or None when it names no real date."""
    groups = m.groupdict()
    mon = groups.get("mon")
    if form.startswith("iso"):
        month = int(groups["m"])
    elif form == "month":
        if mon not in _CAPITALISED or (mon == "May" and m.start() == 0):
            return None
        month = _CAPITALISED[mon]
    elif mon is not None:
        if form in ("day-month", "month-day") and not mon[0].isupper():
            return None  # "may 2 of us come": without a year, only a capitalised month is a date
        month = _MONTHS[mon.lower()]
    else:
        month = 0
    year = int(groups["year"]) if groups.get("year") else None
    day = int(groups["day"]) if groups.get("day") else None
    try:
        if form == "year":
            assert year is not None
            return dt.date(year, 1, 1), dt.date(year + 1, 1, 1)
        if year is None:  # the latest such day or month not after today
            year = today.year
            first = dt.date(year, month, day or 1)
            if first > today:
                year -= 1
        if day is None:
            return _month_window(year, month)
        first = dt.date(year, month, day)
        return first, first + dt.timedelta(days=1)
    except ValueError:  # 31 February, month 13: not a date
        return None


def _relative(form: str, m: re.Match[str], today: dt.date) -> tuple[dt.date, dt.date] | None:
    """The [first day, day after last) a phrase relative to `today` names."""
    g = m.groupdict()
    unit = (g.get("unit") or "day").lower()
    count_word = (g.get("count") or "1").lower()
    count = 1 if count_word in ("a", "an") else _NUMBERS.get(count_word) or int(count_word)
    which = (g.get("which") or "").lower()
    if form == "day":
        first = today - dt.timedelta(days=1 if which == "yesterday" else 0)
        return first, first + dt.timedelta(days=1)
    if form == "past":
        days = count * (7 if unit == "week" else 1)
        return today - dt.timedelta(days=days - 1), today + dt.timedelta(days=1)
    back = count if form == "ago" else int(which == "last")
    if unit == "day":
        first = today - dt.timedelta(days=back)
        return first, first + dt.timedelta(days=1)
    if unit == "week":
        monday = today - dt.timedelta(days=today.weekday() + 7 * back)
        return monday, monday + dt.timedelta(days=7)
    if unit == "month":
        months = today.year * 12 + today.month - 1 - back
        return _month_window(months // 12, months % 12 + 1)
    year = today.year - back
    return dt.date(year, 1, 1), dt.date(year + 1, 1, 1)


def windows_in(text: str, now: float) -> tuple[TimeWindow, ...]:
    """Every calendar date or period `text` names (see the module docstring), in order of appearance.

    >>> import datetime as dt
    >>> now = dt.datetime(2023, 9, 1, tzinfo=dt.UTC).timestamp()
    >>> [w.text for w in windows_in("What did Deb do on 13 March, 2023 and in June?", now)]
    ['13 March, 2023', 'June']
    """
    if _MAYBE.search(text) is None:
        return ()
    return _scan(text, now)


def _scan(text: str, now: float) -> tuple[TimeWindow, ...]:
    """`windows_in` without the `_MAYBE` shortcut: every form's pattern over `text`."""
    today = dt.datetime.fromtimestamp(now, dt.UTC).date()
    taken: list[tuple[int, int]] = []
    found: list[tuple[int, TimeWindow]] = []
    forms = [(form, pattern, _window) for form, pattern in _FORMS]
    forms += [(form, pattern, _relative) for form, pattern in _RELATIVE]
    for form, pattern, read in forms:
        for m in pattern.finditer(text):
            if any(m.start() < end and start < m.end() for start, end in taken):
                continue
            try:
                span = read(form, m, today)
            except (ValueError, OverflowError):  # "999 years ago": before year 1
                span = None
            if span is None:
                continue
            taken.append((m.start(), m.end()))
            found.append((m.start(), TimeWindow(_ts(span[0]), _ts(span[1]), m.group(0))))
    return tuple(w for _, w in sorted(found, key=lambda x: x[0]))


When = str | TimeWindow | tuple[object, object] | Sequence[TimeWindow | tuple[object, object]] | None


def _instant(x: object, what: str) -> float:
    if isinstance(x, dt.datetime):
        if x.tzinfo is None:
            raise ValidationError(f"{what} is a naive datetime; give it a timezone (e.g. datetime.UTC)")
        return x.timestamp()
    if isinstance(x, dt.date):
        return _ts(x)
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return float(x)
    raise ValidationError(f"{what} must be epoch seconds, a date or an aware datetime, got {type(x).__name__}")


def resolve_when(when: When, query: str, now: float) -> tuple[TimeWindow, ...]:
    """The windows a recall anchors on: ``"auto"`` reads them from `query`; None anchors on none;
    a `TimeWindow`, a ``(start, end)`` pair (epoch seconds, dates or aware datetimes; a date as
    `end` includes that day) or a sequence of them is used as given."""
    if when is None:
        return ()
    if isinstance(when, str):
        if when != "auto":
            raise ValidationError(f'when must be "auto", None, (start, end) or a list of them, got {when!r}')
        return windows_in(query, now)
    if isinstance(when, TimeWindow):
        return (when,)
    if isinstance(when, tuple) and len(when) == 2 and not isinstance(when[0], (tuple, TimeWindow)):
        items: Sequence[object] = [when]
    elif isinstance(when, (list, tuple)):
        items = when
    else:
        raise ValidationError(f'when must be "auto", None, (start, end) or a list of them, got {type(when).__name__}')
    out = []
    for item in items:
        if isinstance(item, TimeWindow):
            out.append(item)
            continue
        if not isinstance(item, tuple) or len(item) != 2:
            raise ValidationError(f"each time window must be a (start, end) pair, got {item!r}")
        start = _instant(item[0], "a window's start")
        end_raw = item[1]
        end = _instant(end_raw, "a window's end")
        if isinstance(end_raw, dt.date) and not isinstance(end_raw, dt.datetime):
            end += 86_400.0  # a date as the end means "up to and including that day"
        if not end > start:
            raise ValidationError(f"a time window must end after it starts, got start {start} and end {end}")
        out.append(TimeWindow(start, end))
    return tuple(out)
