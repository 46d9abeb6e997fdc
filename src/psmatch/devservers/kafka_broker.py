"""A development Kafka broker: :class:`KafkaBroker`, single-node Apache Kafka 4.x in
KRaft mode (combined broker + controller) on loopback.

Owns the broker's configuration (a PLAINTEXT listener; or, secure, a ``SASL_SSL``
listener with SCRAM-SHA-512 users, an mTLS listener and Kafka's ``StandardAuthorizer``
denying what no ACL allows, with certificates from :class:`psmatch.devservers.tls.DevCA`),
its storage (formatted with ``kafka.tools.StorageTool format
--standalone``), its start from the Maven Central jars that ``scripts/fetch-jars.sh``
puts in ``.cache/kafka/libs`` (``java -cp <libs>/* kafka.Kafka``) and the wait until it
answers clients. Its process's life is :class:`psmatch.devservers.process.LocalServer`'s.

The jars' folder defaults to ``$PSMATCH_CACHE_DIR/kafka/libs``, else ``.cache/kafka/libs``
in the checkout this package runs from (as ``scripts/fetch-jars.sh`` fills it), else in
the current directory (an installed package).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psmatch.devservers.process import LocalServer, LocalServerError, free_port, port_open
from psmatch.devservers.tls import DevCA
from psmatch.paths import base_dir

log = logging.getLogger(__name__)


DEFAULT_CACHE_DIR = Path(os.environ.get("PSMATCH_CACHE_DIR") or base_dir() / ".cache")


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

    Clients use the PLAINTEXT listener on ``port``. With ``ca`` (secure), there is no
    PLAINTEXT listener: ``port`` is a ``SASL_SSL`` listener (SCRAM-SHA-512; the users
    in ``scram_users``, user name -> password, are created through the admin API once the
    broker runs, so no password is on a command line) and ``mtls_port`` an ``SSL``
    listener that requires a client certificate ``ca`` signs (principal
    ``User:CN=<name>``). The broker's authorizer then denies whatever no ACL allows,
    except to the super users: ``super_users`` and the broker itself (``CN=kafka-broker``,
    whose certificate :attr:`admin_config` uses).
    """

    NAME = "Kafka broker"
    STOP_GRACE = 30.0
    data_dir: Path
    port: int = 0
    controller_port: int = 0
    libs_dir: Path = DEFAULT_CACHE_DIR / "kafka" / "libs"
    heap: str = "768m"
    detached: bool = False
    ca: DevCA | None = None
    mtls_port: int = 0
    scram_users: dict[str, str] = field(default_factory=dict, repr=False)
    super_users: tuple[str, ...] = ()
    _proc: subprocess.Popen[bytes] | None = None
    _pid: int | None = None

    @classmethod
    def adopt(cls, data_dir: Path, **kwargs: Any) -> KafkaBroker | None:
        """The detached broker recorded in ``data_dir`` if it still runs, else None."""
        state = cls._recorded(data_dir, "kafka.Kafka")
        if state is None:
            return None
        return cls(data_dir, port=state["port"], controller_port=state["controller_port"],
                   mtls_port=state.get("mtls_port", 0), detached=True, _pid=state["pid"],
                   **kwargs)  # fmt: skip

    def _state(self) -> dict[str, Any]:
        return {"port": self.port, "controller_port": self.controller_port,
                "mtls_port": self.mtls_port}

    @property
    def mtls_bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.mtls_port}"

    @property
    def secure(self) -> bool:
        return self.ca is not None

    def _ca(self) -> DevCA:
        assert self.ca is not None, "only a secure broker has certificates"
        return self.ca

    def admin_config(self) -> dict[str, str]:
        """librdkafka settings of a super user's client: the broker's own certificate
        on the mTLS listener of a secure broker, else PLAINTEXT."""
        if not self.secure:
            return {"bootstrap.servers": self.bootstrap_servers}
        issued = self._ca().issue("kafka-broker", server=True)
        return {"bootstrap.servers": self.mtls_bootstrap_servers, "security.protocol": "SSL",
                "ssl.ca.location": str(self._ca().ca_file),
                "ssl.certificate.location": str(issued.cert_file),
                "ssl.key.location": str(issued.key_file)}  # fmt: skip

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
        inter_broker = "PLAINTEXT"
        security: dict[str, str] = {}
        if self.secure:
            inter_broker = "MTLS"
            listeners = [f"SASL_SSL://127.0.0.1:{self.port}",
                         f"MTLS://127.0.0.1:{self.mtls_port}",
                         f"CONTROLLER://127.0.0.1:{self.controller_port}"]  # fmt: skip
            protocols = "SASL_SSL:SASL_SSL,MTLS:SSL,CONTROLLER:SSL"
            keystore = self._ca().issue("kafka-broker", server=True).keystore_file
            supers = ["User:CN=kafka-broker", *(f"User:{name}" for name in self.super_users)]
            security = {
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(keystore),
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(self._ca().ca_file),
                "listener.name.mtls.ssl.client.auth": "required",
                "listener.name.controller.ssl.client.auth": "required",
                "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;",
                "authorizer.class.name":
                    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "super.users": ";".join(supers),
                "allow.everyone.if.no.acl.found": "false",
            }  # fmt: skip
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}",
            "listeners": ",".join(listeners),
            "advertised.listeners": ",".join(listeners),
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": inter_broker,
            "listener.security.protocol.map": protocols,
            **security,
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
        path.touch(mode=0o600)
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
        if self.secure:
            self.mtls_port = self.mtls_port or free_port()
        config = self._write_config()
        if not (self.data_dir / "data" / "meta.properties").exists():
            cluster_id = self._storage_tool("random-uuid").strip()
            self._storage_tool("format", "--standalone", "-t", cluster_id, "-c", str(config))
        with (self.data_dir / "kafka.out").open("ab") as out:
            self._launch(self._java("kafka.Kafka", str(config), heap=self.heap), out)
        log.info("Kafka broker starting on %s (pid %s)", self.bootstrap_servers, self.pid)
        self._wait_ready(timeout)
        if self.scram_users:
            self.add_scram_users(self.scram_users)
        return self

    def _wait_ready(self, timeout: float) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        admin = None
        while time.monotonic() < deadline:
            self._check_alive(self.data_dir / "kafka.out")
            if port_open("127.0.0.1", self.mtls_port if self.secure else self.port):
                if admin is None:
                    admin = AdminClient(self.admin_config())
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

    def add_scram_users(self, users: Mapping[str, str]) -> None:
        """Create (or reset) SCRAM-SHA-512 users (user name -> password) through the
        admin API, as a super user."""
        from confluent_kafka.admin import (
            AdminClient,
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialUpsertion,
        )

        admin = AdminClient(self.admin_config())
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
        upserts = [UserScramCredentialUpsertion(name, info, password.encode())
                   for name, password in users.items()]  # fmt: skip
        for future in admin.alter_user_scram_credentials(upserts).values():
            future.result(timeout=30)
