"""The one interface all matchers share, used as the service and outside checks use it."""

from __future__ import annotations

import gc
import pickle
from itertools import pairwise

import numpy as np
import pytest

from psmatch import MATCHERS, ExpressionError, UnknownMatcherError, make_matcher
from psmatch.core.matcher import Matcher, SlotPath
from psmatch.core.multimap import MERGE_MIN
from psmatch.events import flatten_event
from psmatch.language import parse_subscription
from psmatch.service.records.normal_forms import dump_normal_form, load_normal_forms


@pytest.fixture(params=MATCHERS)
def matcher(request):
    return make_matcher(request.param)


def test_matchers_lists_the_papers_matchers():
    assert {"scan", "pstbloom", "psthash"} <= set(MATCHERS)


def test_unknown_matcher_name_is_a_clear_error():
    with pytest.raises(UnknownMatcherError, match="choose one of"):
        make_matcher("nope")


def test_add_match_replace_remove(matcher):
    matcher.add("cheap", "price < 100")
    matcher.add("books", "category = 'books'")
    matcher.check()
    assert len(matcher) == 2
    assert matcher.match({"price": 5, "category": "books"}) == {"cheap", "books"}
    matcher.add("cheap", "price < 1")  # replaces
    matcher.check()
    assert len(matcher) == 2
    assert matcher.match({"price": 5}) == set()
    matcher.remove("books")
    matcher.check()
    assert matcher.match({"category": "books"}) == set()
    with pytest.raises(KeyError):
        matcher.remove("books")


def test_removes_are_staged_and_seen_by_every_read(matcher):
    """``remove`` gives the id up at once and the next read files the removals."""
    matcher.add_many([(str(i), f"x = {i % 3}") for i in range(30)])
    for i in range(0, 30, 2):
        matcher.remove(str(i))
    assert len(matcher) == 15 and "0" not in matcher
    assert set(matcher) == {str(i) for i in range(1, 30, 2)}
    with pytest.raises(KeyError):
        matcher.remove("0")
    with pytest.raises(KeyError):
        matcher.internal.slot_of("0")
    assert matcher.match({"x": 1}) == {"1", "7", "13", "19", "25"}
    matcher.remove("1")
    matcher.add("1", "x = 2")  # a removed id comes back, a staged removal before it
    matcher.remove("7")
    matcher.add("5", "x = 1")  # replaces a live one, a staged removal before it
    matcher.add("40", "x = 2")
    matcher.remove("40")  # a staged add: filed first, then removed
    assert matcher.match_batch([{"x": 1}, {"x": 2}]) == [
        {"5", "13", "19", "25"}, {"1", "11", "17", "23", "29"}]
    matcher.check()
    assert matcher.stats().subscriptions == len(matcher) == 14


def test_remove_many_removes_all_or_nothing(matcher):
    matcher.add_many([("a", "x = 1"), ("b", "x = 1 or y = 2"), ("c", "x = 1")])
    matcher.add("d", "y = 2")  # staged: removed like the filed ones
    for bad in (["a", "nope"], ["a", "b", "a"]):
        with pytest.raises(KeyError):
            matcher.remove_many(bad)
        assert len(matcher) == 4 and matcher.match({"x": 1}) == {"a", "b", "c"}
    matcher.remove_many(["b", "d", "a"])
    matcher.check()
    assert set(matcher) == {"c"} and matcher.match({"x": 1, "y": 2}) == {"c"}
    matcher.remove_many([])
    assert len(matcher) == 1


def test_staged_adds_are_seen_by_every_read(matcher):
    """``add`` stages and the next read files: no read may see the index without them."""
    matcher.add("a", "x = 1")
    matcher.add("a", "x = 2")  # replaces a staged subscription
    matcher.add("b", "x = 2")
    assert len(matcher) == 2 and "a" in matcher
    assert matcher.match({"x": 2}) == {"a", "b"}
    matcher.add("c", "x = 3")
    matcher.remove("c")  # removes a staged subscription
    matcher.add("d", "x = 3")
    assert matcher.stats().subscriptions == 3
    matcher.check()
    matcher.add("e", "x = 3")
    matcher.add_many([("f", "x = 3")])
    assert matcher.match_batch([{"x": 1}, {"x": 3}]) == [set(), {"d", "e", "f"}]


def test_a_bad_expression_leaves_the_index_unchanged(matcher):
    matcher.add("s", "a = 1")
    with pytest.raises(ExpressionError):
        matcher.add("s", "a = ")
    assert matcher.match({"a": 1}) == {"s"}


