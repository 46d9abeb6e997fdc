"""The PS-Tree family (Ji & Jacobsen, "PS-Tree-Based Efficient Boolean Expression
Matching for High-Dimensional and Dense Workloads", PVLDB 12(3), 2018): the forest of
predicate spaces, the conjuncts' predicate rows, PSTBloom and PSTHash.

OpIndex and BE-Tree (:mod:`psmatch.baselines`) reuse the forest as their value encoding.
"""
