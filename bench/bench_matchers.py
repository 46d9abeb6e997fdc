"""Benchmark of the matchers on a BE-Gen workload (a script, not a test).

For each chosen matcher, in a fresh subprocess pinned to one core (so that RSS growth is
that matcher's alone and a crash loses only its row), this script generates the BE-Gen
workload (deterministic, so every matcher sees the same one), builds the index on it and
measures:

- build seconds (``add_many`` of all subscriptions) and memory: RSS growth over the
  build (psutil) next to the matcher's own ``stats().estimated_bytes``;
- match time per event: ``match_batch`` on consecutive batches of ``--batch-size``
  events, per-event time = batch time / batch size; the mean over all events timed,
  the p99 over batches, and events per second;
- single ``add`` throughput (``--updates`` fresh subscriptions) and ``remove`` throughput
  (as many random subscriptions of the built index);
- agreement with ``scan``: the share of the first ``--agreement-events`` events whose
  answer equals scan's (scan is slow at 1M, so it only matches those events), and the
  speedup of the mean match time over scan's.

The table goes to stdout and, with the exact command line, the date and the machine, to
``docs/bench-matchers.md``; a bar plot to ``docs/bench-matchers.png``. ``--profile NAME``
runs pyinstrument over a few match batches of that matcher (after its timed run) and
writes the text report to ``docs/bench-profile-NAME.txt``. Progress goes to stderr.

The defaults are the PS-Tree paper's default workload: 1M subscriptions, 100 dimensions,
cardinality 100, subscription size 5, event size 30, equality ratio 0.2, matching
probability 0.1%. Usage: ``.venv/bin/python bench/bench_matchers.py --help``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))  # this checkout's code, not the installed one

from host import cpu_model  # noqa: E402 - bench/host.py, beside this script

from psmatch import MATCHERS, make_matcher  # noqa: E402
from psmatch.begen import BEGenParams, add_params_arguments, generate, params_from_args  # noqa: E402

MB = 1 << 20


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bench/bench_matchers.py",
        description="Build each matcher on a BE-Gen workload and report build time, memory, "
        "match time per event (batches), update throughput and agreement with scan. "
        "Writes docs/bench-matchers.md and docs/bench-matchers.png.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    workload = parser.add_argument_group("workload (BE-Gen parameters, see src/psmatch/begen/)")
    add_params_arguments(workload, events=10_000)
    run = parser.add_argument_group("run")
    run.add_argument(
        "--matchers",
        default="scan,pstbloom,psthash",
        help=f"comma-separated matchers to run, each in its own subprocess, or 'all' "
        f"({', '.join(MATCHERS)})",
    )
    run.add_argument("--batch-size", type=int, default=1_000, help="events per match_batch call")
    run.add_argument(
        "--agreement-events",
        type=int,
        default=100,
        help="first events whose answers are compared with scan's; scan matches only these",
    )
    run.add_argument(
        "--updates",
        type=int,
        default=2_000,
        help="timed single adds of fresh subscriptions, then as many timed removes",
    )
    run.add_argument(
        "--cpu",
        type=int,
        default=max(os.sched_getaffinity(0)),
        help="the core every matcher's subprocess is pinned to",
    )
    run.add_argument("--timeout", type=float, default=3 * 3600, help="seconds one matcher may take")
    run.add_argument(
        "--out-dir", type=Path, default=REPO / "docs", help="where the report and plot go"
    )
    run.add_argument(
        "--profile",
        choices=MATCHERS,
        default=None,
        help="profile this matcher's match phase with pyinstrument "
        "(writes OUT_DIR/bench-profile-NAME.txt)",
    )
    run.add_argument(
        "--profile-batches", type=int, default=3, help="match batches run under the profiler"
    )
    parser.add_argument("--child", choices=MATCHERS, help=argparse.SUPPRESS)
    parser.add_argument("--answers", type=Path, help=argparse.SUPPRESS)
    return parser


# -- one matcher, in its own process ----------------------------------------------------


class _Progress:
    """Timestamped progress lines on stderr."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.started = time.perf_counter()

    def __call__(self, message: str) -> None:
        elapsed = time.perf_counter() - self.started
        print(f"[{self.name} {elapsed:7.1f}s] {message}", file=sys.stderr, flush=True)

    def counting(self, items: Sequence[Any], what: str, every: int = 100_000) -> Iterator[Any]:
        """Yield ``items``, reporting every ``every`` of them (without changing the call)."""
        for i, item in enumerate(items, 1):
            yield item
            if i % every == 0 or i == len(items):
                self(f"{what} {i:,}/{len(items):,}")