def test_match_batch_answers_in_order(matcher):
    matcher.add_many([("1", "a = 1"), ("2", "a = 2"), ("3", "a >= 1")])
    matcher.check()
    assert matcher.match_batch([{"a": 2}, {}, {"a": 1}]) == [{"2", "3"}, set(), {"1", "3"}]


def test_match_flat_batch_matches_flattened_events_like_match_batch(matcher):
    matcher.add_many([("1", "user.age > 3"), ("2", "a = 1"), ("3", "a = 1 and user.age = 4")])
    events = [{"user": {"age": 4}, "a": 1}, {}, {"a": 1}]
    flat = [flatten_event(event) for event in events]
    assert matcher.internal.match_flat_batch(flat) == matcher.match_batch(events) == [
        {"1", "2", "3"}, set(), {"2"}]
    assert matcher.internal.match_flat_batch([]) == matcher.match_batch([]) == []


def test_match_flat_pairs_lists_each_match_once_by_event(matcher):
    # "either" matches the first event through both of its conjuncts: one pair all the same
    matcher.add_many([("either", "a = 1 or b = 2"), ("big", "a > 0"), ("none", "a < 0")])
    matcher.check()
    flat = [flatten_event(event) for event in ({"a": 1, "b": 2}, {}, {"b": 2}, {"a": 5})]
    events, ids = matcher.internal.match_flat_pairs(flat)
    assert sorted(zip(events.tolist(), ids, strict=True)) == [
        (0, "big"), (0, "either"), (2, "either"), (3, "big")]
    assert events.tolist() == sorted(events.tolist())
    events, ids = matcher.internal.match_flat_pairs([])
    assert (len(events), ids) == (0, [])


def test_match_flat_slots_names_each_match_by_the_slot_of_its_id(matcher):
    matcher.add_many([("a", "x = 1"), ("b", "x >= 1"), ("c", "x = 2")])
    matcher.remove("a")
    matcher.add("d", "x < 3")  # may take the freed slot of "a"
    matcher.check()
    assert sorted(matcher) == ["b", "c", "d"]
    slots = {sub_id: matcher.internal.slot_of(sub_id) for sub_id in matcher}
    assert len(set(slots.values())) == 3
    flat = [flatten_event(event) for event in ({"x": 1}, {"x": 2}, {"x": 9})]
    events, matched = matcher.internal.match_flat_slots(flat)
    assert matched.dtype == np.int64 and events.tolist() == sorted(events.tolist())
    by_slot = {slot: sub_id for sub_id, slot in slots.items()}
    assert sorted(zip(events.tolist(), map(by_slot.get, matched.tolist()), strict=True)) == [
        (0, "b"), (0, "d"), (1, "b"), (1, "c"), (1, "d"), (2, "b")]
    with pytest.raises(KeyError):
        matcher.internal.slot_of("a")
    events, matched = matcher.internal.match_flat_slots([])
    assert len(events) == len(matched) == 0


def test_add_many_pauses_the_cyclic_collector_and_restores_it(matcher):
    seen = []

    def items():
        for i in range(3):
            seen.append(gc.isenabled())
            yield str(i), f"a = {i}"

    assert gc.isenabled()
    matcher.add_many(items())
    assert seen == [False] * 3 and gc.isenabled()
    gc.disable()
    try:
        with pytest.raises(ExpressionError):
            matcher.add_many([("9", "a <")])
        assert not gc.isenabled()  # a caller's own choice is kept, even on an error
    finally:
        gc.enable()
    matcher.check()
    assert matcher.match({"a": 1}) == {"1"}


def test_ids_are_strings_of_any_unicode(matcher):
    ids = ["plain", "é-ü", "\U0001f600", "", "a\x00b", "\ud800 lone surrogate"]
    matcher.add_many([(sub_id, "a = 1") for sub_id in ids])
    matcher.check()
    assert matcher.match({"a": 1}) == set(ids) and all(sub_id in matcher for sub_id in ids)
    offsets, data = matcher.internal.ids_utf8(matcher.internal.slots_of(ids[:5]))
    assert [data[lo:hi].tobytes().decode() for lo, hi in pairwise(offsets)] == ids[:5]
    with pytest.raises(TypeError, match="a subscription id is a str, not int"):
        matcher.add(7, "a = 1")
    with pytest.raises(TypeError, match="not bytes"):
        matcher.add_many([(b"s", "a = 1")])
    assert 7 not in matcher and len(matcher) == len(ids)
    matcher.check()


def test_add_many_with_a_repeated_id_keeps_the_last(matcher):
    matcher.add_many([("x", "a = 1"), ("x", "a = 2")])
    matcher.check()
    assert len(matcher) == 1
    assert matcher.match_batch([{"a": 1}, {"a": 2}]) == [set(), {"x"}]


