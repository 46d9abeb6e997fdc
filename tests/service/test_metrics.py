"""psmatch.service.metrics: names and help, what a batch report (as ``psmatch run`` turns it
into figures) and a query progress do to the metrics, the reject-code label, the HTTP
endpoint, and the executor-side figures a matching task reports (against the session's
real Redis)."""

from __future__ import annotations

import json
import socket
import urllib.request
from typing import Any

import pyarrow as pa
import pytest
from prometheus_client.parser import text_string_to_metric_families

from psmatch.adapters.state import SourceChange, StateStore
from psmatch.service.cli.run import batch_figures
from psmatch.service.config import ServiceConfig
from psmatch.service.errors import ConfigError
from psmatch.service.job import BatchReport
from psmatch.service.metrics import BatchFigures, MetricsError, ServiceMetrics
from psmatch.service.records.common import REJECT_CODES
from psmatch.service.records.subscriptions import parse_subscription_record, subscription_value
from psmatch.service.task_contract import TaskMetrics, WorkerSettings
from psmatch.service.tasks import match_batches


def report(**changes: Any) -> BatchFigures:
    """The metrics' figures of a job's batch report (as ``psmatch run`` passes them)."""
    return batch_figures(batch_report(**changes))


def batch_report(**changes: Any) -> BatchReport:
    workers: dict[str, Any] = dict(
        tasks=2, events=10, rejected=2, notifications=25, sync_s=0.05, snapshot_s=0.01,
        parse_s=0.02,
        match_s=0.3, encode_s=0.04, reloads=1, lag=3, index_subscriptions=42,
        index_predicates=90, index_spaces=5, index_bytes=123_456, peak_rss_bytes=654_321,
        rejects={"invalid_json": 2}, filter_candidates={"psthash": 40, "bitset": 8},
        filter_matches={"psthash": 25, "bitset": 8}, replayed=3,
    )  # fmt: skip
    values: dict[str, Any] = dict(
        batch_id=3, version=7, subscription_records=4, subscriptions_applied=3,
        read_s=0.2, state_s=0.01, match_write_s=0.5, total_s=0.71, live_subscriptions=42,
        subscriptions_validate_s=0.15, subscriptions_apply_s=0.03,
        subscription_rejects=(("invalid_expression", 1),),
    )  # fmt: skip
    for name, value in changes.items():
        (workers if name in workers else values)[name] = value
    return BatchReport(**values, workers=TaskMetrics(**workers))


