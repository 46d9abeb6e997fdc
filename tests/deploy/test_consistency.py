"""The deployment files agree with each other and with the code (no Docker needed).

docker-compose.yml, deploy/prometheus.yml, the Grafana provisioning and dashboard, the
Dockerfile and docs/operations.md refer to each other by service names, ports, paths,
datasource uid, job name and metric names; each reference is checked here, and every
metric the dashboard queries must be one that psmatch.service.metrics really exports.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml

from psmatch.service.config import ServiceConfig
from psmatch.service.metrics import ServiceMetrics

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
METRIC = re.compile(r"\bpsmatch_[a-z0-9_]+")


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_yaml(ROOT / "docker-compose.yml")  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return compose["services"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def prometheus_config() -> dict[str, Any]:
    return load_yaml(DEPLOY / "prometheus.yml")  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads((DEPLOY / "grafana" / "dashboards" / "psmatch.json").read_text())  # type: ignore[no-any-return]


def job_env(services: dict[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in services["psmatch"]["environment"].items()}


def mounts(service: dict[str, Any]) -> dict[str, Path]:
    """Container path → host path of the service's bind mounts (relative to the root)."""
    out = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("./"):
            out[target] = ROOT / source
    return out


def published(service: dict[str, Any]) -> set[int]:
    return {int(str(p).split(":")[-1]) for p in service.get("ports", [])}


def host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def dashboard_targets(dashboard: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(panel, target) for panel in dashboard["panels"] for target in panel.get("targets", [])]


# -- docker-compose.yml ------------------------------------------------------------------


def test_compose_has_the_whole_stack(services: dict[str, Any]) -> None:
    assert set(services) == {"kafka", "redis", "spark-master", "spark-worker", "psmatch",
                             "prometheus", "grafana"}  # fmt: skip
    kafka = services["kafka"]["environment"]
    assert kafka["KAFKA_PROCESS_ROLES"] == "broker,controller"  # KRaft, no ZooKeeper
    assert "zookeeper" not in json.dumps(services).lower()
    redis_cmd = services["redis"]["command"]
    assert redis_cmd[redis_cmd.index("--appendonly") + 1] == "yes"
    assert any(v.endswith(":/data") for v in services["redis"]["volumes"])


def test_the_job_settings_are_valid_and_name_compose_services(services: dict[str, Any]) -> None:
    env = job_env(services)
    config = ServiceConfig.load(env=env)  # every PSMATCH_* is a real setting, validated
    assert all(k.startswith("PSMATCH_") for k in env)
    # Kafka: the job's bootstrap server is what the broker advertises
    kafka_env = services["kafka"]["environment"]
    assert f"PLAINTEXT://{config.bootstrap_servers}" in kafka_env["KAFKA_ADVERTISED_LISTENERS"]
    assert host_port(config.bootstrap_servers)[0] in services
    # Redis
    redis_url = urlparse(config.redis_url)
    assert redis_url.hostname in services and (redis_url.port or 6379) == 6379
    # Spark: the job and the worker name the master's host and port
    master_cmd = services["spark-master"]["command"]
    master_url = (f"spark://{master_cmd[master_cmd.index('--host') + 1]}:"
                  f"{master_cmd[master_cmd.index('--port') + 1]}")  # fmt: skip
    assert master_cmd[0] == "org.apache.spark.deploy.master.Master"
    assert config.spark_master == master_url
    worker_cmd = services["spark-worker"]["command"]
    assert worker_cmd[0] == "org.apache.spark.deploy.worker.Worker"
    assert worker_cmd[-1] == master_url
    assert services["psmatch"]["hostname"] == "psmatch"  # executors reach the driver
    # metrics
    assert config.metrics_host == "0.0.0.0"
    assert config.metrics_port in published(services["psmatch"])


def test_the_job_image_builds_from_files_that_exist(services: dict[str, Any]) -> None:
    for name in ("psmatch", "spark-master", "spark-worker"):
        build = services[name]["build"]
        dockerfile = ROOT / build["context"] / build["dockerfile"]
        assert dockerfile == DEPLOY / "Dockerfile" and dockerfile.exists()
    text = (DEPLOY / "Dockerfile").read_text()
    for source in re.findall(r"^COPY (?!--from)(\S+)", text, re.MULTILINE):
        assert (ROOT / source).exists(), f"Dockerfile copies {source}, which does not exist"
    assert 'ENTRYPOINT ["psmatch"]' in text
    port = ServiceConfig.load(env=job_env(services)).metrics_port
    assert f"PSMATCH_METRICS_PORT={port}" in text and f"EXPOSE {port}" in text


