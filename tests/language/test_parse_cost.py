"""Parsing and normalisation cost O(text) whatever the mix of operators.

Cost is counted, never timed: every :class:`~psmatch.language.Interval` normalisation
builds goes through a counting wrapper, and the limits that bound the rest of the work
are checked on the errors they raise. The expressions are the adversarial ones of
issue 9 (:mod:`psmatch.begen.adversarial`, which the adversarial benchmark times), on
which normalisation used to build intervals for every pair of intervals it intersected.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from psmatch.begen.adversarial import STEP_BOUND, TEXT_BOUND, values
from psmatch.errors import ExpressionLimitError
from psmatch.language import (
    MAX_INTERVALS,
    MAX_NORMAL_FORM_INTERVALS,
    MAX_NORMALISATION_STEPS,
    MAX_TEXT,
    Interval,
    normalise,
    parse_subscription,
    predicates,
)


class RunawayNormalisation(Exception):
    """Raised by the counter past any linear bound, so that a quadratic parse fails fast."""


@pytest.fixture
def intervals_built(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], int]]:
    """Count the intervals normalisation builds; stop it past 4 per character of text."""
    built = 0

    def counted(*fields: object) -> Interval:
        nonlocal built
        built += 1
        if built > 4 * MAX_TEXT:
            raise RunawayNormalisation(f"{built} intervals built")
        return Interval(*fields)  # type: ignore[arg-type]

    # the two modules that build intervals: the predicate of each comparison, and the
    # normaliser's intersections
    monkeypatch.setattr(predicates, "Interval", counted)
    monkeypatch.setattr(normalise, "Interval", counted)
    yield lambda: built


def parsed_or_limited(text: str) -> None:
    """Parse ``text``: a subscription, or a limit error that says where."""
    assert len(text) <= MAX_TEXT
    try:
        subscription = parse_subscription(text)
    except ExpressionLimitError as error:
        assert error.position is not None, error
    else:
        assert subscription.conjuncts


@pytest.mark.parametrize("name", TEXT_BOUND)
def test_normalisation_builds_intervals_linear_in_the_text(name, intervals_built):
    text = TEXT_BOUND[name]()
    parsed_or_limited(text)
    assert intervals_built() <= len(text), name


@pytest.mark.parametrize("name", STEP_BOUND)
def test_normalisation_near_its_step_limit_builds_at_most_that_many(name, intervals_built):
    parsed_or_limited(STEP_BOUND[name]())
    assert intervals_built() <= MAX_NORMALISATION_STEPS, name


def test_intersecting_interval_sets_is_a_sorted_merge(intervals_built):
    # a != 0 and a != 2 and ... and a != 2*199, then a in (every odd number below 400):
    # each step intersects a predicate of up to 200 intervals with a small one.
    text = " and ".join(f"a != {2 * k}" for k in range(200))
    text += f" and a in ({','.join(str(2 * k + 1) for k in range(200))})"
    (conjunct,) = parse_subscription(text).conjuncts
    (predicate,) = conjunct.predicates
    assert [iv.lo for iv in predicate.intervals] == [2 * k + 1 for k in range(200)]
    # Atoms: 2 intervals for each !=, 200 points. Intersections: at most the sum of
    # their two sides at each step; a cross product would build 200 * 200 at the end.
    assert intervals_built() <= 2 * 200 + 200 + sum(k + 2 for k in range(200)) + 400


def test_intervals_per_predicate_are_limited_as_they_are_built():
    lists = [f"a not in ({values(256 * k)})" for k in range(8)]
    text = " and ".join(lists)
    # Four lists of 256 values leave 1,025 intervals: the fourth one crosses the limit.
    fourth = text.index(lists[3])
    with pytest.raises(ExpressionLimitError) as info:
        parse_subscription(text)
    assert info.value.position == fourth
    assert f"more than {MAX_INTERVALS} intervals" in str(info.value)
    assert "'a'" in str(info.value)
    three = " and ".join(lists[:3])
    (conjunct,) = parse_subscription(three).conjuncts
    assert len(conjunct.predicates[0].intervals) == 3 * 256 + 1


def test_the_normal_form_as_a_whole_is_limited_in_intervals():
    # 64 conjuncts, each with two attributes of 769 intervals: 98,432 intervals to index.
    big = " and ".join(f"{name} not in ({values(256 * k)})" for name in "ad" for k in range(3))
    pairs = " and ".join(f"(b{k} = 1 or c{k} = 1)" for k in range(6))
    assert MAX_NORMAL_FORM_INTERVALS < 64 * 2 * (3 * 256 + 1)
    with pytest.raises(ExpressionLimitError, match="intervals in its normal form"):
        parse_subscription(f"{big} and {pairs}")
    assert len(parse_subscription(f"{big} and {pairs[: pairs.rindex(' and ')]}").conjuncts) == 32


def test_normalisation_work_is_limited_when_merges_repeat_over_many_conjuncts(intervals_built):
    # 64 conjuncts share a 769-interval predicate, then 150 comparisons each intersect
    # it again in every conjunct: 64 * 150 * 770 steps unless the work is bounded. The
    # step limit bounds it; the 5 KB of text could not bound it more tightly, since each
    # of those merges rebuilds a predicate of 769 intervals.
    big = " and ".join(f"a not in ({values(256 * k)})" for k in range(3))
    pairs = " and ".join(f"(b{k} = 1 or c{k} = 1)" for k in range(6))
    narrowing = [f"a > {-1000 - k}" for k in range(150)]
    text = f"{big} and {pairs} and " + " and ".join(narrowing)
    with pytest.raises(ExpressionLimitError) as info:
        parse_subscription(text)
    assert info.value.position is not None
    assert info.value.position > text.index(narrowing[0])
    assert f"more than {MAX_NORMALISATION_STEPS} steps" in str(info.value)
    assert intervals_built() <= MAX_NORMALISATION_STEPS
