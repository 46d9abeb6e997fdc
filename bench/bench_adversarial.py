"""Benchmark of issue 9's adversarial workloads (a script, not a test).

Each case is one function in :data:`CASES`; it measures one workload per matcher (or
once, for the parser) and returns its section of ``docs/bench-adversarial.md``: a table
and the issue's target with today's verdict. To add a case, write a workload (a
function in :data:`WORKLOADS` that prepares its input and returns the operation to
measure) and a case function that runs it through :func:`measure` and tabulates.

Every measurement runs in a fresh subprocess (``--worker``), so that one matcher's
memory or crash cannot affect the next, under an address-space limit (``--memory-mb``)
and a CPU-time limit (``--cpu-seconds``), both reported instead of a figure when hit. The
subprocess prepares the input, then measures only the operation:

- CPU seconds (``time.process_time``: the cost on one core, whatever the load of the
  machine) and wall seconds;
- peak memory: the growth of the peak resident set over the operation, read from
  ``VmHWM`` after resetting it (``/proc/self/clear_refs``) once the input is ready.

The page ``docs/bench-adversarial.md`` keeps one section per case, each with the
command and date that produced it: running some cases rewrites their sections and
keeps the others. Usage: ``.venv/bin/python bench/bench_adversarial.py --help``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import re
import resource
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))  # this checkout's code, not the installed one

from host import cpu_model  # noqa: E402 - bench/host.py, beside this script

import psmatch  # noqa: E402
from psmatch import MATCHERS, make_matcher  # noqa: E402
from psmatch.begen.adversarial import EXPRESSIONS, values  # noqa: E402
from psmatch.errors import ExpressionError  # noqa: E402
from psmatch.language import parse_subscription  # noqa: E402

DOC = REPO / "docs" / "bench-adversarial.md"
MB = 1 << 20
INDEXES = [name for name in MATCHERS if name != "scan"]

Report = dict[str, Any]
Operation = Callable[[], Report]


# --------------------------------------------------------------------------- workloads
# A workload prepares its input (not measured) and returns the operation to measure,
# which returns what the table shows besides time and memory.


def parse_workload(matcher: str, expression: str) -> Operation:
    text = EXPRESSIONS[expression]()

    def run() -> Report:
        try:
            subscription = parse_subscription(text)
        except ExpressionError as error:
            return {"chars": len(text), "outcome": f"{type(error).__name__}: {error.reason}"}
        intervals = sum(len(p.intervals) for c in subscription.conjuncts for p in c.predicates)
        return {"chars": len(text), "outcome": f"{len(subscription.conjuncts)} conjuncts, "
                f"{intervals} intervals"}

    return run


def wide_event_workload(matcher: str, subscriptions: int, attributes: int) -> Operation:
    index = make_matcher(matcher)
    index.add_many((str(i), f"x{i} = {i}") for i in range(subscriptions))
    event = {f"x{j}": 1 for j in range(attributes)}
    return lambda: {"matches": len(index.match(event))}


FLOODS: dict[str, Callable[[int], str]] = {
    "a != i": lambda i: f"a != {i}",
    "a not in (20 values)": lambda i: f"a not in ({values(20 * i, 20)})",
    "a = i": lambda i: f"a = {i}",
}


def build_workload(matcher: str, flood: str, subscriptions: int) -> Operation:
    """``add_many`` of already parsed subscriptions: the index's own build cost."""
    parsed = [(str(i), parse_subscription(FLOODS[flood](i))) for i in range(subscriptions)]
    index = make_matcher(matcher)

    def run() -> Report:
        index.add_many(parsed)
        return {"estimated MB": index.stats().estimated_bytes / MB}

    return run


def _churn_text(rng: random.Random) -> str:
    v = rng.randrange(1_000_000)
    return (f"a{rng.randrange(20)} between {v} and {v + rng.randrange(1, 1000)} "
            f"and b{rng.randrange(7)} = {rng.randrange(1000)}")