def value(m: ServiceMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


# -- names -------------------------------------------------------------------------------


def test_every_metric_follows_the_naming_conventions() -> None:
    families = list(ServiceMetrics().registry.collect())
    assert len(families) >= 20
    for family in families:
        assert family.name.startswith("psmatch_"), family.name
        assert family.documentation.strip(), f"{family.name} has no help text"
        assert not family.name.endswith("_total"), "the client appends _total to counters"
        for unit in ("seconds", "bytes"):
            if unit in family.name:
                assert family.name.endswith(unit) or family.type == "counter", family.name
        assert not any(w in family.name for w in ("millis", "_ms", "kilo", "mega")), family.name
    names = ServiceMetrics().exported_names()
    assert {"psmatch_events_matched_total", "psmatch_batch_duration_seconds_bucket",
            "psmatch_subscriptions", "psmatch_index_estimated_bytes"} <= names  # fmt: skip


def test_every_reject_code_is_a_label_from_the_start() -> None:
    m = ServiceMetrics()
    for name in ("subscriptions", "events"):
        for code in REJECT_CODES:
            assert value(m, "psmatch_rejected_records_total", input=name, reason=code) == 0
    assert value(m, "psmatch_rejected_records_total", input="events", reason="other") is None


# -- feeding -----------------------------------------------------------------------------


def test_a_batch_report_moves_counters_and_sets_gauges() -> None:
    m = ServiceMetrics()
    m.observe_batch(report())
    m.observe_batch(report(batch_id=4, version=9, live_subscriptions=44, rejects={},
                           subscription_rejects=()))  # fmt: skip
    assert value(m, "psmatch_batches_total") == 2
    assert value(m, "psmatch_input_records_total", input="events") == 20
    assert value(m, "psmatch_input_records_total", input="subscriptions") == 8
    assert value(m, "psmatch_events_matched_total") == 16
    assert value(m, "psmatch_notifications_total") == 50
    assert value(m, "psmatch_subscription_changes_applied_total") == 6
    assert value(m, "psmatch_rejected_records_total", input="events", reason="invalid_json") == 2
    assert value(m, "psmatch_rejected_records_total", input="subscriptions",
                 reason="invalid_expression") == 1  # fmt: skip
    assert value(m, "psmatch_subscriptions") == 44
    assert value(m, "psmatch_state_version") == 9
    assert value(m, "psmatch_worker_version_lag") == 3
    assert value(m, "psmatch_worker_tasks_total") == 4
    assert value(m, "psmatch_worker_index_reloads_total") == 2
    assert value(m, "psmatch_index_estimated_bytes") == 123_456
    assert value(m, "psmatch_worker_peak_resident_bytes") == 654_321
    assert value(m, "psmatch_index_predicates") == 90
    assert value(m, "psmatch_index_spaces") == 5
    assert value(m, "psmatch_filter_candidates_total", family="psthash") == 80
    assert value(m, "psmatch_filter_matches_total", family="psthash") == 50
    assert value(m, "psmatch_filter_candidates_total", family="bitset") == 16
    assert value(m, "psmatch_filter_matches_total", family="bitset") == 16
    assert value(m, "psmatch_events_replayed_total") == 6
    assert value(m, "psmatch_batch_duration_seconds_count") == 2
    assert value(m, "psmatch_batch_duration_seconds_sum") == pytest.approx(1.42)
    assert value(m, "psmatch_batch_duration_seconds_bucket", le="1.0") == 2
    assert value(m, "psmatch_match_duration_seconds_sum") == pytest.approx(0.6)
    assert value(m, "psmatch_batch_input_rows_bucket", le="100.0") == 2
    assert value(m, "psmatch_batch_phase_seconds_total", phase="worker_match") == pytest.approx(0.6)
    # the catch-up and its snapshot writes, apart
    assert value(m, "psmatch_batch_phase_seconds_total", phase="worker_sync") == pytest.approx(0.08)
    assert value(m, "psmatch_batch_phase_seconds_total",
                 phase="worker_snapshot") == pytest.approx(0.02)
    assert value(m, "psmatch_batch_phase_seconds_total",
                 phase="subscriptions_apply") == pytest.approx(0.06)
    assert value(m, "psmatch_last_batch_timestamp_seconds") > 1e9  # type: ignore[operator]


def test_a_batch_without_tasks_leaves_the_index_gauges() -> None:
    m = ServiceMetrics()
    m.observe_batch(report())
    m.observe_batch(report(tasks=0, index_bytes=0, lag=0, events=0, rejected=0, rejects={}))
    assert value(m, "psmatch_index_estimated_bytes") == 123_456
    assert value(m, "psmatch_worker_peak_resident_bytes") == 654_321
    assert value(m, "psmatch_match_duration_seconds_count") == 1


PROGRESS = {
    "id": "q", "batchId": 12, "numInputRows": 30,
    "inputRowsPerSecond": 120.5, "processedRowsPerSecond": 300.0,
    "sources": [{
        "description": "KafkaV2[Subscribe[subs,ev]]",
        "startOffset": {"ev": {"0": 10, "1": 4}, "subs": {"0": 3}},
        "endOffset": {"ev": {"0": 20, "1": 9}, "subs": {"0": 5}},
        "latestOffset": {"ev": {"0": 25, "1": 9}, "subs": {"0": 5}},
        "numInputRows": 30,
        "metrics": {"avgOffsetsBehindLatest": "2.5", "maxOffsetsBehindLatest": "5"},
    }],
}  # fmt: skip


def test_query_progress_sets_rates_and_offsets_behind_latest() -> None:
    m = ServiceMetrics("subs", "ev")
    m.observe_progress(None)
    m.observe_progress(PROGRESS)
    assert value(m, "psmatch_input_rows_per_second") == 120.5
    assert value(m, "psmatch_processed_rows_per_second") == 300.0
    assert value(m, "psmatch_input_offsets_behind_latest", input="events") == 5
    assert value(m, "psmatch_input_offsets_behind_latest", input="subscriptions") == 0
    # pyspark's SourceProgress keeps offsets as JSON text; an idle trigger has NaN rates
    source = dict(PROGRESS["sources"][0])  # type: ignore[index]
    source.update({k: json.dumps(source[k]) for k in ("endOffset", "latestOffset")})
    source["latestOffset"] = json.dumps({"ev": {"0": 20, "1": 9}, "subs": {"0": 8}})
    m.observe_progress({"inputRowsPerSecond": float("nan"), "sources": [source]})
    assert value(m, "psmatch_input_rows_per_second") == 120.5
    assert value(m, "psmatch_input_offsets_behind_latest", input="events") == 0
    assert value(m, "psmatch_input_offsets_behind_latest", input="subscriptions") == 3


# -- the endpoint ------------------------------------------------------------------------


def test_the_endpoint_serves_the_text_format_and_reports_a_taken_port() -> None:
    m = ServiceMetrics()
    m.observe_batch(report())
    server = m.serve(0)
    try:
        with urllib.request.urlopen(server.url, timeout=10) as response:
            assert response.status == 200
            text = response.read().decode()
        families = {f.name: f for f in text_string_to_metric_families(text)}
        notif = families["psmatch_notifications"]
        assert notif.type == "counter"
        assert [s.value for s in notif.samples if s.name.endswith("_total")] == [25]
        with pytest.raises(MetricsError, match="metrics-port"):
            ServiceMetrics().serve(server.port)
    finally:
        server.stop()
    with socket.socket() as sock:  # the port is free again (as a server would bind it)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", server.port))


def test_the_endpoint_settings_come_from_the_config() -> None:
    env = {"PSMATCH_METRICS_PORT": "9999", "PSMATCH_METRICS_HOST": "0.0.0.0"}
    cfg = ServiceConfig.load(env=env)
    assert (cfg.metrics_port, cfg.metrics_host) == (9999, "0.0.0.0")
    assert ServiceConfig.load(env={}, overrides={"metrics_port": 0}).metrics_port == 0
    with pytest.raises(ConfigError, match="metrics_port"):
        ServiceConfig.load(env={"PSMATCH_METRICS_PORT": "70000"})


# -- executor-side figures ---------------------------------------------------------------


def _events(*values: bytes | None) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_pydict({
        "key": [f"e{i}".encode() for i in range(n)], "value": list(values),
        "topic": ["ev"] * n, "partition": [0] * n, "offset": list(range(n)), "ts": [0] * n,
    })  # fmt: skip


def _stored(expr: str, subscriber: str) -> str:
    change = parse_subscription_record(b"s", subscription_value(expr, subscriber, {}))
    assert change.stored is not None
    return change.stored


@pytest.mark.integration
def test_a_matching_task_reports_its_figures_with_its_result(store: StateStore) -> None:
    """What mapInArrow tasks add to the accumulator: nothing stays in the worker process."""
    settings = WorkerSettings(
        redis_url=_url(store),
        redis_prefix=store.prefix, retention=store.retention, matcher="psthash",
        notifications_topic="notif", rejected_topic="rej",
    )  # fmt: skip
    v = store.apply([SourceChange("subs:0", i, f"s{i}", _stored(f"a < {i + 1}", "x"))
                     for i in range(3)]).version  # fmt: skip
    got: list[TaskMetrics] = []
    out = list(match_batches(settings, v, iter([_events(b'{"a": 0}', b"nope", None)]), got.append))
    assert sum(b.num_rows for b in out) == 3 + 2
    (first,) = got
    assert first.tasks == 1 and first.reloads == 1 and first.lag == v
    assert first.notifications == 3 and first.events == 3 and first.rejected == 2
    assert first.index_subscriptions == 3 and first.index_predicates >= 3
    assert first.rejects == {"invalid_json": 1, "invalid_record": 1}
    # PSTHash's pre-filter: every subscription holds for a = 0, each counted as a match
    assert first.filter_matches == {"psthash": 3}
    assert first.filter_candidates["psthash"] >= 3
    # the thread's CPU time over parse, match and encode: some, and never more than their wall
    assert 0 < first.cpu_s <= first.parse_s + first.match_s + first.encode_s
    # this process's peak resident memory, as /proc tells it (Linux, in KiB)
    with open("/proc/self/status") as status:
        hwm = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    assert 0 < first.peak_rss_bytes <= hwm * 1024
    # the next batch replays two changes from the log: lag 2, no reload
    v2 = store.apply(
        [
            SourceChange("subs:0", 10, "s0", None),
            SourceChange("subs:0", 11, "s9", _stored("a = 0", "y")),
        ]
    ).version
    got.clear()
    list(match_batches(settings, v2, iter([_events(b'{"a": 0}')]), got.append))
    assert got[0].reloads == 0 and got[0].lag == 2 and got[0].index_subscriptions == 3
    assert got[0].filter_matches == {"psthash": 3}, "this batch's, not the matcher's total"


def test_auto_reports_the_pre_filter_of_each_of_its_families(store: StateStore) -> None:
    """``auto`` files equality-only conjuncts in the bitset family and ranges in PSTHash
    (psmatch.auto.routing): each family's candidates and matches are counted apart, and
    together they are the batch's notifications (one conjunct per subscription)."""
    settings = WorkerSettings(
        redis_url=_url(store), redis_prefix=store.prefix, retention=store.retention,
        matcher="auto", notifications_topic="notif", rejected_topic="rej",
    )  # fmt: skip
    exprs = [f"a < {i}" for i in range(1, 6)] + [f"b = {i}" for i in range(5)]
    v = store.apply([SourceChange("subs:0", i, f"s{i}", _stored(e, "x"))
                     for i, e in enumerate(exprs)]).version  # fmt: skip
    got: list[TaskMetrics] = []
    list(match_batches(settings, v, iter([_events(b'{"a": 2, "b": 1}', b'{"a": 0}')]),
                       got.append))  # fmt: skip
    (metrics,) = got
    assert set(metrics.filter_candidates) <= {"psthash", "bitset"}
    assert sum(metrics.filter_matches.values()) == metrics.notifications == 3 + 1 + 5
    for family, matches in metrics.filter_matches.items():
        assert 0 <= matches <= metrics.filter_candidates[family]


def _url(store: StateStore) -> str:
    kw = store.client.connection_pool.connection_kwargs
    return f"redis://{kw['host']}:{kw['port']}/{kw.get('db', 0)}"
