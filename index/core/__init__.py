"""The machinery every indexed matcher shares: the conjunct registry, the batch
matching pipeline, growable columns and the posting multimap.
"""
