"""The pattern index: ``like '%x'`` and ``like '%x%'`` decided by short keys, then exactly.

Regression of issue 9, item 6: 20,000 contains patterns cost a Python ``evaluate`` per
subscription per event in every matcher. The tests count the exact checks (candidates of
the pattern index, ``Conjunct.evaluate`` calls), never time.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from psmatch import MATCHERS, make_matcher
from psmatch.core.patterns import PatternIndex, access_pattern
from psmatch.language import Conjunct, Pattern, parse_subscription

INDEXES = [name for name in MATCHERS if name != "scan"]
LETTERS = "abcde"


def _word(rng: random.Random, low: int, high: int) -> str:
    return "".join(rng.choices(LETTERS, k=rng.randint(low, high)))


def test_holding_is_exactly_the_patterns_that_hold() -> None:
    rng = random.Random(1)
    index = PatternIndex()
    patterns = [Pattern(rng.choice(["suffix", "contains"]), _word(rng, 1, 6), False)
                for _ in range(400)]
    pids = [index.acquire(rng.choice("st"), p) for p in patterns]
    attributes = {pid: index._key[pid][0] for pid in pids}
    events = [{"s": _word(rng, 0, 12), "t": _word(rng, 0, 12), "u": "abc"} for _ in range(60)]
    keys = index.holding(events, np.arange(len(events)))
    found = {(int(k) // index.width, int(k) % index.width) for k in keys}
    expected = {(e, pid) for e, event in enumerate(events)
                for pid, pattern in zip(pids, patterns, strict=True)
                if pattern.test(event[attributes[pid]])}
    assert found == expected


def test_holding_keys_name_the_patterns_that_hold_on_one_event() -> None:
    rng = random.Random(5)
    index = PatternIndex()
    filed = [(rng.choice("st"), Pattern(rng.choice(["suffix", "contains"]), _word(rng, 1, 4),
                                        False)) for _ in range(300)]
    for attribute, pattern in filed:
        index.acquire(attribute, pattern)
    for _ in range(40):
        event = {"s": _word(rng, 0, 10), "t": _word(rng, 0, 10), "u": 3}
        assert index.holding_keys(event) == {
            (attribute, p.form, p.text) for attribute, p in filed if p.test(event[attribute])}


def test_the_access_pattern_is_the_first_positive_suffix_or_contains() -> None:
    def access(text: str) -> tuple[str, Pattern] | None:
        (conjunct,) = parse_subscription(text).conjuncts
        return access_pattern(conjunct)

    assert access("a = 1 and s like 'ab%'") is None  # a prefix is an interval
    assert access("s not like '%ab%'") is None
    assert access("s like '%'") is None
    assert access("n > 1 and s not like '%x' and s like '%abc%'") == (
        "s", Pattern("contains", "abc", False))
    assert access("t like '%yz'") == ("t", Pattern("suffix", "yz", False))


def test_a_value_checks_only_patterns_sharing_a_key() -> None:
    rng = random.Random(2)
    index = PatternIndex()
    for _ in range(20_000):
        index.acquire("s", Pattern("contains", "".join(rng.choices("abcdefghijklmnopqrstuvwxyz",
                                                                   k=4)), False))
    value = "".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=40))
    # 38 trigrams of the value, each posting about 20,000 / 26**3 patterns.
    assert len(index.candidates("s", value)) < 400


def test_identical_patterns_share_an_id_and_freed_ids_are_reused() -> None:
    index = PatternIndex()
    first = index.acquire("s", Pattern("contains", "abcd", False))
    assert index.acquire("s", Pattern("contains", "abcd", False)) == first
    other = index.acquire("s", Pattern("suffix", "abcd", False))
    index.check({first: 2, other: 1})
    index.release(first)
    index.release(first)
    index.check({other: 1})
    assert index.acquire("t", Pattern("contains", "zz", False)) == first
    assert len(index) == 2


@pytest.mark.parametrize("name", INDEXES)
def test_contains_subscriptions_are_evaluated_only_where_their_pattern_holds(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(3)
    letters = "abcdefghijklmnopqrstuvwxyz"
    matcher, scan = make_matcher(name), make_matcher("scan")
    items = [(str(i), f"s like '%{''.join(rng.choices(letters, k=4))}%'")
             for i in range(2_000)]
    items += [("-1", "s like '%zz' and n > 3"), ("-2", "s like '%q%' and s not like '%qq%'")]
    matcher.add_many(items)
    scan.add_many(items)
    matcher.check()
    events = [{"s": "".join(rng.choices(letters, k=40)), "n": 5} for _ in range(20)]
    events += [{"s": "qzz", "n": 5}, {"s": "aqqzz", "n": 4}]
    calls = 0
    evaluate = Conjunct.evaluate

    def counted(self: Conjunct, event: dict) -> bool:
        nonlocal calls
        calls += 1
        return evaluate(self, event)

    monkeypatch.setattr(Conjunct, "evaluate", counted)
    answers = matcher.match_batch(events)
    monkeypatch.undo()
    assert answers == scan.match_batch(events)
    matches = sum(map(len, answers))
    # Before the pattern index: 2,002 evaluations per event (44,044 here).
    assert calls <= matches + 2 * len(events)


@pytest.mark.parametrize("name", INDEXES)
def test_patterns_follow_removals_and_replacements(name: str) -> None:
    rng = random.Random(4)
    matcher, scan = make_matcher(name), make_matcher("scan")
    shapes = ["s like '%{}%'", "s like '%{}'", "s not like '%{}%'", "s like '{}%'",
              "s like '%{}%' or t like '%{}'", "s like '%{}%' and s like '%{}'"]
    events = [{"s": _word(rng, 0, 8), "t": _word(rng, 0, 5)} for _ in range(30)]
    for step in range(400):
        sub_id = str(rng.randrange(40))
        if sub_id in scan and rng.random() < 0.3:
            matcher.remove(sub_id)
            scan.remove(sub_id)
        else:
            shape = rng.choice(shapes)
            text = shape.format(*(_word(rng, 1, 3) for _ in range(shape.count("{}"))))
            matcher.add(sub_id, text)
            scan.add(sub_id, text)
        matcher.check()
        if step % 20 == 0:
            assert matcher.match_batch(events) == scan.match_batch(events)
    assert matcher.match_batch(events) == scan.match_batch(events)
