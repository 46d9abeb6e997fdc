"""The job on an authenticated, encrypted Spark standalone cluster: the master and worker
load the ``spark-defaults.conf`` that ``psmatch spark-conf`` makes, ``psmatch run`` reads
the same file from ``SPARK_CONF_DIR``, and a notification is matched in a Python worker
under the executor. Applications without the secret, or with another, cannot register.
The secret is on no process's command line and in no log; the driver's connection to the
master (through a relay that keeps what the driver sent) carries no plaintext, where an
application without the settings sends its RPC in the clear.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from kafka import KafkaConsumer

from psmatch.adapters.kafka.producer import JsonProducer
from psmatch.devservers.standalone import StandaloneCluster
from psmatch.service.cli import main
from psmatch.service.config import ServiceConfig
from tests.deploy.conftest import JobProcess
from tests.deploy.test_spark_cluster import cmdline, descendants, executors, python_workers

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

# An application that registers with the master and runs one job, or fails.
APPLICATION = """
import sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master(sys.argv[1]).appName(sys.argv[2])
         .config("spark.driver.memory", "512m").getOrCreate())
print("registered, counted", spark.range(10).count(), flush=True)
"""
# Spark's RPC names the endpoint it looks up on the master in every connection's first
# request: seen in the clear unless the connection is encrypted.
PLAINTEXT_MARK = b"endpoint-verifier"


class Relay:
    """A TCP relay from a free loopback port to ``127.0.0.1:target``; :attr:`sent` keeps
    the bytes each accepted client sent."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.sent: list[bytearray] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return  # closed
            upstream = socket.create_connection(("127.0.0.1", self.target))
            self.sent.append(bytearray())
            for args in ((client, upstream, self.sent[-1]), (upstream, client, None)):
                threading.Thread(target=self._pump, args=args, daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket, keep: bytearray | None) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if keep is not None:
                    keep += data
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.server.close()


def spark_conf(folder: Path) -> str:
    """``psmatch spark-conf`` into ``folder``; the secret it wrote."""
    path = folder / "spark-defaults.conf"
    assert main(["spark-conf", "--out", str(path)]) == 0
    (secret,) = [line.split()[1] for line in path.read_text().splitlines()
                 if line.startswith("spark.authenticate.secret ")]  # fmt: skip
    return secret


def start_application(master_url: str, name: str, log_file: Path,
                      conf_dir: Path | None) -> subprocess.Popen[bytes]:  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "SPARK_CONF_DIR"}
    env.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    if conf_dir is not None:
        env["SPARK_CONF_DIR"] = str(conf_dir)
    with log_file.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-c", APPLICATION, master_url, name], env=env, stdout=out,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip


def test_an_authenticated_encrypted_cluster_runs_the_job_and_refuses_other_applications(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    make_config: Callable[..., ServiceConfig],
    start_job: Callable[[ServiceConfig], JobProcess],
) -> None:
    conf_dir = tmp_path / "conf"
    secret = spark_conf(conf_dir)
    other_secret = spark_conf(tmp_path / "other-conf")
    assert secret not in capsys.readouterr().out
    properties = conf_dir / "spark-defaults.conf"
    assert properties.stat().st_mode & 0o777 == 0o600
    cluster = StandaloneCluster(tmp_path / "spark", cores=2, memory="2g",
                                properties_file=properties)  # fmt: skip
    with cluster:
        master_port = int(cluster.master_url.rpartition(":")[2])
        job_relay, plain_relay = Relay(master_port), Relay(master_port)
        # refused applications, started first: each retries its registration for a minute
        refused = {
            "plain": start_application(f"spark://127.0.0.1:{plain_relay.port}", "plain",
                                       tmp_path / "plain.log", None),
            "other-secret": start_application(cluster.master_url, "other-secret",
                                              tmp_path / "other-secret.log",
                                              tmp_path / "other-conf"),
        }  # fmt: skip
        monkeypatch.setenv("SPARK_CONF_DIR", str(conf_dir))
        config = make_config(spark_master=f"spark://127.0.0.1:{job_relay.port}",
                             trigger_seconds=1.0)  # fmt: skip
        job = start_job(config)
        with JsonProducer(config.bootstrap_servers) as producer:
            producer.send(config.subscriptions_topic, {"expr": "a = 1"}, key="one")
            producer.send(config.events_topic, {"a": 1}, key="ev-1")
            producer.send(config.events_topic, {"a": 2}, key="ev-2")
        job.wait_until(lambda: job.metric("psmatch_notifications_total") == 1, 180,
                       "the notification")  # fmt: skip
        consumer = KafkaConsumer(
            config.notifications_topic, bootstrap_servers=config.bootstrap_servers,
            auto_offset_reset="earliest", group_id=None, consumer_timeout_ms=5000,
        )  # fmt: skip
        got = [(m.key.decode(), json.loads(m.value)["event_id"]) for m in consumer]
        consumer.close()
        assert got == [("one", "ev-1")]

        # matched on the cluster: in a Python worker under the executor, which runs with
        # the encryption settings and has the secret from its worker, in its environment
        (executor,) = executors(cluster)
        assert python_workers(executor.pid) and not python_workers(job.proc.pid)
        assert "-Dspark.network.crypto.cipher=AES/GCM/NoPadding" in cmdline(executor)
        assert secret in executor.environ().values()
        log = job.log_file.read_text()
        assert "psmatch.service.spark_rpc" not in log, "no WARNING of an unprotected RPC"

        processes = [psutil.Process(p.pid) for p in (cluster.master, *cluster.workers, job.proc)
                     if p is not None]  # fmt: skip
        processes += [d for p in processes for d in descendants(p.pid)]
        lines = [cmdline(p) for p in processes]
        assert sum("java" in line for line in lines) >= 4  # master, worker, executor, driver
        assert not [line for line in lines if secret in line], "the secret on a command line"

        for name, app in refused.items():
            app.wait(timeout=240)
            out = (tmp_path / f"{name}.log").read_text(errors="replace")
            assert app.returncode != 0 and "registered" not in out, out[-2000:]
            assert "Failed to connect to master" in out
            assert "All masters are unresponsive! Giving up." in out
        # the other secret fails in the authentication handshake: the master's answer
        # ("Authentication failed") or, when the registration's retry gives up first, the
        # handshake interrupted while waiting for it
        other = (tmp_path / "other-secret.log").read_text(errors="replace")
        assert "AuthClientBootstrap.doSparkAuth" in other, other[-2000:]
        status = cluster.status()
        assert [a["name"] for a in status["activeapps"] + status["completedapps"]] == ["psmatch"]

        # the job's connection to the master carried its application (kilobytes), none of
        # it in the clear; the plain application's first request is
        assert sum(len(sent) for sent in job_relay.sent) > 2000
        assert not [s for s in job_relay.sent if PLAINTEXT_MARK in s or secret.encode() in s]
        assert any(PLAINTEXT_MARK in sent for sent in plain_relay.sent)
        job_relay.close()
        plain_relay.close()
        job.stop()
    logs = [p for p in tmp_path.rglob("*") if p.is_file() and p != properties
            and "other-conf" not in p.parts]  # fmt: skip
    assert any(p.name == "stderr" for p in logs), "the executors' logs"
    assert not [p for p in logs if secret in p.read_text(errors="replace")]
    assert not [p for p in logs if other_secret in p.read_text(errors="replace")]
