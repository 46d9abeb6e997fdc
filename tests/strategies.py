"""Hypothesis strategies for random subscriptions and events, and helpers, shared by the tests.

Values are drawn from small pools rich in edge cases (ints past 2**53, the int64
limits, -0.0, unicode, empty and NUL-carrying strings, booleans) so that random
predicates and random events collide often enough to exercise every comparison.
"""

from __future__ import annotations

from hypothesis import strategies as st

from psmatch.core.matcher import Matcher
from psmatch.errors import ExpressionError
from psmatch.language import Predicate, Subscription, parse_subscription
from psmatch.matchers import make_matcher

ATTRIBUTES = ["a", "b", "c", "u.v", "`odd name`"]
NUMBERS = [0, 1, -1, 2, 3, 7, 2.5, -0.0, 0.5, 2**53, 2**53 + 1, 2**53 + 2, 2.0**53,
           2**63 - 1, -(2**63), 1e300, -1e-300, 100]
STRINGS = ["", "a", "ab", "abc", "b", "a\x00", "é", "\U0010ffff", "zz", "son", "jackson"]
BOOLS = [True, False]

numbers = st.sampled_from(NUMBERS)
strings = st.sampled_from(STRINGS)
bools = st.sampled_from(BOOLS)


def literal(value: object) -> str:
    """The text form of a value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace("'", "\\'").replace("\x00", "\\0")
        return f"'{escaped}'"
    return repr(value)


@st.composite
def comparisons(draw: st.DrawFn) -> str:
    attribute = draw(st.sampled_from(ATTRIBUTES))
    kind = draw(st.sampled_from(["number", "string", "bool"]))
    pool = {"number": numbers, "string": strings, "bool": bools}[kind]
    ops = ["=", "==", "!=", "<>", "in", "not in"]
    if kind != "bool":
        ops += ["<", "<=", ">", ">=", "between", "not between"]
    if kind == "string":
        ops += ["like", "not like"]
    op = draw(st.sampled_from(ops))
    if op in ("in", "not in"):
        values = draw(st.lists(pool, min_size=1, max_size=4))
        return f"{attribute} {op} ({', '.join(literal(v) for v in values)})"
    if op in ("between", "not between"):
        return f"{attribute} {op} {literal(draw(pool))} and {literal(draw(pool))}"
    if op in ("like", "not like"):
        core = draw(st.sampled_from(["a", "ab", "son", "", "\U0010ffff", "b"]))
        shape = draw(st.sampled_from(["{}%", "%{}", "%{}%", "{}"]))
        return f"{attribute} {op} {literal(shape.format(core))}"
    return f"{attribute} {op} {literal(draw(pool))}"


def expressions(max_leaves: int = 6) -> st.SearchStrategy[str]:
    """Random expressions with and, or, not and parentheses."""
    return st.recursive(
        comparisons(),
        lambda inner: st.one_of(
            st.tuples(inner, st.sampled_from(["and", "or", "AND", "Or"]), inner).map(
                lambda t: f"({t[0]} {t[1]} {t[2]})"
            ),
            inner.map(lambda e: f"not {e}"),
        ),
        max_leaves=max_leaves,
    )


@st.composite
def events(draw: st.DrawFn) -> dict:
    """A random event: some attributes missing, any kind, ``u.v`` nested or dotted."""
    event: dict = {}
    for attribute in draw(st.lists(st.sampled_from(ATTRIBUTES), unique=True, max_size=5)):
        value = draw(st.one_of(numbers, strings, bools, st.none()))
        name = attribute.strip("`")
        if name == "u.v" and draw(st.booleans()):
            event["u"] = {"v": value}
        else:
            event[name] = value
    return event


FLOOD_VALUES = 48
"""Distinct ints a flood uses: enough bounds (97 spaces) that ``!=`` and ``not in``
cover nearly the whole tree of their attribute, the case stored on side lists."""


@st.composite
def flood_expressions(draw: st.DrawFn) -> str:
    """``!=``, ``not in`` or a range open to nearly the whole domain on ``a``, alone or
    with another comparison: a flood of these covers almost every space of ``a``."""
    v = draw(st.integers(0, FLOOD_VALUES - 1))
    shape = draw(st.sampled_from(["!=", "not in", ">", "<"]))
    if shape == "not in":
        values = draw(st.lists(st.integers(0, FLOOD_VALUES - 1), min_size=1, max_size=4))
        text = f"a not in ({', '.join(map(str, values))})"
    elif shape == ">":
        text = f"a > {v % 3}"
    elif shape == "<":
        text = f"a < {FLOOD_VALUES - 1 - v % 3}"
    else:
        text = f"a != {v}"
    if draw(st.booleans()):
        text = f"{text} and {draw(comparisons())}"
    return text


WIDE_ATTRIBUTES = 40


@st.composite
def wide_expressions(draw: st.DrawFn) -> str:
    """One to three equalities on the attributes ``x0 .. x39`` of wide events."""
    picked = draw(st.lists(st.integers(0, WIDE_ATTRIBUTES - 1), min_size=1, max_size=3,
                           unique=True))
    return " and ".join(f"x{j} = {draw(st.integers(0, 2))}" for j in picked)


@st.composite
def wide_events(draw: st.DrawFn) -> dict:
    """An event with many attributes ``x0 .. x39`` (values 0 to 2), ``a`` in the flood
    values, and a random event's attributes."""
    event = draw(events())
    present = draw(st.lists(st.integers(0, WIDE_ATTRIBUTES - 1), unique=True,
                            min_size=WIDE_ATTRIBUTES // 2))
    event.update({f"x{j}": draw(st.integers(0, 2)) for j in present})
    if draw(st.booleans()):
        event["a"] = draw(st.integers(-1, FLOOD_VALUES))
    return event


def replay_against_scan(matcher: Matcher, ops: list, batch: list[dict]) -> None:
    """Apply ``ops`` (``("add", key, text)``, a replacement when the key is held;
    ``("remove", key, _)``; anything else: a match) to ``matcher`` and to ``scan`` alike,
    texts that do not parse skipped; after each, ``check()`` and the same size, and at a
    match and at the end, the same answers for ``batch``."""
    scan = make_matcher("scan")
    for op, key, text in ops:
        sub_id = str(key)
        if op == "add":
            try:
                subscription = parse_subscription(text)
            except ExpressionError:
                continue
            matcher.add(sub_id, subscription)
            scan.add(sub_id, subscription)
        elif op == "remove" and sub_id in scan:
            matcher.remove(sub_id)
            scan.remove(sub_id)
        else:
            assert matcher.match_batch(batch) == scan.match_batch(batch)
        matcher.check()
        assert len(matcher) == len(scan)
    assert matcher.match_batch(batch) == scan.match_batch(batch)


def parsed(texts: list[str]) -> list[Subscription]:
    """The subscriptions of the texts that parse (random ones may be unsatisfiable)."""
    out = []
    for text in texts:
        try:
            out.append(parse_subscription(text))
        except ExpressionError:
            continue
    return out


def only_predicates(text: str) -> dict[str, Predicate]:
    """The predicates of the one conjunct ``text`` normalises to, by attribute."""
    (conjunct,) = parse_subscription(text).conjuncts
    return {p.attribute: p for p in conjunct.predicates}


SEPARATORS = [" and ", " AND ", "\tand\n", "  And  ", " and", "and ", " or ", " and not "]
NOISE = [*"`'\"\\ ()=<>!,-+.0123456789eE%_a", " and ", " in ", " not ", " between ", " like ",
         " true", "\u00e9", "\uff11", "\\u"]


@st.composite
def conjunction_texts(draw: st.DrawFn) -> str:
    """Conjunctions of random comparisons (every operator and kind), joined in several
    spellings, sometimes with a character inserted or removed somewhere."""
    parts = draw(st.lists(comparisons(), min_size=1, max_size=6))
    text = parts[0] + "".join(draw(st.sampled_from(SEPARATORS)) + p for p in parts[1:])
    text = draw(st.sampled_from(["", " ", "\n"])) + text + draw(st.sampled_from(["", " "]))
    if draw(st.booleans()):
        at = draw(st.integers(0, len(text)))
        cut = draw(st.integers(0, 2))
        text = text[:at] + draw(st.sampled_from(["", *NOISE])) + text[at + cut:]
    return text
