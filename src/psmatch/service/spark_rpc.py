"""Spark's own traffic on a cluster: :func:`spark_rpc_conf`, the settings that
authenticate and encrypt it, :func:`write_spark_defaults`, a standalone cluster's shared
secret and settings, and :func:`warn_if_unprotected`.

The job's tasks carry the Kafka and Redis secrets (Spark's Kafka source options, the
workers' settings), and on a cluster they cross the network between the driver and the
executors in Spark's RPC. With ``spark.authenticate`` and ``spark.network.crypto.enabled``
only holders of the application's secret may connect, and what they send is encrypted
(AES, keys agreed per connection). On YARN and Kubernetes Spark makes and distributes a
secret for each application, so the service switches both on. A standalone cluster's
daemons and applications share one secret, which is the deployment's:
:func:`write_spark_defaults` (``psmatch spark-conf``) makes it and the settings
(:data:`STANDALONE_SETTINGS`) in a ``spark-defaults.conf`` the operator copies to every
node, the driver's included: the master and workers read it, and so does the driver's
``spark-submit``, from ``SPARK_CONF_DIR``; the executors get the secret from their worker
in their environment. The service never puts a secret in Spark's settings, which pyspark
passes on the driver JVM's command line. A cluster session without protection gets one
WARNING. ``local`` masters run in one process: nothing crosses a network.
``tests/deploy/test_spark_auth.py`` runs the job on a standalone cluster with such a file
and sees applications without its secret refused and no secret on a command line.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Callable
from pathlib import Path

from psmatch.service.errors import ConfigError

log = logging.getLogger(__name__)

_GENERATES_SECRET = ("yarn", "k8s://")
PROTECTION = {"spark.authenticate": "true", "spark.network.crypto.enabled": "true"}
SECRET_SETTING = "spark.authenticate.secret"
# Beside PROTECTION, for a cluster whose every member reads the same file: AES-GCM,
# which refuses a tampered message (the default AES-CTR does not), the key derivation
# of auth engine 2, and no fallback to SASL DIGEST-MD5, whose traffic is not encrypted.
# Not spark.io.encryption.enabled: the shuffle and spill files it encrypts are on the
# executors' disks, readable only by the user whose environment holds the secret.
STANDALONE_SETTINGS = {
    **PROTECTION,
    "spark.network.crypto.cipher": "AES/GCM/NoPadding",
    "spark.network.crypto.authEngineVersion": "2",
    "spark.network.crypto.saslFallback": "false",
}


def spark_rpc_conf(master: str) -> dict[str, str]:
    """The settings the service adds for ``master``: :data:`PROTECTION` where the cluster
    manager makes the secret (YARN, Kubernetes), else none."""
    return dict(PROTECTION) if master.startswith(_GENERATES_SECRET) else {}


def write_spark_defaults(path: Path) -> list[str]:
    """Create ``path``, mode 0600, holding :data:`STANDALONE_SETTINGS` and a fresh secret
    (``secrets.token_urlsafe(32)``, 256 bits) as a ``spark-defaults.conf``; the names of
    the settings written (never the secret). :class:`ConfigError` if ``path`` exists (a
    cluster's secret is replaced on every node at once, so the operator removes the old
    file knowingly) or cannot be created."""
    settings = {**STANDALONE_SETTINGS, SECRET_SETTING: secrets.token_urlsafe(32)}
    lines = [
        "# Spark RPC authentication and encryption of a standalone cluster (psmatch spark-conf).",
        "# Copy this file unchanged to SPARK_CONF_DIR on every node: the master, the workers",
        "# and the driver. It holds the cluster's secret: keep it readable by Spark's user only.",
        *(f"{name} {value}" for name, value in settings.items()),
    ]
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as exc:
        if exc.filename != str(path):
            raise ConfigError(f"cannot create {path}: {exc.filename} is a file") from None
        raise ConfigError(f"{path} exists: not overwritten (remove it to make a new secret, "
                          "then copy the new file to every node)") from None  # fmt: skip
    except OSError as exc:
        raise ConfigError(f"cannot create {path}: {exc.strerror}") from None
    with os.fdopen(fd, "w") as file:
        os.fchmod(fd, 0o600)  # whatever the umask
        file.write("\n".join(lines) + "\n")
    return list(settings)


def warn_if_unprotected(master: str, setting: Callable[[str, str], str]) -> bool:
    """Log one WARNING if a cluster session (``setting(name, default)`` reads its
    settings) runs Spark's RPC without authentication or encryption; whether it does."""
    if master.startswith("local"):
        return False
    missing = [name for name, on in PROTECTION.items() if setting(name, "false") != on]
    if missing:
        log.warning(
            "Spark RPC on %s runs without %s: the Kafka and Redis secrets in the tasks cross "
            "the network unprotected. Make a spark-defaults.conf with psmatch spark-conf and "
            "put it in SPARK_CONF_DIR on every node (docs/operations.md)",
            master, " and ".join(missing),
        )  # fmt: skip
    return bool(missing)
