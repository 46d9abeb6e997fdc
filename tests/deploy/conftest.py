"""Fixtures for the deployment tests: the session's Kafka and Redis, ``psmatch run`` as a
separate process (as it is deployed), and a real Prometheus server.

The job runs in its own process because it needs a SparkSession of its own (another
master, a metrics port), and because that is how it is submitted for real.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from psmatch.devservers.process import free_port
from psmatch.service.config import ENV_PREFIX, ServiceConfig

ROOT = Path(__file__).resolve().parents[2]


def scrape(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode()  # type: ignore[no-any-return]


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of one sample in Prometheus text format (None when absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return None


@dataclasses.dataclass
class JobProcess:
    """``psmatch run`` in a child process, configured through ``PSMATCH_*`` variables."""

    config: ServiceConfig
    log_file: Path
    proc: subprocess.Popen[bytes]

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.config.metrics_port}/metrics"

    def log_tail(self, lines: int = 40) -> str:
        text = self.log_file.read_text(errors="replace") if self.log_file.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def metric(self, name: str, **labels: str) -> float | None:
        try:
            return sample(scrape(self.metrics_url), name, **labels)
        except OSError:
            return None

    def wait_until(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"psmatch run exited with {self.proc.returncode} while waiting for {what}:\n"
                    f"{self.log_tail()}"
                )
            time.sleep(0.5)
        raise AssertionError(f"timed out after {timeout} s waiting for {what}:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # psmatch run stops the query cleanly
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)


def config_env(config: ServiceConfig) -> dict[str, str]:
    return {ENV_PREFIX + k.upper(): str(v) for k, v in dataclasses.asdict(config).items()}


@pytest.fixture
def start_job(tmp_path: Path) -> Iterator[Callable[[ServiceConfig], JobProcess]]:
    """Start ``psmatch run`` with a config; waits until the query runs; always stopped."""
    jobs: list[JobProcess] = []

    def start(config: ServiceConfig, timeout: float = 180.0) -> JobProcess:
        log_file = tmp_path / f"job-{len(jobs)}.log"
        env = {**os.environ, **config_env(config), "SPARK_LOCAL_IP": "127.0.0.1",
               "PYSPARK_PYTHON": sys.executable}  # fmt: skip
        with log_file.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "psmatch", "run"],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        job = JobProcess(config, log_file, proc)
        jobs.append(job)
        job.wait_until(lambda: "running; Ctrl-C stops" in job.log_tail(200), timeout,
                       "the streaming query to start")  # fmt: skip
        return job

    yield start
    for job in jobs:
        job.stop()


@dataclasses.dataclass
class PrometheusServer:
    """Debian's ``prometheus`` on a free loopback port, with its own TSDB folder."""

    url: str
    proc: subprocess.Popen[bytes]
    log_file: Path

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query; raises AssertionError when Prometheus refuses it."""
        q = urllib.parse.urlencode({"query": expr})
        try:
            body = json.loads(scrape(f"{self.url}/api/v1/query?{q}"))
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"Prometheus refused {expr!r}: {exc.read().decode()}") from exc
        assert body["status"] == "success", body
        return body["data"]["result"]  # type: ignore[no-any-return]

    def value(self, expr: str) -> float | None:
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else None


@pytest.fixture
def start_prometheus(tmp_path: Path) -> Iterator[Callable[[dict[str, Any]], PrometheusServer]]:
    """Start Prometheus with a scrape config (a parsed prometheus.yml); always stopped."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is not installed: run scripts/install-system-deps.sh")
    servers: list[PrometheusServer] = []

    def start(scrape_config: dict[str, Any], timeout: float = 60.0) -> PrometheusServer:
        folder = tmp_path / f"prometheus-{len(servers)}"
        folder.mkdir()
        config_file = folder / "prometheus.yml"
        config_file.write_text(yaml.safe_dump(scrape_config))
        port = free_port()
        log_file = folder / "prometheus.log"
        with log_file.open("wb") as out:
            proc = subprocess.Popen(
                [binary, f"--config.file={config_file}", f"--storage.tsdb.path={folder / 'data'}",
                 f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        server = PrometheusServer(f"http://127.0.0.1:{port}", proc, log_file)
        servers.append(server)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"prometheus exited:\n{log_file.read_text()}")
            with contextlib.suppress(OSError):
                if "Ready" in scrape(f"{server.url}/-/ready", timeout=2):
                    return server
            time.sleep(0.3)
        raise AssertionError(f"prometheus was not ready in {timeout} s:\n{log_file.read_text()}")

    yield start
    for server in servers:
        if server.proc.poll() is None:
            server.proc.terminate()
            try:
                server.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.proc.kill()
                server.proc.wait(timeout=10)
