"""PSTBloom (Ji & Jacobsen 2018, section 5): one access predicate, Bloom signatures.

Owns PSTBloom's two structures on top of the shared PS-Trees:

* *subscription lists*: a :class:`psmatch.core.multimap.MultiMap` from space id to the
  conjuncts whose access predicate (the first in access order, i.e. the most selective)
  covers that space. An event's located spaces give the candidates directly.
* *side lists*: tree id -> conjuncts whose access predicate is near-full (``!=``,
  ``not in``; :func:`psmatch.pstree.store.near_full`). Filed once instead of under nearly
  every space of the tree, so a flood of them costs linear memory; the event's trees
  give them as candidates, whose access predicate verification then checks.
* *cells* (:class:`psmatch.pstree.cells.WideLists`): conjuncts whose access predicate
  is wide in a fine tree (a fine value domain, whose spaces grow with the index), in
  O(log cells) canonical segments instead of under each space; a conjunct whose access
  predicate later splits make wide moves there, its list entries dropped at the next
  compaction of the lists. Their candidates from an edge cell are verified from the
  access predicate on.
* *signatures*: per space, a Bloom filter (two hash functions, at least 8 bits per
  member) over the conjuncts whose *other* predicates cover the space. A candidate is
  dropped when the signature of the event's space in one of its other dimensions lacks
  it (Lemma 1: no false drops). The survivors are verified exactly.

Signatures are built in bulk (:meth:`PSTBloomMatcher.build_signatures`), each space
sized from its own member count, as the paper's pitfall list advises. A conjunct's two
bits come from one multiplicative hash of its id, in the compiled loops that set them
and test them (``src/psmatch/core/_kernels.c``: ``bloom_add``, ``signature_filter``). Between
builds a split space shares its parent's filter (its members are the same); conjuncts
added since the last build skip the signature test and go straight to exact
verification, and removed ones leave stale bits (extra false positives, never false
drops). The signatures are rebuilt, at the next match, when the additions since the
last build exceed a tenth of the index or the removals a quarter, or after a bulk add
(``add_many``): a rebuild costs a pass over every live conjunct, so a reload or
catch-up made of many ``add_many`` calls pays for one, not one per call. Predicates
that cover more than :data:`WIDE_SPACES` spaces (``!=``, ``not in``, wide ranges) are
not put into signatures: a filter holding nearly every conjunct of its tree rejects
almost nothing and costs memory in every space; verification checks them instead.

Cost per event: locating O(|E| log m), candidates O(c), signature tests O(c x p) with
early exit (one compiled pass over the candidates), verification of the survivors.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from psmatch.core import _kernels
from psmatch.core.columns import GrowableArray, expand_ranges, grown_capacity, zero_padded
from psmatch.core.multimap import MultiMap
from psmatch.core.pipeline import Batch, Candidates
from psmatch.events import FlatEvent
from psmatch.pstree.cells import FINE_SPACES, WideLists, any_fine, row_cover, wide_mask
from psmatch.pstree.matcher import ForestBatch, ForestMatcher
from psmatch.pstree.spaces import Splits
from psmatch.pstree.store import InsertedConjuncts

WIDE_SPACES = 32
"""Predicates covering more spaces than this stay out of the signatures."""
SIGNATURE_BLOCK = 1 << 13
"""Conjuncts :meth:`PSTBloomMatcher.build_signatures` reads at once."""
BITS_PER_MEMBER = 8
_HASH = 0x9E3779B97F4A7C15
"""The multiplier of the signatures' hash (2**64 / golden ratio)."""


