"""The machinery every indexed matcher shares: the conjunct registry, the batch
matching pipeline, growable columns, the posting multimap, and the heap's handling
during bulk work.
"""
