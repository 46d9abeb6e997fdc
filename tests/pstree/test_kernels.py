"""The compiled kernels of the PS-Tree matchers, against direct Python loops over the
same columns: PSTHash's scan of its fallback lists returns, for each located entry, the
conjuncts under its space's keys whose second tree the event has or that have none, less
those needing another tree the event lacks; and
its pairing of located entries returns the pairs of one event's entries whose trees are
a known tree pair."""

from __future__ import annotations

from unittest.mock import patch

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from psmatch.core import multimap as multimap_module
from psmatch.core.multimap import MultiMap
from psmatch.pstree.kernels import fallback_candidates, hashed_pair_entries
from psmatch.pstree.psthash import NO_TREE, fallback_key

TREES = 5
CONJUNCTS = 40
entries = st.tuples(st.integers(0, 12), st.sampled_from([*range(TREES), NO_TREE]),
                    st.integers(0, CONJUNCTS - 1))


@given(st.lists(st.lists(entries, max_size=30), max_size=6),
       st.lists(st.tuples(st.integers(0, 3), st.integers(0, 13)), max_size=25),
       st.lists(st.lists(st.booleans(), min_size=TREES, max_size=TREES), min_size=4,
                max_size=4),
       st.lists(st.sets(st.integers(0, TREES - 1), max_size=3), min_size=CONJUNCTS,
                max_size=CONJUNCTS))
@settings(max_examples=200, deadline=None)
def test_fallback_scan_keeps_the_conjuncts_whose_trees_the_event_has(batches, located, has,
                                                                     needs) -> None:
    """Over main and the delta of a multimap (tiny merge threshold, so both hold
    entries): each located (event, space) gets every conjunct under its space's keys
    whose tree is ``NO_TREE`` or one its event has, and whose tree mask (``needs``: the
    trees of its predicates) needs no tree the event lacks."""
    with patch.object(multimap_module, "MERGE_MIN", 8):
        multimap, reference = MultiMap(), {}
        for batch in batches:
            multimap.add(fallback_key(np.array([s for s, _, _ in batch], dtype=np.int64),
                                      np.array([t for _, t, _ in batch], dtype=np.int64)),
                         np.array([v for _, _, v in batch], dtype=np.int32))
            for sid, tree, value in batch:
                reference.setdefault((sid, tree), []).append(value)
        positions = np.where(np.array(has, dtype=bool), 7, -1).astype(np.int32)
        tree_mask = np.array([sum(1 << t for t in trees) for trees in needs], np.uint64)
        events = np.array([e for e, _ in located], dtype=np.int64)
        low = np.array([s for _, s in located], dtype=np.int64) << 32
        got = []
        for part in multimap.key_ranges(low, low + (1 << 32)):
            owner, values = fallback_candidates(*part, events, positions, tree_mask, NO_TREE)
            assert values.dtype == np.int32
            got += zip(owner.tolist(), values.tolist(), strict=True)
    expected = [(i, v) for i, (event, sid) in enumerate(located)
                for (s, tree), values in reference.items() if s == sid
                and (tree == NO_TREE or has[event][tree]) for v in values
                if all(has[event][t] for t in needs[v])]
    assert sorted(got) == sorted(expected)


@given(st.lists(st.sets(st.integers(0, 60), max_size=40), max_size=5),
       st.sets(st.tuples(st.integers(0, 60), st.integers(0, 60)).filter(lambda p: p[0] < p[1]),
               max_size=300), st.randoms(use_true_random=False))
@settings(max_examples=300, deadline=None)
def test_entry_pairs_are_the_events_tree_pairs(events, tree_pairs, random) -> None:
    """Each event's entries (one per tree, sorted) are paired when their two trees are
    a listed pair, whatever the lengths of the runs compared: events of up to 40 trees
    against up to 300 pairs cover the merge and both searches (``MERGE_RATIO``). Each
    pair comes as its first entry and the key of the two entries' spaces: the larger
    space id plus one above the smaller, whichever entry has it."""
    event = np.array([e for e, trees in enumerate(events) for _ in trees], dtype=np.int64)
    tree = np.array([t for trees in events for t in sorted(trees)], dtype=np.int64)
    sid = np.array([random.randrange(2**31 - 1) for _ in tree], dtype=np.int64)
    pairs = np.array(sorted((a << 32) | b for a, b in tree_pairs), dtype=np.int64)
    owner, keys = hashed_pair_entries(event, tree, sid, pairs)
    expected = [(i, (max(sid[i], sid[j]) + 1) << 32 | min(sid[i], sid[j]))
                for i in range(len(event)) for j in range(i + 1, len(event))
                if event[i] == event[j] and (int(tree[i]), int(tree[j])) in tree_pairs]
    assert sorted(zip(owner.tolist(), keys.tolist(), strict=True)) == sorted(expected)
