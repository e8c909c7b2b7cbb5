"""A periodic trigger moves to its next firing by arithmetic, for any start, period and clock."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engramdb import ValidationError
from engramdb.memories.model import MAX_TIME, MIN_TIME
from engramdb.memories.triggers import Trigger

starts = st.floats(min_value=0.0, max_value=MAX_TIME) | st.integers(min_value=0, max_value=int(MAX_TIME))
periods = st.floats(min_value=1.0, max_value=100 * 366 * 86_400.0) | st.sampled_from([1.0, 1.5, 60.0, 86_400.0])
clocks = st.floats(min_value=MIN_TIME, max_value=MAX_TIME) | st.integers(min_value=0, max_value=int(MAX_TIME))


@given(starts, periods, clocks)
def test_next_after_is_the_first_period_past_now(start: float, every: float, now: float) -> None:
    trig = Trigger.at_time(start, every=every)
    at = float(trig.value)
    try:
        moved = trig.next_after(now)
    except ValidationError:
        # Only a next firing past 9999 is refused, and then none within the range was left.
        assert at <= now and at + (math.floor((now - at) / every) + 1) * every > MAX_TIME * (1 - 1e-15)
        return
    nxt = moved.at
    assert nxt is not None and moved.every == every
    if at > now:
        assert nxt == at
        return
    slack = 4 * math.ulp(nxt)  # the spacing of floats near the answer: what rounding may cost
    assert nxt > now
    assert nxt - every <= now + slack  # the first one past now: no period skipped
    k = round((nxt - at) / every)
    assert k >= 1 and abs((nxt - at) - k * every) <= slack + k * every * 1e-15  # a whole number of periods on


@pytest.mark.parametrize("now", [1e20, -1e20, 1e308, MAX_TIME + 1, math.inf, -math.inf, math.nan, True, "soon"])
def test_next_after_refuses_a_clock_outside_the_time_range(now: object) -> None:
    with pytest.raises(ValidationError, match="now must be epoch seconds"):
        Trigger.at_time(1_764_000_000.0, every=1).next_after(now)  # type: ignore[arg-type]
