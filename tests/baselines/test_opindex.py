"""OpIndex specifics: pivot choice, operator lists, counter targets, signatures, deletion.

Answers are compared with ``scan`` throughout; ``check()`` runs after every mutation.
"""

from __future__ import annotations

import numpy as np
import pytest

from psmatch import Matcher
from psmatch.baselines.opindex import OpIndexMatcher
from psmatch.baselines.opindex_lists import EQ, GE, LE, UNBOUNDED
from tests.baselines.beside_scan import agree, build_beside_scan


def build(subscriptions: dict[str, str]) -> tuple[OpIndexMatcher, Matcher]:
    return build_beside_scan(OpIndexMatcher(), subscriptions)


def entries_of(matcher: OpIndexMatcher, sub_id: str) -> list[tuple[int, int, int]]:
    """(operator, threshold offset, bound id) of a single-conjunct subscription's entries."""
    (cid,) = matcher.registry.cids_of(matcher.internal.slot_of(sub_id))
    block, bid, offset, cid_column = matcher.lists.entries()
    mine = np.flatnonzero(cid_column == cid)
    return sorted(zip((block[mine] % 3).tolist(), offset[mine].tolist(), bid[mine].tolist(),
                      strict=True))


def tree(matcher: OpIndexMatcher, attribute: str) -> int:
    return next(t.tree_id for t in matcher.forest.trees if t.attribute == attribute)


def test_pivot_is_the_least_used_attribute_without_event_history() -> None:
    matcher, _ = build({"x": "a = 1 and b = 1", "y": "a = 2 and c = 1", "z": "a = 3 and b = 2"})
    (cid,) = matcher.registry.cids_of(matcher.internal.slot_of("y"))
    assert matcher.pivot.data[cid] == tree(matcher, "c")


def test_pivot_is_the_least_frequent_attribute_in_the_event_stream() -> None:
    matcher, _ = build({"x": "a = 1 and b = 1"})
    matcher.match_batch([{"a": 1, "b": 1}, {"b": 2}, {"b": 3}])  # b is frequent, a rare
    matcher.add("y", "a = 2 and b = 2")
    matcher.check()
    (cid,) = matcher.registry.cids_of(matcher.internal.slot_of("y"))
    assert matcher.pivot.data[cid] == tree(matcher, "a")


def test_operators_map_to_the_three_lists_with_counter_targets() -> None:
    matcher, scan = build({
        "in": "a in (1, 2, 3)", "between": "a between 2 and 5", "ne": "a != 3",
        "lt": "a < 5", "ge": "a >= 5", "suffix": "s like '%on'", "prefix": "s like 'ab%'",
    })
    need = {k: int(matcher.need.data[matcher.registry.cids_of(matcher.internal.slot_of(k))[0]])
            for k in ("in", "between", "ne", "lt", "ge", "suffix", "prefix")}
    ops = {k: [(op, off) for op, off, _ in entries_of(matcher, k)] for k in need}
    assert ops["in"] == [(EQ, 1)] * 3 and need["in"] == 1  # one counter slot for the IN list
    assert ops["between"] == [(GE, 1), (LE, 1)] and need["between"] == 2
    assert ops["ne"] == [(GE, 2), (LE, 0)] and need["ne"] == 1  # x > 3 or x < 3
    assert ops["lt"] == [(LE, 0)] and need["lt"] == 1  # strict: pos <= 2 rank(5)
    assert ops["ge"] == [(GE, 1)] and need["ge"] == 1
    assert ops["prefix"] == [(GE, 1), (LE, 0)] and need["prefix"] == 2  # ['ab', 'ac')
    (presence,) = entries_of(matcher, "suffix")  # '%on' has no bound: presence entry only
    assert presence[:1] == (LE,) and presence[2] == -1 and need["suffix"] == 1
    agree(matcher, scan, [{"a": v} for v in (0, 1, 2, 3, 4, 5, 6, 2.5)]
          + [{"s": s} for s in ("son", "abc", "ab", "ac", "on", "")] + [{}])


def test_le_list_is_scanned_upward_from_the_event_value() -> None:
    matcher, scan = build({"le5": "a <= 5", "le7": "a <= 7", "lt5": "a < 5", "ge5": "a >= 5"})
    answers = matcher.match_batch([{"a": 5}, {"a": 6}, {"a": 4.5}, {"a": 8}])
    assert answers == [{"le5", "le7", "ge5"}, {"le7", "ge5"}, {"le5", "le7", "lt5"}, {"ge5"}]
    agree(matcher, scan, [{"a": v} for v in (-(2**63), 2**53 + 1, 5.0, 7)])


