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
large share of all events, and put the default workload's measured probability several
times above its 0.1% target, which exact sizes meet.

Generation is seeded and deterministic: one seed gives the same workload on every
machine, and the subscriptions do not depend on the number of events. The predicate
arithmetic is vectorised with numpy in chunks of subscriptions; the cost is dominated by
rendering the text, about 0.4 microseconds per predicate (the default 1M subscriptions of
5 predicates take about 2 s).

Its parameters are :class:`psmatch.begen.params.BEGenParams`; its command line
(``python -m psmatch.begen --help``) is :mod:`psmatch.begen.cli`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from psmatch import make_matcher
from psmatch.begen.params import (
    BETWEEN,
    EQ,
    GE,
    GT,
    IN,
    LE,
    LT,
    NE,
    NOT_IN,
    OPERATOR_CLASSES,
    BEGenParams,
)

_KEYWORD = {
    EQ: "=", LT: "<", LE: "<=", GT: ">", GE: ">=", NE: "!=",
    IN: "in", NOT_IN: "not in", BETWEEN: "between",
}  # fmt: skip

#: Subscriptions derived per vectorised step; fixed so the output never depends on memory.
_CHUNK = 1 << 16


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
