"""Benchmark of subscribing: parsing expressions, validating subscription records and
loading them in the workers (a script, not a test).

What the driver does for each record of the subscriptions topic is
:func:`psmatch.service.records.subscriptions.parse_subscription_record`: decode the JSON
value, parse and normalise the expression (:func:`psmatch.language.parse_subscription`)
and re-encode the stored form. This script measures, in CPU time per subscription on
one pinned core:

- ``tokenize``: the tokenizer alone (:func:`psmatch.language.lexer.tokenize`), as the
  general parser uses it (a conjunction of comparisons is read by the scanner,
  :mod:`psmatch.language.scanner`, without it);
- ``parse``: :func:`psmatch.language.parse_expression`, the text to its tree;
- ``parse_subscription``: the same and the normal form (DNF, interval merging);
- ``record``: ``parse_subscription_record`` on the bytes ``psmatch subscribe`` sends
  (:func:`psmatch.service.records.subscriptions.subscription_value`);
- ``load``: :func:`psmatch.service.records.subscriptions.load_stored` on the stored text
  and normal form the record became: the subscription's objects from its normal form
  (:func:`psmatch.service.records.normal_forms.load_normal_form`) instead of a parse. A
  worker reads a group of logged normal forms into columns at once instead
  (:func:`psmatch.service.records.normal_forms.load_normal_forms`, timed within a whole replay by
  ``bench/bench_worker_reload.py``), and this one by one only for a group with a
  malformed form;

and derives the stages (normal form = parse_subscription - parse, record overhead =
record - parse_subscription). For a conjunction on distinct attributes,
``parse_subscription`` builds no tree, and its "normal form" stage is only what it costs
beyond ``parse``. Two workloads: BE-Gen
subscriptions (:mod:`psmatch.begen`, the papers' operators on integers), and (``--mix``,
0 to leave it out) a deterministic mix of every operator (``in``, ``not in``, ``like`` in
its three forms, ``between``, ``!=``, booleans, strings) under ``or``/``not``/parenthesis
nesting, on distinct attributes so that each one is satisfiable.

Each operation runs over the whole workload ``--repeats`` times (each pass taking the
operations in turn on every 500 subscriptions, so that the machine's load falls on all
alike); the table gives the median and the best rate per CPU second
(``time.process_time``: the cost on one core, whatever else the machine runs), and the
median per wall second. ``--baseline COMMIT`` also measures that commit's language
package, ``src/psmatch/language/`` (loaded beside the current one, with a second copy of
the current record decoder bound to it), in the same passes, each operation of the
baseline right after the current one on the same subscriptions: the two share the
machine's load, and the table gives their ratio. With ``--write-table
PATH`` the run becomes a section of PATH labelled ``--label`` (a run with the same label
replaces it, others are kept). Progress goes to stderr.

Usage: ``.venv/bin/python bench/bench_parser.py --help``.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import platform
import random
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))  # this checkout's code, not the installed one

from host import cpu_model  # noqa: E402 - bench/host.py, beside this script

from psmatch import language  # noqa: E402
from psmatch.begen import add_params_arguments, generate, params_from_args  # noqa: E402
from psmatch.language.lexer import tokenize  # noqa: E402
from psmatch.service.records import subscriptions as records_module  # noqa: E402
from psmatch.service.records.subscriptions import (  # noqa: E402
    parse_subscription_record,
    subscription_value,
)

OPERATIONS = ("tokenize", "parse", "parse_subscription", "record", "load")
STAGES = (
    ("parse", "parse", None),
    ("normal form", "parse_subscription", "parse"),
    ("record overhead", "record", "parse_subscription"),
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bench/bench_parser.py",
        description="CPU time per subscription of the tokenizer, the parser, the normal "
        "form and the driver's validation of subscription records, on BE-Gen subscriptions "
        "and on a mix of every operator.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    workload = parser.add_argument_group("workload (BE-Gen parameters, see src/psmatch/begen/)")
    add_params_arguments(workload, subscriptions=20_000, events=0)
    run = parser.add_argument_group("run")
    run.add_argument("--mix", type=int, default=20_000,
                     help="subscriptions of the every-operator mix (0: BE-Gen only)")
    run.add_argument("--repeats", type=int, default=5,
                     help="passes over each workload per operation; median and best reported")
    run.add_argument("--cpu", type=int, default=max(os.sched_getaffinity(0)),
                     help="the core the benchmark is pinned to")
    run.add_argument("--write-table", type=Path, default=None, metavar="PATH",
                     help="write the run as a section of PATH (e.g. docs/bench-parser.md)")
    run.add_argument("--label", default=None,
                     help="the section's name in PATH (default: the commit)")
    run.add_argument("--baseline", default=None, metavar="COMMIT",
                     help="also measure this commit's parser and record decoder, interleaved")
    return parser


# -- workloads --------------------------------------------------------------------------


def _literal(rng: random.Random, kind: str) -> str:
    if kind == "number":
        return str(rng.choice([rng.randint(-1000, 1000), round(rng.uniform(-1e3, 1e3), 2)]))
    if kind == "string":
        return repr(rng.choice(["books", "music", "films", "toys", "it's", "café", "a\\b"]))
    return rng.choice(["true", "false"])


def _comparison(rng: random.Random, attribute: str) -> str:
    """One comparison that is true of some value (so a subscription on distinct
    attributes is always satisfiable)."""
    kind = rng.choice(["number", "number", "string", "bool"])
    if kind == "bool":
        op = rng.choice(["=", "!=", "in", "not in"])
        value = _literal(rng, kind)
        return f"{attribute} {op} ({value})" if "in" in op else f"{attribute} {op} {value}"
    ops = ["=", "!=", "<", "<=", ">", ">=", "in", "not in", "between", "not between"]
    if kind == "string":
        ops += ["like", "not like"]
    op = rng.choice(ops)
    if op in ("in", "not in"):
        values = {_literal(rng, kind) for _ in range(rng.randint(1, 8))}
        return f"{attribute} {op} ({', '.join(sorted(values))})"
    if op in ("between", "not between"):
        if kind == "number":
            low = rng.randint(-1000, 1000)
            return f"{attribute} {op} {low} and {low + rng.randint(0, 500)}"
        return f"{attribute} {op} 'a' and 'm'"
    if op in ("like", "not like"):
        shape = rng.choice(["{}%", "%{}", "%{}%"])
        return f"{attribute} {op} '{shape.format(rng.choice(['bo', 'son', 'x']))}'"
    return f"{attribute} {op} {_literal(rng, kind)}"


def _tree(rng: random.Random, attributes: list[str]) -> str:
    """A random and/or/not tree over one comparison per attribute."""
    if len(attributes) == 1:
        text = _comparison(rng, attributes[0])
        return f"not {text}" if rng.random() < 0.2 else text
    split = rng.randint(1, len(attributes) - 1)
    left, right = _tree(rng, attributes[:split]), _tree(rng, attributes[split:])
    joined = f"({left} {rng.choice(['and', 'and', 'or'])} {right})"
    return f"not {joined}" if rng.random() < 0.15 else joined


def mix_workload(count: int, seed: int) -> list[str]:
    """``count`` expressions of 3 to 6 comparisons on distinct attributes, every
    operator, nested under and/or/not. Deterministic for a seed."""
    rng = random.Random(seed)
    names = [f"m{k}" for k in range(40)] + ["user.country", "`odd name`"]
    return [_tree(rng, rng.sample(names, rng.randint(3, 6))) for _ in range(count)]


def records_of(texts: Sequence[str]) -> list[tuple[bytes, bytes]]:
    """(key, value) of each subscription as ``psmatch subscribe`` sends it."""
    return [
        (f"sub-{i}".encode(),
         subscription_value(text, f"user-{i % 1000}", {"channel": "email", "tags": ["bench"]}))
        for i, text in enumerate(texts)
    ]  # fmt: skip


# -- measuring --------------------------------------------------------------------------


CHUNK = 500
"""Subscriptions each operation takes in turn: a change in the machine's load falls on
all operations alike, so that the stages (differences of operations) stay meaningful."""


def _timed(operation: Callable[[Any], object], items: Sequence[Any]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of ``operation`` over ``items``."""
    cpu, wall = time.process_time(), time.perf_counter()
    for item in items:
        operation(item)
    return time.process_time() - cpu, time.perf_counter() - wall


