"""The parameters of a BE-Gen workload (:class:`BEGenParams`), with their checks, the
operator codes and classes of Table 2(a) of the BE-Tree paper, and the command-line
flags that set them (:func:`add_params_arguments`, shared by BE-Gen's command line and the
benchmarks).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields

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
