"""Adversarial subscription expressions: the operator mixes that once made parsing and
normalisation cost more than linear in the text, each filling the 64 KiB text
limit (``MAX_TEXT``) or the limit on comparisons (``MAX_PREDICATES``).

Owns :data:`EXPRESSIONS`, by name, which ``bench/bench_adversarial.py`` times and
``tests/language/test_parse_cost.py`` counts (those of :data:`TEXT_BOUND` in intervals per
character, those of :data:`STEP_BOUND` against the normalisation's step limit), and the
builders they share. Apart from the
matchers, as BE-Gen is: nothing in the index imports it.
"""

from __future__ import annotations

from collections.abc import Callable

from psmatch.language import MAX_PREDICATES, MAX_TEXT


def values(start: int, count: int = 256) -> str:
    """``start,start+1,...``: ``count`` integers, comma-separated."""
    return ",".join(str(v) for v in range(start, start + count))


def filled(clause: Callable[[int], str], joiner: str = " and ",
           most: int = MAX_PREDICATES) -> str:  # fmt: skip
    """``clause(0)``, ``clause(1)``, ... joined: at most ``most`` of them and
    ``MAX_TEXT`` characters."""
    parts: list[str] = []
    size = 0
    for k in range(most):
        part = clause(k)
        size += len(part) + (len(joiner) if parts else 0)
        if size > MAX_TEXT:
            break
        parts.append(part)
    return joiner.join(parts)


def nested_not_or(depth: int, pad: int) -> str:
    """``not (s1 != '1' or (t2 = '2' or not (...)))``, ``depth`` levels of ``pad``-character
    strings."""
    text = f"s0 = '{0:0{pad}d}'"
    for k in range(1, depth):
        value = f"'{k:0{pad}d}'"
        text = f"not (s{k} != {value} or {text})" if k % 2 else f"(t{k} = {value} or not ({text}))"
    return text


TEXT_BOUND: dict[str, Callable[[], str]] = {
    "issue: 8 `not in` lists of 256 values": lambda: " and ".join(
        f"a not in ({values(256 * k)})" for k in range(8)),
    "issue: 40 `not in` lists of 256 values": lambda: " and ".join(
        f"a not in ({values(256 * k)})" for k in range(40)),
    "issue: 70 identical `in` lists of 256 values": lambda: " and ".join(
        f"a in ({values(0)})" for _ in range(70)),
    "`in` lists of 256 values under `not (... or ...)`": lambda: "not (" + filled(
        lambda k: f"a in ({values(7 * k)})", " or ")[: MAX_TEXT - 300].rsplit(" or ", 1)[0]
    + ")",
    "256 `not between` on one attribute": lambda: filled(
        lambda k: f"s not between '{k:0100d}' and '{k:0100d}~'"),
    "256 `like` (contains and prefix, negated)": lambda: filled(
        lambda k: f"s not like '%{k:0200d}%' and s not like '{k:0200d}%'",
        most=MAX_PREDICATES // 2),
    "`not`/`or` nested 24 deep": lambda: nested_not_or(24, 2600),
}
"""Builders of the expressions whose normalisation costs at most about their length: the
issue's three, then each operator mix filling the 64 KiB text limit (or the
256-comparison limit)."""

STEP_BOUND: dict[str, Callable[[], str]] = {
    "3 `not in` lists in 64 conjuncts, narrowed 200 times": lambda: " and ".join(
        [f"a not in ({values(256 * k)})" for k in range(3)]
        + [f"(b{k} = 1 or c{k} = 1)" for k in range(6)]
        + [f"a > {-1000 - k}" for k in range(200)]),
    "in-list of 256 strings against 250 long `not like`": lambda: " and ".join(
        [f"s in ({','.join(repr(str(v)) for v in range(256))})"]
        + [f"s not like '%{'x' * 200}{k}%'" for k in range(250)]),
}
"""Builders of the two expressions that reach the normalisation's step limit
(``MAX_NORMALISATION_STEPS``) or come closest to it: their cost is bounded by it, not by
their length."""

EXPRESSIONS = {**TEXT_BOUND, **STEP_BOUND}
"""Every adversarial expression's builder, by name."""
