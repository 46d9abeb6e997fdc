"""Fault-injection measurements of the streaming service (a script, not a test).

Runs the phases of ``tests/service/test_faults.py`` (harness:
``tests/service/faults.py``) with a Kafka broker, a redis-server and a ``psmatch run``
job of its own: while good events are published at ``--rate`` per second, it sends every
poison and malformed record kind through each client, ``kill -9``\\ s redis-server (back
after ``--redis-down`` s), stops the broker for ``--broker-down`` s and ``kill -9``\\ s the
job (restarted at once from its checkpoint). Per fault it measures the good events sent,
the notifications expected (``scan`` on the same subscriptions), received and
duplicated, the bad records rejected once with the right code, and the time from the end
of the fault to the first notification and until everything published before that end
was delivered. Prints the table; ``--write-docs`` replaces the measured section of
docs/faults.md (between its ``faults:begin``/``faults:end`` markers).

Usage::

    .venv/bin/python bench/bench_faults.py --rate 50 --subscriptions 100 \\
        --long-broker-down 90 [--write-docs docs/faults.md]
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from docsection import replace_section  # noqa: E402 - beside this script

from tests.service.faults import TABLE_HEADER, FaultRun, PhaseResult  # noqa: E402

log = logging.getLogger("bench")

RUN = """\
<!-- not executed: starts Kafka, Redis and a psmatch run job, about ten minutes -->
```sh
{command}
```

{subscriptions} subscriptions, {rate:g} good events/s, trigger {trigger:g} s, Redis dead for
{redis_down:g} s, broker stopped for {broker_down:g} s{long}; bad records sent with {clients}.
Load average {load} at the start (the machine is shared with other work: times are
upper bounds).

{table}

{notes}"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rate", type=float, default=50.0, help="good events per second")
    ap.add_argument("--subscriptions", type=int, default=100)
    ap.add_argument("--trigger", type=float, default=0.5)
    ap.add_argument("--redis-down", type=float, default=5.0, help="seconds Redis stays dead")
    ap.add_argument("--broker-down", type=float, default=30.0, help="seconds Kafka stays down")
    ap.add_argument(
        "--long-broker-down", type=float, default=0.0,
        help="then stop the broker again this long (e.g. 90: past the Kafka clients' 60 s "
        "timeouts, so the query fails and psmatch run restarts it); 0: no such phase",
    )  # fmt: skip
    ap.add_argument("--write-docs", type=Path, help="write the results page (docs/faults.md)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    for noisy in ("kafka", "psmatch.faults.kafka", "psmatch.faults.producer",
                  "psmatch.faults.consumer"):  # fmt: skip
        logging.getLogger(noisy).setLevel(logging.ERROR)
    command = ".venv/bin/python bench/bench_faults.py " + shlex.join(sys.argv[1:])
    load = os.getloadavg()[0]
    results: list[PhaseResult]
    with tempfile.TemporaryDirectory(prefix="psmatch-faults-") as tmp:
        run = FaultRun(Path(tmp), rate=args.rate, subscriptions=args.subscriptions,
                       trigger_seconds=args.trigger)  # fmt: skip
        with run:
            for step in (
                run.poison,
                lambda: run.redis_kill(down_s=args.redis_down),
                lambda: run.broker_outage(down_s=args.broker_down),
                *([lambda: run.broker_outage(down_s=args.long_broker_down)]
                  if args.long_broker_down else []),
                run.job_kill,
            ):  # fmt: skip
                result = step()
                log.info("%s", result.row())
            run.finish()
            results = run.results
            clients = sorted({r.client for r in run.bad_sent})
            notes = _notes(run)
    table = "\n".join([TABLE_HEADER, *(r.row() for r in results)])
    print(table)
    if args.write_docs:
        section = RUN.format(
            command=command, subscriptions=args.subscriptions, rate=args.rate,
            trigger=args.trigger, redis_down=args.redis_down, broker_down=args.broker_down,
            long=f" then {args.long_broker_down:g} s" if args.long_broker_down else "",
            clients=", ".join(clients), load=f"{load:.1f}", table=table, notes=notes,
        )  # fmt: skip
        replace_section(args.write_docs, "faults", section)
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
