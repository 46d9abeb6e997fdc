"""``psmatch spark-conf``: a standalone Spark cluster's shared secret and RPC settings in
a new ``spark-defaults.conf`` (:func:`psmatch.service.spark_rpc.write_spark_defaults`),
for the operator to copy to ``SPARK_CONF_DIR`` on every node; the secret is never printed."""

from __future__ import annotations

import argparse
from pathlib import Path

from psmatch.service.config import ServiceConfig
from psmatch.service.spark_rpc import SECRET_SETTING, write_spark_defaults


def cmd_spark_conf(args: argparse.Namespace, cfg: ServiceConfig) -> int:
    path = Path(args.out)
    names = write_spark_defaults(path)
    print(f"wrote {path} (mode 0600): {', '.join(names)}")
    print(f"copy it to SPARK_CONF_DIR on every node (the master, the workers, the driver); "
          f"its {SECRET_SETTING} admits to the cluster whoever reads it")  # fmt: skip
    return 0
