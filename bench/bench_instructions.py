"""Single adds and matches counted in instructions under callgrind, across git revisions.

Wall and CPU times of one add (about a millisecond) move by half between runs on a
shared machine; the instructions a revision executes for the same work do not (hash
randomisation is fixed with ``PYTHONHASHSEED=0``). For each revision and matcher this
script checks the revision out in a temporary git worktree and runs, under
``valgrind --tool=callgrind`` with instrumentation switched on only around the measured
steps:

1. ``add_many`` of ``--subscriptions`` BE-Gen subscriptions (pre-parsed), two warm-up
   ``match_batch`` calls of ``--events`` events (not counted);
2. ``match_batch`` of those events (counted: *match*);
3. ``--adds`` single ``add`` calls of new pre-parsed subscriptions (counted: *adds*);
4. ``match_batch`` of the same events again (counted: *match after*): the adds' work
   deferred to the next match (columns appended lazily, adds staged, structures
   rebuilt) is *match after* - *match*;
5. ``--adds`` more single adds, each followed by ``match`` of one event (counted), then
   as many of those matches alone (counted): the difference is the cost of an add
   that the very next call reads, so nothing deferred is shared between adds.

Reported per revision and matcher: instructions per add, deferred instructions per add,
their sum, the cost of an add read at once, and instructions per matched event. Needs
Debian's ``valgrind`` (with ``valgrind/callgrind.h``) and ``gcc``; each run takes 30-60 s.
A revision must have the package under ``src/psmatch/``. ``--docs docs`` writes the table,
with the command, to ``docs/benchmarks.md`` (between its ``bench_instructions`` markers).

    .venv/bin/python bench/bench_instructions.py --revisions HEAD [--docs docs]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import sysconfig
import tempfile
import tomllib
from pathlib import Path

from docsection import replace_section

REPO = Path(__file__).resolve().parent.parent
MATCHERS = ("pstbloom", "psthash", "opindex", "betree", "counting", "propagation", "pbtree")

_TOGGLE_C = """
#include <valgrind/callgrind.h>
void start(void) { CALLGRIND_START_INSTRUMENTATION; CALLGRIND_ZERO_STATS; }
void dump(void) { CALLGRIND_DUMP_STATS; }
"""

# Runs inside the revision's worktree, under callgrind: argv = matcher subscriptions
# events adds library. Each dump closes one counted step.
_MEASURE = """
import ctypes, sys
from psmatch import make_matcher
from psmatch.begen import BEGenParams, generate
from psmatch.language import parse_subscription
name, n, e, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
toggle = ctypes.CDLL(sys.argv[5])
w = generate(BEGenParams(subscriptions=n + 2 * k, events=2 * e, seed=7))
subs = [(i, parse_subscription(t)) for i, t in w.subscriptions]
matcher = make_matcher(name)
matcher.add_many(subs[:n])
events = w.events[e:]
matcher.match_batch(events)
matcher.match_batch(events)
toggle.start()
matcher.match_batch(events)
toggle.dump()
for sid, sub in subs[n:n + k]:
    matcher.add(sid, sub)
toggle.dump()
matcher.match_batch(events)
toggle.dump()
for sid, sub in subs[n + k:]:
    matcher.add(sid, sub)
    matcher.match(events[0])
toggle.dump()
for _ in range(k):
    matcher.match(events[0])
toggle.dump()
"""


SECTION = """\
## Single adds and matches, counted in instructions

The CPU time of one single `add` moves by half between runs on a shared machine, so
`bench/bench_instructions.py` counts instructions instead, under callgrind with
`PYTHONHASHSEED=0` and the instrumentation on only around the measured steps: one
`match_batch` of the events, single adds of pre-parsed subscriptions, and the same match
again, whose difference from the first is the work the adds deferred to the next read
(*deferred*: staged adds are filed there); then adds each followed by a `match` of one
event, less as many of those matches alone (*add read at once*: an add whose filing no
other add shares). The counts are deterministic.
"""
"""The head of the page's section: what the table counts."""


def _totals(out: Path) -> list[int]:
    """The instruction totals of dumps 1 to 5 of one callgrind run."""
    totals = []
    for part in range(1, 6):
        text = Path(f"{out}.{part}").read_text()
        totals.append(int(next(line.split()[1] for line in text.splitlines()
                               if line.startswith("totals:"))))
    return totals


