"""A Spark standalone cluster on this machine: one master and N workers, from pyspark.

This module owns starting and stopping the daemons that pyspark ships, run with its
``bin/spark-class`` (``org.apache.spark.deploy.master.Master`` and
``org.apache.spark.deploy.worker.Worker``) on loopback ports, so that ``psmatch run
--spark-master spark://127.0.0.1:<port>`` runs its executors — and their Python workers
with the cached index — as separate processes, the way a real cluster does. Each worker
starts an executor as a child process when an application connects (one per worker, so
N workers give an application N executors); when one dies, the master starts a new one.
With a ``properties_file`` (a ``spark-defaults.conf`` made by ``psmatch spark-conf``) the
daemons load it with ``--properties-file``: with ``spark.authenticate`` in it only
applications holding the same secret may register, and the RPC is encrypted. The secret
stays off their command lines; each worker hands it to its executors in their environment.

``scripts/spark-standalone.sh`` (``python -m psmatch.devservers.standalone``) runs them in the
foreground until Ctrl-C; the tests use :class:`StandaloneCluster` directly.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psmatch.devservers.process import LocalServerError, free_port, log_tail, stop_process

log = logging.getLogger(__name__)

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def spark_home() -> Path:
    """The Spark distribution inside the installed pyspark package."""
    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    if not (home / "bin" / "spark-class").exists():
        raise LocalServerError(f"no bin/spark-class in the pyspark installation at {home}")
    return home


@dataclass
class StandaloneCluster:
    """A standalone master and ``worker_count`` workers on ``host`` (loopback by
    default), each offering ``cores`` and ``memory``. Worker web UIs listen on
    ``worker_webui_port`` and the ports after it (free ports when 0). The daemons load
    the Spark settings of ``properties_file`` when given."""

    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 0
    webui_port: int = 0
    worker_webui_port: int = 0
    cores: int = 2
    memory: str = "2g"
    worker_count: int = 1
    properties_file: Path | None = None
    master: subprocess.Popen[bytes] | None = None
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)  # running ones
    _started: int = field(default=0, repr=False)  # workers started so far (log names)
    _logs: dict[int, Path] = field(default_factory=dict, repr=False)  # pid -> its .out

    @property
    def master_url(self) -> str:
        return f"spark://{self.host}:{self.port}"

    @property
    def webui_url(self) -> str:
        return f"http://{self.host}:{self.webui_port}"

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            SPARK_HOME=str(spark_home()),
            SPARK_LOCAL_IP=self.host,  # every daemon and executor binds here
            SPARK_LOG_DIR=str(self.data_dir / "logs"),
            SPARK_WORKER_DIR=str(self.data_dir / "work"),
            PYSPARK_PYTHON=env.get("PYSPARK_PYTHON", sys.executable),
        )
        return env

    def _spawn(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        path = self.data_dir / f"{name}.out"
        if self.properties_file is not None:
            args = (*args, "--properties-file", str(self.properties_file))
        with path.open("ab") as out:
            proc = subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self._env(),
                start_new_session=True,
            )
        self._logs[proc.pid] = path
        return proc

    def start(self, timeout: float = 120.0) -> StandaloneCluster:
        """Start the master, then the workers; return once every worker is registered."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "work").mkdir(exist_ok=True)
        self.port = self.port or free_port()
        self.webui_port = self.webui_port or free_port()
        self.master = self._spawn(
            "master", MASTER_CLASS, "--host", self.host, "--port", str(self.port),
            "--webui-port", str(self.webui_port),
        )  # fmt: skip
        log.info("Spark master starting on %s (pid %d)", self.master_url, self.master.pid)
        try:
            self._wait(lambda s: s.get("status") == "ALIVE", timeout, "the master")
            for _ in range(self.worker_count):
                self.start_worker(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def start_worker(self, timeout: float = 120.0) -> subprocess.Popen[bytes]:
        """Start one more worker (e.g. in place of one that was killed: exited workers are
        dropped from :attr:`workers`) and wait for it to register; returns its process."""
        self.workers = [w for w in self.workers if w.poll() is None]
        alive_before = self._alive_worker_ids()
        webui_port = self.worker_webui_port + self._started if self.worker_webui_port else 0
        name = f"worker-{self._started}"
        self._started += 1
        worker = self._spawn(
            name, WORKER_CLASS, "--host", self.host, "--webui-port",
            str(webui_port or free_port()), "--cores", str(self.cores), "--memory", self.memory,
            "--work-dir", str(self.data_dir / "work"), self.master_url,
        )  # fmt: skip
        self.workers.append(worker)
        log.info("Spark %s starting (pid %d, %d cores, %s)", name, worker.pid, self.cores,
                 self.memory)  # fmt: skip
        self._wait(lambda s: bool(self._alive_worker_ids(s) - alive_before), timeout, name)
        log.info("Spark standalone cluster ready: %s (web UI %s, %d workers)", self.master_url,
                 self.webui_url, len(self.workers))  # fmt: skip
        return worker

    def status(self) -> dict[str, Any]:
        """The master's JSON status page (workers, applications, executors)."""
        with urllib.request.urlopen(self.webui_url + "/json/", timeout=5) as response:
            return json.loads(response.read())  # type: ignore[no-any-return]

    def _alive_worker_ids(self, status: dict[str, Any] | None = None) -> set[str]:
        try:
            status = self.status() if status is None else status
        except OSError:
            return set()
        return {w["id"] for w in status.get("workers", []) if w.get("state") == "ALIVE"}

    def _wait(self, ready: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc in (self.master, *self.workers):
                if proc is not None and proc.poll() is not None:
                    out = self._logs[proc.pid]
                    raise LocalServerError(
                        f"the Spark {out.stem} exited with code {proc.returncode}:\n{log_tail(out)}"
                    )
            with contextlib.suppress(OSError, ValueError):
                if ready(self.status()):
                    return
            time.sleep(0.5)
        raise LocalServerError(f"{what} of the Spark standalone cluster was not up in {timeout} s")

    def stop(self) -> None:
        """Stop the workers (their executors end with them), then the master."""
        for proc in self.workers:
            stop_process(proc, f"Spark {self._logs[proc.pid].stem}", grace=20)
        self.workers = []
        if self.master is not None:
            stop_process(self.master, "Spark master", grace=20)
            self.master = None

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="spark-standalone",
        description="Run a Spark standalone master and workers from the pyspark "
        "installation in the foreground (Ctrl-C stops them). Submit the job with "
        "psmatch run --spark-master spark://HOST:PORT.",
    )
    parser.add_argument("--dir", default="var/spark", help="logs and executor work dirs")
    parser.add_argument("--host", default="127.0.0.1", help="address the daemons bind to")
    parser.add_argument("--port", type=int, default=7077, help="master port (0 = free port)")
    parser.add_argument("--webui-port", type=int, default=8080, help="master web UI port")
    parser.add_argument("--worker-webui-port", type=int, default=8081,
                        help="web UI port of the first worker (the next ones: the ports after)")
    parser.add_argument("--workers", type=int, default=1,
                        help="workers (an application gets one executor on each)")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 2, help="cores per worker")
    parser.add_argument("--memory", default="2g", help="memory each worker offers executors")
    parser.add_argument("--properties-file", type=Path,
                        help="Spark settings the daemons load, e.g. the spark-defaults.conf of "
                        "psmatch spark-conf (authentication and encryption)")  # fmt: skip
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-7s %(message)s",
                        datefmt="%H:%M:%S")  # fmt: skip
    cluster = StandaloneCluster(
        Path(args.dir).resolve(), args.host,
        args.port, args.webui_port, args.worker_webui_port, args.cores, args.memory,
        args.workers, args.properties_file,
    )  # fmt: skip

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        cluster.start()
        print(f"master {cluster.master_url}  web UI {cluster.webui_url}  (Ctrl-C stops)",
              flush=True)  # fmt: skip
        while all(p is not None and p.poll() is None for p in (cluster.master, *cluster.workers)):
            time.sleep(1)
        log.error("a Spark daemon exited; see %s", cluster.data_dir)
        return 1
    except KeyboardInterrupt:
        return 0
    except LocalServerError as exc:
        print(f"spark-standalone: {exc}", file=sys.stderr)
        return 1
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