def churn_workload(matcher: str, live: int, cycles: int, seconds: float) -> Operation:
    """Replace random live subscriptions by new ones (remove, then add a fresh id)."""
    rng = random.Random(9)
    index = make_matcher(matcher)
    texts = {str(i): _churn_text(rng) for i in range(live)}
    index.add_many(texts.items())
    initial = index.stats().estimated_bytes
    alive = list(texts)

    def run() -> Report:
        deadline = time.process_time() + seconds
        done = 0
        while done < cycles and time.process_time() < deadline:
            for _ in range(min(500, cycles - done)):
                slot = rng.randrange(live)
                index.remove(alive[slot])
                del texts[alive[slot]]
                alive[slot] = str(live + done)
                texts[alive[slot]] = _churn_text(rng)
                index.add(alive[slot], texts[alive[slot]])
                done += 1
        fresh = make_matcher(matcher)
        fresh.add_many(texts.items())
        churned, rebuilt = index.stats().estimated_bytes, fresh.stats().estimated_bytes
        return {"cycles": done, "initial MB": initial / MB, "churned MB": churned / MB,
                "fresh MB": rebuilt / MB, "churned / fresh": churned / rebuilt}

    return run


def like_workload(matcher: str, subscriptions: int, events: int) -> Operation:
    rng = random.Random(6)
    letters = "abcdefghijklmnopqrstuvwxyz"
    index = make_matcher(matcher)
    index.add_many((str(i), f"s like '%{''.join(rng.choices(letters, k=4))}%'")
                   for i in range(subscriptions))
    batch = [{"s": "".join(rng.choices(letters, k=40))} for _ in range(events)]

    def run() -> Report:
        start = time.process_time()
        matches = sum(len(m) for m in index.match_batch(batch))
        return {"ms per event": (time.process_time() - start) * 1000 / events,
                "matches per event": matches / events}

    return run


WORKLOADS: dict[str, Callable[..., Operation]] = {
    "parse": parse_workload,
    "wide_event": wide_event_workload,
    "build": build_workload,
    "churn": churn_workload,
    "like": like_workload,
}


# --------------------------------------------------------------------------- measuring


def _peak_kib() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        return int(re.search(r"VmHWM:\s+(\d+)", f.read()).group(1))  # type: ignore[union-attr]


def _rss_kib() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))  # type: ignore[union-attr]


def _worker(spec: str) -> None:
    """Run one measurement (in the subprocess) and print its report as JSON."""
    request = json.loads(spec)
    run = WORKLOADS[request["workload"]](request["matcher"], **request["params"])
    gc.collect()
    base = _rss_kib()
    with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
        f.write("5")  # resets VmHWM to the current resident set
    cpu, wall = time.process_time(), time.perf_counter()
    report = run()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    report.update(cpu_s=cpu, wall_s=wall, peak_mb=max(0, _peak_kib() - base) / 1024)
    print(json.dumps(report))


@dataclass(frozen=True)
class Limits:
    cpu_seconds: float
    memory_mb: int


def measure(workload: str, matcher: str, limits: Limits, **params: Any) -> Report:
    """One measurement in a fresh subprocess; ``error`` says why there is no figure."""
    spec = json.dumps({"workload": workload, "matcher": matcher, "params": params})
    print(f"  {workload} {matcher} {params}", file=sys.stderr, flush=True)

    def limit() -> None:
        size = limits.memory_mb * MB
        resource.setrlimit(resource.RLIMIT_AS, (size, size))
        cpu = int(limits.cpu_seconds)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))

    over = {"error": f"over {limits.cpu_seconds:.0f} s of CPU"}
    try:
        # The wall-clock timeout only guards against a stuck subprocess: on a loaded
        # machine wall time is several times the CPU time the limit counts.
        done = subprocess.run(
            [sys.executable, __file__, "--worker", spec], capture_output=True, text=True,
            timeout=10 * limits.cpu_seconds, preexec_fn=limit, cwd=REPO, check=False)
    except subprocess.TimeoutExpired:
        return over
    if done.returncode == -signal.SIGXCPU:
        return over
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        if "MemoryError" in done.stderr:
            last = f"MemoryError (limit {limits.memory_mb} MB)"
        return {"error": last[:120]}
    return json.loads(done.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- cases


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value).replace("|", "\\|")


