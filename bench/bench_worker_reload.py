"""How long a Python worker takes to be ready, and how much memory it takes.

A script, not a test. Starts its own redis-server (or uses ``--redis-url``), stores a
BE-Gen workload's subscriptions in the Redis state (as the driver stores them) and times
what a Spark Python worker does in :func:`psmatch.service.index_cache.sync_index`, each step in a
fresh Python process (as a new worker), reporting its wall and CPU time and its peak
resident memory:

1. the subscriptions are stored as the job stores them: validated, each put's normal
   form logged beside it in the change log;
2. *a worker with no index*: it builds its matcher from the state (from the whole change
   log while that holds every change since the empty state, which parses nothing; else
   from every subscription) and writes its index snapshot (:mod:`psmatch.service.snapshots`);
3. ``--changes`` puts are then applied to the state (each replacing a subscription),
   validated and logged the same way;
4. *ready from the snapshot*: a new worker loads the snapshot and replays those changes
   from the change log.

Each of ``--subscriptions`` (sizes) and ``--matcher`` (kinds) may be given several
times: one table, two rows per size and matcher.

``--docs docs`` writes the table, with the command, to ``docs/bench-streaming.md``
(between its ``bench_worker_reload`` markers).

Usage::

    .venv/bin/python bench/bench_worker_reload.py --subscriptions 100000 1000000 \\
        --matching-probability 0.0001 [--matcher auto psthash] [--changes 20000] [--docs docs]
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from docsection import replace_section  # noqa: E402 - beside this script

from psmatch.adapters.state import SourceChange, StateStore  # noqa: E402
from psmatch.devservers.redis_server import RedisServer  # noqa: E402
from psmatch.service.records.subscriptions import (  # noqa: E402
    parse_subscription_record,
    subscription_value,
)
from psmatch.service.task_contract import WorkerSettings  # noqa: E402

log = logging.getLogger("bench")


def worker_step(settings: WorkerSettings, version: int) -> dict[str, float]:
    """Run :func:`sync_index` to ``version`` in a fresh process (a new Python worker; the
    index of shard 0 when ``settings.shards`` > 1); its wall and CPU seconds, peak
    resident bytes, the changes it replayed and what it started from (``built_from``).

    The peak is the process's ``VmHWM``, not ``ru_maxrss``: Linux carries the parent's
    peak over into the ``ru_maxrss`` of a child across ``exec``, so a child reported its
    parent's peak (a bare interpreter started by a process that had touched 500 MiB:
    511 MiB, its ``VmHWM`` 11 MiB)."""
    fields = {name: getattr(settings, name) for name in (
        "redis_url", "redis_prefix", "retention", "matcher", "notifications_topic",
        "rejected_topic", "snapshot_dir", "shards")}  # fmt: skip
    code = (
        "import json, re, sys, time\n"
        f"sys.path.insert(0, {str(ROOT / 'src')!r})\n"
        "from psmatch.service.index_cache import sync_index\n"
        "from psmatch.service.task_contract import WorkerSettings\n"
        f"settings = WorkerSettings(**json.loads({json.dumps(fields)!r}))\n"
        "t, c = time.perf_counter(), time.process_time()\n"
        f"index = sync_index(settings, {version})\n"
        "print(json.dumps({'wall_s': time.perf_counter() - t, 'cpu_s': time.process_time() - c,"
        " 'peak_rss': 1024 * int(re.search(r'VmHWM:\\s+(\\d+)',"
        " open('/proc/self/status').read()).group(1)),"
        " 'replayed': index.replayed, 'subscriptions': len(index.matcher),"
        " 'version': index.version, 'built_from': index.built_from}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def store_logged(store: StateStore, puts: list[tuple[str, str]], offset: int) -> None:
    """Apply ``puts`` (id, expression) to the state, validated and logged as the job
    logs them (the normal form beside the record, so that a worker replaying the log
    parses nothing), :data:`APPLY_BATCH` a micro-batch."""
    for start in range(0, len(puts), APPLY_BATCH):
        validated = (parse_subscription_record(sub_id.encode(),
                                               subscription_value(expr, "bench", {}))
                     for sub_id, expr in puts[start:start + APPLY_BATCH])  # fmt: skip
        store.apply([SourceChange("subs:0", offset + start + i, c.sub_id, c.stored,
                                  c.normal_form) for i, c in enumerate(validated)])  # fmt: skip


APPLY_BATCH = 50_000


def measure(size: int, matchers: list[str], args: argparse.Namespace, url: str,
            work: Path) -> list[str]:
    """The table rows of ``size`` subscriptions, each of ``matchers``."""
    gen = [sys.executable, "-m", "psmatch.begen", "--subscriptions", str(size),
           "--events", "10", "--matching-probability", str(args.matching_probability),
           "--out", str(work / "workload"), "--measure-subscriptions", "0"]  # fmt: skip
    log.info("generating the BE-Gen workload: %s", " ".join(gen[2:]))
    subprocess.run(gen, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    lines = (work / "workload" / "subscriptions.tsv").read_text().splitlines()
    subs = [(sid, expr) for sid, expr in (line.split("\t", 1) for line in lines if line)]
    prefix = f"reload{uuid.uuid4().hex[:6]}:"
    retention = len(subs) + args.changes
    store = StateStore.from_url(url, prefix, retention)
    workers = {matcher: WorkerSettings(url, prefix, retention, matcher, "n", "r",
                                       snapshot_dir=str(work / f"snapshots-{matcher}-{size}"))
               for matcher in matchers}  # fmt: skip
    try:
        store_logged(store, [(f"s{sid}", expr) for sid, expr in subs], 0)
        reloads = {}
        for matcher, settings in workers.items():
            reloads[matcher] = reload = worker_step(settings, len(subs))
            assert reload["subscriptions"] == len(subs) and reload["version"] == len(subs)
            log.info("%s, no index: %s", matcher, reload)
        # the snapshots fall behind: --changes puts, each replacing a subscription by
        # another one of the workload
        store_logged(store, [(f"s{subs[i % len(subs)][0]}", subs[(i + 1) % len(subs)][1])
                             for i in range(args.changes)], len(subs))  # fmt: skip
        rows = []
        for matcher, settings in workers.items():
            ready = worker_step(settings, len(subs) + args.changes)
            assert ready["replayed"] == args.changes and ready["subscriptions"] == len(subs)
            log.info("%s, ready from the snapshot: %s", matcher, ready)
            reload = reloads[matcher]
            assert settings.snapshot_dir is not None
            mb = sum(p.stat().st_size for p in Path(settings.snapshot_dir).iterdir()) / 1e6
            what = f"{matcher}, {len(subs):,}"
            rows += [
                f"| {what} | a worker with no index: built from the {reload['built_from']} "
                f"+ snapshot write ({mb:,.0f} MB) | {reload['wall_s']:.1f} s | "
                f"**{reload['cpu_s']:.1f} s** | {reload['peak_rss'] / 2**20:,.0f} MiB |",
                f"| {what} | a new worker: snapshot loaded + {args.changes:,} changes "
                f"replayed | {ready['wall_s']:.1f} s | **{ready['cpu_s']:.1f} s** | "
                f"{ready['peak_rss'] / 2**20:,.0f} MiB |",
            ]
    finally:
        store.clear()
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--subscriptions", type=int, nargs="+", default=[100_000])
    ap.add_argument("--matching-probability", type=float, default=0.0001)
    ap.add_argument("--matcher", nargs="+", default=["psthash"])
    ap.add_argument("--changes", type=int, default=20_000, help="puts replayed by the catch-up")
    ap.add_argument("--redis-url")
    ap.add_argument("--docs", type=Path, help="write the table to <dir>/bench-streaming.md")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix="psmatch-reload-"))
    redis = None if args.redis_url else RedisServer(work / "redis", appendonly=False).start()
    url = args.redis_url or redis.url  # type: ignore[union-attr]
    try:
        rows = [row for size in args.subscriptions
                for row in measure(size, args.matcher, args, url, work)]
    finally:
        if redis is not None:
            redis.stop()
    table = (
        f"| matcher, BE-Gen subscriptions (matching probability {args.matching_probability}) "
        "| step (each a new process) | wall | CPU | peak RSS |\n"
        "| --- | --- | --- | --- | --- |\n" + "\n".join(rows)
    )
    print(table)
    if args.docs:
        replace_section(args.docs / "bench-streaming.md", "bench_worker_reload", (
            "<!-- not executed: starts redis-server and runs for minutes -->\n```sh\n"
            f".venv/bin/python bench/bench_worker_reload.py {' '.join(sys.argv[1:])}\n"
            f"```\n\n{table}"))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
