"""What notification records cost the service's writer in CPU, and how much room they
take in the broker's log, per sink codec.

A script, not a test. Starts its own Kafka broker (``psmatch.devservers.services``), generates
BE-Gen events with ``python -m psmatch.begen``, builds the notification records the
service would write for them (``--per-event`` matches per event, heads of distinct
subscriptions, :mod:`psmatch.service.records.notifications`), writes the same records to
one new topic per codec and pass with the service's writer
(:class:`psmatch.adapters.kafka.sink.RecordSink`), and reports for each codec the CPU
time this process spent per record from the first
``write`` to the end of ``flush`` (``time.process_time``: the writing thread and
librdkafka's, which compress and send; the median of ``--repeats`` passes, the codecs
taken in turn in each), the writing thread's share of it (``time.thread_time``), and
the bytes of its first topic's log segments. ``--docs docs`` writes the table, with the
command, to ``docs/bench-streaming.md`` (between its ``bench_sink_compression`` markers).

Usage::

    .venv/bin/python bench/bench_sink_compression.py [--events 2000] [--per-event 13] \\
        [--codecs none,lz4,zstd] [--repeats 3] [--docs docs]
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from docsection import replace_section  # noqa: E402 - beside this script

from psmatch.adapters.kafka.admin import ensure_topics  # noqa: E402
from psmatch.adapters.kafka.sink import RecordSink, SinkSettings  # noqa: E402
from psmatch.devservers.services import release_shared_services, shared_services  # noqa: E402
from psmatch.service.records.notifications import (  # noqa: E402
    notification_head,
    notification_tail,
    notification_value,
)
from psmatch.service.records.subscriptions import dumps_record, load_stored  # noqa: E402
from psmatch.service.task_contract import output_records  # noqa: E402


def notification_records(events: list[bytes], per_event: int) -> list[tuple[bytes, bytes]]:
    """``per_event`` notification records (key, value) of each event, each for a
    subscription drawn from 100,000."""
    rng = random.Random(1)
    heads = [notification_head(f"s{i}", load_stored(dumps_record("a = 1", f"user-{i}", {})))
             for i in range(100_000)]  # fmt: skip
    records = []
    for n, event in enumerate(events):
        tail = notification_tail(f"ev-{n}", event, "2026-11-27T06:40:00.000Z", 1764225600000)
        for _ in range(per_event):
            i = rng.randrange(len(heads))
            records.append((f"s{i}".encode(), notification_value(f"s{i}", heads[i], tail)))
    return records


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--events", type=int, default=2000, help="BE-Gen events")
    ap.add_argument("--per-event", type=int, default=13, help="notifications per event")
    ap.add_argument("--codecs", default="none,lz4", help="codecs to compare, comma-separated")
    ap.add_argument("--repeats", type=int, default=3, help="passes over the codecs")
    ap.add_argument("--docs", type=Path,
                    help="write the table to <dir>/bench-streaming.md")  # fmt: skip
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="psmatch-bench-") as work:
        subprocess.run([sys.executable, "-m", "psmatch.begen", "--subscriptions", "1000",
                        "--events", str(args.events), "--out", work, "--measure-subscriptions",
                        "0", "--measure-events", "0"], check=True, cwd=ROOT,
                       capture_output=True)  # fmt: skip
        events = Path(work, "events.jsonl").read_bytes().splitlines()
    records = notification_records(events, args.per_event)
    size = sum(len(key) + len(value) for key, value in records)
    print(f"{len(records):,} notification records of {len(events):,} events, {size:,} bytes "
          "of keys and values")  # fmt: skip
    codecs = args.codecs.split(",")
    cpu: dict[str, list[float]] = {codec: [] for codec in codecs}
    logged: dict[str, int] = {}
    thread: dict[str, list[float]] = {codec: [] for codec in codecs}
    services = shared_services()
    try:
        bootstrap = services.kafka.bootstrap_servers
        for k in range(args.repeats):
            for codec in codecs:
                topic = f"bench-compression-{codec}-{k}-{uuid.uuid4().hex[:8]}"
                ensure_topics(bootstrap, {topic: {}}, partitions=2)
                sink = RecordSink(SinkSettings(bootstrap, compression=codec))
                batch = output_records(topic, records)
                started, thread_started = time.process_time(), time.thread_time()
                sink.write(batch)
                sink.flush()
                cpu[codec].append((time.process_time() - started) / len(records))
                thread[codec].append((time.thread_time() - thread_started) / len(records))
                print(f"pass {k + 1}/{args.repeats}, {codec}: {cpu[codec][-1] * 1e6:.2f} µs of "
                      f"CPU a record, {thread[codec][-1] * 1e6:.2f} µs of it the writing "
                      "thread's", file=sys.stderr, flush=True)  # fmt: skip
                if k:
                    continue
                time.sleep(2)  # the broker's appends reach the segment files
                logged[codec] = sum(segment.stat().st_size
                                    for folder in services.kafka.data_dir.rglob(f"{topic}-*")
                                    for segment in folder.glob("*.log"))  # fmt: skip
                print(f"{codec}: {logged[codec]:,} bytes in the broker's log "
                      f"({logged[codec] / size:.1%} of the keys and values)")  # fmt: skip
        for codec in codecs:
            print(f"{codec}: {statistics.median(cpu[codec]) * 1e6:.2f} µs of CPU a record "
                  f"(median of {args.repeats}; " + ", ".join(
                      f"{c * 1e6:.2f}" for c in cpu[codec]) + "), the writing thread "
                  f"{statistics.median(thread[codec]) * 1e6:.2f} µs (" + ", ".join(
                      f"{c * 1e6:.2f}" for c in thread[codec]) + ")")  # fmt: skip
    finally:
        release_shared_services()
    if args.docs:
        rows = [f"| {codec} | {statistics.median(cpu[codec]) * 1e6:.2f} ("
                + ", ".join(f"{c * 1e6:.2f}" for c in cpu[codec])
                + f") | {logged[codec]:,} ({logged[codec] / size:.1%}) |" for codec in codecs]
        replace_section(args.docs / "bench-streaming.md", "bench_sink_compression", f"""\
<!-- not executed: starts a Kafka broker -->
```sh
.venv/bin/python bench/bench_sink_compression.py {" ".join(sys.argv[1:])}
```

{len(records):,} notification records of {len(events):,} BE-Gen events ({args.per_event} per
event, {size / len(records):,.0f} bytes each, {size:,} bytes of keys and values), written by
`RecordSink` to a real broker, the codecs in turn, {args.repeats} passes:

| codec | µs of CPU a record, median (each pass) | bytes in the broker's log (share) |
| --- | --- | --- |
""" + "\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
