"""The ``auto`` matcher: each conjunct filed in PSTHash or the bitset family by the width
of its predicates and the domain's distinct bounds (:mod:`psmatch.auto.routing`), one
answer per event (:mod:`psmatch.auto.matcher`)."""
