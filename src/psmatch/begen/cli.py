"""BE-Gen's command line, ``python -m psmatch.begen``: generate a workload, write its
files and measure its matching probability."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from psmatch.begen.generator import generate, measure_matching_probability, write_workload
from psmatch.begen.params import add_params_arguments, params_from_args


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