def _rows(results: list[Report], columns: list[str]) -> str:
    """The table, with a failed measurement's reason in its last column."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for result in results:
        cells = [_cell(result[c]) if c in result else "" for c in columns]
        if "error" in result:
            cells[-1] = f"**{_cell(result['error'])}**"
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def case_parser(args: argparse.Namespace, limits: Limits) -> str:
    results = []
    for name in EXPRESSIONS:
        result = measure("parse", "-", limits, expression=name)
        results.append({"expression": name, **result})
    worst = max(r.get("cpu_s", float("inf")) for r in results)
    verdict = "met" if worst < 1.0 else "not met"
    return (
        "Parsing and normalising (`parse_subscription`) adversarial expressions: the issue's "
        "three examples, then each operator mix filling the 64 KiB text limit (or the "
        "256-comparison limit first), then the expressions that reach or come closest to "
        "the step limit. An `ExpressionLimitError` is the intended outcome where a limit is "
        "crossed.\n\n"
        + _rows(results, ["expression", "chars", "cpu_s", "wall_s", "peak_mb", "outcome"])
        + f"\n\nTarget: a 64 KiB expression of any operators parses within 1 s on one core. "
        f"Worst CPU time: {worst:.3f} s: **{verdict}**."
    )


def case_wide_events(args: argparse.Namespace, limits: Limits) -> str:
    results = []
    for matcher in args.matchers:
        small = measure("wide_event", matcher, limits, subscriptions=10_000, attributes=1_000)
        large = measure("wide_event", matcher, limits, subscriptions=10_000, attributes=10_000)
        row = {"matcher": matcher}
        row.update({f"1k {k}": v for k, v in small.items() if k != "matches"})
        row.update({f"10k {k}": v for k, v in large.items() if k != "matches"})
        if "cpu_s" in small and "cpu_s" in large:
            row["10k / 1k cpu"] = large["cpu_s"] / max(small["cpu_s"], 1e-9)
        if "error" in large or "error" in small:
            row["error"] = large.get("error") or small.get("error")
        results.append(row)
    return (
        "10,000 subscriptions `x{i} = i`; one event of 1,000 then of 10,000 attributes "
        "`x{j}: 1` (one match). CPU seconds and peak memory of `match`.\n\n"
        + _rows(results, ["matcher", "1k cpu_s", "1k peak_mb", "10k cpu_s", "10k peak_mb",
                          "10k / 1k cpu"])
        + "\n\nTarget (PSTHash): the 10,000-attribute event costs at most 15 x the "
        "1,000-attribute one, with peak memory under 100 MB."
    )


def _build_case(args: argparse.Namespace, limits: Limits, flood: str, size: int,
                target: float, target_text: str) -> str:
    results = [{"matcher": m, **measure("build", m, limits, flood=flood, subscriptions=size)}
               for m in args.matchers]
    counting = next((r for r in results if r["matcher"] == "counting" and "cpu_s" in r), None)
    for r in results:
        if counting and "cpu_s" in r:
            r["cpu / counting"] = r["cpu_s"] / counting["cpu_s"]
            r["peak / counting"] = r["peak_mb"] / max(counting["peak_mb"], 1.0)
            r["meets"] = "yes" if r["cpu / counting"] <= target and (
                target_text.endswith("time") or r["peak / counting"] <= target) else "no"
    return (
        f"`add_many` of {size:,} parsed subscriptions `{flood}`: CPU seconds and peak "
        "memory of the build, next to the index's own `estimated_bytes`.\n\n"
        + _rows(results, ["matcher", "cpu_s", "wall_s", "peak_mb", "estimated MB",
                          "cpu / counting", "peak / counting", "meets"])
        + f"\n\nTarget: {target_text}."
    )


def case_floods(args: argparse.Namespace, limits: Limits) -> str:
    return "\n\n".join(
        _build_case(args, limits, flood, args.flood_size, 3.0,
                    "build within 3 x counting's time and memory")
        for flood in ("a != i", "a not in (20 values)"))


def case_bulk_equal(args: argparse.Namespace, limits: Limits) -> str:
    return _build_case(args, limits, "a = i", args.bulk_size, 2.0,
                       "within 2 x counting's build time")


def case_churn(args: argparse.Namespace, limits: Limits) -> str:
    seconds = max(1.0, limits.cpu_seconds - 30)
    results = [{"matcher": m, **measure("churn", m, limits, live=1_000, cycles=args.churn_cycles,
                                        seconds=seconds)} for m in args.matchers]
    return (
        f"1,000 live subscriptions (`aK between v and w and bK = u`), then up to "
        f"{args.churn_cycles:,} cycles each removing one at random and adding a new one, "
        f"stopped after {seconds:.0f} s of CPU; `estimated_bytes` after the churn against a fresh "
        "build of the same 1,000. CPU seconds and peak memory of the churn.\n\n"
        + _rows(results, ["matcher", "cycles", "cpu_s", "peak_mb", "initial MB", "churned MB",
                          "fresh MB", "churned / fresh"])
        + "\n\nTarget: after 100,000 cycles, `estimated_bytes` within 1.5 x a fresh build."
    )


def case_like(args: argparse.Namespace, limits: Limits) -> str:
    results = [{"matcher": m, **measure("like", m, limits, subscriptions=20_000, events=20)}
               for m in [*args.matchers, "scan"]]
    scan = next((r for r in results if r["matcher"] == "scan" and "ms per event" in r), None)
    for r in results:
        if scan and "ms per event" in r:
            r["speedup over scan"] = scan["ms per event"] / r["ms per event"]
    return (
        "20,000 subscriptions `s like '%xxxx%'` (random 4-letter words); 20 events of one "
        "random 40-letter string. CPU time per event of `match_batch`.\n\n"
        + _rows(results, ["matcher", "ms per event", "matches per event", "peak_mb",
                          "speedup over scan"])
        + "\n\nTarget: at least 10 x faster than `scan` per event."
    )


CASES: dict[str, tuple[str, Callable[[argparse.Namespace, Limits], str]]] = {
    "parser": ("A 64 KiB expression of any operators", case_parser),
    "wide_events": ("Wide events", case_wide_events),
    "floods": ("Floods of `!=` and `not in` on one attribute", case_floods),
    "churn": ("Churn", case_churn),
    "bulk_equal": ("Bulk build of many values on one attribute", case_bulk_equal),
    "like": ("Contains patterns", case_like),
}


# --------------------------------------------------------------------------- the page


def _machine() -> str:
    cpu = cpu_model()
    return (f"{cpu}, {os.cpu_count()} cores; Python {platform.python_version()}, "
            f"numpy {np.__version__}; load average {os.getloadavg()[0]:.1f} at the start")


def _revision() -> str:
    """The commit measured, and whether src/psmatch/ differs from it."""
    try:
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "src"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "an unknown commit"
    return f"commit {commit}" + (" with uncommitted changes to src/psmatch/" if dirty else "")


_HEADER = """# Adversarial benchmark (issue 9)

