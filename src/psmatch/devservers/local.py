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
then SIGKILL after a grace period). ``stop()`` then ``start()`` (or ``restart()``) brings
the same server back on the same ports with the same data; ``kill()`` ends it with
SIGKILL, as a crash would (for fault-injection tests).

Two lifetimes:

* attached (the default, for tests): the server gets SIGTERM when the process that
  started it dies, so a killed test run leaves no orphan;
* ``detached=True`` (``psmatch run --start-local``, ``psmatch servers``): the server
  runs in its own session and outlives whoever started it; its pid and ports are
  recorded in ``<data_dir>/server.json``, so a later process can find it again
  (:meth:`KafkaBroker.adopt`, :meth:`RedisServer.adopt`) and stop it.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from psmatch.errors import PsmatchError

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[3]
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
    """In the child before exec: get SIGTERM when the starting process dies (Linux).

    Linux sends it when the *thread* that started the child ends: start a server from a
    thread that outlives it (a server started from a ``threading.Timer`` dies with the
    timer's thread)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace")


def _stop_pid(pid: int, name: str, grace: float) -> None:
    """SIGTERM a process that is not our child, SIGKILL it after ``grace`` seconds."""
    log.info("stopping %s (pid %d)", name, pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while _pid_alive(pid):
        if time.monotonic() > deadline:
            log.warning("%s did not stop within %.0f s; killing it", name, grace)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            grace = 0
        time.sleep(0.1)


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


class LocalServer:
    """What :class:`KafkaBroker` and :class:`RedisServer` share: the process's life.

    Subclasses are dataclasses with ``data_dir``, ``port``, ``detached`` and the private
    ``_proc`` (our child) / ``_pid`` (a detached server found again by :meth:`adopt`).
    """

    NAME = "server"
    STOP_GRACE = 20.0
    data_dir: Path
    port: int
    detached: bool
    _proc: subprocess.Popen[bytes] | None
    _pid: int | None

    @property
    def state_file(self) -> Path:
        """``server.json``: pid and ports of a detached server."""
        return self.data_dir / "server.json"

    @property
    def pid(self) -> int | None:
        if self._proc is not None:
            return self._proc.pid
        return self._pid

    @property
    def running(self) -> bool:
        if self._proc is not None:
            return self._proc.poll() is None
        return self._pid is not None and _pid_alive(self._pid)

    def _state(self) -> dict[str, Any]:
        return {"port": self.port}

    def _launch(self, cmd: list[str], stdout: Any) -> None:
        if self.running:
            raise LocalServerError(f"{self.NAME} is already running (pid {self.pid})")
        self._pid = None
        self._proc = subprocess.Popen(
            cmd,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C in the terminal does not reach it
            # attached: no orphan server if we are killed
            preexec_fn=None if self.detached else _die_with_parent,
        )
        if self.detached:
            state = {"pid": self._proc.pid, "cmd": self.NAME, **self._state()}
            self.state_file.write_text(json.dumps(state))

    def _check_alive(self, log_file: Path) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            raise LocalServerError(
                f"{self.NAME} exited with code {self._proc.returncode}:\n{_tail(log_file)}"
            )

    def stop(self) -> None:
        """Stop the server (SIGTERM, SIGKILL after a grace period); ports and data stay."""
        if self._proc is not None:
            _stop_process(self._proc, self.NAME, grace=self.STOP_GRACE)
            self._proc = None
        elif self._pid is not None:
            _stop_pid(self._pid, self.NAME, self.STOP_GRACE)
            self._pid = None
        with contextlib.suppress(FileNotFoundError):
            self.state_file.unlink()

    def kill(self) -> None:
        """End the server with SIGKILL, as a crash would; ports and data stay."""
        pid = self.pid
        if pid is not None and self.running:
            log.info("killing %s (pid %d)", self.NAME, pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            if self._proc is not None:
                self._proc.wait(timeout=10)
            while _pid_alive(pid):
                time.sleep(0.05)
        self._proc = None
        self._pid = None
        with contextlib.suppress(FileNotFoundError):
            self.state_file.unlink()

    def restart(self) -> Self:
        """Stop and start again on the same port(s) and data directory."""
        self.stop()
        return self.start()  # type: ignore[attr-defined,no-any-return]

    @classmethod
    def _recorded(cls, data_dir: Path, marker: str) -> dict[str, Any] | None:
        """The state of a detached server in ``data_dir`` that still runs, else None."""
        try:
            state = json.loads((data_dir / "server.json").read_text())
            pid = int(state["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if not _pid_alive(pid) or marker not in _cmdline(pid):
            return None  # gone, or the pid now belongs to another program
        return dict(state)


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
class KafkaBroker(LocalServer):
    """A single-node Kafka broker + KRaft controller on 127.0.0.1.

    Clients use the PLAINTEXT listener on ``port``. With ``sasl_users`` (user name →
    password) the broker also has a ``SASL_PLAINTEXT`` listener on ``sasl_port`` that
    accepts those users with the SASL ``PLAIN`` mechanism.
    """

    NAME = "Kafka broker"
    STOP_GRACE = 30.0
    data_dir: Path
    port: int = 0
    controller_port: int = 0
    libs_dir: Path = DEFAULT_CACHE_DIR / "kafka" / "libs"
    heap: str = "768m"
    detached: bool = False
    sasl_port: int = 0
    sasl_users: dict[str, str] = field(default_factory=dict, repr=False)
    _proc: subprocess.Popen[bytes] | None = None
    _pid: int | None = None

    @classmethod
    def adopt(cls, data_dir: Path, **kwargs: Any) -> KafkaBroker | None:
        """The detached broker recorded in ``data_dir`` if it still runs, else None."""
        state = cls._recorded(data_dir, "kafka.Kafka")
        if state is None:
            return None
        return cls(data_dir, port=state["port"], controller_port=state["controller_port"],
                   detached=True, _pid=state["pid"], **kwargs)  # fmt: skip

    def _state(self) -> dict[str, Any]:
        return {"port": self.port, "controller_port": self.controller_port}

    @property
    def sasl_bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "kafka.log"

    def _storage_tool(self, *args: str) -> str:
        """Run Kafka's ``kafka.tools.StorageTool`` with ``args``; its standard output, or
        :class:`LocalServerError` with the tool's own message if it fails."""
        done = subprocess.run(self._java("kafka.tools.StorageTool", *args),
                              capture_output=True, text=True, check=False)  # fmt: skip
        if done.returncode:
            said = (done.stderr.strip() or done.stdout.strip())[-2000:] or "no output"
            raise LocalServerError(
                f"kafka.tools.StorageTool {args[0]} failed (exit {done.returncode}) for "
                f"the broker in {self.data_dir}: {said}")
        return done.stdout

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
        listeners = [f"PLAINTEXT://127.0.0.1:{self.port}",
                     f"CONTROLLER://127.0.0.1:{self.controller_port}"]  # fmt: skip
        protocols = "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
        sasl: dict[str, str] = {}
        if self.sasl_users:
            listeners.append(f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}")
            protocols += ",SASL_PLAINTEXT:SASL_PLAINTEXT"
            users = " ".join(f'user_{u}="{pw}"' for u, pw in self.sasl_users.items())
            sasl = {
                "sasl.enabled.mechanisms": "PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
                    f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"
                ),
            }
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}",
            "listeners": ",".join(listeners),
            "advertised.listeners": ",".join(listeners),
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": protocols,
            **sasl,
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
        path.touch(mode=0o600)  # it may hold the SASL users' passwords
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
        # KRaft records the controller's endpoint in the metadata log: keep its port
        port_file = self.data_dir / "controller.port"
        if not self.controller_port and port_file.exists():
            self.controller_port = int(port_file.read_text())
        self.controller_port = self.controller_port or free_port()
        port_file.write_text(str(self.controller_port))
        if self.sasl_users:
            self.sasl_port = self.sasl_port or free_port()
        config = self._write_config()
        if not (self.data_dir / "data" / "meta.properties").exists():
            cluster_id = self._storage_tool("random-uuid").strip()
            self._storage_tool("format", "--standalone", "-t", cluster_id, "-c", str(config))
        with (self.data_dir / "kafka.out").open("ab") as out:
            self._launch(self._java("kafka.Kafka", str(config), heap=self.heap), out)
        log.info("Kafka broker starting on %s (pid %s)", self.bootstrap_servers, self.pid)
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        admin = None
        while time.monotonic() < deadline:
            self._check_alive(self.data_dir / "kafka.out")
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


