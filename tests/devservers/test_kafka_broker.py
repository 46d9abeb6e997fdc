"""psmatch.devservers.kafka_broker: what a broker that cannot start says (the broker that
starts is every integration test's, tests/conftest.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from psmatch.devservers.kafka_broker import KafkaBroker
from psmatch.devservers.process import LocalServerError


@pytest.mark.integration
def test_kafka_without_jars_says_what_to_run(tmp_path: Path) -> None:
    broker = KafkaBroker(tmp_path / "kafka", libs_dir=tmp_path / "nothing")
    with pytest.raises(LocalServerError, match="fetch-jars"):
        broker.start()


@pytest.mark.integration
def test_a_failed_storage_format_says_what_kafka_said(tmp_path: Path) -> None:
    (tmp_path / "kafka").mkdir()
    (tmp_path / "kafka" / "data").write_text("a file where the log directory goes")
    broker = KafkaBroker(tmp_path / "kafka")
    with pytest.raises(LocalServerError, match=r"StorageTool format failed \(exit \d+\) for the "
                                               r"broker in .*kafka: .+"):  # fmt: skip
        broker.start()
    assert not broker.running


def test_the_jars_are_the_checkouts_else_the_current_directorys(tmp_path: Path) -> None:
    """``PSMATCH_CACHE_DIR`` when set; else the checkout's .cache (scripts/fetch-jars.sh
    fills it); from a copy of the package outside any checkout, the current directory's."""
    checkout = Path(__file__).resolve().parents[2]
    site, elsewhere = tmp_path / "site-packages", tmp_path / "elsewhere"
    shutil.copytree(checkout / "src" / "psmatch", site / "psmatch",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    elsewhere.mkdir()
    code = "from psmatch.devservers.kafka_broker import KafkaBroker; print(KafkaBroker.libs_dir)"
    env = {k: v for k, v in os.environ.items() if k != "PSMATCH_CACHE_DIR"}

    def libs_dir(**extra: str) -> str:
        return subprocess.run([sys.executable, "-c", code], cwd=elsewhere, check=True,
                              capture_output=True, text=True, env={**env, **extra}).stdout.strip()

    assert libs_dir() == str(checkout / ".cache" / "kafka" / "libs")
    assert libs_dir(PYTHONPATH=str(site)) == str(elsewhere / ".cache" / "kafka" / "libs")
    assert libs_dir(PSMATCH_CACHE_DIR="/opt/jars") == "/opt/jars/kafka/libs"
