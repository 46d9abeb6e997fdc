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
measures: build seconds (wall and CPU, and the CPU that reading the texts alone takes:
``add_many``'s bulk scan for a matcher that files normal-form columns, else parsing;
timed on the first :data:`PARSE_SAMPLE` and scaled to n), ``stats().estimated_bytes``,
the process's peak RSS, CPU ms per event matched in batches of ``--batch-size``
(``--events`` events) and one at a time (``--single`` events). The table, the command
and the machine go to ``docs/bench-domains.md``, a log-log plot of build seconds,
bytes and ms per event against n per matcher to ``docs/bench-domains.png``.

With ``--hem-dir DIR`` (a checkout of the public HEM code, shiwanghua/HEM), HEM's own
C++ matchers HEM5DD, Rein and Tama run beside them on the range workloads, on the same
subscriptions and events: ``bench/hem_driver.cpp`` is compiled with ``g++ -O3`` against
DIR's sources (copied into ``DIR/.psmatch-driver/subs-N`` with HEM's compile-time
capacity ``subs`` set to n) and handed the generated workload as int32 columns. They
match one event at a time (their figure stands in both ms columns) and report their own
memory estimate (``calMemory``, whole MB) as the estimated bytes. Progress goes to
stderr.

Usage: ``nice .venv/bin/python bench/bench_domains.py --help``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shlex
import shutil
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
MATCHER_ORDER = ("bitset", "auto", "psthash", "pstbloom", "counting")
"""The order of psmatch's matchers in the report (HEM's follow them)."""
WALL_SLACK = 4
"""Wall-clock timeout of a run, in multiples of its CPU limit (``--timeout``)."""
PARSE_SAMPLE = 10_000
"""Subscriptions whose parsing is timed alone, to tell parsing from filing in a build."""


def range_arrays(n: int, events: int, per_subscription: int, width: float,
                 seed: int) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    """``n`` subscriptions of ``per_subscription`` closed ranges of ``width x DOMAIN`` on
    distinct attributes of :data:`ATTRIBUTES` (their attributes and lower bounds, n x k,
    and the span), and the values of events carrying every attribute (events x
    :data:`ATTRIBUTES`)."""
    rng = np.random.default_rng(seed)
    span = int(width * DOMAIN)
    attrs = np.argsort(rng.random((n, ATTRIBUTES)), axis=1)[:, :per_subscription]
    lows = rng.integers(0, DOMAIN - span + 1, size=(n, per_subscription))
    values = rng.integers(0, DOMAIN, size=(events, ATTRIBUTES))
    return attrs, lows, span, values


RANGES = {"fine2": (3, 0.02), "fine40": (3, 0.4), "hem": (10, 0.4)}
"""The range workloads: predicates per subscription and width (a fraction of DOMAIN)."""


def ranges(n: int, events: int, per_subscription: int, width: float,
           seed: int) -> tuple[list[tuple[str, str]], list[dict[str, int]]]:
    """:func:`range_arrays` as subscription texts (``aK between lo and hi``) and events."""
    attrs, lows, span, values = range_arrays(n, events, per_subscription, width, seed)
    subscriptions = [
        (str(i), " and ".join(f"a{a} between {lo} and {lo + span}"
                              for a, lo in zip(row_a.tolist(), row_lo.tolist(), strict=True)))
        for i, (row_a, row_lo) in enumerate(zip(attrs, lows, strict=True))]
    return subscriptions, [{f"a{a}": v for a, v in enumerate(row)} for row in values.tolist()]


