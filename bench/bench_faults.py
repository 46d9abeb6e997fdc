"""Fault-injection measurements of the streaming service (a script, not a test).

Runs the phases of ``tests/streaming/test_faults.py`` (harness:
``tests/streaming/faults.py``) with a Kafka broker, a redis-server and a ``psmatch run``
job of its own: while good events are published at ``--rate`` per second, it sends every
poison and malformed record kind through each client, ``kill -9``\\ s redis-server (back
after ``--redis-down`` s), stops the broker for ``--broker-down`` s and ``kill -9``\\ s the
job (restarted at once from its checkpoint). Per fault it measures the good events sent,
the notifications expected (``scan`` on the same subscriptions), received and
duplicated, the bad records rejected once with the right code, and the time from the end
of the fault to the first notification and until everything published before that end
was delivered. Prints the table; ``--write-docs`` writes it to docs/faults.md.

Usage::

    .venv/bin/python bench/bench_faults.py --rate 50 --subscriptions 100 \\
        [--write-docs docs/faults.md]
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.streaming.faults import TABLE_HEADER, FaultRun, PhaseResult  # noqa: E402

log = logging.getLogger("bench")

DOC = """\
# Faults: what the service does when records are bad and servers go away

Measured with `{command}` on {when} (this 2-core machine; load average {load} at
the start: other engineers' work was running at the same time, so the times are upper
bounds). The same phases, shorter, are the integration test
`tests/streaming/test_faults.py` (in `make test`; `-s` prints its table).

One `psmatch run` job (a subprocess, Spark `local[2]`, trigger {trigger:g} s, matcher
`psthash`) on a Kafka broker and a redis-server started by the run on free loopback ports;
{subscriptions} subscriptions; good events published at {rate:g} per second all along by a
confluent-kafka producer; the notifications each event must cause computed with the
`scan` matcher on the same subscriptions; a consumer records every notification and
rejected record with its arrival time. The faults, one after the other, on the same job:

1. **poison and malformed records**: the four poison records of issue 8 (an event nested
   1,000 deep, a subscriber `"x\\udc00y"` as JSON escape text, an array nested 5,000 deep
   in a subscription, 600 KB of binary garbage as an event) and {kinds} other malformed
   kinds (events and subscriptions: not JSON, not UTF-8, NaN, trailing data, null, array,
   lone surrogate, array attribute, too deep, missing `expr`, non-string subscriber, bad
   and unsatisfiable expressions, a key that is not UTF-8, an invalid value under a live
   subscription's id), each sent with {clients};
2. **`kill -9` of redis-server**, started again {redis_down:g} s later on the same port and
   AOF directory;
3. **the Kafka broker stopped** (SIGTERM) for {broker_down:g} s, started again on the same
   port and data directory;
4. **`kill -9` of `psmatch run`**, started again at once from its checkpoint.

Columns:

* *fault lasted*: from the start of the fault to its end (the server answering again,
  the job started again); for the broker, its stop (SIGTERM, controlled shutdown) and its
  start are included;
* *good events sent* during the phase (from 2-3 s before the fault to 3 s after it), the
  *notifications expected* for them and those *received* (distinct);
* *duplicates*: extra copies of a notification that arrived during the phase, whatever
  the event (a replay repeats the last uncommitted batch, published before the fault);
* *bad records rejected once with the right code*: exactly one record in the rejected
  topic, with the `code` of `/work/notes/codes.md`, the original's size and sha256, and
  its value recoverable;
* *first notification after the fault*: seconds from the end of the fault to the first
  notification that arrived (possibly of an event published before), and *of an event
  published after the fault* (the whole path working again: publish, match, notify);
* *all caught up*: seconds from the end of the fault until every notification of the
  events published before that end had arrived;
* *automatic query restarts*: times `psmatch run` restarted its query by itself.

The first row is the events published outside the faults, from the job's start (its
"first notification" is the job's start-up time; its duplicates arrived outside every
fault's phase).

{table}

{notes}
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rate", type=float, default=50.0, help="good events per second")
    ap.add_argument("--subscriptions", type=int, default=100)
    ap.add_argument("--trigger", type=float, default=0.5)
    ap.add_argument("--redis-down", type=float, default=5.0, help="seconds Redis stays dead")
    ap.add_argument("--broker-down", type=float, default=30.0, help="seconds Kafka stays down")
    ap.add_argument("--write-docs", type=Path, help="write the results page (docs/faults.md)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    for noisy in ("kafka", "psmatch.faults.kafka", "psmatch.faults.producer",
                  "psmatch.faults.consumer"):  # fmt: skip
        logging.getLogger(noisy).setLevel(logging.ERROR)
    command = "python bench/bench_faults.py " + shlex.join(sys.argv[1:])
    load = os.getloadavg()[0]
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    results: list[PhaseResult]
    with tempfile.TemporaryDirectory(prefix="psmatch-faults-") as tmp:
        run = FaultRun(Path(tmp), rate=args.rate, subscriptions=args.subscriptions,
                       trigger_seconds=args.trigger)  # fmt: skip
        with run:
            for step in (
                run.poison,
                lambda: run.redis_kill(down_s=args.redis_down),
                lambda: run.broker_outage(down_s=args.broker_down),
                run.job_kill,
            ):
                result = step()
                log.info("%s", result.row())
            run.finish()
            results = run.results
            kinds = len({r.kind for r in run.bad_sent})
            clients = sorted({r.client for r in run.bad_sent})
            notes = _notes(run)
    table = "\n".join([TABLE_HEADER, *(r.row() for r in results)])
    print(table)
    if args.write_docs:
        args.write_docs.write_text(
            DOC.format(
                command=command,
                when=when,
                load=f"{load:.1f}",
                trigger=args.trigger,
                subscriptions=args.subscriptions,
                rate=args.rate,
                kinds=kinds - 4,
                clients=", ".join(clients),
                redis_down=args.redis_down,
                broker_down=args.broker_down,
                table=table,
                notes=notes,
            )
        )
        log.info("wrote %s", args.write_docs)
    return 0 if all(_ok(r) for r in results) else 1


def _ok(result: PhaseResult) -> bool:
    return (
        result.job_alive
        and result.received == result.expected
        and result.unexpected == 0
        and not result.reject_problems
    )


def _notes(run: FaultRun) -> str:
    lines = []
    for r in run.results:
        if not _ok(r):
            lines.append(
                f"* **{r.name}: failed** - job alive {r.job_alive}, {r.received:,} of "
                f"{r.expected:,} notifications, {r.unexpected} unexpected, reject problems "
                f"{r.reject_problems or 'none'}; missing e.g. {r.missing_sample}."
            )
        lines += [f"* {r.name}: {note}" for note in r.notes]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
