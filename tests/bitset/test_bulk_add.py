"""``add_many`` into the bitset matcher files the texts in the common form through the bulk
scanner and ``_insert_columns`` (no parse), the others parsed one by one: the same
answers as ``scan``, ``check()`` after each step, and the errors as ``add`` raises them."""

from __future__ import annotations

import pytest

import psmatch.core.matcher as core_matcher
from psmatch import ExpressionError, make_matcher
from psmatch.language import parse_subscription

COMMON = [(f"s{i}", f"a{i % 5} between {i} and {i + 40} and b{i % 3} >= {i % 7}")
          for i in range(200)]
OTHERS = [("o1", "a1 in (3, 4) or b1 = 'x'"), ("o2", "a2 between 1.5 and 90"),
          ("o3", parse_subscription("a3 < 50"))]
EVENTS = [{"a0": v, "a1": v + 1, "a2": v, "a3": 2 * v, "a4": v, "b0": v % 9, "b1": v % 8,
           "b2": 3} for v in range(0, 260, 7)] + [{"a0": 5}, {"b1": "x", "a1": 3}, {}]


def same_as_scan(items: list, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Add ``items`` to a bitset matcher with ``add_many`` and to ``scan`` one by one, and
    compare; returns the expressions the bitset's ``add_many`` parsed one by one."""
    parsed: list[object] = []

    def parse(text: object) -> object:
        parsed.append(text)
        return parse_subscription(text)  # type: ignore[arg-type]

    bitset, scan = make_matcher("bitset"), make_matcher("scan")
    with monkeypatch.context() as patch:
        patch.setattr(core_matcher, "parse_subscription", parse)
        bitset.add_many(items)
    bitset.check()
    for sub_id, expr in items:
        scan.add(sub_id, expr)
    assert len(bitset) == len(scan)
    assert bitset.match_batch(EVENTS) == scan.match_batch(EVENTS)
    return parsed


def test_texts_in_the_common_form_are_filed_with_no_parse(monkeypatch):
    assert same_as_scan(COMMON, monkeypatch) == []


def test_the_other_forms_are_parsed_one_by_one_beside_them(monkeypatch):
    parsed = same_as_scan(COMMON[:50] + OTHERS + COMMON[50:], monkeypatch)
    assert parsed == [OTHERS[0][1], OTHERS[1][1]]  # a Subscription is not parsed


def test_an_id_given_twice_keeps_the_last_and_a_replacement_holds():
    items = [*COMMON[:100], ("s3", "a0 = 17"), *COMMON[100:], ("s150", "b2 = 3")]
    bitset = make_matcher("bitset")
    bitset.bulk_size = 64  # several batches
    bitset.add_many(items)
    bitset.check()
    assert "s3" in bitset.match({"a0": 17}) and "s3" not in bitset.match({"a3": 10, "b0": 5})
    assert "s150" in bitset.match({"b2": 3})
    bitset.add_many([("s3", "a4 = 1")])
    bitset.check()
    assert "s3" in bitset.match({"a4": 1}) and "s3" not in bitset.match({"a0": 17})


def test_a_bad_expression_files_the_items_before_it_and_raises():
    bitset = make_matcher("bitset")
    with pytest.raises(ExpressionError):
        bitset.add_many([*COMMON[:30], ("bad", "a0 between 5 and"), *COMMON[30:60]])
    bitset.check()
    assert sorted(bitset) == sorted(sub_id for sub_id, _ in COMMON[:30])
    scan = make_matcher("scan")
    scan.add_many(COMMON[:30])
    assert bitset.match_batch(EVENTS) == scan.match_batch(EVENTS)