def workload(name: str, n: int, events: int,
             seed: int) -> tuple[list[tuple[str, str]], list[dict[str, Any]]]:
    if name == "begen":
        from psmatch.begen import BEGenParams, generate

        generated = generate(BEGenParams(subscriptions=n, events=events, seed=seed))
        return generated.subscriptions, generated.events
    return ranges(n, events, *RANGES[name], seed)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """One (workload, matcher, n) run, in this process."""
    from psmatch import make_matcher
    from psmatch.core.bulk_scan import scan_columns
    from psmatch.core.matcher import Matcher
    from psmatch.language import parse_subscription

    subscriptions, events = workload(args.workload, args.n, args.events, args.seed)
    matcher = make_matcher(args.matcher)
    # reading the texts as add_many does: the bulk scan for a matcher that files columns
    texts = [text for _, text in subscriptions[:PARSE_SAMPLE]]
    sampled = len(texts)
    start = time.process_time()
    if type(matcher)._insert_columns is not Matcher._insert_columns:
        texts = [texts[i] for i in scan_columns(texts)[2].tolist()]
    for text in texts:
        parse_subscription(text)
    parse = (time.process_time() - start) * len(subscriptions) / sampled
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


def limited_run(command: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """Run ``command`` within the address-space limit (``--memory-gb``) and the CPU-time
    limit (``--timeout``; the wall clock gets :data:`WALL_SLACK` times that, for a shared
    machine): ``{"stdout": ...}``, or ``{"error": ...}`` saying which limit or failure
    ended it."""
    limit = int(args.memory_gb * 2**30)
    cpu = int(args.timeout)

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))

    try:
        done = subprocess.run(command, capture_output=True, text=True,
                              timeout=WALL_SLACK * args.timeout, preexec_fn=limited,
                              check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"over {WALL_SLACK * args.timeout:.0f} s wall"}
    if done.returncode == -signal.SIGXCPU:
        return {"error": f"over {args.timeout:.0f} CPU s"}
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["?"])[-1]
        memory = "MemoryError" in done.stderr or "bad_alloc" in done.stderr
        return {"error": "MemoryError" if memory else tail[:80]}
    return {"stdout": done.stdout}


def run_child(workload_name: str, matcher: str, n: int,
              args: argparse.Namespace) -> dict[str, Any]:
    """``measure`` in a subprocess within the memory limit and timeout."""
    command = [sys.executable, __file__, "--child", "--workload", workload_name,
               "--matcher", matcher, "--n", str(n), "--events", str(args.events),
               "--single", str(args.single), "--batch-size", str(args.batch_size),
               "--seed", str(args.seed)]
    done = limited_run(command, args)
    if "error" in done:
        return {"workload": workload_name, "matcher": matcher, "n": n} | done
    return json.loads(done["stdout"].strip().splitlines()[-1])


HEM_MATCHERS = {"HEM5DD": "hem5dd", "Rein": "rein", "Tama": "tama"}
"""HEM's matchers the driver runs (row name: the driver's name for it)."""
HEM_SOURCES = ("HEM5.cpp", "Rein.cpp", "Tama.cpp", "Util.cpp", "constant.cpp", "generator.cpp",
               "printer.cpp")
"""The files of HEM's code the driver is linked with (besides its headers)."""


def build_driver(hem_dir: Path, n: int) -> Path:
    """``bench/hem_driver.cpp`` compiled against HEM's sources in ``hem_dir``, HEM's
    compile-time capacity (``constant.h``'s ``subs``) set to ``n``, in a build directory
    under ``hem_dir``; reused while neither the sources nor the driver changed."""
    build = hem_dir / ".psmatch-driver" / f"subs-{n}"
    exe, driver = build / "hem_driver", REPO / "bench" / "hem_driver.cpp"
    sources = [hem_dir / name for name in HEM_SOURCES] + sorted(hem_dir.glob("*.h"))
    missing = [str(p) for p in sources[:len(HEM_SOURCES)] if not p.is_file()]
    if missing:
        raise SystemExit(f"--hem-dir {hem_dir}: not HEM's code (no {', '.join(missing)})")
    if exe.exists() and exe.stat().st_mtime >= max(p.stat().st_mtime for p in [*sources, driver]):
        return exe
    build.mkdir(parents=True, exist_ok=True)
    for path in sources:
        shutil.copy2(path, build / path.name)
    constant = build / "constant.h"  # latin-1: the bytes as they are, whatever the comments
    text, count = re.subn(r"^const int subs = \d+;", f"const int subs = {n};",
                          constant.read_text(encoding="latin-1"), flags=re.MULTILINE)
    if count != 1:
        raise SystemExit(f"--hem-dir {hem_dir}: constant.h has no 'const int subs = N;' line")
    constant.write_text(text, encoding="latin-1")
    print(f"compiling {exe}", file=sys.stderr, flush=True)
    subprocess.run(["g++", "-O3", "-march=native", "-std=c++17", "-w", "-I", str(build),
                    "-o", str(exe), str(driver), *(str(build / f) for f in HEM_SOURCES),
                    "-lpthread"], check=True)
    return exe