class PSTBloomMatcher(ForestMatcher):
    """PS-Tree index with one access predicate per conjunct and Bloom signatures."""

    name = "pstbloom"

    def __init__(self) -> None:
        super().__init__()
        self.lists = MultiMap()
        self.side = MultiMap()  # tree id -> conjuncts whose access predicate is near-full
        self.cells = WideLists()  # access predicates covering over WIDE_COVER spaces
        self.sig_offset = np.zeros(0, dtype=np.int64)  # first word of a space's filter
        self.sig_bits = np.zeros(0, dtype=np.int64)  # its size in bits; 0: no filter
        self.sig_pool = np.zeros(0, dtype=np.uint64)
        self.sig_mask = GrowableArray(np.uint64)  # per cid: bit k = predicate k is signed
        self._added_since_build = 0
        self._removed_since_build = 0
        self._bulk_since_build = False
        self._stale_entries = 0  # list entries of conjuncts since moved to the cells

    # -- filing ------------------------------------------------------------------------

    def _file_rows(self, inserted: InsertedConjuncts) -> None:
        grown = self._on_splits(inserted.splits)
        store = self.store
        side = inserted.near_full(0)
        if any_fine(self.forest):
            _, sizes, _ = self.forest.space_layout()
            wide = wide_mask(inserted.covered_count(0, ~side),
                             sizes[store.pred_tree[store.pred_start.data[inserted.cids]]])
        else:
            wide = np.zeros(len(inserted.cids), dtype=bool)
        cids, sids = inserted.covered(0, ~side & ~wide)
        self.lists.add(sids, cids.astype(np.int32))
        self.side.add(self.store.pred_tree[self.store.pred_start.data[
            inserted.cids[side]]].astype(np.int64), inserted.cids[side].astype(np.int32))
        self.sig_mask.put(inserted.cids, 0)
        self._added_since_build += len(inserted.cids)
        # last: re-anchoring a tree may merge spaces, which the lists above were filed by
        if len(grown):
            self.cells.file(self.forest, store, np.concatenate([inserted.cids, grown]),
                            np.concatenate([wide, np.ones(len(grown), dtype=bool)]),
                            inserted.splits.tree)
        else:
            self.cells.file(self.forest, store, inserted.cids, wide, inserted.splits.tree)
        if self._stale_entries > max(4096, len(self.lists) // 4):
            self.lists.compact(self._keep_live)
            self._stale_entries = 0

    def _unfile_rows(self, cids: np.ndarray) -> None:
        self._removed_since_build += len(cids)

    def _on_splits(self, splits: Splits) -> np.ndarray:
        """The new spaces of a batch's splits inherit their gap's lists and filter, all
        in one lookup (the gaps existed before the batch, so none is a new space).

        Returns the conjuncts whose access predicate the splits made wide in a fine tree
        (:func:`psmatch.pstree.cells.wide_mask`), for the cells: their list entries
        stay, true but stale, until the lists are next compacted."""
        if not len(splits):
            return np.empty(0, dtype=np.int64)
        parents = splits.sid
        new = splits.new_sids
        owner, cids = self.lists.lookup(parents)
        if self.cells.active:
            at_home = ~self.cells.wide.data[cids]
            owner, cids = owner[at_home], cids[at_home]
        self.lists.add(new[owner].ravel(), np.repeat(cids, 2))
        self._share_signatures(parents, new)
        if not any_fine(self.forest):
            return np.empty(0, dtype=np.int64)
        _, sizes, _ = self.forest.space_layout()
        fine = sizes[splits.tree[owner]] > FINE_SPACES
        return self._grown_wide(cids[fine & self.registry.alive.data[cids]])

    def _grown_wide(self, cids: np.ndarray) -> np.ndarray:
        """Those of ``cids`` whose access predicate is now wide in a fine tree."""
        if not len(cids):
            return np.empty(0, dtype=np.int64)
        cids = np.unique(cids).astype(np.int64)
        cover, spaces = row_cover(self.forest, self.store, cids, 0)
        grown = wide_mask(cover, spaces)
        self._stale_entries += int(cover[grown].sum())
        return cids[grown]

    def _share_signatures(self, parents: np.ndarray, new: np.ndarray) -> None:
        need = int(new.max()) + 1
        if need > len(self.sig_bits):
            grow = grown_capacity(need, max(len(self.sig_bits), 64))
            self.sig_offset = zero_padded(self.sig_offset, grow)
            self.sig_bits = zero_padded(self.sig_bits, grow)
        inside = parents < len(self.sig_bits)
        for column in (self.sig_offset, self.sig_bits):
            column[new[inside]] = column[parents[inside]][:, None]

    def _finish_bulk(self) -> None:
        """The bulk-added conjuncts are signed at the next match (see the module
        docstring)."""
        self._bulk_since_build = True

    def _posting_maps(self) -> list[MultiMap]:
        return [self.lists]

    def _keep_live(self, keys: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Besides live conjuncts and spaces: not a conjunct since moved to the cells."""
        return super()._keep_live(keys, values) & ~self.cells.wide.data[values]

    def _purge(self) -> None:
        self.side.compact(lambda _, cids: self.registry.alive.data[cids])
        self.cells.compact(self.registry.alive.data)
        super()._purge()

    def _family_bytes(self) -> int:
        return int(self.sig_pool.nbytes + self.sig_offset.nbytes + self.sig_bits.nbytes
                   + self.sig_mask.nbytes + self.side.nbytes + self.cells.nbytes)

    def _check(self) -> None:
        super()._check()
        self.cells.check(self.forest, self.store)

    # -- signatures --------------------------------------------------------------------

    def build_signatures(self) -> None:
        """Rebuild every space's Bloom signature from the live conjuncts.

        Two passes over the live conjuncts, a block of :data:`SIGNATURE_BLOCK` at a time
        (:meth:`_signed`): the first counts each space's members with a running sum over
        the layout (no list of members) and marks the signed predicates in the conjuncts'
        masks, rewritten in place, which sizes the filters; the second sets the members'
        bits. The temporaries are those of one block, whatever the index, not a list of
        all live conjuncts and a new column of masks. Until it returns, the index stays
        stale (:meth:`_signatures_stale`): a build that raised is done again before the
        next match. Cost O(total spaces covered by signed predicates + spaces x blocks),
        vectorised.
        """
        spaces = self.forest.spaces
        _, _, layout = self.forest.space_layout()
        mask = self.sig_mask.view()
        mask[:] = 0
        running = np.zeros(len(layout) + 1, dtype=np.int64)
        for cids in self._live_blocks():
            (row_cid, row_k), (_, first, cover) = self._signed(cids)
            np.bitwise_or.at(mask, row_cid, np.uint64(1) << row_k.astype(np.uint64))
            running += np.bincount(first, minlength=len(running))
            running -= np.bincount(first + cover, minlength=len(running))
        count = np.zeros(spaces.size, dtype=np.int64)
        count[layout] = np.cumsum(running[:-1])
        del running
        bits = np.maximum(64, 1 << np.ceil(np.log2(np.maximum(count * BITS_PER_MEMBER, 1)))
                          .astype(np.int64))
        bits[~spaces.alive[: spaces.size]] = 0
        words = bits // 64
        self.sig_offset = np.cumsum(words) - words
        self.sig_bits = bits
        pool = np.zeros(int(words.sum()), dtype=np.uint64)
        for cids in self._live_blocks():
            _, (iv_cid, first, cover) = self._signed(cids)
            member, position = expand_ranges(first, cover)
            sid, cid = layout[position], iv_cid[member]
            _kernels.bloom_add(pool, self.sig_offset[sid], bits[sid],
                               cid.astype(np.int64, copy=False), _HASH)  # fmt: skip
        self.sig_pool = pool
        self._added_since_build = 0
        self._removed_since_build = 0
        self._bulk_since_build = False

    def _live_blocks(self) -> Iterator[np.ndarray]:
        """The live conjuncts' ids, :data:`SIGNATURE_BLOCK` ids at a time."""
        alive = self.registry.alive.view()
        for start in range(0, len(alive), SIGNATURE_BLOCK):
            yield start + np.flatnonzero(alive[start : start + SIGNATURE_BLOCK])

    def _signed(self, cids: np.ndarray) -> tuple[tuple[np.ndarray, np.ndarray],
                                                 tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The signed predicates of conjuncts ``cids`` (those after the access predicate
        covering at most :data:`WIDE_SPACES` spaces), as (cid, place in access order), and
        their intervals as (cid, first layout position, spaces covered). O(predicates of
        the conjuncts), vectorised."""
        store = self.store
        base, sizes, _ = self.forest.space_layout()
        start = store.pred_start.data[cids].astype(np.int64)
        owner, pids = expand_ranges(start + 1,
                                    np.maximum(store.pred_count.data[cids].astype(np.int64) - 1, 0))
        iv_owner, *bounds = store.intervals(pids)
        trees = store.pred_tree[pids][iv_owner]
        lo, hi = store.positions(*bounds)
        cover = np.maximum(np.minimum(hi, sizes[trees] - 1) - lo + 1, 0)
        signed_row = np.bincount(iv_owner, weights=cover, minlength=len(pids)) <= WIDE_SPACES
        signed_iv = signed_row[iv_owner]
        return ((cids[owner[signed_row]], (pids - start[owner])[signed_row]),
                (cids[owner[iv_owner[signed_iv]]], (base[trees] + lo)[signed_iv],
                 cover[signed_iv]))

    def _signatures_stale(self) -> bool:
        live = max(self.registry.live, 1)
        return (self._bulk_since_build or self._added_since_build > max(1024, live // 10)
                or self._removed_since_build > max(1024, live // 4))

    # -- matching ----------------------------------------------------------------------

    def _begin(self, events: list[FlatEvent]) -> ForestBatch:
        if self._signatures_stale():
            self.build_signatures()
        return super()._begin(events)

    def _candidates(self, batch: Batch, first: int, last: int) -> Candidates:
        """The subscription lists of the event's spaces (the access predicate holds) and
        the side lists of its trees (near-full access predicates, still to verify),
        through the signatures."""
        assert isinstance(batch, ForestBatch)
        located, positions = batch.chunk(first, last)
        sid_matrix = np.full(positions.shape, -1, dtype=np.int64)
        sid_matrix[located.event, located.tree] = located.sid
        pair, cids = self.lists.lookup(located.sid)
        side_pair, side_cids = self.side.lookup(located.tree)
        wide_pair, wide_cids, wide_checked, probed = self.cells.candidates(
            self.forest, located.tree, located.position)
        checked = np.concatenate([
            np.repeat(np.array([1, 0], dtype=np.int32), [len(pair), len(side_pair)]),
            wide_checked])
        ev, cids, checked = self._signature_filter(
            located.event[np.concatenate([pair, side_pair, wide_pair])],
            np.concatenate([cids, side_cids, wide_cids]).astype(np.int64), checked, sid_matrix)
        return Candidates(ev, cids, len(pair) + len(side_pair) + len(wide_pair) + probed,
                          checked)

    def _signature_filter(self, ev: np.ndarray, cids: np.ndarray, checked: np.ndarray,
                          sid_matrix: np.ndarray
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Keep the live candidates whose id is in the signature of the event's space in
        each of its signed dimensions (an event that lacks one drops it). One compiled
        pass (``src/psmatch/core/_kernels.c``, ``signature_filter``): O(candidates x signed
        predicates checked up to the first miss), reading no temporaries. Its numpy
        version (a pass per predicate place over the remaining candidates) took 64 % of
        PSTBloom's matching at 1M BE-Gen subscriptions."""
        kept = np.empty(len(cids), dtype=np.int64)
        n_kept = _kernels.signature_filter(
            ev, cids, self.registry.alive.data, self.sig_mask.data, self.store.pred_start.data,
            self.store.row_table(), sid_matrix, self.sig_bits, self.sig_offset, self.sig_pool,
            kept, _HASH)
        kept = kept[:n_kept]
        return ev[kept], cids[kept], checked[kept]