def test_threshold_keys_encode_block_and_position() -> None:
    matcher, _ = build({"x": "a > 2 and b = 'k'"})
    matcher.match({"a": 3})
    lists = matcher.lists
    key = lists.main.key if len(lists.main) else lists.delta_run.key
    thresholds = key & 0xFFFFFFFF
    assert set(thresholds.tolist()) == {2 * 0 + 2, 2 * 0 + 1}  # open '>' 2, '=' on 'k'
    assert UNBOUNDED > 2**30


def test_a_conjunct_is_only_counted_when_its_pivot_is_in_the_event() -> None:
    matcher, scan = build({"x": "a = 1 and b > 0", "y": "c = 1"})
    agree(matcher, scan, [{"b": 5}, {"a": 1}, {"a": 1, "b": 5}, {"a": "1", "b": 5}])


def test_equality_signatures_hold_every_operand() -> None:
    matcher, scan = build({f"s{i}": f"a = {i} and b = {i % 3}" for i in range(40)})
    rows = [matcher.directory.row_of[(int(matcher.pivot.data[c]) << 32) | tree(matcher, "a")]
            for c in range(40)]
    assert all(matcher.directory.signature.data[r] != 0 for r in rows)
    agree(matcher, scan, [{"a": i, "b": i % 3} for i in range(-1, 42)])


def test_delta_run_merges_into_main_and_rekeys_on_new_values(monkeypatch) -> None:
    monkeypatch.setattr("psmatch.baselines.opindex_lists.DELTA_MIN", 4)
    matcher, scan = build({f"s{i}": f"a > {i} and b < {2 * i}" for i in range(20)})
    events = [{"a": v, "b": w} for v in range(-1, 22) for w in (0, 7, 30)]
    agree(matcher, scan, events)
    assert len(matcher.lists.main) > 0
    for i in range(20):  # new values between the old ones shift every rank
        text = f"a <= {i + 0.5} and b >= {i - 0.25}"
        matcher.add(f"t{i}", text)
        scan.add(f"t{i}", text)
        matcher.check()
        agree(matcher, scan, [*events, {"a": i + 0.5, "b": i - 0.25}])


def test_deletion_tombstones_then_purges(monkeypatch) -> None:
    monkeypatch.setattr("psmatch.core.registry.PURGE_MIN", 3)
    texts = {f"s{i}": f"a = {i % 5} and b between {i} and {i + 10}" for i in range(30)}
    matcher, scan = build(texts)
    events = [{"a": i % 5, "b": i} for i in range(45)]
    agree(matcher, scan, events)
    entries_before = len(matcher.lists.entries()[0])
    for i in range(0, 30, 3):
        matcher.remove(f"s{i}")
        scan.remove(f"s{i}")
        matcher.check()
        agree(matcher, scan, events)
    assert len(matcher.lists.entries()[0]) < entries_before  # purged, not only tombstoned
    assert matcher.registry.awaiting_reclaim <= len(matcher)
    size = int(matcher.list_size.sum())
    # counter slots renumbered at the purge
    assert size == len(matcher) + matcher.registry.awaiting_reclaim
    for i in range(0, 30, 3):  # cids freed by the purge are reused
        matcher.add(f"s{i}", texts[f"s{i}"])
        scan.add(f"s{i}", texts[f"s{i}"])
        matcher.check()
    agree(matcher, scan, events)


@pytest.mark.parametrize("value", [2**53, 2**53 + 1, 2.0**53, -0.0, "é", True, 1e300])
def test_exotic_values(value: object) -> None:
    matcher, scan = build({"eq": "v = 9007199254740993", "lt": "v < 9007199254740993",
                           "s": "v >= 'a'", "b": "v != true", "f": "v > 1e299"})
    agree(matcher, scan, [{"v": value}])


def test_several_conjuncts_report_the_subscription_once() -> None:
    matcher, scan = build({"x": "a = 1 or b = 2 or (a > 0 and b > 0)"})
    assert matcher.match({"a": 1, "b": 2}) == {"x"}
    agree(matcher, scan, [{"a": 1}, {"b": 2}, {"a": 2, "b": 1}, {"a": 0}])
