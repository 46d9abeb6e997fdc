"""The matchers of earlier papers that PSTBloom and PSTHash are measured against:
OpIndex, BE-Tree, and the two-phase counting, Propagation and PB+tree.
"""
