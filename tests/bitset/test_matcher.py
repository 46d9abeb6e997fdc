"""The bitset matcher returns exactly what ``scan`` returns, ``check()`` after each
mutation: fine-domain and wide ranges, missing attributes and other kinds, strings,
ints past 2**53, every operator, and churn."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psmatch import ExpressionError, make_matcher
from psmatch.language import parse_subscription
from tests.strategies import events, expressions, literal, replay_against_scan

FINE = 10**6
ATTRIBUTES = [f"a{i}" for i in range(6)]


@st.composite
def fine_ranges(draw: st.DrawFn) -> str:
    """A conjunction of 1-3 ranges over [0, 10^6) (ints or floats, 2 % or 40 % wide,
    open or closed), or other operators on the same attributes."""
    parts = []
    for attribute in draw(st.lists(st.sampled_from(ATTRIBUTES), min_size=1, max_size=3,
                                   unique=True)):
        width = draw(st.sampled_from([0.02, 0.4, 0.0, 1e-6]))
        lo = draw(st.one_of(st.integers(0, FINE), st.floats(0, FINE)))
        hi = lo + width * FINE
        shape = draw(st.sampled_from(["between", "not between", "<", ">=", "=", "!=",
                                      "in", "not in", "> and <"]))
        if shape in ("between", "not between"):
            parts.append(f"{attribute} {shape} {lo!r} and {hi!r}")
        elif shape == "> and <":
            parts.append(f"{attribute} > {lo!r} and {attribute} < {hi!r}")
        elif shape in ("in", "not in"):
            parts.append(f"{attribute} {shape} ({lo!r}, {hi!r}, {int(lo) + 1})")
        else:
            parts.append(f"{attribute} {shape} {lo!r}")
    return " and ".join(parts)


@st.composite
def fine_events(draw: st.DrawFn) -> dict:
    """Most attributes, some missing or of another kind; values near the bounds."""
    event: dict = {}
    for attribute in ATTRIBUTES:
        value = draw(st.one_of(st.integers(0, FINE), st.floats(0, FINE), st.none(),
                               st.just("x"), st.just(True), st.integers(0, 100)))
        if value is not None:
            event[attribute] = value
    return event


def _agree(texts: list[str], batch: list[dict], removing: int = 2) -> None:
    matcher, scan = make_matcher("bitset"), make_matcher("scan")
    for i, text in enumerate(texts):
        try:
            subscription = parse_subscription(text)
        except ExpressionError:
            continue
        matcher.add(str(i % 60), subscription)
        scan.add(str(i % 60), subscription)
    matcher.check()
    assert matcher.match_batch(batch) == scan.match_batch(batch)
    assert [matcher.match(e) for e in batch[:5]] == scan.match_batch(batch[:5])
    removed = list(scan)[::removing]
    matcher.remove_many(removed)
    for sub_id in removed:
        scan.remove(sub_id)
    matcher.check()
    assert matcher.match_batch(batch) == scan.match_batch(batch)


@given(st.lists(fine_ranges(), min_size=20, max_size=120),
       st.lists(fine_events(), min_size=5, max_size=40))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_fine_domain_and_wide_ranges_agree_with_scan(texts: list[str], batch: list[dict]):
    # events that sit exactly on the subscriptions' bounds as well
    bounds = [float(t.split()[2]) for t in texts if t.split()[1] == "between"][:10]
    batch = batch + [{a: b for a in ATTRIBUTES} for b in bounds]
    _agree(texts, batch)


@given(st.lists(expressions(), min_size=10, max_size=80),
       st.lists(events(), min_size=5, max_size=40))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_every_operator_and_kind_agrees_with_scan(texts: list[str], batch: list[dict]):
    _agree(texts, batch, removing=3)


BIG = [2**53 - 1, 2**53, 2**53 + 1, 2**53 + 2, 2**63 - 2, 2**63 - 1, -(2**63), -(2**63) + 1,
       2.0**53, 9.223372036854776e18, -9.223372036854776e18]


@given(st.lists(st.tuples(st.sampled_from(["<", "<=", ">", ">=", "=", "!="]),
                          st.sampled_from(BIG)), min_size=1, max_size=40),
       st.lists(st.sampled_from(BIG), min_size=1, max_size=12))
@settings(max_examples=60, deadline=None)
def test_ints_past_two_to_the_53_compare_exactly(comparisons: list, values: list) -> None:
    texts = [f"a {op} {literal(v)}" for op, v in comparisons]
    _agree(texts * 3, [{"a": v} for v in values])


@given(st.lists(st.tuples(st.sampled_from(["add", "remove", "match"]), st.integers(0, 30),
                          fine_ranges()), min_size=1, max_size=60),
       st.lists(fine_events(), min_size=1, max_size=8))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_churn_agrees_with_scan_after_each_mutation(ops: list, batch: list[dict]) -> None:
    replay_against_scan(make_matcher("bitset"), ops, batch)


def test_strings_booleans_and_patterns() -> None:
    texts = {"s": "s between 'b' and 'd'", "p": "s like 'ab%'", "q": "s like '%son'",
             "n": "s not in ('abc', 'x')", "b": "f = true and s >= 'a'", "c": "f != true",
             "long": "s = 'abcdefghij'", "long2": "s > 'abcdefgh'"}
    matcher, scan = make_matcher("bitset"), make_matcher("scan")
    matcher.add_many(texts.items())
    scan.add_many(texts.items())
    matcher.check()
    batch = [{"s": v, "f": f} for v in ["", "a", "abc", "abcdefgh", "abcdefghi", "abcdefghij",
                                       "b", "c", "d", "da", "jackson", "x", "é"]
             for f in (True, False, 1)] + [{"f": True}, {"s": 3}, {}]
    assert matcher.match_batch(batch) == scan.match_batch(batch)
