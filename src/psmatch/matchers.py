"""The registry of matcher families: ``make_matcher(name)`` for every name in ``MATCHERS``.

Each family is imported on first use, so that a program that builds one matcher loads
only that family's modules.
"""

from __future__ import annotations

from importlib import import_module

from psmatch.core.matcher import Matcher
from psmatch.errors import UnknownMatcherError

_REGISTRY: dict[str, tuple[str, str]] = {
    "scan": ("psmatch.scan", "ScanMatcher"),
    "pstbloom": ("psmatch.pstree.pstbloom", "PSTBloomMatcher"),
    "psthash": ("psmatch.pstree.psthash", "PSTHashMatcher"),
    "opindex": ("psmatch.baselines.opindex", "OpIndexMatcher"),
    "betree": ("psmatch.baselines.betree", "BETreeMatcher"),
    "counting": ("psmatch.baselines.counting", "CountingMatcher"),
    "propagation": ("psmatch.baselines.propagation", "PropagationMatcher"),
    "pbtree": ("psmatch.baselines.pbtree", "PBTreeMatcher"),
    "bitset": ("psmatch.bitset.matcher", "BitsetMatcher"),
    "auto": ("psmatch.auto.matcher", "AutoMatcher"),
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
