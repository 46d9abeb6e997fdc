"""How long an index snapshot takes to write and to load, and how large it is.

A script, not a test. Builds a matcher of a BE-Gen workload with its notification heads
(one head shared by every subscription, as with a single subscriber), then times
:func:`psmatch.service.snapshots.save_snapshot` in this process and
:func:`psmatch.service.snapshots.load_snapshot` in a fresh Python process each (as a
worker that starts), the best of ``--repeat`` runs, and reports the file's size and the
loading process's peak resident memory (``VmHWM``).

Usage::

    .venv/bin/python bench/bench_snapshots.py --subscriptions 200000 \\
        [--matcher psthash --matcher pstbloom] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src")]

from psmatch import make_matcher  # noqa: E402
from psmatch.begen import BEGenParams, generate  # noqa: E402
from psmatch.service.records.notifications import NotificationHeads  # noqa: E402
from psmatch.service.snapshots import save_snapshot  # noqa: E402

PREFIX = "bench:"

LOAD = """
import json, sys, time
from psmatch.service.snapshots import load_snapshot
wall, cpu = time.perf_counter(), time.process_time()
snap = load_snapshot(sys.argv[1], sys.argv[2], sys.argv[3])
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
peak = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status")
            if line.startswith("VmHWM:"))
print(json.dumps({"wall": wall, "cpu": cpu, "peak": peak, "subscriptions": len(snap.matcher),
                  "matches": sorted(snap.matcher.match(json.loads(sys.argv[4])))}))
"""


def measure(name: str, subscriptions: int, repeat: int, work: Path) -> dict[str, float]:
    """Save and load timings of a ``name`` matcher of ``subscriptions`` BE-Gen ones."""
    workload = generate(BEGenParams(subscriptions=subscriptions, events=1))
    matcher = make_matcher(name)
    matcher.add_many(workload.subscriptions)
    ids = [sub_id for sub_id, _ in workload.subscriptions]
    heads = NotificationHeads()
    heads.put_many(matcher.internal.slots_of(ids), [',"subscriber":"bench",'] * len(ids))
    event = workload.events[0]
    expected = sorted(matcher.match(event))
    saves = []
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        path = save_snapshot(work, PREFIX, 1, matcher, heads, "digest")
        saves.append((time.perf_counter() - wall, time.process_time() - cpu))
    assert path is not None
    loads = []
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", LOAD, str(work), PREFIX, name,
                              json.dumps(event)], capture_output=True, text=True)
        if out.returncode:
            raise RuntimeError(out.stderr)
        loads.append(json.loads(out.stdout))
        assert loads[-1]["matches"] == expected and loads[-1]["subscriptions"] == len(ids)
    best_load = min(loads, key=lambda run: run["wall"])
    return {"matcher": name, "subscriptions": subscriptions,
            "file_mib": path.stat().st_size / 2**20,
            "save_s": min(wall for wall, _ in saves), "save_cpu_s": min(c for _, c in saves),
            "load_s": best_load["wall"], "load_cpu_s": best_load["cpu"],
            "load_peak_mib": best_load["peak"] / 2**20}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subscriptions", type=int, default=200_000)
    parser.add_argument("--matcher", action="append", dest="matchers")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print("matcher    subscriptions  file MiB  save s (CPU)    load s (CPU)    load peak MiB")
    for name in args.matchers or ["psthash", "pstbloom"]:
        with tempfile.TemporaryDirectory() as work:
            row = measure(name, args.subscriptions, args.repeat, Path(work))
        print(f"{row['matcher']:<10} {row['subscriptions']:>13,} {row['file_mib']:>9.1f}  "
              f"{row['save_s']:>5.2f} ({row['save_cpu_s']:.2f})   "
              f"{row['load_s']:>5.2f} ({row['load_cpu_s']:.2f})   {row['load_peak_mib']:>9.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
