"""Sweep ``bench/bench_matchers.py`` over BE-Gen workloads and write ``docs/benchmarks.md``.

This script owns ``docs/benchmarks.md`` and the plots ``docs/benchmarks-*.png``. It reproduces
the *shape* of the evaluation (section 7) of Ji & Jacobsen, "PS-Tree-Based Efficient Boolean
Expression Matching for High-Dimensional and Dense Workloads", PVLDB 12(3), 2018: dense vs
sparse, Zipf attribute choice,
equality ratio, matching probability and subscription count.

It never imports a matcher: each workload point is one subprocess call of
``bench/bench_matchers.py`` (which runs every matcher in its own subprocess) with ``--out-dir``
under a temporary directory; the markdown table that script writes is parsed (it writes no JSON).
Results accumulate in a JSON file (``--results``) after every point, so a sweep cut short by
``--budget-minutes`` or an interrupt can still be rendered with ``--render-only``. The
hand-written analysis between the ``<!-- analysis -->`` markers of an existing
``docs/benchmarks.md`` is kept when the report is regenerated, and so are the sections other
scripts write there (between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` markers,
e.g. ``bench/bench_instructions.py``'s).

Progress goes to stderr. Example::

    .venv/bin/python bench/bench_sweep.py --budget-minutes 50 --results bench-sweep.json
    .venv/bin/python bench/bench_sweep.py --render-only --results bench-sweep.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench" / "bench_matchers.py"
DOCS = REPO / "docs"

ALL = "pstbloom,psthash,opindex,betree,counting,propagation,pbtree"
CONTENDERS = "pstbloom,psthash,opindex,betree"
ORDER = ["scan", *ALL.split(",")]
ANALYSIS_START, ANALYSIS_END = "<!-- analysis -->", "<!-- /analysis -->"
OTHER_SECTION = re.compile(r"^<!-- (\w+):begin -->$.*?^<!-- \1:end -->$", re.M | re.S)
"""A section another script writes on the page (its heading inside it), kept as it is."""
OUT_DIR = re.compile(r"--out-dir \S+")


@dataclass(frozen=True)
class Point:
    """One workload point: a bench_matchers call."""

    key: str
    sweeps: tuple[str, ...]  # sweeps this point belongs to
    x: dict[str, str]  # sweep -> x value shown for that sweep
    args: tuple[str, ...]  # BE-Gen / run arguments beyond the common ones
    matchers: str


def _dense(n: int = 100_000) -> tuple[str, ...]:
    return ("--subscriptions", str(n), "--dimensions", "100")


# Points in priority order (sweeps 1 and 5 first, then 3, 4, 2, then the optional 1M point).
POINTS: list[Point] = [
    Point(
        "dense-100k",
        ("density", "count"),
        {"density": "dense (100)", "count": "100000"},
        _dense(),
        "scan," + ALL,
    ),
    # The base point of sweeps 2-4 again, for the four matchers those sweeps run, so that
    # a sweep's points can all run on the same core.
    Point(
        "base-100k",
        ("equality", "probability", "zipf"),
        {"equality": "0.2", "probability": "0.001", "zipf": "0"},
        _dense(),
        CONTENDERS,
    ),
    Point(
        "sparse-100k",
        ("density",),
        {"density": "sparse (30000)"},
        ("--subscriptions", "100000", "--dimensions", "30000"),
        ALL,
    ),
    Point("dense-30k", ("count",), {"count": "30000"}, _dense(30_000), ALL),
    Point("dense-300k", ("count",), {"count": "300000"}, _dense(300_000), ALL),
    Point(
        "eq-0.0",
        ("equality",),
        {"equality": "0.0"},
        (*_dense(), "--equality-ratio", "0.0"),
        CONTENDERS,
    ),
    Point(
        "eq-0.5",
        ("equality",),
        {"equality": "0.5"},
        (*_dense(), "--equality-ratio", "0.5"),
        CONTENDERS,
    ),
    Point(
        "eq-1.0",
        ("equality",),
        {"equality": "1.0"},
        (*_dense(), "--equality-ratio", "1.0"),
        CONTENDERS,
    ),
    Point(
        "mp-0.0001",
        ("probability",),
        {"probability": "0.0001"},
        (*_dense(), "--matching-probability", "0.0001"),
        CONTENDERS,
    ),
    Point(
        "mp-0.01",
        ("probability",),
        {"probability": "0.01"},
        (*_dense(), "--matching-probability", "0.01"),
        CONTENDERS,
    ),
    Point("zipf-1", ("zipf",), {"zipf": "1"}, (*_dense(), "--alpha", "1"), CONTENDERS),
    Point("zipf-2", ("zipf",), {"zipf": "2"}, (*_dense(), "--alpha", "2"), CONTENDERS),
    Point("dense-1m", ("count",), {"count": "1000000"}, _dense(1_000_000), "pstbloom,psthash"),
]

SWEEPS: dict[str, tuple[str, str]] = {  # name -> (title, x label)
    "density": ("1. Dense (100 dimensions) vs sparse (30,000 dimensions), uniform", "dimensions"),
    "count": ("5. Subscription count, dense", "subscriptions"),
    "equality": ("3. Equality ratio, dense", "equality ratio"),
    "probability": ("4. Matching probability, dense", "target matching probability"),
    "zipf": ("2. Zipf attribute choice, dense", "alpha"),
}
SWEEP_ORDER = ["density", "zipf", "equality", "probability", "count"]


@dataclass
class Result:
    """What one point produced."""

    key: str
    command: str
    started: str
    seconds: float
    loadavg: float
    header: dict[str, str] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""


# -- running ----------------------------------------------------------------------------


def _common(ns: argparse.Namespace) -> list[str]:
    return [
        "--events",
        str(ns.events),
        "--agreement-events",
        str(ns.agreement_events),
        "--updates",
        str(ns.updates),
        "--timeout",
        str(ns.timeout),
        "--cpu",
        str(ns.cpu),
    ]


def _number(cell: str) -> float | None:
    cell = cell.strip().split(" ")[0].replace(",", "")
    try:
        return float(cell)
    except ValueError:
        return None


def parse_report(text: str) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """The header facts and the table rows of a bench-matchers.md."""
    header: dict[str, str] = {}
    for name, pattern in {
        "machine": r"Machine: (.*?)\.\n",
        "workload": r"^Workload \(BE-Gen[^:]*: (.*?)\. The index",
        "measured_probability": r"probability measured: ([0-9.]+%|not measured)",
    }.items():
        found = re.search(pattern, text, re.M | re.S)
        if found:
            header[name] = " ".join(found.group(1).split())
    rows: list[dict[str, Any]] = []
    lines = [ln for ln in text.splitlines() if ln.startswith("| ")]
    if not lines:
        return header, rows
    columns = [c.strip() for c in lines[0].strip("|").split("|")]
    for line in lines[1:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        cell = dict(zip(columns, cells, strict=False))
        row: dict[str, Any] = {"matcher": cells[0]}
        if len(cells) < 5 or not cells[1] or _number(cells[1]) is None:
            row["error"] = cells[1] if len(cells) > 1 else "no result"
            rows.append(row)
            continue
        cpu = cell.get("CPU ms/event (CPU/wall)", "")
        share = re.search(r"\(([0-9]+)%\)", cpu)
        row.update(
            build_s=_number(cell["build s"]),
            rss_mb=_number(cell["RSS growth MB"]),
            est_mb=_number(cell["estimated MB"]),
            ms=_number(cell["mean ms/event"]),
            cpu_ms=_number(cpu),
            cpu_share=float(share.group(1)) / 100 if share else None,
            adds=_number(cell["adds/s"]),
            removes=_number(cell["removes/s"]),
            agreement=cell.get("agreement with scan", ""),
            speedup=_number(cell.get("speedup vs scan", "")),
        )
        rows.append(row)
    return header, rows


def run_point(point: Point, ns: argparse.Namespace, workdir: Path) -> Result:
    """One subprocess call of bench_matchers for ``point``; its parsed result."""
    out_dir = workdir / point.key
    command = [
        ".venv/bin/python",
        "bench/bench_matchers.py",
        *point.args,
        *_common(ns),
        "--matchers",
        point.matchers,
        "--out-dir",
        str(out_dir),
    ]
    log = workdir / f"{point.key}.log"
    started = datetime.now(UTC)
    result = Result(
        point.key, shlex.join(command), f"{started:%Y-%m-%d %H:%M}", 0.0, os.getloadavg()[0]
    )
    clock = time.perf_counter()
    print(f"[sweep] {point.key}: {result.command} (log {log})", file=sys.stderr, flush=True)
    with log.open("w") as err:
        done = subprocess.run(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=err, check=False)
    result.seconds = time.perf_counter() - clock
    report = out_dir / "bench-matchers.md"
    if done.returncode != 0 or not report.exists():
        result.error = f"bench_matchers exit code {done.returncode}; see {log}"
    else:
        result.header, result.rows = parse_report(report.read_text(encoding="utf-8"))
    print(
        f"[sweep] {point.key}: done in {result.seconds / 60:.1f} min {result.error}",
        file=sys.stderr,
        flush=True,
    )
    return result


def load(path: Path) -> dict[str, Any]:
    if path.exists():
        data: dict[str, Any] = json.loads(path.read_text())
        return data
    return {"settings": {}, "results": {}}


def sweep(ns: argparse.Namespace) -> dict[str, Any]:
    """Run the selected points in priority order within the budget, saving after each."""
    data = load(ns.results)
    data.setdefault("settings", {})["common"] = _common(ns)
    workdir = Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    print(f"[sweep] work directory {workdir}", file=sys.stderr, flush=True)
    clock = time.perf_counter()
    by_key = {p.key: p for p in POINTS}
    wanted = ns.points.split(",") if ns.points else list(by_key)  # run in this order
    for point in (by_key[k] for k in wanted):
        if point.key in data["results"] and not ns.rerun:
            continue
        elapsed = (time.perf_counter() - clock) / 60
        if elapsed > ns.budget_minutes:
            print(
                f"[sweep] budget spent ({elapsed:.0f} min); skipping {point.key}",
                file=sys.stderr,
                flush=True,
            )
            continue
        data["results"][point.key] = asdict(run_point(point, ns, workdir))
        ns.results.write_text(json.dumps(data, indent=1))
    return data


# -- the report -------------------------------------------------------------------------


def _ok(result: dict[str, Any], name: str) -> dict[str, Any] | None:
    for row in result.get("rows", []):
        if row["matcher"] == name and "error" not in row:
            return row
    return None


def _fmt(value: float | None, pattern: str = ".3f") -> str:
    return "–" if value is None else format(value, pattern)


def _sweep_points(name: str, results: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    points = [(p.x[name], results[p.key]) for p in POINTS if name in p.sweeps and p.key in results]
    try:  # numeric x values in increasing order; others (dense/sparse) as listed
        return sorted(points, key=lambda xr: float(xr[0]))
    except ValueError:
        return points


def _matchers(points: list[tuple[str, dict[str, Any]]]) -> list[str]:
    seen = {row["matcher"] for _, r in points for row in r.get("rows", [])}
    return [m for m in ORDER if m in seen]


def _plot(name: str, points: list[tuple[str, dict[str, Any]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    title, xlabel = SWEEPS[name]
    names = [m for m in _matchers(points) if m != "scan"]
    xs = list(range(len(points)))
    fig, axes = plt.subplots(1, 4, figsize=(18, 4.6))
    panels = [
        ("cpu_ms", "match CPU ms/event (log)", True),
        ("ms", "match wall ms/event (log)", True),
        ("build_s", "build seconds", False),
        ("rss_mb", "RSS growth MB", False),
    ]
    bar = len(points) <= 2
    width = 0.8 / max(len(names), 1)
    for ax, (metric, label, log) in zip(axes, panels, strict=True):
        for i, m in enumerate(names):
            ys = [(_ok(r, m) or {}).get(metric) for _, r in points]
            if bar:
                ax.bar(
                    [x + (i - len(names) / 2 + 0.5) * width for x in xs],
                    [y if y is not None else 0 for y in ys],
                    width,
                    label=m,
                )
            else:
                ax.plot(xs, [y if y is not None else float("nan") for y in ys], "o-", label=m)
        ax.set_xticks(xs, [x for x, _ in points])
        ax.set_xlabel(xlabel)
        ax.set_title(label)
        if log:
            ax.set_yscale("log")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{title} (one core, batches of 1,000 events; each point one run)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _core(result: dict[str, Any]) -> str:
    found = re.search(r"--cpu (\d+)", result.get("command", ""))
    return found.group(1) if found else "?"


def _ranking(result: dict[str, Any]) -> list[tuple[str, float]]:
    rows = [r for r in result.get("rows", []) if "error" not in r and r["matcher"] != "scan"]
    ranked = [(r["matcher"], r["cpu_ms"]) for r in rows if r.get("cpu_ms") is not None]
    return sorted(ranked, key=lambda t: t[1])


def _sweep_section(name: str, results: dict[str, Any], docs: Path) -> str:
    title, xlabel = SWEEPS[name]
    points = _sweep_points(name, results)
    missing = [p.key for p in POINTS if name in p.sweeps and p.key not in results]
    out = [f"### {title}", ""]
    if not points:
        return "\n".join([*out, f"Not run (points missing: {', '.join(missing)}).", ""])
    names = _matchers(points)
    head = f"| matcher | {' | '.join(x for x, _ in points)} |"
    sep = "|---" * (len(points) + 1) + "|"
    tables = [
        (
            "Match CPU ms per event (process CPU time over the match phase; wall ms in brackets)",
            lambda row: f"{_fmt(row['cpu_ms'])} ({_fmt(row['ms'])})",
        ),
        ("Build seconds (`add_many`, parsing included)", lambda row: _fmt(row["build_s"], ".1f")),
        (
            "Memory MB: RSS growth over the build (`stats()` estimate in brackets)",
            lambda row: f"{_fmt(row['rss_mb'], '.0f')} ({_fmt(row['est_mb'], '.0f')})",
        ),
    ]
    for caption, cell in tables:
        out += [f"{caption}, by {xlabel}:", "", head, sep]
        for m in names:
            cells = []
            for _, r in points:
                row = _ok(r, m)
                err = next((x.get("error") for x in r.get("rows", []) if x["matcher"] == m), None)
                cells.append(cell(row) if row else (err or "not run"))
            out.append(f"| {m} | {' | '.join(cells)} |")
        out.append("")
    out.append(
        "Ranking by match CPU ms/event (fastest first; ratio to the fastest), measured "
        "matching probability, "
        "CPU/wall share of the fastest matcher's match phase, load average at start:"
    )
    out.append("")
    for x, r in points:
        ranking = _ranking(r)
        ranked = " < ".join(f"{m} {v:.3f} ({v / ranking[0][1]:.1f}x)" for m, v in ranking)
        share = next(
            (
                row.get("cpu_share")
                for row in r.get("rows", [])
                if _ranking(r) and row["matcher"] == _ranking(r)[0][0]
            ),
            None,
        )
        out.append(
            f"- {xlabel} {x}: {ranked or r.get('error') or 'no result'}; "
            f"measured p {r.get('header', {}).get('measured_probability', '?')}; "
            f"CPU/wall {_fmt(share, '.0%')}; load {r.get('loadavg', 0):.1f}; "
            f"core {_core(r)}"
        )
    if missing:
        out.append(f"- not run within the time budget: {', '.join(missing)}")
    png = f"benchmarks-{name}.png"
    _plot(name, points, docs / png)
    out += ["", f"![{title}]({png})", ""]
    return "\n".join(out)


def render(data: dict[str, Any], docs: Path, sweep_commands: list[str]) -> Path:
    """Write docs/benchmarks.md and its plots from the accumulated results."""
    results: dict[str, Any] = data["results"]
    docs.mkdir(parents=True, exist_ok=True)
    path = docs / "benchmarks.md"
    analysis = f"{ANALYSIS_START}\n(analysis to be written)\n{ANALYSIS_END}"
    others = ""
    if path.exists():
        old = path.read_text(encoding="utf-8")
        if ANALYSIS_START in old and ANALYSIS_END in old:
            analysis = old[old.index(ANALYSIS_START) : old.index(ANALYSIS_END) + len(ANALYSIS_END)]
        others = "".join(f"{m.group(0)}\n\n" for m in OTHER_SECTION.finditer(old))
    first = next(iter(results.values()), {})
    machine = first.get("header", {}).get("machine", "unknown")
    total = sum(r["seconds"] for r in results.values()) / 60
    commands = "\n".join(
        f"# {key} ({r['seconds'] / 60:.1f} min, load {r['loadavg']:.1f})\n"
        + OUT_DIR.sub("--out-dir OUT", r["command"])
        for key, r in sorted(results.items(), key=lambda kv: kv[1]["started"])
    )
    workload = first.get("header", {}).get("workload", "")
    sweep = "\n".join(sweep_commands)
    sections = "\n".join(_sweep_section(name, results, docs) for name in SWEEP_ORDER)
    text = f"""# Matcher benchmarks: the shape of the PS-Tree paper's evaluation

