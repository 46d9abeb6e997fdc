"""The limits on a subscription, which bound what parsing and normalisation may cost.

Each is checked as the parser or normalisation reaches it (the normal form's total of
intervals once it is complete), and crossing one is an
:class:`psmatch.errors.ExpressionLimitError` naming the position.
"""

from __future__ import annotations

MAX_CONJUNCTS = 64
"""Most conjuncts a subscription may have after normalisation to DNF."""
MAX_PREDICATES = 256
"""Most comparisons an expression may contain, and most values in one ``in`` list."""
MAX_DEPTH = 64
"""Deepest nesting of parentheses and ``not``."""
MAX_TEXT = 65_536
"""Longest expression text, in characters."""
MAX_INTERVALS = 1024
"""Most intervals in one predicate, once the comparisons on its attribute in a conjunct
are merged (four ``not in`` lists of 256 values leave 1,025)."""
MAX_NORMAL_FORM_INTERVALS = 65_536
"""Most intervals in a subscription's normal form, summed over its conjuncts: what a
matcher indexes for it."""
MAX_NORMALISATION_STEPS = 2**18
"""Most steps (intervals read or built, patterns checked, predicates copied) that
normalisation may take: what bounds its time whatever the mix of operators."""
