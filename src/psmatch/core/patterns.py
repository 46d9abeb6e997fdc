"""The index of ``like`` suffix and contains patterns, shared by every indexed matcher.

A ``like '%x'`` (suffix) or ``like '%x%'`` (contains) pattern is not an interval, so no
PS-Tree space, paper predicate or sorted list can decide it: the conjuncts holding one
are *residual* (:mod:`psmatch.core.registry`) and used to be finished by
``Conjunct.evaluate`` on every candidate, i.e. on every event carrying the attribute.
This module owns :class:`PatternIndex`, which finds, for a string value, the patterns
that hold on it, touching only the patterns that share a short key with the value:

* *contains*: each pattern is posted under one of its n-grams of up to :data:`GRAM`
  characters: the whole text when it is shorter, else its trigram with the shortest
  posting list when it was filed (the rarest, so the lists stay short). A value's
  candidates are the postings of its distinct substrings of 1 to :data:`GRAM`
  characters (O(length) keys);
* *suffix*: each pattern is posted under its last :data:`GRAM` characters (or all of
  them); a value's candidates are the postings of its own last 1 to :data:`GRAM`
  characters (three keys);
* every candidate is then verified exactly (``in`` / ``endswith``), so a shared key
  costs a check, never a wrong answer.

Identical patterns on one attribute share an id (reference counted); freed ids are
reused. Cost per value: O(length) key lookups plus one exact check per candidate.

A conjunct's *access pattern* (:func:`access_pattern`) is the pattern a matcher may
file it under: a necessary condition, so a conjunct whose access pattern does not hold
on an event (:meth:`PatternIndex.holding_keys`) can be left out of its candidates.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from psmatch.core.columns import distinct_sorted
from psmatch.events import FlatEvent
from psmatch.language import Conjunct, Pattern

GRAM = 3
"""Longest key a pattern is posted under (trigrams)."""
PATTERN_BYTES = 200
"""Estimated bytes of one filed pattern: its text, its key and its posting entry."""

PatternKey = tuple[str, str, str]
"""A filed pattern as ``(attribute, form, text)``."""


def access_pattern(conjunct: Conjunct) -> tuple[str, Pattern] | None:
    """The first pattern of ``conjunct`` the pattern index can decide, with its attribute:
    a necessary condition of the conjunct (its predicates all hold when it does)."""
    for predicate in conjunct.predicates:
        for pattern in predicate.patterns:
            if PatternIndex.indexable(pattern):
                return predicate.attribute, pattern
    return None


class PatternIndex:
    """Suffix and contains patterns per attribute, looked up by short keys."""

    def __init__(self) -> None:
        self._id_of: dict[PatternKey, int] = {}  # (attribute, form, text) -> pid
        self._key: list[PatternKey | None] = []  # pid -> (attribute, form, text)
        self._post: list[str] = []  # pid -> the key it is posted under
        self._refs: list[int] = []
        self._free: list[int] = []
        # (attribute, form) -> key -> pids posted under it
        self._postings: dict[tuple[str, str], dict[str, set[int]]] = {}

    def __len__(self) -> int:
        """Distinct patterns filed."""
        return len(self._id_of)

    @staticmethod
    def indexable(pattern: Pattern) -> bool:
        """Whether the index can decide ``pattern`` (a positive suffix or contains)."""
        return not pattern.negated and bool(pattern.text)

    def acquire(self, attribute: str, pattern: Pattern) -> int:
        """The id of ``pattern`` on ``attribute``, filed if new; one more reference.
        O(length of the pattern)."""
        assert self.indexable(pattern)
        key = (attribute, pattern.form, pattern.text)
        pid = self._id_of.get(key)
        if pid is not None:
            self._refs[pid] += 1
            return pid
        postings = self._postings.setdefault((attribute, pattern.form), {})
        text = pattern.text
        if pattern.form == "suffix":
            post = text[-GRAM:]
        elif len(text) <= GRAM:
            post = text
        else:
            post = min((text[i : i + GRAM] for i in range(len(text) - GRAM + 1)),
                       key=lambda gram: len(postings.get(gram, ())))
        pid = self._free.pop() if self._free else len(self._key)
        if pid == len(self._key):
            self._key.append(key)
            self._post.append(post)
            self._refs.append(1)
        else:
            self._key[pid], self._post[pid], self._refs[pid] = key, post, 1
        self._id_of[key] = pid
        postings.setdefault(post, set()).add(pid)
        return pid

    def release(self, pid: int) -> None:
        """Drop one reference; the last one unfiles the pattern and frees its id."""
        self._refs[pid] -= 1
        if self._refs[pid]:
            return
        key = self._key[pid]
        assert key is not None
        attribute, form, _ = key
        postings = self._postings[(attribute, form)]
        posted = postings[self._post[pid]]
        posted.discard(pid)
        if not posted:
            del postings[self._post[pid]]
        del self._id_of[key]
        self._key[pid] = None
        self._free.append(pid)

    def candidates(self, attribute: str, value: str) -> set[int]:
        """The pattern ids posted under a key of ``value`` on ``attribute``: a superset of
        those that hold. O(length of the value) lookups."""
        found: set[int] = set()
        contains = self._postings.get((attribute, "contains"))
        if contains:
            keys = {value[i : i + n] for n in range(1, GRAM + 1)
                    for i in range(len(value) - n + 1)}
            for key in keys & contains.keys():
                found |= contains[key]
        suffix = self._postings.get((attribute, "suffix"))
        if suffix:
            for n in range(1, min(GRAM, len(value)) + 1):
                posted = suffix.get(value[-n:])
                if posted:
                    found |= posted
        return found

    def _holding_ids(self, event: FlatEvent) -> list[int]:
        """The ids of the patterns that hold on ``event`` (an id once per attribute).
        Cost: :meth:`candidates` of each string value on an attribute with patterns,
        plus one exact check per candidate."""
        attributes = {attribute for attribute, _ in self._postings}
        found = []
        for attribute, value in event.items():
            if attribute not in attributes or not isinstance(value, str):
                continue
            for pid in self.candidates(attribute, value):
                _, form, text = self._key[pid]  # type: ignore[misc]
                if value.endswith(text) if form == "suffix" else text in value:
                    found.append(pid)
        return found

    def holding(self, events: Sequence[FlatEvent], rows: np.ndarray) -> np.ndarray:
        """Sorted keys ``event * len(ids) + pid`` of every (event, pattern) that holds,
        for the events ``rows`` of ``events``; cost as :meth:`_holding_ids` per event."""
        width = self.width
        keys = [e * width + pid for e in rows.tolist() for pid in self._holding_ids(events[e])]
        return distinct_sorted(np.array(keys, dtype=np.int64))

    def holding_keys(self, event: FlatEvent) -> set[PatternKey]:
        """The ``(attribute, form, text)`` of every pattern that holds on ``event``; cost
        as :meth:`_holding_ids`."""
        key = self._key
        return {key[pid] for pid in self._holding_ids(event)}  # type: ignore[misc]

    @property
    def width(self) -> int:
        """The multiplier of :meth:`holding`'s keys (ids handed out, at least 1)."""
        return max(len(self._key), 1)

    @property
    def nbytes(self) -> int:
        return PATTERN_BYTES * len(self._id_of) + 8 * (len(self._key) + len(self._free))

    def check(self, expected: dict[int, int]) -> None:
        """Assert that the filed patterns are exactly those of ``expected`` (pid ->
        references), each posted once under a key of its text."""
        live = {pid: refs for pid, refs in enumerate(self._refs) if self._key[pid] is not None}
        assert live == expected, "pattern references disagree with the conjuncts"
        assert sorted(self._free) == [p for p, k in enumerate(self._key) if k is None]
        posted = sorted(pid for table in self._postings.values()
                        for pids in table.values() for pid in pids)
        assert posted == sorted(live), "a pattern is posted twice or not at all"
        for pid in live:
            attribute, form, text = self._key[pid]  # type: ignore[misc]
            assert pid in self._postings[(attribute, form)][self._post[pid]]
            assert (text.endswith(self._post[pid]) if form == "suffix"
                    else self._post[pid] in text)
