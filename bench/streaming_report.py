"""The report of ``bench/bench_streaming.py``: the run's tables, the runs kept in
``docs/bench-streaming-runs.json`` and the plots.

Owns the text a run prints (:func:`render`), the delivery modes' table
(:func:`render_delivery`), the record of the latest run of each configuration
(:func:`record_run`) and the results table and plots of ``docs/bench-streaming.md``
drawn from those runs (:func:`render_runs`, :func:`plot`).
"""


from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any

from host import cpu_model
from streaming_phases import FIRST_MATCH_TICK_S, FIRST_MATCH_WINDOW_S, SAMPLE_EVERY, SPARK_STEPS


def _bd_rows(bd: dict[str, float]) -> str:
    names = [
        ("read_s", "batches with subscription records: Kafka read + cache + validate them "
                   "and apply them to Redis (executors, job 1)"),
        ("state_s", "read the batch's version from Redis (driver)"),
        ("match_write_s", "match and write to Kafka on executors (job 2, wall; reads Kafka "
                          "when job 1 did not run)"),
        ("worker_sync_s", "  in workers: catch up to the batch version (sum over tasks)"),
        ("worker_snapshot_s", "  in workers: of which writing index snapshots"),
        ("worker_parse_s", "  in workers: JSON parse + validate events"),
        ("worker_match_s", "  in workers: match (match_flat_slots)"),
        ("worker_encode_s", "  in workers: build notification records"),
        ("worker_cpu_s", "  in workers: CPU time of the three steps above (the rest: waiting)"),
        ("worker_write_s", "  in workers: write the records to Kafka, until acknowledged"),
        ("total_s", "whole batch (wall)"),
    ]
    return "\n".join(f"| {label} | {bd[k]:.3f} |" for k, label in names)


def _cpu_rows(r: dict[str, Any]) -> str:
    """The CPU table's rows: each kind of process while subscribing, in psmatch's backlog
    phase, in the ceiling's and in the latency phase, then the totals."""
    phases = (r["subscribe_cpu_s"], r["throughput"]["cpu_s"], r["ceiling"]["cpu_s"],
              r["latency"]["cpu_s"])  # fmt: skip
    kinds = sorted(set().union(*phases), key=lambda k: -phases[1].get(k, 0.0))
    rows = [f"| {k} | " + " | ".join(f"{p.get(k, 0.0):.2f}" for p in phases) + " |"
            for k in kinds]  # fmt: skip
    rows.append("| all | " + " | ".join(f"{sum(p.values()):.2f}" for p in phases) + " |")
    return "\n".join(rows)


CPU_TABLE = """CPU seconds each kind of process used while subscribing (from the first subscription
published to the last applied, the workers caught up), while the backlog drained (from
the first event published to the last one read) and in the latency phase ({phase_s:.1f} s,
from the end of the warm-up to the end of the load; the load's own CPU, above, is in no
row: it has exited when the phase's figures are read); `/proc`, all processes of the
machine:

| process | subscribing | psmatch's backlog | the ceiling's | the latency phase |
| --- | --- | --- | --- | --- |
{rows}
"""


def _warm_up_row(lat: dict[str, Any]) -> str:
    """The warm-up's latencies, not measured above (no row without a warm-up)."""
    if not lat.get("warm_up_s"):
        return ""
    return (f"| the {lat['warm_up_s']:.0f} s of warm-up before it, at the same rate: p50 / "
            f"p99 | {lat['warm_up_p50_ms']:,.0f} / {lat['warm_up_p99_ms']:,.0f} ms |\n")


def _churn_row(r: dict[str, Any]) -> str:
    """The churn phase's row of a summary table (none without the phase)."""
    if "churn" not in r:
        return ""
    c = r["churn"]
    return (f"| churn: {c['changes']:,} live subscriptions replaced (publish → applied in "
            f"Redis, the workers caught up; {c['batches']} batches) | {c['seconds']:.1f} s → "
            f"**{c['changes_per_s']:,.0f} changes/s** (a worker's peak then "
            f"{c['worker_peak_rss_bytes'] / 2**20:,.0f} MiB)"
            f"{_catch_up_note(c.get('workers'))} |\n")


def _catch_up_note(sums: dict[str, float] | None) -> str:
    """The workers' catch-up of a phase, in words (none in runs recorded before it)."""
    if sums is None:
        return ""
    return (f" (the workers' catch-up {sums['sync_s']:.1f} s summed over tasks, of which "
            f"writing index snapshots {sums['snapshot_s']:.1f} s)")