Written by `bench/bench_adversarial.py` (each section names the command and the commit
that produced it; a run rewrites only the sections of the cases it ran). Each figure
comes from a fresh subprocess; CPU seconds are the cost on one core, peak memory the
growth of the resident set's peak over the measured operation. A bold cell is a
measurement that hit the CPU-time limit or the memory limit instead of finishing. Each
section states its target and whether the run met it.
"""


NOT_EXECUTED = "<!-- not executed: a benchmark run, seconds to minutes of CPU per case -->"


def _write_doc(sections: dict[str, str]) -> None:
    old = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
    kept = dict(re.findall(r"<!-- case:(\w+) -->\n(.*?)<!-- end:\1 -->", old, re.S))
    kept.update(sections)
    body = [_HEADER]
    for case in CASES:
        if case in kept:
            body.append(f"<!-- case:{case} -->\n{kept[case]}<!-- end:{case} -->")
    DOC.write_text("\n".join(body), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench/bench_adversarial.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=",".join(CASES),
                        help=f"comma-separated cases to run, among {', '.join(CASES)}")
    parser.add_argument("--matchers", default=",".join(INDEXES),
                        help="comma-separated matchers for the matcher cases")
    parser.add_argument("--cpu-seconds", type=float, default=120.0,
                        help="CPU seconds after which one measurement (its input included) "
                        "is stopped (default 120)")
    parser.add_argument("--memory-mb", type=int, default=4096,
                        help="address-space limit of one measurement (default 4096)")
    parser.add_argument("--flood-size", type=int, default=20_000)
    parser.add_argument("--bulk-size", type=int, default=100_000)
    parser.add_argument("--churn-cycles", type=int, default=100_000)
    parser.add_argument("--no-doc", action="store_true", help="print only, do not write docs/")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(args.worker)
        return
    if not Path(psmatch.__file__).resolve().is_relative_to(REPO):
        parser.error(f"psmatch is imported from {psmatch.__file__}, not from {REPO}: "
                     f"run with PYTHONPATH={REPO / 'src'}")
    args.matchers = [m for m in args.matchers.split(",") if m]
    limits = Limits(args.cpu_seconds, args.memory_mb)
    command = "$ .venv/bin/python bench/bench_adversarial.py " + shlex.join(sys.argv[1:])
    sections = {}
    for case in args.cases.split(","):
        title, run = CASES[case]
        print(f"{case}:", file=sys.stderr, flush=True)
        machine = f"{_revision()}; {_machine()}"
        table = run(args, limits)
        sections[case] = (f"## {title}\n\n{NOT_EXECUTED}\n```console\n{command.rstrip()}\n```\n\n"
                          f"{machine[0].upper()}{machine[1:]}.\n\n{table}\n\n")
        print(sections[case], flush=True)
    if not args.no_doc:
        _write_doc(sections)


if __name__ == "__main__":
    main()
