"""A real Prometheus scrapes a running ``psmatch run`` with deploy/prometheus.yml's job.

The scrape job is the deployed one, aimed at the job's loopback port and scraped every
second. Prometheus must see the job up with its counters at zero, then, after real
traffic through Kafka, the counters, gauges and histograms at the values the traffic
implies; every query of the Grafana dashboard must be valid PromQL that Prometheus
evaluates against these series.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from psmatch.adapters.kafka.producer import JsonProducer
from psmatch.service.config import ServiceConfig
from tests.deploy.conftest import ROOT, JobProcess, PrometheusServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

JOB = 'job="psmatch"'


def scrape_config_for(port: int) -> dict[str, Any]:
    """deploy/prometheus.yml's psmatch job, aimed at 127.0.0.1:port, scraped every second."""
    deployed = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    (job,) = [j for j in deployed["scrape_configs"] if j["job_name"] == "psmatch"]
    (static,) = job["static_configs"]
    job = {**job, "scrape_interval": "1s",
           "static_configs": [{**static, "targets": [f"127.0.0.1:{port}"]}]}  # fmt: skip
    return {"global": {**deployed["global"], "scrape_interval": "1s"}, "scrape_configs": [job]}


def wait_for(prom: PrometheusServer, expr: str, expected: float, job: JobProcess,
             timeout: float = 120) -> None:  # fmt: skip
    last: list[float | None] = [None]

    def done() -> bool:
        last[0] = prom.value(expr)
        return last[0] == expected

    try:
        job.wait_until(done, timeout, f"{expr} == {expected}")
    except AssertionError as exc:
        raise AssertionError(f"Prometheus: {expr} = {last[0]}, not {expected}\n{exc}") from None


def test_prometheus_sees_the_counters_move_after_traffic(
    make_config: Callable[..., ServiceConfig],
    start_job: Callable[[ServiceConfig], JobProcess],
    start_prometheus: Callable[[dict[str, Any]], PrometheusServer],
) -> None:
    config = make_config()
    job = start_job(config)
    prom = start_prometheus(scrape_config_for(config.metrics_port))
    wait_for(prom, f"up{{{JOB}}}", 1, job, timeout=60)
    assert prom.value(f"psmatch_events_matched_total{{{JOB}}}") == 0
    assert prom.value(f"psmatch_notifications_total{{{JOB}}}") == 0
    assert prom.query(f"psmatch_rejected_records_total{{{JOB}}}"), "labelled series exist at 0"

    with JsonProducer(config.bootstrap_servers) as producer:
        subs = config.subscriptions_topic
        producer.send(subs, {"expr": "a < 10", "subscriber": "low"}, key="low")
        producer.send(subs, {"expr": "a >= 5"}, key="high")
        producer.send(subs, {"expr": "a <"}, key="broken")
        producer.flush()
        for i in range(20):
            producer.send(config.events_topic, {"a": i}, key=f"ev-{i}")
        producer.send(config.events_topic, "not json", key="bad-1", raw=True)
        producer.send(config.events_topic, "[1, 2]", key="bad-2", raw=True)

    # low matches a = 0..9, high a = 5..19
    wait_for(prom, f"psmatch_notifications_total{{{JOB}}}", 10 + 15, job)
    wait_for(prom, f"psmatch_events_matched_total{{{JOB}}}", 20, job)
    wait_for(prom, f'psmatch_input_records_total{{{JOB},input="events"}}', 22, job)
    wait_for(prom, f'psmatch_input_records_total{{{JOB},input="subscriptions"}}', 3, job)
    rejected = {
        (r["metric"]["input"], r["metric"]["reason"]): float(r["value"][1])
        for r in prom.query(f"psmatch_rejected_records_total{{{JOB}}} > 0")
    }
    assert rejected == {("subscriptions", "invalid_expression"): 1,
                        ("events", "invalid_json"): 1, ("events", "invalid_record"): 1}  # fmt: skip
    assert prom.value(f"psmatch_subscriptions{{{JOB}}}") == 2
    assert prom.value(f"psmatch_state_version{{{JOB}}}") == 2
    assert prom.value(f"psmatch_subscription_changes_applied_total{{{JOB}}}") == 2
    assert prom.value(f"psmatch_index_subscriptions{{{JOB}}}") == 2
    assert prom.value(f"psmatch_index_estimated_bytes{{{JOB}}}") > 0  # type: ignore[operator]
    assert prom.value(f"psmatch_batch_duration_seconds_count{{{JOB}}}") >= 1  # type: ignore[operator]
    assert prom.value(f"psmatch_worker_tasks_total{{{JOB}}}") >= 1  # type: ignore[operator]
    assert prom.value(f"sum(rate(psmatch_events_matched_total{{{JOB}}}[1m]))") > 0  # type: ignore[operator]
    # the job and Prometheus agree (the driver's own endpoint is the source)
    assert job.metric("psmatch_notifications_total") == 25

    # every dashboard query is valid PromQL; the core ones have data by now
    time.sleep(2)
    dashboard = json.loads((ROOT / "deploy/grafana/dashboards/psmatch.json").read_text())
    empty = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            if not prom.query(target["expr"]):
                empty.append(f"{panel['title']}: {target['expr']}")
    core = [e for e in empty if any(m in e for m in (
        "psmatch_events_matched_total", "psmatch_notifications_total", "psmatch_subscriptions{",
        "psmatch_index_estimated_bytes", "psmatch_batch_duration_seconds_bucket"))]  # fmt: skip
    assert not core, f"dashboard queries without data: {core}"
