"""Spark's own traffic on a cluster: :func:`spark_rpc_conf`, the settings that
authenticate and encrypt it, and :func:`warn_if_unprotected`.

The job's tasks carry the Kafka and Redis secrets (Spark's Kafka source options, the
workers' settings), and on a cluster they cross the network between the driver and the
executors in Spark's RPC. With ``spark.authenticate`` and ``spark.network.crypto.enabled``
only holders of the application's secret may connect, and what they send is encrypted
(AES, keys agreed per connection). On YARN and Kubernetes Spark makes and distributes a
secret for each application, so the service switches both on. A standalone cluster's
daemons and applications share one secret, which is the deployment's: it sets
``spark.authenticate``, ``spark.authenticate.secret`` and ``spark.network.crypto.enabled``
in ``spark-defaults.conf`` on every node, the driver's included (where ``spark-submit``
reads it; the service never puts a secret in Spark's settings, which pyspark passes on
the driver JVM's command line). A cluster session without them gets one WARNING.
``local`` masters run in one process: nothing crosses a network.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

_GENERATES_SECRET = ("yarn", "k8s://")
PROTECTION = {"spark.authenticate": "true", "spark.network.crypto.enabled": "true"}


def spark_rpc_conf(master: str) -> dict[str, str]:
    """The settings the service adds for ``master``: :data:`PROTECTION` where the cluster
    manager makes the secret (YARN, Kubernetes), else none."""
    return dict(PROTECTION) if master.startswith(_GENERATES_SECRET) else {}


def warn_if_unprotected(master: str, setting: Callable[[str, str], str]) -> bool:
    """Log one WARNING if a cluster session (``setting(name, default)`` reads its
    settings) runs Spark's RPC without authentication or encryption; whether it does."""
    if master.startswith("local"):
        return False
    missing = [name for name, on in PROTECTION.items() if setting(name, "false") != on]
    if missing:
        log.warning(
            "Spark RPC on %s runs without %s: the Kafka and Redis secrets in the tasks cross "
            "the network unprotected. Set spark.authenticate, spark.authenticate.secret and "
            "spark.network.crypto.enabled in spark-defaults.conf on every node "
            "(docs/operations.md)", master, " and ".join(missing),
        )  # fmt: skip
    return bool(missing)
