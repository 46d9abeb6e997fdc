"""Local Kafka and Redis servers for one machine: what ``make run`` and the tests start.

This module owns starting and stopping the project's own server processes on loopback:

* :class:`KafkaBroker` — a single-node Apache Kafka 4.x broker in KRaft mode (combined
  broker + controller), run with ``java -cp <libs>/* kafka.Kafka`` from the Maven Central
  jars that ``scripts/fetch-jars.sh`` puts in ``.cache/kafka/libs``; its storage is
  formatted with ``kafka.tools.StorageTool format --standalone``.
* :class:`RedisServer` — Debian's ``redis-server`` with AOF persistence.
* :func:`shared_services` — one Kafka and one Redis per process, reference counted, so
  several pytest conftests can share the same instances within a test session.

Every server is started on the ports given (or free loopback ports), its output goes to
a log file in its data directory, and :meth:`stop` always ends the process (SIGTERM,
then SIGKILL after a grace period).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from index.errors import PsmatchError

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CACHE_DIR = Path(os.environ.get("PSMATCH_CACHE_DIR", REPO_ROOT / ".cache"))


class LocalServerError(PsmatchError):
    """A local Kafka or Redis server could not be started or is missing its files."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM when the starting process dies (Linux)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _stop_process(proc: subprocess.Popen[bytes], name: str, grace: float = 20.0) -> None:
    if proc.poll() is not None:
        return
    log.info("stopping %s (pid %d)", name, proc.pid)
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        log.warning("%s did not stop within %.0f s; killing it", name, grace)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(timeout=10)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


_LOG4J2 = """\
Configuration:
  name: psmatch-kafka
  Appenders:
    File:
      name: file
      fileName: "{log_file}"
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: INFO
      AppenderRef:
        - ref: file
    Logger:
      - name: kafka
        level: WARN
      - name: org.apache.kafka
        level: WARN
      - name: state.change.logger
        level: WARN
"""


