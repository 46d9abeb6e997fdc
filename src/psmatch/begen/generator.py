"""BE-Gen, the synthetic workload generator of the BE-Tree and PS-Tree papers.

The papers: Sadoghi & Jacobsen, "BE-Tree: An Index Structure to Efficiently Match
Boolean Expressions over High-dimensional Discrete Space", SIGMOD 2011 (the *BE-Tree
paper*); Ji & Jacobsen, "PS-Tree-Based Efficient Boolean Expression Matching for
High-Dimensional and Dense Workloads", PVLDB 12(3), 2018 (the *PS-Tree paper*).

This module owns the generation of benchmark and test workloads: subscriptions in the
text form of :mod:`psmatch.language` and events as attribute -> value dicts, over
attributes ``a1 .. a<dimensions>`` with integer values in ``[0, cardinality)``.

The method is BE-Gen's (BE-Tree paper section 7.1, Tables 2 and 3; PS-Tree paper Table 1):

1. *Base expressions* model events: each is ``event_size`` equality predicates on
   distinct attributes, the attributes drawn without replacement with weight
   ``1 / r**alpha`` for the attribute of rank ``r`` (``a1`` is rank 1; ``alpha = 0`` is
   uniform, ``alpha > 0`` Zipf), the values uniform over the domain.
2. *Derived expressions* model subscriptions: each is derived from one base by keeping
   every base predicate with probability ``Pr_pred = subscription_size / event_size``,
   drawn as a simple random sample of exactly ``subscription_size`` of them (see below),
   and turning a kept ``attr = v*`` with probability
   ``Pr_trans = 1 - equality_ratio`` into an implied predicate, the operator drawn
   uniformly from the operator class (Table 2(a)) and the operands by the inference
   rules of Table 2(b): ``< v1`` (v1 > v*), ``<= v1`` (v1 >= v*), ``> v1`` (v1 < v*),
   ``>= v1`` (v1 <= v*), ``!= v1`` (v1 != v*), ``in (...)`` with v* and 1 to
   ``max_set_size - 1`` other values, ``not in (...)`` with 1 to ``max_set_size`` values
   other than v* (duplicates drawn are dropped, hence *up to*), ``between v1 and v2``
   around v* spanning on average ``between_width`` of the domain. Table 2(b) prints
   ``i < v1 where v1 >= v*``, which the base would not satisfy when v1 = v*; the rule
   used here is the strict one.
3. The number of bases sets the matching probability: with ``B`` bases the
   subscriptions are spread evenly over them (``subscriptions / B`` each) and every
   event is a copy of a base (each base used equally often), so an event satisfies at
   least the subscriptions derived from its base: ``1 / B`` of them. Overlap between
   bases adds *accidental* matches (many with a Zipf attribute choice or a small
   domain), so the real probability is measured (:func:`measure_matching_probability`),
   never assumed.

Subscription sizes are exact rather than binomial (independent coin flips with
``Pr_pred``) because the spread breaks the control of the matching probability: a
binomial size puts about 10% of the subscriptions at 1 or 2 predicates, which match a
large share of all events; on the default workload (target 0.1%) that measured 0.63%,
against 0.1% with exact sizes.

Generation is seeded and deterministic: one seed gives the same workload on every
machine, and the subscriptions do not depend on the number of events. The predicate
arithmetic is vectorised with numpy in chunks of subscriptions; the cost is dominated by
rendering the text, about 0.4 microseconds per predicate (the default 1M subscriptions of
5 predicates take about 2 s).

Command line: ``python -m psmatch.begen --help``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

from psmatch import make_matcher

# Operator codes of derived predicates.
EQ, LT, LE, GT, GE, NE, IN, NOT_IN, BETWEEN = range(9)

#: Table 2(a) of the BE-Tree paper: the operators a base predicate may be transformed into
#: (besides ``=``, which every class keeps) for each level of expressiveness.
OPERATOR_CLASSES: dict[str, tuple[int, ...]] = {
    "min": (),
    "low": (IN,),
    "med": (LT, LE, GT, GE, IN, BETWEEN),
    "high": (LT, LE, GT, GE, NE, IN, NOT_IN, BETWEEN),
}

_KEYWORD = {
    EQ: "=", LT: "<", LE: "<=", GT: ">", GE: ">=", NE: "!=",
    IN: "in", NOT_IN: "not in", BETWEEN: "between",
}  # fmt: skip

#: Subscriptions derived per vectorised step; fixed so the output never depends on memory.
_CHUNK = 1 << 16


@dataclass(frozen=True, slots=True)
class BEGenParams:
    """The parameters of a BE-Gen workload; the defaults are the PS-Tree paper's (Table 1).

    The operator class is not in that table; ``med``, the BE-Tree paper's default
    (Table 3), is used.
    """

    subscriptions: int = 1_000_000
    events: int = 1_000
    dimensions: int = 100
    cardinality: int = 100
    alpha: float = 0.0
    subscription_size: int = 5
    event_size: int = 30
    equality_ratio: float = 0.2
    operator_class: str = "med"
    matching_probability: float = 0.001
    between_width: float = 0.12
    max_set_size: int = 6
    seed: int = 0

    def __post_init__(self) -> None:
        problems = []
        if self.subscriptions < 1:
            problems.append("subscriptions must be at least 1")
        if self.events < 0:
            problems.append("events must be at least 0")
        if self.dimensions < 1:
            problems.append("dimensions must be at least 1")
        if self.cardinality < 2:
            problems.append("cardinality must be at least 2")
        if self.alpha < 0:
            problems.append("alpha must be at least 0")
        if not 1 <= self.event_size <= self.dimensions:
            problems.append("event_size must be between 1 and dimensions")
        if not 1 <= self.subscription_size <= self.event_size:
            problems.append("subscription_size must be between 1 and event_size")
        if not 0.0 <= self.equality_ratio <= 1.0:
            problems.append("equality_ratio must be in [0, 1]")
        if self.operator_class not in OPERATOR_CLASSES:
            problems.append(f"operator_class must be one of {', '.join(OPERATOR_CLASSES)}")
        elif self.operator_class == "min" and self.equality_ratio != 1.0:
            problems.append("operator class 'min' has only '=': equality_ratio must be 1")
        if not 0.0 < self.matching_probability <= 1.0:
            problems.append("matching_probability must be in (0, 1]")
        if not 0.0 < self.between_width <= 1.0:
            problems.append("between_width must be in (0, 1]")
        if self.max_set_size < 2:
            problems.append("max_set_size must be at least 2")
        if problems:
            raise ValueError("invalid BE-Gen parameters: " + "; ".join(problems))

    @property
    def bases(self) -> int:
        """Number of base expressions: ``1 / matching_probability``, at most ``subscriptions``."""
        return max(1, min(self.subscriptions, round(1.0 / self.matching_probability)))

    @property
    def pr_pred(self) -> float:
        """Probability that a base predicate is kept in a derived subscription."""
        return self.subscription_size / self.event_size

    @property
    def pr_trans(self) -> float:
        """Probability that a kept predicate is transformed into an implied one."""
        return 1.0 - self.equality_ratio


@dataclass(frozen=True, slots=True, eq=False)
class Workload:
    """A generated workload.

    ``subscriptions`` are ``(id, expression text)`` pairs, subscription ``i`` under the
    id ``str(i)``; ``subscription_base[i]`` is the base subscription ``i`` was derived
    from and ``event_base[j]`` the base event ``j`` copies, so event ``j`` satisfies
    every subscription ``i`` with ``subscription_base[i] == event_base[j]``.
    """

    params: BEGenParams
    subscriptions: list[tuple[str, str]]
    events: list[dict[str, int]]
    subscription_base: np.ndarray
    event_base: np.ndarray


@dataclass(frozen=True, slots=True)
class MatchingProbability:
    """A measured matching probability: ``matches / (events * subscriptions)``."""

    probability: float
    matches: int
    events: int
    subscriptions: int


def generate(params: BEGenParams) -> Workload:
    """Generate the workload ``params`` describes.

    Cost: O(bases * dimensions) to choose the base attributes, then about 0.4
    microseconds per derived predicate (1M subscriptions of 5 predicates: about 2 s).
    """
    base_rng, sub_rng, event_rng = (
        np.random.default_rng(s) for s in np.random.SeedSequence(params.seed).spawn(3)
    )
    names = [f"a{rank}" for rank in range(1, params.dimensions + 1)]
    base_attrs, base_values = _base_expressions(params, base_rng)
    subscriptions, subscription_base = _derived_expressions(
        params, base_attrs, base_values, names, sub_rng
    )
    event_base = _event_bases(params, event_rng)
    events = [
        dict(zip([names[a] for a in base_attrs[b]], base_values[b].tolist(), strict=True))
        for b in event_base.tolist()
    ]
    return Workload(params, subscriptions, events, subscription_base, event_base)


def _base_expressions(
    params: BEGenParams, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Attribute indexes (sorted, distinct) and values of the bases, ``(bases, event_size)`` each.

    Weighted sampling without replacement by Efraimidis-Spirakis keys
    (``log(u) / weight``, keep the largest), ``O(bases * dimensions)``.
    """
    n_bases, dims, size = params.bases, params.dimensions, params.event_size
    weights = np.arange(1, dims + 1, dtype=np.float64) ** -params.alpha
    attrs = np.empty((n_bases, size), dtype=np.int64)
    rows_per_step = max(1, 4_000_000 // dims)
    for start in range(0, n_bases, rows_per_step):
        stop = min(n_bases, start + rows_per_step)
        with np.errstate(divide="ignore"):
            keys = np.log(rng.random((stop - start, dims))) / weights
        top = np.argpartition(-keys, size - 1, axis=1)[:, :size]
        attrs[start:stop] = np.sort(top, axis=1)
    values = rng.integers(0, params.cardinality, size=(n_bases, size))
    return attrs, values


def _derived_expressions(
    params: BEGenParams,
    base_attrs: np.ndarray,
    base_values: np.ndarray,
    names: Sequence[str],
    rng: np.random.Generator,
) -> tuple[list[tuple[str, str]], np.ndarray]:
    """The subscriptions, derived evenly from the bases in random order, and their bases."""
    n, size, k = params.subscriptions, params.event_size, params.subscription_size
    subscription_base = np.arange(n, dtype=np.int64) % params.bases
    rng.shuffle(subscription_base)
    transforms = np.array(OPERATOR_CLASSES[params.operator_class], dtype=np.int64)
    value_text = [str(v) for v in range(params.cardinality)]
    subscriptions: list[tuple[str, str]] = []
    for start in range(0, n, _CHUNK):
        bases = subscription_base[start : start + _CHUNK]
        # A simple random sample of k of the base's positions, in attribute order.
        cols = np.argpartition(rng.random((len(bases), size)), k - 1, axis=1)[:, :k]
        cols = np.sort(cols, axis=1).ravel()
        rows = np.repeat(np.arange(len(bases)), k)
        attrs = base_attrs[bases[rows], cols]
        vstar = base_values[bases[rows], cols]
        ops = np.full(len(rows), EQ, dtype=np.int64)
        if len(transforms):
            transformed = rng.random(len(rows)) < params.pr_trans
            ops[transformed] = transforms[rng.integers(0, len(transforms), transformed.sum())]
        texts = _render(params, ops, attrs, vstar, names, value_text, rng)
        subscriptions.extend(
            (str(start + j), " and ".join(texts[j * k : (j + 1) * k])) for j in range(len(bases))
        )
    return subscriptions, subscription_base


def _render(
    params: BEGenParams,
    ops: np.ndarray,
    attrs: np.ndarray,
    vstar: np.ndarray,
    names: Sequence[str],
    value_text: Sequence[str],
    rng: np.random.Generator,
) -> list[str]:
    """The text of each predicate: operator ``ops[i]`` implied by ``attrs[i] = vstar[i]``."""
    card = params.cardinality
    # Strict ranges need room beyond v*; at the domain's edge the non-strict one is used.
    ops[(ops == LT) & (vstar == card - 1)] = LE
    ops[(ops == GT) & (vstar == 0)] = GE
    texts: list[str] = [""] * len(ops)

    def uniform(low: np.ndarray, high: np.ndarray) -> np.ndarray:
        """One integer uniform in ``[low, high]`` per element."""
        return low + (rng.random(len(low)) * (high - low + 1)).astype(np.int64)

    for op in (EQ, LT, LE, GT, GE, NE, IN, NOT_IN, BETWEEN):
        idx = np.flatnonzero(ops == op)
        if not len(idx):
            continue
        v = vstar[idx]
        left = [names[a] for a in attrs[idx].tolist()]
        if op == EQ:
            operands = [value_text[x] for x in v.tolist()]
        elif op == LT:
            operands = [value_text[x] for x in uniform(v + 1, np.full_like(v, card - 1)).tolist()]
        elif op == LE:
            operands = [value_text[x] for x in uniform(v, np.full_like(v, card - 1)).tolist()]
        elif op == GT:
            operands = [value_text[x] for x in uniform(np.zeros_like(v), v - 1).tolist()]
        elif op == GE:
            operands = [value_text[x] for x in uniform(np.zeros_like(v), v).tolist()]
        elif op == NE:
            other = (v + uniform(np.ones_like(v), np.full_like(v, card - 1))) % card
            operands = [value_text[x] for x in other.tolist()]
        elif op == BETWEEN:
            # Span (values covered) uniform in [1, 2 * width * card - 1]: mean width * card.
            max_span = int(min(card, max(1, round(2 * params.between_width * card) - 1)))
            width = uniform(np.ones_like(v), np.full_like(v, max_span)) - 1
            low = uniform(np.maximum(0, v - width), np.minimum(v, card - 1 - width))
            operands = [
                f"{value_text[lo]} and {value_text[hi]}"
                for lo, hi in zip(low.tolist(), (low + width).tolist(), strict=True)
            ]
        else:
            operands = _value_sets(params, op, v, value_text, rng)
        keyword = _KEYWORD[op]
        for i, name, operand in zip(idx.tolist(), left, operands, strict=True):
            texts[i] = f"{name} {keyword} {operand}"
    return texts


def _value_sets(
    params: BEGenParams,
    op: int,
    vstar: np.ndarray,
    value_text: Sequence[str],
    rng: np.random.Generator,
) -> list[str]:
    """The ``(v1, v2, ...)`` lists of ``in`` (with v*) or ``not in`` (without v*) predicates."""
    card, k = params.cardinality, params.max_set_size
    n = len(vstar)
    drawn = k - 1 if op == IN else k
    others = (vstar[:, None] + 1 + (rng.random((n, drawn)) * (card - 1)).astype(np.int64)) % card
    count = rng.integers(1, drawn + 1, n)
    values = np.where(np.arange(drawn)[None, :] < count[:, None], others, card)
    if op == IN:
        values = np.concatenate([vstar[:, None], values], axis=1)
    values.sort(axis=1)
    values[:, 1:][values[:, 1:] == values[:, :-1]] = card
    return [
        "(" + ", ".join([value_text[x] for x in row if x < card]) + ")" for row in values.tolist()
    ]


def _event_bases(params: BEGenParams, rng: np.random.Generator) -> np.ndarray:
    """The base each event copies: rounds of random permutations of all bases."""
    rounds = math.ceil(params.events / params.bases) if params.events else 0
    order = rng.permuted(np.tile(np.arange(params.bases, dtype=np.int64), (rounds, 1)), axis=1)
    return order.ravel()[: params.events]


def measure_matching_probability(
    workload: Workload,
    *,
    max_subscriptions: int = 50_000,
    max_events: int = 200,
    matcher: str = "scan",
    seed: int = 0,
) -> MatchingProbability:
    """Measure the matching probability with a real matcher, on a sample when the workload is big.

    The sample is ``max_subscriptions`` subscriptions drawn at random (all when there are
    fewer) against the first ``max_events`` events (events are already in random
    order); the estimate ``matches / (events * subscriptions)`` is unbiased. Cost: one
    build of ``matcher`` on the sample and one ``match_batch`` of the events.
    """
    subs = workload.subscriptions
    if len(subs) > max_subscriptions:
        chosen = np.random.default_rng(seed).choice(len(subs), max_subscriptions, replace=False)
        subs = [subs[i] for i in np.sort(chosen).tolist()]
    events = workload.events[:max_events]
    index = make_matcher(matcher)
    index.add_many(subs)
    matches = sum(len(ids) for ids in index.match_batch(events)) if events else 0
    pairs = len(events) * len(subs)
    return MatchingProbability(matches / pairs if pairs else 0.0, matches, len(events), len(subs))


def write_workload(workload: Workload, out_dir: Path) -> tuple[Path, Path, Path]:
    """Write ``subscriptions.tsv`` (``id<TAB>expression`` lines), ``events.jsonl`` (one JSON
    object per line) and ``params.json`` (the parameters) into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    subs_path, events_path = out_dir / "subscriptions.tsv", out_dir / "events.jsonl"
    params_path = out_dir / "params.json"
    with subs_path.open("w", encoding="utf-8") as f:
        f.writelines(f"{sub_id}\t{text}\n" for sub_id, text in workload.subscriptions)
    with events_path.open("w", encoding="utf-8") as f:
        f.writelines(json.dumps(event, separators=(",", ":")) + "\n" for event in workload.events)
    params_path.write_text(json.dumps(asdict(workload.params), indent=2) + "\n", encoding="utf-8")
    return subs_path, events_path, params_path


def read_subscriptions(path: Path) -> list[tuple[str, str]]:
    """Read a ``subscriptions.tsv`` written by :func:`write_workload`."""
    with path.open(encoding="utf-8") as f:
        return [
            (sub_id, text) for sub_id, text in (line.rstrip("\n").split("\t", 1) for line in f)
        ]


def read_events(path: Path) -> list[dict[str, int]]:
    """Read an ``events.jsonl`` written by :func:`write_workload`."""
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f]


_HELP = {
    "subscriptions": "number of subscriptions (derived expressions)",
    "events": "number of events (copies of base expressions)",
    "dimensions": "number of attributes, named a1 .. a<dimensions>",
    "cardinality": "values are integers in [0, cardinality)",
    "alpha": "attribute choice weight 1/rank**alpha: 0 is uniform, > 0 is Zipf (a1 most popular)",
    "subscription_size": "predicates per subscription (Pr_pred = this / event size)",
    "event_size": "attribute-value pairs per event (predicates per base expression)",
    "equality_ratio": "share of '=' predicates (Pr_trans = 1 - this)",
    "operator_class": "operators of transformed predicates (BE-Tree paper, Table 2(a)): "
    "min '=', low '= in', med '< <= = >= > in between', high med plus '!= not in'",
    "matching_probability": "target share of subscriptions an event matches; "
    "sets the number of bases to 1/this (the real value is measured)",
    "between_width": "mean share of the domain a 'between' covers",
    "max_set_size": "most values in an 'in' / 'not in' list",
    "seed": "random seed: the same seed gives the same workload",
}


def add_params_arguments(parser: argparse.ArgumentParser, **defaults: object) -> None:
    """Add one ``--flag`` per :class:`BEGenParams` field to ``parser``.

    ``defaults`` overrides the papers' defaults by field name (the benchmark's event count).
    """
    base = BEGenParams()
    for f in fields(BEGenParams):
        default = defaults.get(f.name, getattr(base, f.name))
        parser.add_argument(
            "--" + f.name.replace("_", "-"),
            type=str if f.name == "operator_class" else type(getattr(base, f.name)),
            default=default,
            choices=list(OPERATOR_CLASSES) if f.name == "operator_class" else None,
            help=_HELP[f.name],
        )


def params_from_args(args: argparse.Namespace, **overrides: object) -> BEGenParams:
    """The :class:`BEGenParams` of flags added by :func:`add_params_arguments`."""
    values = {f.name: getattr(args, f.name) for f in fields(BEGenParams)}
    return BEGenParams(**(values | overrides))  # type: ignore[arg-type]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m psmatch.begen",
        description="Generate a BE-Gen workload (BE-Tree paper, section 7.1) and measure its "
        "matching probability. Writes OUT/subscriptions.tsv (one 'id<TAB>expression' line "
        "per subscription, in the text form of the subscription language), "
        "OUT/events.jsonl (one JSON object per line) and OUT/params.json. Defaults are "
        "the PS-Tree paper's default workload.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_params_arguments(parser)
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="directory to write the files to; without it nothing is written",
    )
    parser.add_argument(
        "--measure-subscriptions",
        type=int,
        default=50_000,
        help="subscriptions sampled to measure the matching probability",
    )
    parser.add_argument(
        "--measure-events",
        type=int,
        default=200,
        help="events matched to measure the matching probability (0: do not measure)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m psmatch.begen``."""
    args = _parser().parse_args(argv)
    try:
        params = params_from_args(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    workload = generate(params)
    elapsed = time.perf_counter() - started
    print(
        f"generated {len(workload.subscriptions)} subscriptions and {len(workload.events)} events "
        f"from {params.bases} bases in {elapsed:.1f} s"
    )
    if args.out is not None:
        for path in write_workload(workload, args.out):
            print(f"wrote {path}")
    if args.measure_events > 0 and workload.events:
        measured = measure_matching_probability(
            workload, max_subscriptions=args.measure_subscriptions, max_events=args.measure_events
        )
        print(
            f"matching probability: measured {measured.probability:.4%} "
            f"({measured.matches} matches, scan on {measured.subscriptions} subscriptions x "
            f"{measured.events} events); target {params.matching_probability:.4%}, "
            f"by construction {1 / params.bases:.4%}"
        )
    return 0

