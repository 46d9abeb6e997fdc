"""psmatch.devservers.kafka_broker: what a broker that cannot start says (the broker that
starts is every integration test's, tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from psmatch.devservers.kafka_broker import KafkaBroker
from psmatch.devservers.process import LocalServerError

pytestmark = pytest.mark.integration


def test_kafka_without_jars_says_what_to_run(tmp_path: Path) -> None:
    broker = KafkaBroker(tmp_path / "kafka", libs_dir=tmp_path / "nothing")
    with pytest.raises(LocalServerError, match="fetch-jars"):
        broker.start()


def test_a_failed_storage_format_says_what_kafka_said(tmp_path: Path) -> None:
    (tmp_path / "kafka").mkdir()
    (tmp_path / "kafka" / "data").write_text("a file where the log directory goes")
    broker = KafkaBroker(tmp_path / "kafka")
    with pytest.raises(LocalServerError, match=r"StorageTool format failed \(exit \d+\) for the "
                                               r"broker in .*kafka: .+"):  # fmt: skip
        broker.start()
    assert not broker.running
