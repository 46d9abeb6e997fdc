"""Wide access predicates in canonical segments of coarse cells (psmatch.pstree.cells).

Counted, not timed: the entries a wide conjunct is filed under, the candidates an event
gets from the cells, and the answers against ``scan`` after every mutation.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psmatch import make_matcher
from psmatch.pstree.cells import CELL_BOUNDS, WIDE_COVER, canonical_segments

FAMILIES = ["pstbloom", "psthash"]
DOMAIN = 1_000_000


def _ranges(n: int, width: float, seed: int, attributes: int = 3,
            prefix: str = "r") -> list[tuple[str, str]]:
    """``n`` conjuncts of two ranges of ``width x DOMAIN`` with random bounds."""
    rng = np.random.default_rng(seed)
    span = int(width * DOMAIN)
    out = []
    for i in range(n):
        a, b = rng.choice(attributes, size=2, replace=False).tolist()
        lo_a, lo_b = rng.integers(0, DOMAIN - span, size=2).tolist()
        out.append((f"{prefix}{i}", f"a{a} between {lo_a} and {lo_a + span} and "
                                    f"a{b} between {lo_b} and {lo_b + span}"))
    return out


def _events(n: int, seed: int, attributes: int = 3) -> list[dict[str, int]]:
    """Events over the domain, some lacking an attribute."""
    rng = np.random.default_rng(seed)
    values = rng.integers(0, DOMAIN, size=(n, attributes)).tolist()
    return [{f"a{k}": v for k, v in enumerate(row) if (i + k) % 5} for i, row in enumerate(values)]


def _both(name: str, statements: list[tuple[str, str]]) -> tuple:
    matcher, scan = make_matcher(name), make_matcher("scan")
    matcher.add_many(statements)
    scan.add_many(statements)
    matcher.check()
    return matcher, scan


@given(st.integers(0, 9).flatmap(lambda levels: st.tuples(
    st.just(levels), st.lists(st.tuples(st.integers(0, 2**levels - 1),
                                        st.integers(0, 2**levels - 1)), max_size=20))))
@settings(max_examples=200, deadline=None)
def test_canonical_segments_tile_exactly_the_cells_covered(drawn: tuple) -> None:
    levels, spans = drawn
    first = np.array([a for a, _ in spans], dtype=np.int64)
    last = np.array([b for _, b in spans], dtype=np.int64)
    nodes, owners = canonical_segments(first, last, levels)
    for i, (a, b) in enumerate(spans):
        mine = nodes[owners == i].tolist()
        leaves: list[int] = []
        for node in mine:
            depth = node.bit_length() - 1  # the node's level counted from the root
            width = 1 << (levels - depth)
            start = (node - (1 << depth)) * width
            leaves.extend(range(start, start + width))
        assert sorted(leaves) == list(range(a, b + 1)), (levels, a, b, mine)
        per_level = np.bincount([n.bit_length() for n in mine], minlength=levels + 2)
        assert (per_level <= 2).all()


@pytest.mark.parametrize("name", FAMILIES)
def test_a_wide_conjunct_costs_a_bounded_number_of_entries(name: str) -> None:
    """Ranges of 40 % over a fine domain: each is filed under O(log cells) keys, not
    under the thousands of spaces it covers; the entries per conjunct stay flat as the
    index grows four times."""
    per_conjunct = []
    for n in (400, 1600):
        matcher, scan = _both(name, _ranges(n, 0.4, seed=n))
        cells = matcher.cells
        wide = int(cells.wide.view().sum())
        assert wide >= n // 2
        levels = int(cells.levels.max())
        assert len(cells.map) <= wide * (2 * levels + 2)
        per_conjunct.append(len(cells.map) / wide)
        events = _events(60, seed=1)
        assert matcher.match_batch(events) == scan.match_batch(events)
    assert per_conjunct[1] <= per_conjunct[0] + 4  # log cells: two more levels


@pytest.mark.parametrize("name", FAMILIES)
def test_narrow_predicates_keep_their_spaces_lists(name: str) -> None:
    """A predicate covering at most WIDE_COVER spaces is never in the cells."""
    matcher, _ = _both(name, _ranges(300, 0.001, seed=3))
    assert not matcher.cells.wide.view().any() and len(matcher.cells.map) == 0
    spaces_per_tree = max(len(t) for t in matcher.forest.trees)
    assert spaces_per_tree > WIDE_COVER  # the domain is fine; the ranges are narrow


@pytest.mark.parametrize("name", FAMILIES)
def test_an_event_gets_few_candidates_from_edge_cells(name: str) -> None:
    """Candidates from the cells are the conjuncts whose access predicate holds plus
    those with an end in the event's cell: a bounded surplus, however large the index."""
    matcher, scan = _both(name, _ranges(2000, 0.4, seed=5))
    for event in _events(20, seed=6):
        batch = matcher._begin([event])
        located = batch.chunk(0, 1)[0]
        _, _, checked, probed = matcher.cells.candidates(matcher.forest, located.tree,
                                                         located.position)
        assert probed <= len(event) * (int(matcher.cells.levels.max()) + 2)
        unchecked = int((checked == 0).sum())
        # an edge cell has at most 2 x CELL_BOUNDS bounds until its tree is anchored anew
        assert unchecked <= len(event) * 2 * 2 * CELL_BOUNDS, unchecked
        assert matcher.match(event) == scan.match(event)


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("width", [0.02, 0.4])
def test_growing_trees_move_early_conjuncts_and_are_anchored_anew(name: str,
                                                                  width: float) -> None:
    """Batches that keep splitting a fine domain's spaces: the early conjuncts, filed
    under their spaces (or hashed) while the trees were coarse, move to the cells once
    their access predicate covers more than WIDE_COVER spaces; trees whose bounds
    double are anchored anew under a new slot, their wide conjuncts filed again; the
    answers stay scan's and ``check()`` holds after every add."""
    matcher, scan = _both(name, _ranges(25, width, seed=7, attributes=2))
    early = np.arange(len(matcher.registry))
    events = _events(80, seed=8, attributes=2)
    slots = []
    for step in range(6):
        more = _ranges(25 * 2**step, width, seed=10 + step, attributes=2, prefix=f"s{step}.")
        matcher.add_many(more)
        scan.add_many(more)
        matcher.check()
        assert matcher.match_batch(events) == scan.match_batch(events)
        slots.append(matcher.cells.slot.copy())
    cells = matcher.cells
    assert cells.wide.view()[early].all()  # every early conjunct is in the cells now
    if width == 0.4:  # wide from the third batch on: anchored anew as the trees doubled
        assert len(slots[2]) == 2 and (slots[-1] > slots[2]).all()
    if name == "psthash":
        assert not matcher.hashed.view()[early].any()
    entries_per_wide = len(cells.map) / int(cells.wide.view().sum())
    assert entries_per_wide <= 2 * int(cells.levels.max()) + 2
    for sub_id, text in _ranges(10, width, seed=99, attributes=2, prefix="one"):
        matcher.add(sub_id, text)
        scan.add(sub_id, text)
        matcher.check()
    assert matcher.match_batch(events) == scan.match_batch(events)


@pytest.mark.parametrize("name", FAMILIES)
def test_removals_purge_the_cells_and_anchors_keep_their_spaces(name: str) -> None:
    """Removed wide conjuncts leave the cells at the purge; the anchors, pinned, stay
    bounds of their trees although no predicate names them any more."""
    matcher, scan = _both(name, _ranges(500, 0.4, seed=11))
    before = len(matcher.cells.map)
    for sub_id in list(scan)[::2]:
        matcher.remove(sub_id)
        scan.remove(sub_id)
    matcher.check()
    assert len(matcher.cells.map) < 0.7 * before  # purges ran
    matcher.remove_many(list(scan))
    for sub_id in list(scan):
        scan.remove(sub_id)
    matcher.check()
    anchors = [a for a in matcher.cells.anchors if len(a)]
    assert anchors and all((matcher.forest.bound_refs[a] >= 1).all() for a in anchors)
    events = _events(40, seed=12)
    assert matcher.match_batch(events) == scan.match_batch(events)
    again = _ranges(300, 0.2, seed=13, prefix="again")
    matcher.add_many(again)
    scan.add_many(again)
    matcher.check()
    assert matcher.match_batch(events) == scan.match_batch(events)
