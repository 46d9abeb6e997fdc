"""psmatch.devservers.standalone: a real Spark standalone master and workers from pyspark.

(The job on this cluster, with an executor killed, is tests/deploy/test_spark_cluster.py;
authenticated and encrypted with ``properties_file``, tests/deploy/test_spark_auth.py.)
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from psmatch.devservers.standalone import StandaloneCluster, main, spark_home


def alive_workers(cluster: StandaloneCluster) -> list[dict[str, object]]:
    return [w for w in cluster.status()["workers"] if w["state"] == "ALIVE"]


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_master_and_workers_start_register_and_stop(tmp_path: Path) -> None:
    assert (spark_home() / "bin" / "spark-class").exists()
    cluster = StandaloneCluster(tmp_path / "spark", cores=1, memory="1g", worker_count=2).start()
    try:
        assert cluster.master_url.startswith("spark://127.0.0.1:")
        status = cluster.status()
        assert status["status"] == "ALIVE" and status["url"] == cluster.master_url
        workers = alive_workers(cluster)
        assert len(workers) == 2 == len(cluster.workers)
        for worker in workers:
            assert (worker["cores"], worker["memory"], worker["host"]) == (1, 1024, "127.0.0.1")
        # a worker killed outright is replaced by starting another one
        first = cluster.workers[0]
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
        cluster.start_worker()
        assert first not in cluster.workers and len(cluster.workers) == 2
        assert {w["id"] for w in alive_workers(cluster)} - {w["id"] for w in workers}
        procs = [cluster.master, *cluster.workers]
    finally:
        cluster.stop()
    assert all(p is not None and p.poll() is not None for p in procs)
    assert cluster.master is None and cluster.workers == []


def test_the_script_entry_point_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "spark://" in out and "--properties-file" in out