def _new_worker_row(r: dict[str, Any]) -> str:
    """The new worker's row of a summary table (none in runs recorded before it)."""
    if "new_worker" not in r:
        return ""
    w = r["new_worker"]
    return (f"| a new worker ready at the end (a fresh process; built from the {w['built_from']}, "
            f"{w['replayed']:,} changes replayed) | {w['wall_s']:.1f} s ({w['cpu_s']:.1f} s of "
            f"CPU, peak {w['peak_rss'] / 2**20:,.0f} MiB) |\n")


def _spark_rows(ms: dict[str, float]) -> str:
    rows = [f"| {step} | {ms[step]:,.0f} |" for step in SPARK_STEPS]
    rows += [f"| the longest batch (triggerExecution) | {ms['max_triggerExecution']:,.0f} |",
             f"| from one batch's start to the next | {ms['start_to_start']:,.0f} |"]
    return "\n".join(rows)


BEGEN = "BE-Gen"
"""The workload of a run given no ``--workload``: ``python -m psmatch.begen``'s."""
RUN_FIELDS = ("workload", "subscriptions", "matcher", "shards")
"""What makes a configuration: the runs file keeps the latest run of each."""


def record_run(directory: Path, r: dict[str, Any], command: str) -> list[dict[str, Any]]:
    """Record this run's summary in ``<directory>/bench-streaming-runs.json`` in place of
    the earlier run of its configuration (:data:`RUN_FIELDS`); returns every recorded run.
    Fields a run did not measure (no ``--churn``) are ``None``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "bench-streaming-runs.json"
    runs = json.loads(path.read_text()) if path.exists() else []
    mib = 2**20
    churn, worker = r.get("churn"), r["new_worker"]
    run = {
        "workload": r["workload"], "subscriptions": r["subscriptions"],
        "matcher": r["matcher"], "shards": r["shards"], "command": command,
        "notifications_per_event": r["matches_per_event"],
        "subscribe_s": r["subscribe_s"],
        "first_notification_s": r.get("first_notification_s"),
        "events_per_s": r["throughput"]["events_per_s"],
        "ceiling_events_per_s": r["ceiling"]["events_per_s"],
        "rate": r["latency"]["rate_target"],
        "warm_up_s": r["latency"]["warm_up_s"],
        "p50_ms": r["latency"]["p50_ms"], "p99_ms": r["latency"]["p99_ms"],
        "churn_changes": churn["changes"] if churn else None,
        "churn_changes_per_s": churn["changes_per_s"] if churn else None,
        "churn_peak_mib": churn["worker_peak_rss_bytes"] / mib if churn else None,
        "new_worker_s": worker["wall_s"], "new_worker_replayed": worker["replayed"],
        "new_worker_peak_mib": worker["peak_rss"] / mib,
        "worker_peak_mib": r["worker_peak_rss_bytes"] / mib,
        "index_mib": r["index_bytes"] / mib,
        "latency_quantiles_ms": r["latency_quantiles_ms"],
    }  # fmt: skip
    runs = [x for x in runs if any(x[k] != run[k] for k in RUN_FIELDS)] + [run]
    runs.sort(key=lambda x: (x["workload"], x["matcher"], x["shards"], x["subscriptions"]))
    path.write_text(json.dumps(runs, indent=1) + "\n")
    return runs


TABLE_HEAD = ("| subscriptions, matcher | notifications per event | subscribing all of them | "
              "first notification then | backlog drained | ceiling (no matching) | "
              "psmatch / ceiling | p50 / p99 publish → notification | replacing live "
              "subscriptions | a new worker ready (a fresh process) | a worker's peak RSS | "
              "index (`stats()`) |\n" + "| --- " * 12 + "|")


def _seconds(s: float | None) -> str:
    return "–" if s is None else f"{s:.1f} s"


def _subscriptions(x: dict[str, Any]) -> str:
    """A run's subscriptions: their number, and their workload unless it is BE-Gen's."""
    return f"{x['subscriptions']:,}" + ("" if x["workload"] == BEGEN else f" {x['workload']}")


def render_runs(runs: list[dict[str, Any]]) -> str:
    """docs/bench-streaming.md's results table: a row per recorded configuration."""
    rows = []
    for x in sorted(runs, key=lambda x: (x["workload"] != BEGEN, x["subscriptions"],
                                         x["matcher"] != "psthash", x["shards"])):  # fmt: skip
        shards = f" in {x['shards']} shards" if x["shards"] > 1 else ""
        churn = ("–" if x["churn_changes"] is None else
                 f"{x['churn_changes']:,} at **{x['churn_changes_per_s']:,.0f} changes/s** "
                 f"(a worker's peak then {x['churn_peak_mib']:,.0f} MiB)")  # fmt: skip
        replayed = ("" if not x["new_worker_replayed"] else
                    f", {x['new_worker_replayed']:,} changes replayed")  # fmt: skip
        rows.append(
            f"| {_subscriptions(x)}, {x['matcher']}{shards} | "
            f"{x['notifications_per_event']:,.3g} | {x['subscribe_s']:.1f} s | "
            f"{_seconds(x.get('first_notification_s'))} | "
            f"**{x['events_per_s']:,.0f} events/s** | {x['ceiling_events_per_s']:,.0f} events/s | "
            f"{100 * x['events_per_s'] / x['ceiling_events_per_s']:.0f} % | "
            f"{x['p50_ms']:,.0f} / {x['p99_ms']:,.0f} ms at {x['rate']:,.0f} events/s | "
            f"{churn} | {x['new_worker_s']:.1f} s{replayed} (peak "
            f"{x['new_worker_peak_mib']:,.0f} MiB) | **{x['worker_peak_mib']:,.0f} MiB** | "
            f"{x['index_mib']:,.0f} MiB |")
    commands = [f".venv/bin/python bench/bench_streaming.py {x['command']}"
                for x in sorted(runs, key=lambda x: (x["workload"] != BEGEN, x["subscriptions"],
                                                     x["matcher"], x["shards"]))]  # fmt: skip
    return f"""\
Written by `bench/bench_streaming.py --docs docs` from its latest run of each
configuration (`docs/bench-streaming-runs.json`), each run by one of these commands:

<!-- not executed: each starts Kafka, Redis and Spark and runs for many minutes -->
```sh
{chr(10).join(commands)}
```

{TABLE_HEAD}
{chr(10).join(rows)}"""


