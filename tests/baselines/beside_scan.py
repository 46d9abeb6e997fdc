"""Building a matcher beside ``scan`` and comparing their answers, for the baselines' tests."""

from __future__ import annotations

from typing import TypeVar

from psmatch import Matcher, make_matcher

M = TypeVar("M", bound=Matcher)


def build_beside_scan(matcher: M, subscriptions: dict[str, str]) -> tuple[M, Matcher]:
    """Add each subscription to ``matcher`` and to a new ``scan``, checking ``matcher``
    after every add."""
    scan = make_matcher("scan")
    for sub_id, text in subscriptions.items():
        matcher.add(sub_id, text)
        scan.add(sub_id, text)
        matcher.check()
    return matcher, scan


def agree(matcher: Matcher, scan: Matcher, events: list[dict]) -> None:
    assert matcher.match_batch(events) == scan.match_batch(events)