def write_hem_workload(path: Path, name: str, n: int, args: argparse.Namespace) -> None:
    """The range workload ``name`` as the driver reads it (``bench/hem_driver.cpp``):
    the same subscriptions and events :func:`ranges` gives psmatch's matchers."""
    per_subscription, width = RANGES[name]
    attrs, lows, span, values = range_arrays(n, args.events, per_subscription, width, args.seed)
    header = np.array([n, per_subscription, args.events, ATTRIBUTES, DOMAIN], dtype=np.int32)
    # HEM's values lie in [0, DOMAIN): an upper bound of DOMAIN (a range that reaches the
    # domain's end) is its last value, which the same events match
    highs = np.minimum(lows + span, DOMAIN - 1)
    with open(path, "wb") as f:
        for column in (header, attrs, lows, highs, values):
            f.write(np.ascontiguousarray(column, dtype="<i4").tobytes())


def run_peer(name: str, peer: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    """One of HEM's matchers on the workload ``name`` at ``n``, in the driver, within the
    memory limit and timeout."""
    exe = build_driver(Path(args.hem_dir).resolve(), n)
    data = exe.parent / f"{name}-{n}-{args.events}-{args.seed}.i32"
    if not data.exists():
        write_hem_workload(data, name, n, args)
    row = {"workload": name, "matcher": peer, "n": n}
    done = limited_run([str(exe), HEM_MATCHERS[peer], str(data)], args)
    if "error" in done:
        return row | done
    out = json.loads(done["stdout"].strip().splitlines()[-1])
    return row | {"build_s": out["build_s"], "build_cpu_s": out["build_cpu_s"],
                  "parse_cpu_s": 0.0, "estimated_bytes": out["memory_mb"] * 2**20,
                  "peak_rss": out["peak_rss"], "batched_ms": out["ms_per_event"],
                  "single_ms": out["ms_per_event"],
                  "matches_per_event": out["matches_per_event"]}


def _mib(value: float) -> str:
    return f"{value / 2**20:,.1f}"


def command_line(argv: list[str]) -> str:
    """The invocation as the report shows it, ``--hem-dir``'s value as ``HEM`` (where the
    checkout is belongs to the machine, not the report)."""
    shown = list(argv)
    for i, arg in enumerate(argv):
        if arg == "--hem-dir" and i + 1 < len(argv):
            shown[i + 1] = "HEM"
        elif arg.startswith("--hem-dir="):
            shown[i] = "--hem-dir=HEM"
    return shlex.join(["python", "bench/bench_domains.py", *shown])


def write_report(results: list[dict[str, Any]], args: argparse.Namespace, argv: list[str]) -> None:
    from host import cpu_model

    this_command = command_line(argv)
    commands = list(dict.fromkeys(r.get("command", this_command) for r in results))
    lines = [
        "# Matchers across value domains and range widths",
        "",
        "Generated by `bench/bench_domains.py` (its docstring describes the workloads). "
        "Build: `add_many` of all subscriptions; bytes: `stats().estimated_bytes`; peak RSS: "
        "the process's, workload included; ms per event: CPU time (the processes are "
        "single-threaded, and CPU time is what a shared machine does not inflate), batches of "
        f"{args.batch_size} over {args.events} events, and one at a time over {args.single}.",
        "",
        "HEM5DD, Rein and Tama are the public HEM code's C++ matchers (`--hem-dir HEM`, a "
        "checkout of github.com/shiwanghua/HEM; `bench/hem_driver.cpp`), on the same "
        "subscriptions and events: they match one event "
        "at a time (their figure stands in both ms columns), and their bytes are their own "
        "estimate (`calMemory`, whole MB).",
        "",
        "Commands (with `--results`, each invocation appended its rows to the results file "
        "and the last wrote this report from it; a row is the last run of its workload, "
        "matcher and n, and its last column is the number of its command):",
        "",
        *(f"    {i}. {command}" for i, command in enumerate(commands, 1)),
        "",
        f"Machine: {cpu_model()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, numpy {np.__version__}; one process at a time, "
        f"each limited to {args.memory_gb:g} GiB of address space and {args.timeout:.0f} "
        "CPU seconds; a matcher that failed at some n is not run at larger ones.",
        "",
        "| workload | matcher | n | build s | build CPU s | of which reading texts (est.) "
        "| estimated MiB | bytes / sub | peak RSS MiB "
        "| ms / event batched | ms / event single | matches / event | command |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    order = [*MATCHER_ORDER, *HEM_MATCHERS]
    results = sorted(results, key=lambda r: (WORKLOADS.index(r["workload"]), r["n"],
                                              order.index(r["matcher"])
                                              if r["matcher"] in order else len(order)))
    for r in results:
        run = commands.index(r.get("command", this_command)) + 1
        if "error" in r:
            lines.append(f"| {r['workload']} | {r['matcher']} | {r['n']:,} | "
                         f"{r['error']} | | | | | | | | | {run} |")
            continue
        lines.append(
            f"| {r['workload']} | {r['matcher']} | {r['n']:,} | {r['build_s']:.2f} | "
            f"{r['build_cpu_s']:.2f} | {r['parse_cpu_s']:.2f} | "
            f"{_mib(r['estimated_bytes'])} | {r['estimated_bytes'] / r['n']:,.0f} | "
            f"{_mib(r['peak_rss'])} | {r['batched_ms']:.3f} | {r['single_ms']:.3f} | "
            f"{r['matches_per_event']:.1f} | {run} |")
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
    order = [*MATCHER_ORDER, *HEM_MATCHERS]
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
            shown = {r["matcher"] for r in ok if r["workload"] == name}
            for matcher in sorted(shown, key=lambda m: [*order, m].index(m)):
                points = sorted((r["n"], r[metric]) for r in ok
                                if r["workload"] == name and r["matcher"] == matcher)
                # one colour per matcher in every panel; HEM's matchers dashed
                ax.plot(*zip(*points, strict=True), marker="o", label=matcher,
                        color=f"C{[*order, matcher].index(matcher) % 10}",
                        linestyle="--" if matcher in HEM_MATCHERS else "-")
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
    parser.add_argument("--hem-dir", help="a checkout of the public HEM code: run its "
                        "HEM5DD, Rein and Tama on the range workloads too (needs g++)")
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
            names = args.matchers.split(",")
            if args.hem_dir and workload_name in RANGES:  # HEM's matchers too, once each
                names += [peer for peer in HEM_MATCHERS if peer not in names]
            else:
                names = [name for name in names if name not in HEM_MATCHERS]
            for matcher in names:
                if matcher in failed:  # it failed at a smaller n: skip the larger ones
                    continue
                result = (run_peer(workload_name, matcher, n, args) if matcher in HEM_MATCHERS
                          else run_child(workload_name, matcher, n, args))
                if "error" in result:
                    failed.add(matcher)
                print(json.dumps(result), file=sys.stderr, flush=True)
                results.append(result)
                if args.results:
                    with open(args.results, "a", encoding="utf-8") as f:
                        f.write(json.dumps(result | {"command": command_line(argv)}) + "\n")
    if args.results:  # the report: the last run of each (workload, matcher, n) in the file
        with open(args.results, encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
        results = list({(r["workload"], r["matcher"], r["n"]): r for r in rows}.values())
    write_report(results, args, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
