"""How long a Python worker takes to be ready: full reload and change-log catch-up.

A script, not a test. Starts its own redis-server (or uses ``--redis-url``), stores a
BE-Gen workload's subscriptions in the Redis state (as the driver stores them) and times,
in this process, what a Spark Python worker does in :func:`streaming.worker.sync_index`:

1. *full reload*: a worker with no index reads every subscription from Redis and builds
   its matcher (first use, or too far behind the change log);
2. *catch-up*: a worker at version ``v`` replays ``--changes`` puts from the change log;
3. *snapshot*: a worker reloads and writes its index snapshot (:mod:`streaming.snapshots`),
   then a new worker starts from that snapshot.

Usage::

    .venv/bin/python bench/bench_worker_reload.py --subscriptions 100000 \\
        --matching-probability 0.0001 [--matcher psthash] [--changes 20000]
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from connectors.local import RedisServer  # noqa: E402
from connectors.state import SourceChange, StateStore  # noqa: E402
from streaming import worker  # noqa: E402
from streaming.records import dumps_record  # noqa: E402
from streaming.worker import WorkerSettings, sync_index  # noqa: E402

log = logging.getLogger("bench")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--subscriptions", type=int, default=100_000)
    ap.add_argument("--matching-probability", type=float, default=0.0001)
    ap.add_argument("--matcher", default="psthash")
    ap.add_argument("--changes", type=int, default=20_000, help="puts replayed by the catch-up")
    ap.add_argument("--redis-url")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix="psmatch-reload-"))
    gen = [sys.executable, "-m", "index.begen", "--subscriptions", str(args.subscriptions),
           "--events", "10", "--matching-probability", str(args.matching_probability),
           "--out", str(work / "workload"), "--measure-subscriptions", "0"]  # fmt: skip
    log.info("generating the BE-Gen workload: %s", " ".join(gen[2:]))
    subprocess.run(gen, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    lines = (work / "workload" / "subscriptions.tsv").read_text().splitlines()
    subs = [line.split("\t", 1) for line in lines if line]

    redis = None if args.redis_url else RedisServer(work / "redis", appendonly=False).start()
    url = args.redis_url or redis.url  # type: ignore[union-attr]
    prefix = f"reload{uuid.uuid4().hex[:6]}:"
    retention = len(subs) + args.changes
    store = StateStore.from_url(url, prefix, retention)
    try:
        store.apply([SourceChange("subs:0", i, f"s{sid}", dumps_record(expr, "bench", {}))
                     for i, (sid, expr) in enumerate(subs)])  # fmt: skip
        settings = WorkerSettings(url, prefix, retention, args.matcher, "n", "r")
        t0 = time.perf_counter()
        index = sync_index(settings, len(subs))
        reload_s = time.perf_counter() - t0
        assert len(index.matcher) == len(subs) and index.version == len(subs)
        log.info("full reload of %d subscriptions (%s): %.2f s", len(subs), args.matcher,
                 reload_s)  # fmt: skip

        # catch-up: the worker is at version v; the log holds the next --changes puts,
        # each replacing an existing subscription by another one of the workload
        offset = len(subs)
        store.apply([SourceChange("subs:0", offset + i, f"s{subs[i % len(subs)][0]}",
                                  dumps_record(subs[(i + 1) % len(subs)][1], "bench", {}))
                     for i in range(args.changes)])  # fmt: skip
        t0 = time.perf_counter()
        index = sync_index(settings, len(subs) + args.changes)
        catch_up_s = time.perf_counter() - t0
        assert index.reloads == 1 and len(index.matcher) == len(subs)
        log.info("catch-up of %d changes: %.2f s", args.changes, catch_up_s)

        version = len(subs) + args.changes
        snapshots = replace(settings, snapshot_dir=str(work / "snapshots"))
        worker._CACHE.clear()
        t0 = time.perf_counter()
        sync_index(snapshots, version)
        save_s = time.perf_counter() - t0
        size = sum(p.stat().st_size for p in (work / "snapshots").iterdir())
        worker._CACHE.clear()
        t0 = time.perf_counter()
        index = sync_index(snapshots, version)
        load_s = time.perf_counter() - t0
        assert len(index.matcher) == len(subs) and index.version == version
        log.info("reload + snapshot write: %.2f s (%.0f MB); start from it: %.2f s",
                 save_s, size / 1e6, load_s)  # fmt: skip
        print(
            f"matcher {args.matcher}, {len(subs):,} BE-Gen subscriptions "
            f"(matching probability {args.matching_probability}): full reload "
            f"{reload_s:.2f} s; catch-up of {args.changes:,} changes {catch_up_s:.2f} s; "
            f"reload + snapshot write {save_s:.2f} s ({size / 1e6:.0f} MB); "
            f"start from the snapshot {load_s:.2f} s"
        )
    finally:
        worker._CACHE.clear()
        store.clear()
        if redis is not None:
            redis.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
