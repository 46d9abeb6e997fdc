"""connectors.standalone: a real Spark standalone master and worker from pyspark.

(The job on this cluster, with an executor killed, is tests/deploy/test_spark_cluster.py.)
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from connectors.standalone import StandaloneCluster, main, spark_home


def alive_workers(cluster: StandaloneCluster) -> list[dict[str, object]]:
    return [w for w in cluster.status()["workers"] if w["state"] == "ALIVE"]


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_master_and_worker_start_register_and_stop(tmp_path: Path) -> None:
    assert (spark_home() / "bin" / "spark-class").exists()
    cluster = StandaloneCluster(tmp_path / "spark", cores=1, memory="1g").start()
    try:
        assert cluster.master_url.startswith("spark://127.0.0.1:")
        status = cluster.status()
        assert status["status"] == "ALIVE" and status["url"] == cluster.master_url
        (worker,) = alive_workers(cluster)
        assert (worker["cores"], worker["memory"], worker["host"]) == (1, 1024, "127.0.0.1")
        # a worker killed outright is replaced by starting another one
        assert cluster.worker is not None
        first = cluster.worker
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
        cluster.start_worker()
        assert any(w["id"] != worker["id"] for w in alive_workers(cluster))
        procs = [cluster.master, cluster.worker]
    finally:
        cluster.stop()
    assert all(p is not None and p.poll() is not None for p in procs)
    assert cluster.master is None and cluster.worker is None


def test_the_script_entry_point_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    assert "spark://" in capsys.readouterr().out