def plot(runs: list[dict[str, Any]], directory: Path) -> None:
    """Throughput against subscriptions (psmatch and the ceiling of the same runs) and
    the latency distribution of each recorded run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def label(x: dict[str, Any]) -> str:
        workload = "" if x["workload"] == BEGEN else f"{x['workload']}, "
        return f"{workload}{x['matcher']}, {x['shards']} shard(s)"

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for name in sorted({label(x) for x in runs}):
        line = [x for x in runs if label(x) == name]
        n = [x["subscriptions"] for x in line]
        ax.plot(n, [x["events_per_s"] for x in line], "o-", label=f"psmatch ({name})")
        ax.plot(n, [x["ceiling_events_per_s"] for x in line], "s--", alpha=0.6,
                label=f"ceiling, same runs ({name})")  # fmt: skip
    ax.set(xscale="log", yscale="log", xlabel="live subscriptions",
           ylabel="events/s drained (backlog)",
           title=f"Throughput against subscriptions ({os.cpu_count()} cores)")  # fmt: skip
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(directory / "bench-streaming-throughput.png", dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for x in runs:
        if not (q := x["latency_quantiles_ms"]):  # a run recorded without its distribution
            continue
        ax.plot([v / 1000 for v in q], [i / (len(q) - 1) for i in range(len(q))],
                label=f"{x['subscriptions']:,} subs, {label(x)}, {x['rate']:,.0f} events/s "
                      f"offered, after {x['warm_up_s']:.0f} s of warm-up")  # fmt: skip
    ax.set(xlabel="publish → notification latency (s)", ylabel="share of notifications",
           title="Latency distribution (latency phase, 1 s trigger)")  # fmt: skip
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(directory / "bench-streaming-latency.png", dpi=110)
    plt.close(fig)


def render_delivery(r: dict[str, Any]) -> str:
    """The delivery modes side by side (each mode's backlog and latency phases, in the
    order run, on one query's checkpoint: a mode given twice, first and last, shows how
    much of a difference is the order's) and the first-match phase, if run."""
    modes = r.get("modes", [])
    plain = [m["events_per_s"] for mode, m in modes if mode == "at-least-once"]
    base = statistics.fmean(plain) if plain else float("nan")
    rows = []
    for mode, m in modes:
        spark = m["spark_ms"]
        rows.append(
            f"| {mode} | {m['events_per_s']:,.0f} ({100 * m['events_per_s'] / base:.0f} %) | "
            f"{m['backlog_commit_s']:.3f} of {m['backlog_write_s']:.3f} s | "
            f"{m['p50_ms']:,.0f} / **{m['p99_ms']:,.0f} ms** at {m['rate']:,.0f} events/s | "
            f"{1000 * m['latency_batch_s']:,.0f} ms ({1000 * m['latency_match_write_s']:,.0f} "
            f"match+write, {1000 * m['latency_commit_s']:,.0f} commit) | "
            f"{spark['latestOffset']:,.0f} / {spark['queryPlanning']:,.0f} / "
            f"{spark['walCommit']:,.0f} / {spark['addBatch']:,.0f} / "
            f"{spark['commitOffsets']:,.0f} / {spark['start_to_start']:,.0f} ms |")
    fm = r.get("first_match")
    first_row = "" if fm is None else (
        f"\nNew subscriptions at {fm['rate']:,.0f} changes/s ({fm['changes']:,}, sent at "
        f"{fm['changes_per_s_sent']:,.0f}/s), a probe event every "
        f"{FIRST_MATCH_TICK_S} s matching those of the last {FIRST_MATCH_WINDOW_S:.0f} s: "
        f"publish of a subscription → its first notification p50 / p99 / max "
        f"{fm['p50_ms']:,.0f} / **{fm['p99_ms']:,.0f}** / {fm['max_ms']:,.0f} ms "
        f"({fm['matched']:,} matched; delivery {modes[-1][0]}).\n")
    return f"""\
Delivery modes, in the order run on the same query (trigger {r["trigger_s"]} s):

| delivery | backlog events/s (% of at-least-once's, the mean of its rows) | \
backlog: commit of the workers' write, per batch | p50 / p99 publish → notification | \
latency phase: a batch (driver) | \
Spark per batch: latestOffset / queryPlanning / walCommit / addBatch / commitOffsets / \
start to start |
| --- | --- | --- | --- | --- | --- |
{chr(10).join(rows)}
{first_row}"""


def _workload(r: dict[str, Any]) -> str:
    """The run's subscriptions as its report names them."""
    if r["workload"] != BEGEN:
        return (f"{r['subscriptions']:,} subscriptions of the workload {r['workload']} "
                f"(~{r['matches_per_event']:,.0f} notifications per event)")
    return (f"{r['subscriptions']:,} BE-Gen subscriptions (matching probability "
            f"{r['matching_probability']}, i.e. ~{r['matches_per_event']:,.0f} notifications "
            "per event)")


def render(r: dict[str, Any]) -> str:
    tp, lat = r["throughput"], r["latency"]
    return f"""\
Measured with `bench/bench_streaming.py` on {os.cpu_count()} cores of {cpu_model()} (Spark
local[*], one Kafka broker, one Redis, all on loopback), {_workload(r)},
matcher `{r["matcher"]}` in {r["shards"]} shard(s), trigger {r["trigger_s"]} s.
Latency: every {SAMPLE_EVERY}th notification of partition 0, the broker's append time less
its event's timestamp, after {lat["warm_up_s"]:.0f} s of warm-up at the same rate.

| phase | figure |
| --- | --- |
| subscribe {r["subscriptions"]:,} (publish → applied in Redis, the batch's workers caught \
up) | {r["subscribe_s"]:.1f} s{_catch_up_note(r.get("subscribe_workers"))} |
| first notification after subscribing (first event published → end of the batch \
that wrote one) | {_seconds(r.get("first_notification_s"))} |
| warm-up: each Python worker loads the index once | {r["warmup_s"]:.1f} s |
| throughput: backlog of {tp["events"]:,} events drained | {tp["drain_s"]:.1f} s |
| events/s in (backlog) | {tp["events_per_s"]:,.0f} |
| notifications/s out (backlog) | {tp["notifications_per_s"]:,.0f} \
({tp["notifications"]:,} in all) |
| ceiling: the same backlog with no matching, events/s | {r["ceiling"]["events_per_s"]:,.0f} \
(psmatch at {100 * r["ceiling"]["ratio"]:.0f} % of it) |
| latency phase: events/s offered (target {lat["rate_target"]:,.0f}) | {lat["rate_sent"]:,.0f} |
| notifications/s out (latency phase) | {lat["notifications_per_s"]:,.0f} |
| publish → notification latency p50 / p99 / max | {lat["p50_ms"]:,.0f} / \
{lat["p99_ms"]:,.0f} / {lat["max_ms"]:,.0f} ms |
{_warm_up_row(lat)}{_churn_row(r)}{_new_worker_row(r)}
Where a batch's time goes (mean per batch with events; backlog phase:
{tp["breakdown"]["batches"]:.0f} batches of {tp["breakdown"]["events_per_batch"]:,.0f} events;
latency phase:
{lat["breakdown"]["batches"]:.0f} batches of {lat["breakdown"]["events_per_batch"]:,.0f} events):

| step (backlog phase) | seconds |
| --- | --- |
{_bd_rows(tp["breakdown"])}

| step (latency phase) | seconds |
| --- | --- |
{_bd_rows(lat["breakdown"])}

{CPU_TABLE.format(rows=_cpu_rows(r), phase_s=r["latency"]["phase_s"])}
{render_delivery(r)}"""
