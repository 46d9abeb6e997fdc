"""The bitset family: per-cell fail bitsets over conjunct ids (after Rein and HEM).

Each (attribute, kind) of the filed predicates has its domain cut into a bounded number
of cells, and per cell a bitset of the conjuncts a value there cannot satisfy
(:mod:`psmatch.bitset.cells`); an event ORs one bitset per dimension and the clear bits
are its candidates, tested exactly only where a cell holds a predicate's bound
(:mod:`psmatch.bitset.rows`, on the order-preserving keys of
:mod:`psmatch.bitset.keys`). :mod:`psmatch.bitset.matcher` is the matcher,
``make_matcher("bitset")``.
"""