def test_add_columns_adds_normal_forms_in_bulk_replacing_held_ids(matcher):
    texts = {"a": "s like '%x%' and n > 1", "b": "s like 'ab%' or n = 2",
             "c": "not s like '%z' and n between 0 and 9", "d": "n in (5, 7) or t = true"}
    matcher.add("a", "n = 0")  # replaced by the bulk add
    matcher.add("e", "n = 0")
    columns = load_normal_forms(list(texts.values()),
                                [dump_normal_form(parse_subscription(t)) for t in texts.values()])
    matcher.internal.add_columns(list(texts), columns)
    matcher.check()
    assert len(matcher) == 5
    batch = [{"s": "axe", "n": 2}, {"s": "abc", "n": 5}, {"s": "zz", "n": 0},
             {"n": 7, "t": True}, {"n": 0}]  # fmt: skip
    # an absent attribute makes a comparison unknown, and `not` of unknown is not true
    assert matcher.match_batch(batch) == [{"a", "b", "c"}, {"b", "c", "d"}, {"e"}, {"d"}, {"e"}]
    with pytest.raises(ValueError, match="one distinct id per subscription"):
        matcher.internal.add_columns(["x", "x", "y", "z"], columns)
    assert len(matcher) == 5


def test_an_unpickled_index_takes_enough_adds_to_merge_its_side_lists(matcher):
    """A worker restored from a snapshot (pickle protocol 5, whose arrays live in the
    pickle's buffer) goes on growing: more adds than a multimap keeps beside its main
    part, so they merge into arrays the index did not allocate itself."""
    texts = {str(i): f"a between {i} and {i + 3} and b = {i % 7}" for i in range(2 * MERGE_MIN)}
    matcher.add_many(list(texts.items())[:MERGE_MIN // 2])
    restored = pickle.loads(pickle.dumps(matcher, protocol=5))
    restored.add_many(list(texts.items())[MERGE_MIN // 2:])
    restored.check()
    assert len(restored) == len(texts)
    events = [{"a": a, "b": b} for a in range(0, 2 * MERGE_MIN, 211) for b in (0, 3)]
    assert restored.match_batch(events) == [
        {i for i in texts if int(i) <= e["a"] <= int(i) + 3 and e["b"] == int(i) % 7}
        for e in events]


FOREST_MATCHERS = {"pstbloom", "psthash", "opindex", "betree", "auto"}  # auto: coarse, in PSTHash


def test_stats_mean_the_same_in_every_matcher(matcher):
    matcher.add_many([
        ("x", "a between 1 and 5 and b != 3"),  # 1 conjunct of 2 predicates
        ("y", "c like '%z%' or d not between 2 and 4"),  # 2 conjuncts of 1
        ("z", "e in (1, 2, 3) and not (f = 1)"),  # 1 conjunct of 2
    ])
    matcher.check()
    stats = matcher.stats()
    assert (stats.subscriptions, stats.conjuncts, stats.predicates) == (3, 4, 6)
    # Distinct bounds per attribute: a 2, b 1, c 0, d 2, e 3, f 1; 2m + 1 spaces each.
    assert stats.spaces == (24 if matcher.name in FOREST_MATCHERS else 0)
    matcher.remove("y")
    matcher.check()
    stats = matcher.stats()
    assert (stats.subscriptions, stats.conjuncts, stats.predicates) == (2, 2, 4)
    assert stats.spaces == (20 if matcher.name in FOREST_MATCHERS else 0)  # d: 1 space left


def test_stats_count_the_index(matcher):
    matcher.add_many([("x", "a = 1 or b in (1, 2)"), ("y", "c > 3 and d < 2")])
    stats = matcher.stats()
    assert (stats.subscriptions, stats.conjuncts, stats.predicates) == (2, 3, 4)
    assert stats.estimated_bytes > 0
    assert set(stats.as_dict()) == {
        "subscriptions", "conjuncts", "predicates", "spaces", "estimated_bytes"}


def test_the_public_face_is_the_documented_interface():
    """The library's face is what the README lists; the service's path by slot is
    ``internal``, a :class:`psmatch.core.matcher.SlotPath`."""
    face = {name for name in vars(Matcher) if not name.startswith("_")}
    assert face == {"name", "bulk_size", "add", "add_many", "remove", "remove_many", "match",
                    "match_batch", "stats", "check", "internal"}
    assert {"__len__", "__contains__", "__iter__"} <= set(vars(Matcher))
    assert isinstance(make_matcher("scan").internal, SlotPath)