@dataclass
class KafkaBroker:
    """A single-node Kafka broker + KRaft controller on 127.0.0.1."""

    data_dir: Path
    port: int = 0
    controller_port: int = 0
    libs_dir: Path = DEFAULT_CACHE_DIR / "kafka" / "libs"
    heap: str = "768m"
    _proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "kafka.log"

    def _java(self, *args: str, heap: str | None = None) -> list[str]:
        java = shutil.which("java")
        if java is None:
            raise LocalServerError("java is not installed (Kafka needs Java 17)")
        cmd = [java]
        if heap:
            cmd += [f"-Xmx{heap}", f"-Xms{heap}"]
        return [
            *cmd,
            f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.yaml'}",
            "-cp",
            f"{self.libs_dir}/*",
            *args,
        ]

    def _write_config(self) -> Path:
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}",
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}"
            ),
            "advertised.listeners": (
                f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}"
            ),
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.data_dir / "data"),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            "log.cleaner.backoff.ms": "1000",
        }
        path = self.data_dir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (self.data_dir / "log4j2.yaml").write_text(_LOG4J2.format(log_file=self.log_file))
        return path

    def start(self, timeout: float = 90.0) -> KafkaBroker:
        """Format storage if new, start the broker and wait until it accepts clients."""
        if not any(self.libs_dir.glob("kafka_2.13-*.jar")):
            raise LocalServerError(
                f"no Kafka jars in {self.libs_dir}: run scripts/fetch-jars.sh (make jars)"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        self.controller_port = self.controller_port or free_port()
        config = self._write_config()
        if not (self.data_dir / "data" / "meta.properties").exists():
            cluster_id = subprocess.run(
                self._java("kafka.tools.StorageTool", "random-uuid"),
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
            subprocess.run(
                self._java(
                    "kafka.tools.StorageTool",
                    "format",
                    "--standalone",
                    "-t",
                    cluster_id,
                    "-c",
                    str(config),
                ),
                check=True,
                capture_output=True,
                text=True,
            )
        out = (self.data_dir / "kafka.out").open("ab")
        self._proc = subprocess.Popen(
            self._java("kafka.Kafka", str(config), heap=self.heap),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,  # no orphan server if we are killed
        )
        log.info("Kafka broker starting on %s (pid %d)", self.bootstrap_servers, self._proc.pid)
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        admin = None
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise LocalServerError(
                    f"Kafka exited with code {self._proc.returncode}:\n"
                    f"{_tail(self.data_dir / 'kafka.out')}\n{_tail(self.log_file)}"
                )
            if port_open("127.0.0.1", self.port):
                if admin is None:
                    admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
                try:
                    md = admin.list_topics(timeout=2)
                    if md.brokers:
                        log.info("Kafka broker ready on %s", self.bootstrap_servers)
                        return
                except Exception:  # the broker is still coming up
                    pass
            time.sleep(0.3)
        self.stop()
        raise LocalServerError(f"Kafka did not become ready in {timeout:.0f} s")

    def stop(self) -> None:
        if self._proc is not None:
            _stop_process(self._proc, "Kafka broker", grace=30)
            self._proc = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None


@dataclass
class RedisServer:
    """Debian's ``redis-server`` on 127.0.0.1 with AOF persistence in ``data_dir``."""

    data_dir: Path
    port: int = 0
    appendonly: bool = True
    _proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 30.0) -> RedisServer:
        binary = shutil.which("redis-server") or (
            "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None
        )
        if binary is None:
            raise LocalServerError("redis-server is not installed (make deps installs it)")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        cmd = [
            binary,
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--dir", str(self.data_dir),
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", "everysec",
            "--save", "",
            "--daemonize", "no",
            "--protected-mode", "yes",
            "--logfile", str(self.data_dir / "redis.log"),
        ]  # fmt: skip
        self._proc = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,  # no orphan server if we are killed
        )
        import redis

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise LocalServerError(
                    f"redis-server exited with code {self._proc.returncode}:\n"
                    f"{_tail(self.data_dir / 'redis.log')}"
                )
            try:
                if redis.Redis.from_url(self.url, socket_timeout=1).ping():
                    log.info("Redis ready on %s (pid %d)", self.url, self._proc.pid)
                    return self
            except redis.exceptions.RedisError:
                # BUSY loading the AOF, or not listening yet
                pass
            time.sleep(0.1)
        self.stop()
        raise LocalServerError(f"redis-server did not become ready in {timeout:.0f} s")

    def stop(self) -> None:
        """SIGTERM makes redis-server flush the AOF and exit."""
        if self._proc is not None:
            _stop_process(self._proc, "redis-server")
            self._proc = None

    def restart(self) -> RedisServer:
        """Stop and start again on the same port and data directory."""
        self.stop()
        return self.start()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None


@dataclass
class LocalServices:
    kafka: KafkaBroker
    redis: RedisServer
    base_dir: Path


_shared: LocalServices | None = None
_shared_refs = 0
_shared_lock = threading.Lock()


def shared_services() -> LocalServices:
    """Start (once per process) a Kafka broker and a Redis server in a temporary folder.

    Reference counted: each caller must call :func:`release_shared_services` once; the
    last release stops both servers. An ``atexit`` hook stops them in any case.
    """
    global _shared, _shared_refs
    with _shared_lock:
        if _shared is None:
            base = Path(tempfile.mkdtemp(prefix="psmatch-services-"))
            kafka = KafkaBroker(base / "kafka")
            redis_server = RedisServer(base / "redis")
            try:
                redis_server.start()
                kafka.start()
            except BaseException:
                redis_server.stop()
                kafka.stop()
                raise
            _shared = LocalServices(kafka, redis_server, base)
            atexit.register(_stop_shared)
        _shared_refs += 1
        return _shared


def release_shared_services() -> None:
    global _shared_refs
    with _shared_lock:
        _shared_refs -= 1
        if _shared_refs <= 0:
            _stop_shared()


def _stop_shared() -> None:
    global _shared
    if _shared is not None:
        services, _shared = _shared, None
        services.kafka.stop()
        services.redis.stop()
        shutil.rmtree(services.base_dir, ignore_errors=True)
