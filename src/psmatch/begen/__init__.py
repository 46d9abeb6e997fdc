"""BE-Gen, the workload generator of the BE-Tree and PS-Tree papers, apart from the matchers.

It generates subscriptions and events for benchmarks and tests
(:mod:`psmatch.begen.generator`, with its parameters in :mod:`psmatch.begen.params`),
beside the adversarial expressions they share (:mod:`psmatch.begen.adversarial`); no
matcher imports either. Command line:
``python -m psmatch.begen --help``.
"""

from __future__ import annotations

from psmatch.begen.cli import main
from psmatch.begen.generator import (
    MatchingProbability,
    Workload,
    generate,
    measure_matching_probability,
    read_events,
    read_subscriptions,
    write_workload,
)
from psmatch.begen.params import BEGenParams, add_params_arguments, params_from_args

__all__ = [
    "BEGenParams",
    "MatchingProbability",
    "Workload",
    "add_params_arguments",
    "generate",
    "main",
    "measure_matching_probability",
    "params_from_args",
    "read_events",
    "read_subscriptions",
    "write_workload",
]