@dataclass
class RedisServer(LocalServer):
    """Debian's ``redis-server`` on 127.0.0.1 with AOF persistence in ``data_dir``.

    With ``password``, clients must authenticate (``requirepass``); the password goes
    to the server in a config file only its owner can read, never on a command line.
    """

    NAME = "redis-server"
    data_dir: Path
    port: int = 0
    appendonly: bool = True
    detached: bool = False
    password: str | None = field(default=None, repr=False)
    _proc: subprocess.Popen[bytes] | None = None
    _pid: int | None = None

    @classmethod
    def adopt(cls, data_dir: Path, **kwargs: Any) -> RedisServer | None:
        """The detached redis-server recorded in ``data_dir`` if it still runs, else None."""
        state = cls._recorded(data_dir, "redis-server")
        if state is None:
            return None
        return cls(data_dir, port=state["port"], detached=True, _pid=state["pid"], **kwargs)

    @property
    def url(self) -> str:
        """The server's URL, without the password."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 30.0) -> RedisServer:
        binary = shutil.which("redis-server") or (
            "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None
        )
        if binary is None:
            raise LocalServerError("redis-server is not installed (make deps installs it)")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        settings = {
            "bind": "127.0.0.1",
            "port": str(self.port),
            "dir": str(self.data_dir),
            "appendonly": "yes" if self.appendonly else "no",
            # always: a write is on disk before Redis acknowledges it. With everysec Redis
            # may acknowledge writes it has not yet written (it postpones the write while
            # a slow fsync runs), and a kill -9 then loses applied subscription changes
            # whose Kafka batch is already committed.
            "appendfsync": "always",
            "save": '""',
            "daemonize": "no",
            "protected-mode": "yes",
            "logfile": str(self.data_dir / "redis.log"),
        }
        if self.password:
            quoted = self.password.replace("\\", "\\\\").replace('"', '\\"')
            settings["requirepass"] = f'"{quoted}"'
        conf = self.data_dir / "redis.conf"
        conf.touch(mode=0o600)
        conf.write_text("".join(f"{k} {v}\n" for k, v in settings.items()))
        # redis-server's stdout is empty with a logfile: its messages go to redis.log
        self._launch([binary, str(conf)], subprocess.DEVNULL)
        # SIGTERM makes redis-server flush the AOF and exit (stop())
        import redis

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive(self.data_dir / "redis.log")
            try:
                client = redis.Redis(
                    "127.0.0.1", self.port, password=self.password, socket_timeout=1
                )
                if client.ping():
                    log.info("Redis ready on %s (pid %s)", self.url, self.pid)
                    return self
            except redis.exceptions.RedisError:
                # BUSY loading the AOF, or not listening yet
                pass
            time.sleep(0.1)
        self.stop()
        raise LocalServerError(f"redis-server did not become ready in {timeout:.0f} s")


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