Generated by `bench/bench_sweep.py`, which calls
`bench/bench_matchers.py` once per workload point; every figure below comes from those runs.

- {len(results)} workload points, {total:.0f} min of benchmark wall time in all.
- Machine: {machine}. The machine is **shared and busy**: other jobs ran concurrently, so a
  matcher's subprocess (pinned to one core) often got well under 100% of its core (see the
  CPU/wall share and the core of each point below). Compare matchers **within one point as
  ratios**, and prefer the CPU-time column to wall time; absolute values across points are
  noisier. "Benchmark wall time" is the sum over points, some of which ran concurrently on
  the two cores.
- Base size **100,000 subscriptions** (the paper's default is 1M; 100K keeps the whole sweep
  within ~50 minutes on this 2-core machine), 2,000 events in batches of 1,000,
  the first 20 checked against scan where scan ran (elsewhere the first matcher's answers give
  the measured matching probability),
  200 timed adds and removes. Other BE-Gen parameters are the paper's Table 1 defaults:
  {workload}.
- `scan` ran only at the dense 100K point (as the speedup reference). The sweeps 2 to 4 ran the
  four matchers the paper's ranking names (pstbloom, psthash, opindex, betree); sweeps 1 and 5
  ran all seven indexes.

{analysis}

## Results per sweep