class Implementation(NamedTuple):
    """The functions timed: a language package's and a record decoder's bound to it."""

    tokenize: Callable[[str], object]
    parse_expression: Callable[[str], object]
    parse_subscription: Callable[[str], object]
    parse_subscription_record: Callable[[bytes, bytes], object]
    load_stored: Callable[[str, str | None], object]


LANGUAGE = "src/psmatch/language"
"""The language package, whose files ``--baseline`` takes from its commit."""


def implementation(language: ModuleType, tokenize: Callable[[str], object],
                   records: ModuleType) -> Implementation:
    return Implementation(tokenize, language.parse_expression, language.parse_subscription,
                          records.parse_subscription_record, records.load_stored)


def _module(name: str, path: Path, package: bool = False) -> ModuleType:
    """The module ``name`` executed from ``path`` (the ``__init__.py`` of a package, whose
    submodules are then imported from beside it)."""
    search = [str(path.parent)] if package else None
    spec = importlib.util.spec_from_file_location(name, path, submodule_search_locations=search)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def _is_language(name: str) -> bool:
    return name == "psmatch.language" or name.startswith("psmatch.language.")


def load_baseline(commit: str, directory: Path) -> Implementation:
    """The language package of ``commit`` (its files under :data:`LANGUAGE`, written to
    ``directory``), and a second copy of the current record decoder importing it as its
    ``psmatch.language``; the rest of the package is the current one. While they load,
    the baseline's modules stand in ``sys.modules`` under the current ones' names; the
    current ones are put back after."""
    files = _git("ls-tree", "-r", "--name-only", commit, "--", LANGUAGE).splitlines()
    if not files:
        raise SystemExit(f"error: no {LANGUAGE}/ at commit {commit!r}")
    for path in files:
        target = directory / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(subprocess.run(["git", "show", f"{commit}:{path}"], cwd=REPO,
                                          capture_output=True, check=True).stdout)  # fmt: skip
    current = {name: module for name, module in sys.modules.items() if _is_language(name)}
    records_name = records_module.__name__
    try:
        for name in current:
            del sys.modules[name]
        language = _module("psmatch.language", directory / LANGUAGE / "__init__.py", package=True)
        records = _module(records_name, Path(records_module.__file__))
        lexer = sys.modules.get("psmatch.language.lexer")
        # before the package was split into modules, the tokenizer was its _tokenize
        tokenize = lexer.tokenize if lexer is not None else language._tokenize
    finally:
        for name in [name for name in sys.modules if _is_language(name)]:
            del sys.modules[name]
        sys.modules.update(current)
        sys.modules[records_name] = records_module
    return implementation(language, tokenize, records)


