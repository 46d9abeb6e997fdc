"""The random workload of the streaming tests: subscriptions over a few attributes whose
notifications the ``scan`` matcher predicts (the end-to-end and fault-injection tests)."""

from __future__ import annotations

import random

from psmatch.language import parse_subscription

ATTRS = ("a", "b", "c")


def random_subscriptions(rng: random.Random, n: int) -> dict[str, str]:
    """``n`` satisfiable expressions over a, b, c (integers 0..20) and s (a letter)."""
    ops = [
        lambda: f"{rng.choice(ATTRS)} < {rng.randint(0, 20)}",
        lambda: f"{rng.choice(ATTRS)} >= {rng.randint(0, 20)}",
        lambda: f"{rng.choice(ATTRS)} = {rng.randint(0, 20)}",
        lambda: f"s in ('{rng.choice('xyz')}', '{rng.choice('xyz')}')",
        lambda: f"not {rng.choice(ATTRS)} between {rng.randint(0, 10)} and {rng.randint(10, 20)}",
    ]
    subs: dict[str, str] = {}
    while len(subs) < n:
        parts = [rng.choice(ops)() for _ in range(rng.randint(1, 3))]
        expr = f" {rng.choice(['and', 'or'])} ".join(parts)
        try:
            parse_subscription(expr)
        except ValueError:  # e.g. unsatisfiable
            continue
        subs[f"sub-{len(subs)}"] = expr
    return subs