# -- Prometheus --------------------------------------------------------------------------


def test_prometheus_scrapes_the_job_where_compose_serves_it(
    services: dict[str, Any], prometheus_config: dict[str, Any]
) -> None:
    config = ServiceConfig.load(env=job_env(services))
    jobs = {job["job_name"]: job for job in prometheus_config["scrape_configs"]}
    targets = [t for sc in jobs["psmatch"]["static_configs"] for t in sc["targets"]]
    assert targets == [f"psmatch:{config.metrics_port}"]
    assert jobs["psmatch"].get("metrics_path", "/metrics") == "/metrics"
    assert mounts(services["prometheus"])["/etc/prometheus/prometheus.yml"] == (
        DEPLOY / "prometheus.yml"
    )
    assert "--config.file=/etc/prometheus/prometheus.yml" in services["prometheus"]["command"]
    assert 9090 in published(services["prometheus"])


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian's prometheus)")
def test_promtool_accepts_the_scrape_config() -> None:
    result = subprocess.run(["promtool", "check", "config", str(DEPLOY / "prometheus.yml")],
                            capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


# -- Grafana -----------------------------------------------------------------------------


def test_grafana_provisions_the_datasource_and_the_dashboard(
    services: dict[str, Any], dashboard: dict[str, Any]
) -> None:
    grafana = mounts(services["grafana"])
    provisioning = grafana["/etc/grafana/provisioning"]
    assert provisioning == DEPLOY / "grafana" / "provisioning"
    (datasource,) = load_yaml(provisioning / "datasources" / "prometheus.yml")["datasources"]
    url = urlparse(datasource["url"])
    assert datasource["type"] == "prometheus"
    assert url.hostname == "prometheus" and url.port in published(services["prometheus"])
    (provider,) = load_yaml(provisioning / "dashboards" / "psmatch.yml")["providers"]
    dashboards_dir = grafana[provider["options"]["path"]]
    assert (dashboards_dir / "psmatch.json").exists()
    home = services["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert Path(home).parent.as_posix() == provider["options"]["path"]
    # every panel and query uses the provisioned datasource
    for panel, target in dashboard_targets(dashboard):
        assert panel["datasource"]["uid"] == datasource["uid"], panel["title"]
        assert target["datasource"]["uid"] == datasource["uid"], panel["title"]


def test_every_metric_in_the_dashboard_is_exported(
    dashboard: dict[str, Any], prometheus_config: dict[str, Any]
) -> None:
    exported = ServiceMetrics().exported_names()
    used: set[str] = set()
    job_names = {job["job_name"] for job in prometheus_config["scrape_configs"]}
    for panel, target in dashboard_targets(dashboard):
        expr = target["expr"]
        names = set(METRIC.findall(expr))
        assert names <= exported, f"panel {panel['title']!r} uses unknown {names - exported}"
        for job in re.findall(r'job="([^"]+)"', expr):
            assert job in job_names, f"panel {panel['title']!r} filters on unknown job {job}"
        used |= names
    # it covers throughput, latency, rejects, subscriptions, index size and outages
    assert {"psmatch_events_matched_total", "psmatch_notifications_total",
            "psmatch_batch_duration_seconds_bucket", "psmatch_match_duration_seconds_bucket",
            "psmatch_rejected_records_total", "psmatch_subscriptions",
            "psmatch_index_estimated_bytes", "psmatch_index_predicates",
            "psmatch_index_spaces", "psmatch_input_offsets_behind_latest",
            "psmatch_redis_retries_total", "psmatch_redis_unavailable_seconds",
            "psmatch_query_restarts_total", "psmatch_filter_candidates_total",
            "psmatch_filter_matches_total", "psmatch_events_replayed_total"} <= used  # fmt: skip
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)) and dashboard["uid"] == "psmatch"


def test_the_operations_guide_lists_exactly_the_exported_metrics() -> None:
    text = (ROOT / "docs" / "operations.md").read_text()
    table = {m.group(1) for m in re.finditer(r"^\| `(psmatch_[a-z0-9_]+)`", text, re.MULTILINE)}
    families = {
        f.name + ("_total" if f.type == "counter" else "")
        for f in ServiceMetrics().registry.collect()
    }
    assert table == families