Operation = tuple[Callable[[Any], object], Sequence[Any]]
"""A function and the items it is timed on."""


def _operations(implementation: Implementation, texts: list[str],
                records: list[tuple[bytes, bytes]],
                stored: list[tuple[str, str | None]]) -> dict[str, Operation]:
    record, load = implementation.parse_subscription_record, implementation.load_stored
    return {
        "tokenize": (implementation.tokenize, texts),
        "parse": (implementation.parse_expression, texts),
        "parse_subscription": (implementation.parse_subscription, texts),
        "record": (lambda kv: record(kv[0], kv[1]), records),
        "load": (lambda sn: load(sn[0], sn[1]), stored),
    }


def run_workload(name: str, texts: list[str], repeats: int,
                 implementations: dict[str, Implementation]) -> dict[str, dict[str, Any]]:
    """Rates of each operation of each implementation over ``texts``, per CPU and per
    wall second: the median and best CPU rate over ``repeats`` passes, each pass taking
    the operations (and for each, the implementations) in turn on every :data:`CHUNK`
    of subscriptions."""
    records = records_of(texts)
    # the workload must be valid: a rejected subscription would time an error path
    changes = [parse_subscription_record(key, value) for key, value in records]
    stored = [(change.stored, change.normal_form) for change in changes]
    operations = {impl: _operations(modules, texts, records, stored)
                  for impl, modules in implementations.items()}  # fmt: skip
    cpu = {impl: {op: [] for op in OPERATIONS} for impl in implementations}
    wall = {impl: {op: [] for op in OPERATIONS} for impl in implementations}
    for k in range(repeats):
        gc.collect()
        spent = {impl: {op: [0.0, 0.0] for op in OPERATIONS} for impl in implementations}
        for start in range(0, len(texts), CHUNK):
            for op in OPERATIONS:
                for impl in implementations:
                    operation, items = operations[impl][op]
                    c, w = _timed(operation, items[start : start + CHUNK])
                    spent[impl][op][0] += c
                    spent[impl][op][1] += w
        for impl in implementations:
            for op in OPERATIONS:
                cpu[impl][op].append(len(texts) / spent[impl][op][0])
                wall[impl][op].append(len(texts) / spent[impl][op][1])
            print(f"[{name}, {impl}] pass {k + 1}/{repeats}: " + ", ".join(
                f"{op} {cpu[impl][op][-1]:,.0f}/CPU s" for op in OPERATIONS),
                file=sys.stderr, flush=True)  # fmt: skip
    return {impl: {op: {"cpu": statistics.median(cpu[impl][op]), "best": max(cpu[impl][op]),
                        "wall": statistics.median(wall[impl][op])} for op in OPERATIONS}
            for impl in implementations}  # fmt: skip


# -- the report -------------------------------------------------------------------------


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                          check=False).stdout.strip()  # fmt: skip


def _commit() -> str:
    commit = _git("rev-parse", "--short", "HEAD")
    records = Path(records_module.__file__).relative_to(REPO)
    dirty = _git("status", "--porcelain", "--", LANGUAGE, str(records))
    return commit + (" + uncommitted changes to the parser" if dirty else "")


