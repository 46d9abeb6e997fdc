"""psmatch's matching library: subscriptions in, matching subscription ids out.

    >>> from index import make_matcher
    >>> m = make_matcher("psthash")
    >>> m.add("alice", "price < 100 and category in ('books', 'music')")
    >>> m.match({"price": 12, "category": "books"})
    {'alice'}

``MATCHERS`` names every matcher; all obey the semantics in :mod:`index.events` and
:mod:`index.language` and return exactly what ``scan`` returns.
"""

from __future__ import annotations

from importlib import import_module

from index.errors import (
    EventError,
    ExpressionError,
    ExpressionLimitError,
    PsmatchError,
    UnknownMatcherError,
    UnsatisfiableError,
)
from index.explain import Explanation, explain
from index.matcher import Matcher, MatcherStats

_REGISTRY: dict[str, tuple[str, str]] = {
    "scan": ("index.scan", "ScanMatcher"),
    "pstbloom": ("index.pstree.pstbloom", "PSTBloomMatcher"),
    "psthash": ("index.pstree.psthash", "PSTHashMatcher"),
    "opindex": ("index.baselines.opindex", "OpIndexMatcher"),
    "betree": ("index.baselines.betree", "BETreeMatcher"),
    "counting": ("index.baselines.counting", "CountingMatcher"),
    "propagation": ("index.baselines.propagation", "PropagationMatcher"),
    "pbtree": ("index.baselines.pbtree", "PBTreeMatcher"),
}

MATCHERS: tuple[str, ...] = tuple(_REGISTRY)
"""The names ``make_matcher`` accepts."""


def make_matcher(name: str) -> Matcher:
    """A new, empty matcher of the named kind (one of ``MATCHERS``)."""
    try:
        module, cls = _REGISTRY[name]
    except KeyError:
        raise UnknownMatcherError(
            f"unknown matcher {name!r}; choose one of {', '.join(MATCHERS)}"
        ) from None
    return getattr(import_module(module), cls)()


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
    "explain",
    "make_matcher",
]