def _batches(events: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    return (events[i : i + size] for i in range(0, len(events), size))


def run_one(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Measure matcher ``name``; runs inside the child process. Returns the result row."""
    os.sched_setaffinity(0, {args.cpu})
    progress = _Progress(name)
    n = args.subscriptions
    progress(f"generating the workload ({n:,} subscriptions + {args.updates:,} fresh)")
    workload = generate(params_from_args(args, subscriptions=n + args.updates))
    subscriptions, fresh = workload.subscriptions[:n], workload.subscriptions[n:]
    events = workload.events[: args.agreement_events] if name == "scan" else workload.events
    del workload
    process = psutil.Process()
    gc.collect()
    rss_before = process.memory_info().rss

    matcher = make_matcher(name)
    started = time.perf_counter()
    matcher.add_many(progress.counting(subscriptions, "build"))
    build_seconds = time.perf_counter() - started
    gc.collect()
    rss_growth = process.memory_info().rss - rss_before
    stats = matcher.stats()
    progress(f"built in {build_seconds:.1f} s; {stats}")

    batch_seconds: list[float] = []
    batch_sizes: list[int] = []
    answers: list[list[str]] = []
    cpu_started = time.process_time()
    for batch in _batches(events, args.batch_size):
        started = time.perf_counter()
        matched = matcher.match_batch(batch)
        batch_seconds.append(time.perf_counter() - started)
        batch_sizes.append(len(batch))
        answers.extend(sorted(ids) for ids in matched[: args.agreement_events - len(answers)])
        if len(batch_seconds) % 5 == 0 or sum(batch_sizes) == len(events):
            per_event = sum(batch_seconds) / sum(batch_sizes)
            progress(
                f"matched {sum(batch_sizes):,}/{len(events):,} events, "
                f"{per_event * 1e3:.3f} ms/event"
            )
    match_cpu_seconds = time.process_time() - cpu_started
    args.answers.write_text(json.dumps(answers))

    if args.profile == name:
        _profile(matcher, events, args, progress)

    started = time.perf_counter()
    for sub_id, text in fresh:
        matcher.add(sub_id, text)
    matcher.stats()  # a read: files the staged adds, so the add time includes filing
    add_seconds = time.perf_counter() - started
    victims = np.random.default_rng(args.seed).choice(n, args.updates, replace=False)
    started = time.perf_counter()
    for sub_id in victims.tolist():
        matcher.remove(str(sub_id))
    matcher.stats()  # a read: files the staged removals, so the time includes filing
    remove_seconds = time.perf_counter() - started
    progress(f"{args.updates:,} adds in {add_seconds:.2f} s, removes in {remove_seconds:.2f} s")

    per_event = np.array(batch_seconds) / np.array(batch_sizes)
    timed = sum(batch_sizes)
    return {
        "matcher": name,
        "build_seconds": build_seconds,
        "rss_growth_bytes": rss_growth,
        "estimated_bytes": stats.estimated_bytes,
        "stats": stats.as_dict(),
        "events_timed": timed,
        "batches": len(batch_seconds),
        "mean_seconds_per_event": sum(batch_seconds) / timed if timed else float("nan"),
        "p99_seconds_per_event": float(np.percentile(per_event, 99)) if timed else float("nan"),
        "events_per_second": timed / sum(batch_seconds) if timed else float("nan"),
        "match_cpu_share": match_cpu_seconds / sum(batch_seconds) if timed else float("nan"),
        "cpu_seconds_per_event": match_cpu_seconds / timed if timed else float("nan"),
        "adds_per_second": len(fresh) / add_seconds if fresh else float("nan"),
        "removes_per_second": len(victims) / remove_seconds if len(victims) else float("nan"),
    }


def _profile(
    matcher: Any, events: Sequence[Any], args: argparse.Namespace, progress: _Progress
) -> None:
    """Run ``--profile-batches`` match batches under pyinstrument; write the text report."""
    from pyinstrument import Profiler  # only needed with --profile

    batches = list(_batches(events, args.batch_size))[: args.profile_batches]
    profiler = Profiler(interval=0.0005)
    profiler.start()
    for batch in batches:
        matcher.match_batch(batch)
    profiler.stop()
    path = args.out_dir / f"bench-profile-{args.child}.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    header = (
        f"pyinstrument profile of {args.child}.match_batch on {len(batches)} batch(es) of "
        f"{args.batch_size} events, index of {args.subscriptions:,} subscriptions\n"
        f"command: {_command_line()}\n\n"
    )
    # paths relative to the checkout: the report describes the code, not where it ran
    text = profiler.output_text(unicode=False, color=False).replace(f"{REPO}/", "")
    path.write_text(header + text)
    progress(f"wrote {path}")


# -- the parent: one subprocess per matcher, then the report ----------------------------


def _command_line() -> str:
    argv = list(sys.argv)
    if "--child" in argv:  # a child reports the parent's command
        argv = argv[: argv.index("--child")]
    return shlex.join([".venv/bin/python", os.path.relpath(argv[0], REPO), *argv[1:]])


def _run_children(
    args: argparse.Namespace, argv: list[str], names: list[str], workdir: Path
) -> tuple[list[dict[str, Any]], dict[str, list[list[str]]]]:
    """Run each matcher in its own subprocess; its result row and its answers."""
    rows: list[dict[str, Any]] = []
    answers: dict[str, list[list[str]]] = {}
    env = os.environ | {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    for name in names:
        answers_path = workdir / f"{name}.json"
        command = [
            sys.executable,
            __file__,
            *argv,
            "--child",
            name,
            "--answers",
            str(answers_path),
        ]
        print(f"== {name}", file=sys.stderr, flush=True)
        try:
            done = subprocess.run(
                command,
                stdout=subprocess.PIPE,
                text=True,
                env=env,
                timeout=args.timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            rows.append({"matcher": name, "error": f"timed out after {args.timeout:.0f} s"})
            continue
        if done.returncode != 0:
            rows.append({"matcher": name, "error": f"failed (exit code {done.returncode})"})
            continue
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        answers[name] = json.loads(answers_path.read_text())
    return rows, answers


def _compare(rows: list[dict[str, Any]], answers: dict[str, list[list[str]]]) -> None:
    """Add agreement with scan and speedup over scan to each row."""
    scan_rows = [r for r in rows if r["matcher"] == "scan" and "error" not in r]
    for row in rows:
        if "error" in row:
            continue
        if "scan" in answers and row["matcher"] != "scan":
            reference = answers["scan"]
            mine = answers[row["matcher"]][: len(reference)]
            row["agreement"] = (
                sum(a == b for a, b in zip(mine, reference, strict=False)) / len(reference)
                if reference
                else float("nan")
            )
            row["agreement_events"] = len(reference)
        if scan_rows:
            row["speedup"] = scan_rows[0]["mean_seconds_per_event"] / row["mean_seconds_per_event"]


def _fmt(value: float | None, pattern: str) -> str:
    return "–" if value is None or value != value else format(value, pattern)


def _rate(value: float) -> str:
    """A per-second rate: whole numbers, or two decimals when below 100."""
    return _fmt(value, ",.0f" if value >= 100 else ".2f")


def _table(rows: list[dict[str, Any]]) -> str:
    header = (
        "| matcher | build s | RSS growth MB | estimated MB | mean ms/event | p99 ms/event "
        "| events/s | events timed (batches) | CPU ms/event (CPU/wall) | adds/s | removes/s "
        "| agreement with scan | speedup vs scan |"
    )
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['matcher']} | {r['error']} |" + " |" * (header.count("|") - 3))
            continue
        agreement = (
            "reference"
            if r["matcher"] == "scan"
            else f"{r['agreement']:.2%} of {r['agreement_events']}"
            if "agreement" in r
            else "–"
        )
        lines.append(
            f"| {r['matcher']} | {r['build_seconds']:.1f} | {r['rss_growth_bytes'] / MB:.0f} "
            f"| {r['estimated_bytes'] / MB:.0f} | {r['mean_seconds_per_event'] * 1e3:.3f} "
            f"| {r['p99_seconds_per_event'] * 1e3:.3f} | {_rate(r['events_per_second'])} "
            f"| {r['events_timed']:,} ({r['batches']}) "
            f"| {r['cpu_seconds_per_event'] * 1e3:.3f} ({_fmt(r['match_cpu_share'], '.0%')}) "
            f"| {_rate(r['adds_per_second'])} "
            f"| {_rate(r['removes_per_second'])} | {agreement} "
            f"| {_fmt(r.get('speedup'), ',.1f')} |"
        )
    return "\n".join(lines)


def _machine() -> str:
    cpu = cpu_model()
    return (
        f"CPU {cpu}, {os.cpu_count()} cores ({psutil.cpu_count(logical=False)} physical), "
        f"{psutil.virtual_memory().total / (1 << 30):.1f} GiB RAM; {platform.platform()}; "
        f"Python {platform.python_version()}, numpy {np.__version__}"
    )


def _plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if "error" not in r]
    names = [r["matcher"] for r in ok]
    x = np.arange(len(ok))
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.5))
    mean = [r["mean_seconds_per_event"] * 1e3 for r in ok]
    p99 = [r["p99_seconds_per_event"] * 1e3 for r in ok]
    axes[0].bar(x - 0.2, mean, 0.4, label="mean")
    axes[0].bar(x + 0.2, p99, 0.4, label="p99 over batches")
    axes[0].set_yscale("log")
    axes[0].set_ylabel("ms per event (log)")
    axes[0].set_title("match time per event")
    axes[1].bar(x, [r["build_seconds"] for r in ok], 0.6)
    axes[1].set_ylabel("seconds")
    axes[1].set_title("build")
    axes[2].bar(x - 0.2, [r["rss_growth_bytes"] / MB for r in ok], 0.4, label="RSS growth")
    axes[2].bar(x + 0.2, [r["estimated_bytes"] / MB for r in ok], 0.4, label="stats() estimate")
    axes[2].set_ylabel("MB")
    axes[2].set_title("memory")
    for ax in axes:
        ax.set_xticks(x, names)
    axes[0].legend()
    axes[2].legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _report(
    args: argparse.Namespace,
    params: BEGenParams,
    rows: list[dict[str, Any]],
    answers: dict[str, list[list[str]]],
    seconds: float,
) -> str:
    reference = "scan" if "scan" in answers else next(iter(answers), None)
    if reference and answers[reference]:
        counts = [len(a) for a in answers[reference]]
        measured = (
            f"{np.mean(counts) / args.subscriptions:.4%} (mean {np.mean(counts):,.1f} matches "
            f"per event, by {reference} on the first {len(counts)} events)"
        )
    else:
        measured = "not measured (no matcher finished)"
    workload = ", ".join(f"{f.name} {getattr(params, f.name)}" for f in fields(params))
    profile = (
        f"\nProfile of {args.profile}'s match phase: "
        f"[bench-profile-{args.profile}.txt](bench-profile-{args.profile}.txt)\n"
        if args.profile
        else ""
    )
    return f"""# Matcher benchmark

Command: `{_command_line()}`

Whole run {seconds / 60:.1f} min. Machine: {_machine()}.
Each matcher ran in its own subprocess pinned to core {args.cpu}.

Workload (BE-Gen, `src/psmatch/begen/`): {workload}. The index holds {args.subscriptions:,}
subscriptions; {args.updates:,} more are the fresh ones for the add test. Matching
probability measured: {measured}; target {params.matching_probability:.4%}.

{_table(rows)}

- *build s*: `add_many` of all subscriptions (parsing included).
- *RSS growth*: process RSS after the build minus before it (psutil, after `gc.collect()`);
  *estimated*: the matcher's `stats().estimated_bytes`.
- *mean / p99 ms/event*: `match_batch` on batches of {args.batch_size:,} events, per-event time
  = batch time / batch size; mean over all events timed, p99 over the batches. scan matches
  only the first {args.agreement_events} events.
- *CPU ms/event (CPU/wall)*: process CPU time per event over the match phase, and CPU
  time over wall time; a share well under 100% means the pinned core was shared with
  other work and the wall times above are inflated by about its inverse.
- *adds/s, removes/s*: {args.updates:,} single `add` calls of fresh subscriptions (and the
  read after them that files the staged adds), then {args.updates:,} `remove` calls of
  random subscriptions of the built index (and the read that files the staged removals).
- *agreement with scan*: share of the first {args.agreement_events} events whose answer equals
  scan's; *speedup*: scan's mean time per event over the matcher's.
{profile}
![bar plot](bench-matchers.png)
"""


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parser().parse_args(argv)
    if args.child:
        print(json.dumps(run_one(args.child, args)))
        return 0
    names = (
        list(MATCHERS)
        if args.matchers == "all"
        else [n.strip() for n in args.matchers.split(",") if n.strip()]
    )
    unknown = [n for n in names if n not in MATCHERS]
    if unknown:
        print(
            f"error: unknown matcher(s) {', '.join(unknown)}; choose from {', '.join(MATCHERS)}",
            file=sys.stderr,
        )
        return 2
    try:
        params = params_from_args(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not 0 <= args.updates <= args.subscriptions or args.batch_size < 1:
        print(
            "error: need 0 <= --updates <= --subscriptions and --batch-size >= 1", file=sys.stderr
        )
        return 2
    clock = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-matchers-") as workdir:
        rows, answers = _run_children(args, argv, names, Path(workdir))
    _compare(rows, answers)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    report = _report(args, params, rows, answers, time.perf_counter() - clock)
    (args.out_dir / "bench-matchers.md").write_text(report, encoding="utf-8")
    _plot(
        rows,
        args.out_dir / "bench-matchers.png",
        f"{args.subscriptions:,} subscriptions, {params.dimensions} dimensions, "
        f"batches of {args.batch_size:,} events, one core",
    )
    print(_table(rows))
    print(f"wrote {args.out_dir / 'bench-matchers.md'} and {args.out_dir / 'bench-matchers.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