def measure(worktree: Path, matcher: str, args: argparse.Namespace, library: Path,
            workdir: Path) -> dict[str, float]:
    out = workdir / f"{worktree.name}-{matcher}.out"
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(worktree / "src")}
    subprocess.run(
        ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
         sys.executable, "-c", _MEASURE, matcher, str(args.subscriptions), str(args.events),
         str(args.adds), str(library)],
        cwd=worktree, env=env, check=True, capture_output=True,
    )  # fmt: skip
    match, adds, match_after, read_adds, reads = _totals(out)
    per_add = adds / args.adds
    deferred = (match_after - match) / args.adds
    return {"add": per_add, "deferred": deferred, "add + deferred": per_add + deferred,
            "add read at once": (read_adds - reads) / args.adds,
            "match per event": match / args.events}


def build_extensions(tree: Path) -> None:
    """Build a checkout's C extensions in place (``pyproject.toml``'s ``ext-modules``, with
    their flags), as ``pip install -e`` does in the repository, so that the checkout
    imports from its own tree."""
    config = tomllib.loads((tree / "pyproject.toml").read_text())
    for ext in config.get("tool", {}).get("setuptools", {}).get("ext-modules", []):
        target = tree / "src" / (ext["name"].replace(".", "/")
                                 + sysconfig.get_config_var("EXT_SUFFIX"))  # fmt: skip
        subprocess.run(["gcc", "-shared", "-fPIC", *ext.get("extra-compile-args", []),
                        f"-I{sysconfig.get_paths()['include']}", "-o", str(target),
                        *(str(tree / source) for source in ext["sources"])],
                       check=True)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--revisions", nargs="+", default=["HEAD"],
                        help="git revisions to compare (default: HEAD)")
    parser.add_argument("--matchers", default=",".join(MATCHERS))
    parser.add_argument("--subscriptions", type=int, default=20_000)
    parser.add_argument("--events", type=int, default=20)
    parser.add_argument("--adds", type=int, default=100)
    parser.add_argument("--docs", type=Path, help="write the table to <dir>/benchmarks.md")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="psmatch-instructions-") as tmp:
        workdir = Path(tmp)
        (workdir / "toggle.c").write_text(_TOGGLE_C)
        library = workdir / "libtoggle.so"
        subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", str(library),
                        str(workdir / "toggle.c")], check=True)
        trees = {}
        for revision in args.revisions:
            tree = workdir / f"rev{len(trees)}"
            subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree),
                            revision], check=True, capture_output=True)
            # the table names the commit measured, not a name that moves (HEAD, a branch)
            commit = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
                                    check=True, capture_output=True, text=True).stdout.strip()
            trees[commit] = tree
            build_extensions(tree)
        try:
            rows = ["| matcher | revision | add (M instr) | deferred | add + deferred "
                    "| add read at once | match per event (M instr) |",
                    "|---|---|---:|---:|---:|---:|---:|"]  # fmt: skip
            print(*rows, sep="\n")
            for matcher in args.matchers.split(","):
                for revision, tree in trees.items():
                    r = measure(tree, matcher, args, library, workdir)
                    rows.append(f"| {matcher} | {revision} | {r['add'] / 1e6:.3f} | "
                                f"{r['deferred'] / 1e6:.3f} | {r['add + deferred'] / 1e6:.3f} | "
                                f"{r['add read at once'] / 1e6:.3f} | "
                                f"{r['match per event'] / 1e6:.3f} |")  # fmt: skip
                    print(rows[-1], flush=True)
        finally:
            for tree in trees.values():
                subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force",
                                str(tree)], check=False, capture_output=True)
    if args.docs:
        command = " ".join(argv if argv is not None else sys.argv[1:])
        replace_section(args.docs / "benchmarks.md", "bench_instructions", (
            f"{SECTION}\n<!-- not executed: a callgrind run of minutes per revision and matcher -->"
            f"\n```sh\n.venv/bin/python bench/bench_instructions.py {command}\n```\n\n"
            f"After `add_many` of {args.subscriptions:,} BE-Gen subscriptions, {args.events} "
            f"events and {args.adds} adds; millions of instructions:\n\n"
            + "\n".join(rows)))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