def _machine() -> str:
    cpu = cpu_model()
    return f"{cpu}, {os.cpu_count()} cores; Python {platform.python_version()}"


Rates = dict[str, dict[str, dict[str, dict[str, float]]]]
"""Workload -> implementation (``current``, ``baseline``) -> operation -> rates."""


def _table(rates: Rates, sizes: dict[str, int]) -> str:
    compared = all("baseline" in by_impl for by_impl in rates.values())
    header = ("| workload | operation | µs CPU each (median) | per CPU second (median) "
              "| per CPU second (best) | per wall second (median) |")
    if compared:
        header += " baseline: µs CPU each | baseline: per CPU second | current / baseline |"
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for workload, by_impl in rates.items():
        for op in OPERATIONS:
            r = by_impl["current"][op]
            line = (f"| {workload} ({sizes[workload]:,}) | `{op}` | {1e6 / r['cpu']:.1f} "
                    f"| {r['cpu']:,.0f} | {r['best']:,.0f} | {r['wall']:,.0f} |")
            if compared:
                b = by_impl["baseline"][op]
                line += f" {1e6 / b['cpu']:.1f} | {b['cpu']:,.0f} | {r['cpu'] / b['cpu']:.2f}× |"
            lines.append(line)
        for impl, by_op in by_impl.items():
            stages = ", ".join(f"{stage} {_stage_us(by_op, op, minus):.1f} µs"
                               for stage, op, minus in STAGES)  # fmt: skip
            lines.append(f"| {workload} | stages ({impl}) | {stages} |"
                         + " |" * (header.count("|") - 4))  # fmt: skip
    return "\n".join(lines)


def _stage_us(by_op: dict[str, dict[str, float]], op: str, minus: str | None) -> float:
    us = 1e6 / by_op[op]["cpu"]
    return us - (1e6 / by_op[minus]["cpu"] if minus else 0.0)


def _section(label: str, args: argparse.Namespace, load: str, rates: Rates,
             sizes: dict[str, int]) -> str:
    command = shlex.join([".venv/bin/python", "bench/bench_parser.py", *sys.argv[1:]])
    baseline = (f" Baseline: commit {args.baseline}'s `{LANGUAGE}/` (with the current record "
                "decoder), measured in the same passes." if args.baseline else "")
    return (
        f"## {label}\n\n"
        f"Command: `{command}`\n\n"
        f"Commit {_commit()}; {_machine()}; pinned to core "
        f"{args.cpu}; load average (`uptime`) {load} at the start; {args.repeats} passes "
        f"per operation.{baseline}\n\n"
        f"{_table(rates, sizes)}\n\n"
    )


_SECTION = re.compile(r"<!-- run:(.+?) -->\n(.*?)<!-- end:\1 -->", re.S)


def write_doc(path: Path, label: str, section: str) -> None:
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    sections = {m.group(1): m.group(2) for m in _SECTION.finditer(old)}
    sections[label] = section
    body = [
        "# Subscribing: parser and record validation benchmark\n",
        "Written by `bench/bench_parser.py` (see its docstring for what each operation "
        "covers); a section per labelled run, with its command, commit and load (a run "
        "under the same label replaces its section). Rates are subscriptions per CPU "
        "second on one pinned core (median of the passes): the machine is shared, so CPU "
        "time, not wall time, is the measure, and a comparison is made within one run "
        "(`--baseline`), where both sides share the machine's load.\n",
    ]
    body += [f"<!-- run:{name} -->\n{text}<!-- end:{name} -->\n" for name, text in sections.items()]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(body), encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.repeats < 1 or args.mix < 0:
        print("error: need --repeats >= 1 and --mix >= 0", file=sys.stderr)
        return 2
    try:
        params = params_from_args(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    os.sched_setaffinity(0, {args.cpu})
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    implementations = {"current": implementation(language, tokenize, records_module)}
    if args.baseline:
        with tempfile.TemporaryDirectory(prefix="bench-parser-") as directory:
            implementations["baseline"] = load_baseline(args.baseline, Path(directory))
    print(f"generating {params.subscriptions:,} BE-Gen subscriptions", file=sys.stderr)
    workloads = {"BE-Gen": [text for _, text in generate(params).subscriptions]}
    if args.mix:
        workloads["every operator"] = mix_workload(args.mix, params.seed)
    rates = {name: run_workload(name, texts, args.repeats, implementations)
             for name, texts in workloads.items()}  # fmt: skip
    sizes = {name: len(texts) for name, texts in workloads.items()}
    print(_table(rates, sizes))
    if args.write_table:
        label = args.label or _commit()
        write_doc(args.write_table, label, _section(label, args, load, rates, sizes))
        print(f"wrote section {label!r} of {args.write_table}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
