"""Tests of BE-Gen (psmatch.begen): determinism, the effect of each parameter, that every
subscription parses and is implied by its base event, and the measured matching probability."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from psmatch import make_matcher
from psmatch.begen import (
    BEGenParams,
    Workload,
    generate,
    main,
    measure_matching_probability,
    read_events,
    read_subscriptions,
)
from psmatch.language import parse_subscription

# One predicate of the generator's output; "between A and B" contains an "and".
PREDICATE = re.compile(
    r"a(\d+) (?:between (\d+) and (\d+)|(not in|in) \(([\d, ]+)\)|(<=|>=|!=|=|<|>) (\d+))"
    r"(?: and |$)"
)

SMALL = BEGenParams(subscriptions=4_000, events=100, matching_probability=0.01, seed=7)


def predicates(text: str) -> list[tuple[int, str, tuple[int, ...]]]:
    """(attribute rank, operator, values) of each predicate; fails on unexpected text."""
    out = []
    position = 0
    for m in PREDICATE.finditer(text):
        assert m.start() == position, text
        position = m.end()
        rank = int(m.group(1))
        if m.group(2) is not None:
            out.append((rank, "between", (int(m.group(2)), int(m.group(3)))))
        elif m.group(4) is not None:
            out.append((rank, m.group(4), tuple(int(v) for v in m.group(5).split(", "))))
        else:
            out.append((rank, m.group(6), (int(m.group(7)),)))
    assert position == len(text), text
    return out


def operator_counts(workload: Workload) -> Counter[str]:
    return Counter(op for _, text in workload.subscriptions for _, op, _ in predicates(text))


@pytest.fixture(scope="module")
def small() -> Workload:
    return generate(SMALL)


def test_same_seed_same_workload(small: Workload) -> None:
    again = generate(SMALL)
    assert again.subscriptions == small.subscriptions
    assert again.events == small.events
    assert np.array_equal(again.subscription_base, small.subscription_base)
    assert np.array_equal(again.event_base, small.event_base)


def test_other_seed_other_workload(small: Workload) -> None:
    other = generate(
        BEGenParams(subscriptions=4_000, events=100, matching_probability=0.01, seed=8)
    )
    assert other.subscriptions != small.subscriptions
    assert other.events != small.events


def test_subscriptions_do_not_depend_on_event_count(small: Workload) -> None:
    more_events = generate(
        BEGenParams(subscriptions=4_000, events=333, matching_probability=0.01, seed=7)
    )
    assert more_events.subscriptions == small.subscriptions
    assert more_events.events[: len(small.events)] == small.events


def test_counts_ids_and_bases(small: Workload) -> None:
    assert [sub_id for sub_id, _ in small.subscriptions] == [
        str(i) for i in range(SMALL.subscriptions)]
    assert len(small.events) == SMALL.events
    # Subscriptions are spread evenly over the bases; events use each base equally often.
    per_base = np.bincount(small.subscription_base, minlength=SMALL.bases)
    assert SMALL.bases == 100
    assert per_base.min() == per_base.max() == SMALL.subscriptions // SMALL.bases
    assert len(set(small.event_base.tolist())) == SMALL.events


def test_events_have_event_size_distinct_attributes_in_the_domain(small: Workload) -> None:
    for event in small.events:
        assert len(event) == SMALL.event_size
        for name, value in event.items():
            assert re.fullmatch(r"a\d+", name)
            assert 1 <= int(name[1:]) <= SMALL.dimensions
            assert isinstance(value, int)
            assert 0 <= value < SMALL.cardinality


@pytest.mark.parametrize(("sub_size", "event_size"), [(5, 30), (10, 30), (3, 8), (8, 8)])
def test_subscription_size(sub_size: int, event_size: int) -> None:
    params = BEGenParams(
        subscriptions=3_000,
        events=10,
        subscription_size=sub_size,
        event_size=event_size,
        matching_probability=0.01,
    )
    workload = generate(params)
    # Exact sizes: binomial ones would put many at 1 or 2 predicates (see psmatch.begen).
    assert {len(predicates(text)) for _, text in workload.subscriptions} == {sub_size}
    assert all(len(event) == event_size for event in workload.events)


@pytest.mark.parametrize("dimensions", [30, 400])
def test_dimensions_bound_the_attributes(dimensions: int) -> None:
    params = BEGenParams(
        subscriptions=3_000, events=50, dimensions=dimensions, matching_probability=0.01
    )
    workload = generate(params)
    ranks = {rank for _, text in workload.subscriptions for rank, _, _ in predicates(text)}
    assert min(ranks) >= 1 and max(ranks) <= dimensions
    # Uniform choice over few dimensions uses (nearly) all of them.
    assert len(ranks) > 0.9 * min(dimensions, SMALL.bases * SMALL.event_size)


@pytest.mark.parametrize("cardinality", [2, 3, 100, 1000])
def test_values_stay_in_the_domain(cardinality: int) -> None:
    params = BEGenParams(
        subscriptions=2_000,
        events=20,
        cardinality=cardinality,
        operator_class="high",
        matching_probability=0.01,
    )
    workload = generate(params)
    for _, text in workload.subscriptions:
        for _, op, values in predicates(text):
            assert all(0 <= v < cardinality for v in values)
            if op == "between":
                assert values[0] <= values[1]
            if op in ("in", "not in"):
                assert list(values) == sorted(set(values))
                assert len(values) <= params.max_set_size


@pytest.mark.parametrize("ratio", [0.0, 0.2, 0.6, 1.0])
def test_equality_ratio(ratio: float) -> None:
    workload = generate(
        BEGenParams(subscriptions=3_000, events=10, equality_ratio=ratio, matching_probability=0.01)
    )
    counts = operator_counts(workload)
    assert abs(counts["="] / sum(counts.values()) - ratio) < 0.02


@pytest.mark.parametrize(
    ("operator_class", "operators"),
    [
        ("low", {"=", "in"}),
        ("med", {"=", "<", "<=", ">", ">=", "in", "between"}),
        ("high", {"=", "<", "<=", ">", ">=", "!=", "in", "not in", "between"}),
    ],
)
def test_operator_class(operator_class: str, operators: set[str]) -> None:
    workload = generate(
        BEGenParams(
            subscriptions=3_000, events=10, operator_class=operator_class, matching_probability=0.01
        )
    )
    counts = operator_counts(workload)
    assert set(counts) == operators
    # Transformed predicates pick their operator uniformly from the class.
    transformed = [counts[op] for op in operators - {"="}]
    assert max(transformed) < 1.25 * min(transformed)


def test_min_class_is_equality_only() -> None:
    workload = generate(
        BEGenParams(
            subscriptions=1_000,
            events=10,
            operator_class="min",
            equality_ratio=1.0,
            matching_probability=0.01,
        )
    )
    assert set(operator_counts(workload)) == {"="}


def test_between_width_is_the_mean_share_of_the_domain() -> None:
    workload = generate(
        BEGenParams(
            subscriptions=5_000,
            events=10,
            equality_ratio=0.0,
            cardinality=1000,
            matching_probability=0.01,
        )
    )
    spans = [
        hi - lo + 1
        for _, text in workload.subscriptions
        for _, op, (lo, *rest) in predicates(text)
        if op == "between"
        for hi in rest
    ]
    assert abs(np.mean(spans) / 1000 - 0.12) < 0.01


def test_zipf_skews_the_attribute_choice() -> None:
    def attribute_counts(alpha: float) -> np.ndarray:
        workload = generate(
            BEGenParams(subscriptions=3_000, events=300, alpha=alpha, matching_probability=1 / 300)
        )
        counts = np.zeros(101)
        for event in workload.events:
            for name in event:
                counts[int(name[1:])] += 1
        return counts[1:]

    uniform = attribute_counts(0.0)
    assert uniform.max() < 1.6 * uniform.min()
    zipf = attribute_counts(2.0)
    assert zipf[0] > 0.95 * 300  # a1 is in (nearly) every event: its weight dwarfs the rest
    assert zipf[:10].sum() > 5 * zipf[-10:].sum()
    assert zipf[:50].sum() > zipf[50:].sum()


def test_every_subscription_parses_with_its_predicates() -> None:
    for operator_class in ("low", "med", "high"):
        workload = generate(
            BEGenParams(
                subscriptions=1_500,
                events=10,
                cardinality=30,
                operator_class=operator_class,
                matching_probability=0.01,
            )
        )
        for _, text in workload.subscriptions:
            subscription = parse_subscription(text)
            assert len(subscription.conjuncts) == 1
            assert subscription.predicate_count == len(predicates(text))


def test_each_event_matches_the_subscriptions_derived_from_its_base(small: Workload) -> None:
    matcher = make_matcher("scan")
    matcher.add_many(small.subscriptions)
    for base, matched in zip(small.event_base, matcher.match_batch(small.events), strict=True):
        derived = {str(i) for i in np.flatnonzero(small.subscription_base == base).tolist()}
        assert derived <= matched


def test_measured_matching_probability_is_near_the_target(small: Workload) -> None:
    measured = measure_matching_probability(small)
    assert measured.events == SMALL.events
    assert measured.subscriptions == SMALL.subscriptions
    # At least its own base's share (1/bases); the accidental rest stays small.
    assert 0.01 <= measured.probability < 0.03
    sampled = measure_matching_probability(small, max_subscriptions=1_000, max_events=50)
    assert sampled.subscriptions == 1_000 and sampled.events == 50
    assert 0.005 < sampled.probability < 0.04


@pytest.mark.parametrize(
    "bad",
    [
        {"subscriptions": 0},
        {"cardinality": 1},
        {"event_size": 101},
        {"subscription_size": 31},
        {"equality_ratio": 1.5},
        {"operator_class": "extreme"},
        {"operator_class": "min"},
        {"matching_probability": 0.0},
        {"max_set_size": 1},
        {"alpha": -1.0},
    ],
)
def test_invalid_parameters_are_rejected(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="invalid BE-Gen parameters"):
        BEGenParams(**bad)  # type: ignore[arg-type]


def test_command_line_writes_and_measures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "--subscriptions",
        "2000",
        "--events",
        "40",
        "--matching-probability",
        "0.02",
        "--seed",
        "3",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "measured" in out and "target 2.0000%" in out
    params = BEGenParams(subscriptions=2000, events=40, matching_probability=0.02, seed=3)
    workload = generate(params)
    assert read_subscriptions(tmp_path / "subscriptions.tsv") == workload.subscriptions
    assert read_events(tmp_path / "events.jsonl") == workload.events
    assert '"subscriptions": 2000' in (tmp_path / "params.json").read_text()


def test_command_line_rejects_bad_parameters(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--cardinality", "1", "--measure-events", "0"]) == 2
    assert "cardinality must be at least 2" in capsys.readouterr().err
