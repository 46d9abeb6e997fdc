"""What an exactly-once matching task pays its sink, step by step (a script, not a test).

A task of ``--delivery exactly-once`` opens a
:class:`psmatch.adapters.kafka.sink.TransactionalSink` of its ``transactional.id``,
reads its marker, writes its records in one transaction, commits it with the marker and
destroys the sink (:mod:`psmatch.service.delivery`). This script does that ``--cycles``
times under one id against a Kafka broker of its own, ``--records`` records of
``--record-bytes`` bytes a cycle and ``--pause`` seconds between a commit and the next
opening (the driver's steps between two batches), and times each step. It does so
twice in the same run: as the sink opens, and with its wait for a broker
(:meth:`psmatch.adapters.batch_producer.BatchProducer.await_broker`) left out, which is
what librdkafka alone makes of a new producer's ``init_transactions``.

``--docs docs`` writes the table, with the command, to ``docs/bench-streaming.md``
(between its ``bench_transactions`` markers).

Usage::

    .venv/bin/python bench/bench_transactions.py --cycles 40 --pause 0.1 [--docs docs]
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench")]

import pyarrow as pa  # noqa: E402
from docsection import replace_section  # noqa: E402
from host import cpu_model  # noqa: E402

from psmatch.adapters.batch_producer import BatchProducer  # noqa: E402
from psmatch.adapters.kafka.admin import ensure_topics  # noqa: E402
from psmatch.adapters.kafka.sink import SinkSettings, TransactionalSink  # noqa: E402
from psmatch.devservers.services import release_shared_services, shared_services  # noqa: E402

STEPS = ("open", "marker", "write", "commit", "close")
VARIANTS = {"as the sink opens": True, "no wait for a broker first": False}


def cycles(settings: SinkSettings, args: argparse.Namespace, topics: tuple[str, str],
           transactional_id: str) -> dict[str, list[float]]:  # fmt: skip
    """``args.cycles`` tasks' sink steps under one id, in ms each."""
    out, source = topics
    records = pa.record_batch({
        "topic": pa.array([out] * args.records),
        "key": pa.array([b"k%d" % i for i in range(args.records)], pa.binary()),
        "value": pa.array([b"v" * args.record_bytes] * args.records, pa.binary()),
    })  # fmt: skip
    times: dict[str, list[float]] = {step: [] for step in STEPS}
    position = 0
    for n in range(args.cycles):
        marks = [time.perf_counter()]
        sink = TransactionalSink(settings, transactional_id, transactional_id)
        marks.append(time.perf_counter())
        position = max(position, sink.committed(source, [0])[0])
        marks.append(time.perf_counter())
        sink.begin()
        sink.write(records)
        marks.append(time.perf_counter())
        position += args.records
        sink.commit(source, {0: position}, f"batch {n}")
        marks.append(time.perf_counter())
        sink.discard()
        marks.append(time.perf_counter())
        for step, start, end in zip(STEPS, marks[:-1], marks[1:], strict=True):
            times[step].append((end - start) * 1000)
        time.sleep(args.pause)
    return times


def measure(args: argparse.Namespace) -> dict[str, Any]:
    services = shared_services()
    try:
        bootstrap = services.kafka.bootstrap_servers
        tag = uuid.uuid4().hex[:6]
        topics = (f"txn{tag}.out", f"txn{tag}.in")
        ensure_topics(bootstrap, {topic: {} for topic in topics}, partitions=2)
        settings = SinkSettings(bootstrap)
        # the broker's coordinators load at their first use: one cycle first, not timed
        warm = argparse.Namespace(**{**vars(args), "cycles": 1})
        cycles(settings, warm, topics, f"txn{tag}.warm")
        result: dict[str, Any] = {}
        awaiting = BatchProducer.await_broker
        for name, waits in VARIANTS.items():
            BatchProducer.await_broker = (  # type: ignore[method-assign]
                awaiting if waits else lambda self, timeout: False)
            try:
                times = cycles(settings, args, topics, f"txn{tag}.{int(waits)}")
            finally:
                BatchProducer.await_broker = awaiting  # type: ignore[method-assign]
            result[name] = {step: summary(v) for step, v in times.items()}
        return result
    finally:
        release_shared_services()


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"median": statistics.median(ordered),
            "p90": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
            "max": ordered[-1],
            "over_400": sum(v > 400 for v in ordered)}  # fmt: skip


def render(result: dict[str, Any], args: argparse.Namespace, command: str) -> str:
    lines = [
        "<!-- not executed: starts a Kafka broker and runs for a minute -->",
        "```sh", command, "```", "",
        f"On {cpu_model()}, {args.cycles} tasks under one `transactional.id`, each "
        f"{args.records:,} records of {args.record_bytes} bytes, {args.pause} s from a "
        "commit to the next opening; median / p90 / max in ms (and how many of the "
        "openings took over 0.4 s):", "",
        "| sink | open | marker read | write | commit | close |",
        "| --- | --- | --- | --- | --- | --- |",
    ]  # fmt: skip
    for name, steps in result.items():
        cells = []
        for step in STEPS:
            s = steps[step]
            cell = f"{s['median']:.0f} / {s['p90']:.0f} / {s['max']:.0f}"
            if step == "open":
                cell += f" ({s['over_400']} over 0.4 s)"
            cells.append(cell)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=40, help="tasks timed per variant")
    ap.add_argument("--records", type=int, default=2000, help="records per transaction")
    ap.add_argument("--record-bytes", type=int, default=200)
    ap.add_argument("--pause", type=float, default=0.1,
                    help="seconds from a commit to the next opening")  # fmt: skip
    ap.add_argument("--docs", type=Path, default=None,
                    help="write the table to <dir>/bench-streaming.md")  # fmt: skip
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    result = measure(args)
    print(json.dumps(result, indent=2))
    command = f".venv/bin/python bench/bench_transactions.py {' '.join(sys.argv[1:])}"
    print(render(result, args, command))
    if args.docs:
        replace_section(args.docs / "bench-streaming.md", "bench_transactions",
                        render(result, args, command))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
