"""``psmatch run --start-local`` as ``make run`` uses it, in a subprocess: the servers it
starts outlive a ``kill -9`` of the job, the next run reuses them, Ctrl-C stops them, and
``psmatch servers`` restarts Redis alone on the same port with the same data."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from psmatch.adapters.kafka.admin import wait_for_kafka
from psmatch.devservers.kafka_broker import KafkaBroker
from psmatch.devservers.process import free_port, pid_alive, port_open
from psmatch.devservers.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

PSMATCH = str(Path(sys.executable).parent / "psmatch")


def wait_for_line(log: Path, text: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise AssertionError(f"psmatch exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        time.sleep(0.5)
    raise AssertionError(f"no {text!r} in {timeout} s:\n{log.read_text()[-3000:]}")


def test_local_servers_outlive_a_killed_job_and_ctrl_c_stops_them(
    tmp_path: Path, data: Path
) -> None:
    redis_port, kafka_port = free_port(), free_port()
    flags = [
        "--data-dir", str(data),
        "--redis-url", f"redis://127.0.0.1:{redis_port}/0",
        "--bootstrap-servers", f"127.0.0.1:{kafka_port}",
        "--checkpoint-location", str(tmp_path / "checkpoint"),
        "--metrics-port", "0", "--spark-master", "local[1]",
    ]  # fmt: skip

    def run(log: Path) -> subprocess.Popen[bytes]:
        with log.open("wb") as out:
            return subprocess.Popen([PSMATCH, "run", "--start-local", *flags], stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip

    job = run(tmp_path / "run1.log")
    try:
        wait_for_line(tmp_path / "run1.log", "running; Ctrl-C stops", job, 400)
        pids = {k: json.loads((data / k / "server.json").read_text())["pid"]
                for k in ("redis", "kafka")}  # fmt: skip
        redis.Redis(port=redis_port).set("mark", "kept")
        job.send_signal(signal.SIGKILL)  # the job alone, as a crash would
        job.wait(timeout=30)
    finally:
        with_group_killed(job)
    time.sleep(2)
    assert all(pid_alive(pid) for pid in pids.values())
    assert redis.Redis(port=redis_port).get("mark") == b"kept"
    assert wait_for_kafka(f"127.0.0.1:{kafka_port}", timeout=30)

    # Redis alone, restarted on the same port with the same data
    stop = subprocess.run([PSMATCH, "servers", "stop", "redis", *flags], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert stop.returncode == 0 and "redis: not running" in stop.stdout
    assert not port_open("127.0.0.1", redis_port) and pid_alive(pids["kafka"])
    start = subprocess.run([PSMATCH, "servers", "start", "redis", *flags], capture_output=True,
                           text=True, timeout=120)  # fmt: skip
    assert start.returncode == 0 and f"port {redis_port}" in start.stdout
    assert redis.Redis(port=redis_port).get("mark") == b"kept"

    job = run(tmp_path / "run2.log")
    try:
        wait_for_line(tmp_path / "run2.log", "running; Ctrl-C stops", job, 400)
        text = (tmp_path / "run2.log").read_text()
        assert "using the Kafka broker started earlier" in text
        assert "using the redis-server started earlier" in text
        job.send_signal(signal.SIGINT)  # Ctrl-C
        assert job.wait(timeout=180) == 0
    finally:
        with_group_killed(job)
    assert not port_open("127.0.0.1", redis_port) and not port_open("127.0.0.1", kafka_port)
    assert not (data / "redis" / "server.json").exists()
    status = subprocess.run([PSMATCH, "servers", "status", *flags], capture_output=True,
                            text=True, timeout=60)  # fmt: skip
    assert "redis: not running" in status.stdout and "kafka: not running" in status.stdout


def with_group_killed(job: subprocess.Popen[bytes]) -> None:
    """Whatever is left of the job's process group (its Spark JVM) is killed; the
    servers run in sessions of their own and are not in it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(job.pid, signal.SIGKILL)
    job.wait(timeout=30)


@pytest.fixture
def data(tmp_path: Path) -> Iterator[Path]:
    """The run's data dir; whatever detached server is left in it is stopped after."""
    yield tmp_path / "var"
    for server in (KafkaBroker.adopt(tmp_path / "var" / "kafka"),
                   RedisServer.adopt(tmp_path / "var" / "redis")):  # fmt: skip
        if server is not None:
            server.stop()
