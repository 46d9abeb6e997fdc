"""psmatch: content-based publish/subscribe. Subscriptions in, matching subscription ids out.

    >>> from psmatch import make_matcher
    >>> m = make_matcher("psthash")
    >>> m.add("alice", "price < 100 and category in ('books', 'music')")
    >>> m.match({"price": 12, "category": "books"})
    {'alice'}

``MATCHERS`` names every matcher; all obey the semantics in :mod:`psmatch.events` and
:mod:`psmatch.language` and return exactly what ``scan`` returns. The streaming service
is :mod:`psmatch.service` (the ``service`` extra: ``pip install 'psmatch[service]'``).
"""

from __future__ import annotations

from psmatch.core.matcher import Matcher, MatcherStats
from psmatch.errors import (
    EventError,
    ExpressionError,
    ExpressionLimitError,
    PsmatchError,
    UnknownMatcherError,
    UnsatisfiableError,
)
from psmatch.explain import Explanation, explain
from psmatch.matchers import MATCHERS, make_matcher

__version__ = "0.2.0"

__all__ = [
    "MATCHERS",
    "EventError",
    "Explanation",
    "ExpressionError",
    "ExpressionLimitError",
    "Matcher",
    "MatcherStats",
    "PsmatchError",
    "UnknownMatcherError",
    "UnsatisfiableError",
    "__version__",
    "explain",
    "make_matcher",
]
