"""Benchmark of the matchers across value domains and range widths (a script, not a test).

Workloads (all generated here, deterministic from ``--seed``):

- ``begen``: BE-Gen's paper default (:mod:`psmatch.begen`: 100 attributes, cardinality
  100, 5 predicates per subscription, events of 30 attributes);
- ``fine2`` and ``fine40``: 3 range predicates per subscription (``aK between lo and
  hi``) on distinct attributes of 20, over [0, 10^6), each range 2 % (40 %) of the
  domain, bounds uniform; events carry all 20 attributes, values uniform;
- ``hem``: the default workload of the public HEM code (Shi & Qian, DASFAA 2022): 20
  attributes, each subscription 10 closed ranges of width 0.4 x 10^6 over [0, 10^6) on
  distinct attributes, events carrying all 20 attributes.

For each workload, matcher (``--matchers``) and size (``--sizes``), a fresh subprocess
with an address-space limit (``--memory-gb``) and a CPU-time limit (``--timeout``), so that one
blow-up costs only its row, generates the workload, builds the index (``add_many``) and
measures: build seconds (wall and CPU, and the CPU that parsing the texts alone takes,
timed on the first :data:`PARSE_SAMPLE` and scaled to n), ``stats().estimated_bytes``,
the process's peak RSS, CPU ms per event matched in batches of ``--batch-size``
(``--events`` events) and one at a time (``--single`` events). The table, the command
and the machine go to ``docs/bench-domains.md``, a log-log plot of build seconds,
bytes and ms per event against n per matcher to ``docs/bench-domains.png``. HEM's own C++ matchers
(``--hem-dir``) are not run by this script. Progress goes to stderr.

Usage: ``nice .venv/bin/python bench/bench_domains.py --help``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))  # this checkout's code, not the installed one
sys.path.insert(0, str(REPO / "bench"))

DOMAIN = 1_000_000
ATTRIBUTES = 20
WORKLOADS = ("begen", "fine2", "fine40", "hem")
WALL_SLACK = 4
"""Wall-clock timeout of a run, in multiples of its CPU limit (``--timeout``)."""
PARSE_SAMPLE = 10_000
"""Subscriptions whose parsing is timed alone, to tell parsing from filing in a build."""


def ranges(n: int, events: int, per_subscription: int, width: float,
           seed: int) -> tuple[list[tuple[str, str]], list[dict[str, int]]]:
    """``n`` subscriptions of ``per_subscription`` closed ranges of ``width x DOMAIN`` on
    distinct attributes of :data:`ATTRIBUTES`, and events carrying every attribute."""
    rng = np.random.default_rng(seed)
    span = int(width * DOMAIN)
    attrs = np.argsort(rng.random((n, ATTRIBUTES)), axis=1)[:, :per_subscription]
    lows = rng.integers(0, DOMAIN - span + 1, size=(n, per_subscription))
    subscriptions = [
        (str(i), " and ".join(f"a{a} between {lo} and {lo + span}"
                              for a, lo in zip(row_a.tolist(), row_lo.tolist(), strict=True)))
        for i, (row_a, row_lo) in enumerate(zip(attrs, lows, strict=True))]
    values = rng.integers(0, DOMAIN, size=(events, ATTRIBUTES)).tolist()
    return subscriptions, [{f"a{a}": v for a, v in enumerate(row)} for row in values]


def workload(name: str, n: int, events: int,
             seed: int) -> tuple[list[tuple[str, str]], list[dict[str, Any]]]:
    if name == "begen":
        from psmatch.begen import BEGenParams, generate

        generated = generate(BEGenParams(subscriptions=n, events=events, seed=seed))
        return generated.subscriptions, generated.events
    if name in ("fine2", "fine40"):
        return ranges(n, events, 3, 0.02 if name == "fine2" else 0.4, seed)
    assert name == "hem"
    return ranges(n, events, 10, 0.4, seed)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """One (workload, matcher, n) run, in this process."""
    from psmatch import make_matcher
    from psmatch.language import parse_subscription

    subscriptions, events = workload(args.workload, args.n, args.events, args.seed)
    sample = subscriptions[:PARSE_SAMPLE]
    start = time.process_time()
    for _, text in sample:
        parse_subscription(text)
    parse = (time.process_time() - start) * len(subscriptions) / len(sample)
    matcher = make_matcher(args.matcher)
    start, cpu = time.perf_counter(), time.process_time()
    matcher.add_many(subscriptions)
    build, build_cpu = time.perf_counter() - start, time.process_time() - cpu
    del subscriptions
    estimated = matcher.stats().estimated_bytes
    matches = 0
    start = time.process_time()  # CPU time: the machine may be shared
    for at in range(0, len(events), args.batch_size):
        matches += sum(map(len, matcher.match_batch(events[at:at + args.batch_size])))
    batched = (time.process_time() - start) / len(events)
    single_events = events[: args.single]
    start = time.process_time()
    for event in single_events:
        matcher.match(event)
    single = (time.process_time() - start) / max(len(single_events), 1)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"workload": args.workload, "matcher": args.matcher, "n": args.n,
            "build_s": build, "build_cpu_s": build_cpu, "parse_cpu_s": parse,
            "estimated_bytes": estimated, "peak_rss": peak,
            "batched_ms": 1e3 * batched, "single_ms": 1e3 * single,
            "matches_per_event": matches / len(events)}


def run_child(workload_name: str, matcher: str, n: int,
              args: argparse.Namespace) -> dict[str, Any]:
    """``measure`` in a subprocess within the memory limit and timeout."""
    command = [sys.executable, __file__, "--child", "--workload", workload_name,
               "--matcher", matcher, "--n", str(n), "--events", str(args.events),
               "--single", str(args.single), "--batch-size", str(args.batch_size),
               "--seed", str(args.seed)]
    limit = int(args.memory_gb * 2**30)
    cpu = int(args.timeout)

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))

    failed = {"workload": workload_name, "matcher": matcher, "n": n}
    try:  # the CPU limit is the timeout; the wall clock gets slack for a shared machine
        done = subprocess.run(command, capture_output=True, text=True,
                              timeout=WALL_SLACK * args.timeout, preexec_fn=limited,
                              check=False)
    except subprocess.TimeoutExpired:
        return failed | {"error": f"over {WALL_SLACK * args.timeout:.0f} s wall"}
    if done.returncode == -signal.SIGXCPU:
        return failed | {"error": f"over {args.timeout:.0f} CPU s"}
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["?"])[-1]
        return failed | {"error": "MemoryError" if "MemoryError" in done.stderr
                         else tail[:80]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _mib(value: float) -> str:
    return f"{value / 2**20:,.1f}"


def write_report(results: list[dict[str, Any]], args: argparse.Namespace, argv: list[str]) -> None:
    from host import cpu_model

    lines = [
        "# Matchers across value domains and range widths",
        "",
        "Generated by `bench/bench_domains.py` (its docstring describes the workloads). "
        "Build: `add_many` of all subscriptions; bytes: `stats().estimated_bytes`; peak RSS: "
        "the process's, workload included; ms per event: CPU time (the processes are "
        "single-threaded, and CPU time is what a shared machine does not inflate), batches of "
        f"{args.batch_size} over {args.events} events, and one at a time over {args.single}.",
        "",
        "Command (the last; with `--results`, earlier invocations appended the other "
        "rows): `" + shlex.join(["python", "bench/bench_domains.py", *argv]) + "`",
        "",
        f"Machine: {cpu_model()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, numpy {np.__version__}; one process at a time, "
        f"each limited to {args.memory_gb:g} GiB of address space and {args.timeout:.0f} "
        "CPU seconds; a matcher that failed at some n is not run at larger ones.",
        "",
        "| workload | matcher | n | build s | build CPU s | of which parsing (est.) "
        "| estimated MiB | bytes / sub | peak RSS MiB "
        "| ms / event batched | ms / event single | matches / event |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    matchers = args.matchers.split(",")
    results = sorted(results, key=lambda r: (WORKLOADS.index(r["workload"]), r["n"],
                                              matchers.index(r["matcher"])
                                              if r["matcher"] in matchers else len(matchers)))
    for r in results:
        if "error" in r:
            lines.append(f"| {r['workload']} | {r['matcher']} | {r['n']:,} | "
                         f"{r['error']} | | | | | | | | |")
            continue
        lines.append(
            f"| {r['workload']} | {r['matcher']} | {r['n']:,} | {r['build_s']:.2f} | "
            f"{r['build_cpu_s']:.2f} | {r['parse_cpu_s']:.2f} | "
            f"{_mib(r['estimated_bytes'])} | {r['estimated_bytes'] / r['n']:,.0f} | "
            f"{_mib(r['peak_rss'])} | {r['batched_ms']:.3f} | {r['single_ms']:.3f} | "
            f"{r['matches_per_event']:.1f} |")
    lines += ["", "![cost against n](bench-domains.png)", ""]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))
    plot(results, out.with_suffix(".png"))


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in results if "error" not in r]
    workloads = [w for w in WORKLOADS if any(r["workload"] == w for r in ok)]
    if not workloads:
        return
    metrics = (("build_cpu_s", "build CPU s"), ("estimated_bytes", "estimated bytes"),
               ("batched_ms", "ms / event (batched)"))
    figure, axes = plt.subplots(len(metrics), len(workloads), squeeze=False,
                                figsize=(4 * len(workloads), 3.2 * len(metrics)))
    for column, name in enumerate(workloads):
        for row, (metric, label) in enumerate(metrics):
            ax = axes[row][column]
            for matcher in sorted({r["matcher"] for r in ok if r["workload"] == name}):
                points = sorted((r["n"], r[metric]) for r in ok
                                if r["workload"] == name and r["matcher"] == matcher)
                ax.plot(*zip(*points, strict=True), marker="o", label=matcher)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("subscriptions")
            ax.set_ylabel(label)
            if row == 0:
                ax.set_title(name)
                ax.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--matchers", default="bitset,psthash,pstbloom,counting")
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--single", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--memory-gb", type=float, default=6.0)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--out", default=str(REPO / "docs" / "bench-domains.md"))
    parser.add_argument("--results", help="append the results as JSON lines to this file "
                        "and report every run it holds (several invocations, one report)")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing: write the report of the --results file")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--workload", help=argparse.SUPPRESS)
    parser.add_argument("--matcher", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args)))
        return 0
    results = []
    for workload_name in [] if args.report_only else args.workloads.split(","):
        failed: set[str] = set()
        for n in sorted(int(s) for s in args.sizes.split(",")):
            for matcher in args.matchers.split(","):
                if matcher in failed:  # it failed at a smaller n: skip the larger ones
                    continue
                result = run_child(workload_name, matcher, n, args)
                if "error" in result:
                    failed.add(matcher)
                print(json.dumps(result), file=sys.stderr, flush=True)
                results.append(result)
                if args.results:
                    with open(args.results, "a", encoding="utf-8") as f:
                        f.write(json.dumps(result) + "\n")
    if args.results:  # the report covers every run the results file holds
        with open(args.results, encoding="utf-8") as f:
            results = [json.loads(line) for line in f if line.strip()]
    write_report(results, args, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