{sections}
{others}## Commands

The sweep itself, run from the repository root (one or more invocations sharing one
`--results` file; a later invocation skips points already measured):

```
{sweep}
```

Each point is one call of `bench/bench_matchers.py` made by the sweep (`--out-dir` is a
directory the sweep makes under the system's temporary directory):

```
{commands}
```
"""
    path.write_text(text, encoding="utf-8")
    return path


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--agreement-events", type=int, default=20)
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument(
        "--timeout", type=float, default=400, help="seconds one matcher may take at one point"
    )
    parser.add_argument("--cpu", type=int, default=1, help="core the matchers are pinned to")
    parser.add_argument(
        "--budget-minutes",
        type=float,
        default=50,
        help="start no new point after this many minutes",
    )
    parser.add_argument(
        "--points", default="", help=f"comma-separated subset of {', '.join(p.key for p in POINTS)}"
    )
    parser.add_argument("--rerun", action="store_true", help="rerun points already in --results")
    parser.add_argument(
        "--results",
        type=Path,
        default=Path(tempfile.gettempdir()) / "bench-sweep-results.json",
        help="accumulated results (JSON)",
    )
    parser.add_argument(
        "--render-only",
        action="store_true",
        help="write the report from --results without running anything",
    )
    parser.add_argument(
        "--merge",
        type=Path,
        action="append",
        default=[],
        help="also render the points and commands of this results file (a sweep run in "
        "parallel, e.g. on the other core); repeatable",
    )
    parser.add_argument("--docs", type=Path, default=DOCS)
    return parser


def main(argv: list[str] | None = None) -> int:
    ns = _parser().parse_args(argv)
    data = load(ns.results) if ns.render_only else sweep(ns)
    if not data["results"]:
        print("no results to render", file=sys.stderr)
        return 1
    settings = data.setdefault("settings", {})
    commands: list[str] = settings.setdefault("sweep_commands", [])
    if not ns.render_only:
        argv_used = argv if argv is not None else sys.argv[1:]
        commands.append(shlex.join([".venv/bin/python", "bench/bench_sweep.py", *argv_used]))
        ns.results.write_text(json.dumps(data, indent=1))
    for other_path in ns.merge:
        other = load(other_path)
        for key, value in other["results"].items():
            data["results"].setdefault(key, value)
        extra = other.get("settings", {}).get("sweep_commands", [])
        commands = commands + [c for c in extra if c not in commands]
    path = render(data, ns.docs, commands)
    print(f"[sweep] wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
