"""The ``psmatch`` command against real Kafka and Redis (``run`` is covered end to end)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer

from psmatch.adapters.kafka.admin import ensure_topics, service_topics
from psmatch.adapters.state import StateStore
from psmatch.service.cli import main
from psmatch.service.config import ServiceConfig

COMMANDS = ["run", "servers", "subscribe", "unsubscribe", "publish", "tail", "rebuild-state"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--bootstrap-servers" in out and "PSMATCH_" in out


def test_console_script_is_installed() -> None:
    script = Path(sys.executable).parent / "psmatch"
    result = subprocess.run([str(script), "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "rebuild-state" in result.stdout


# The service extra's modules, as a Python without the extra lacks them.
SERVICE_EXTRA = ("pyspark", "pyarrow", "pandas", "confluent_kafka", "redis", "hiredis",
                 "prometheus_client", "orjson")  # fmt: skip


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["tail"], ["servers", "status"]])
def test_without_the_service_extra_every_command_says_so_in_one_line(argv: list[str]) -> None:
    """``python -m psmatch`` with the extra's modules unimportable (a ``None`` in
    ``sys.modules`` makes their import fail as a missing module does)."""
    code = (f"import runpy, sys; sys.modules.update(dict.fromkeys({SERVICE_EXTRA!r}));"
            f" sys.argv = ['psmatch', *{argv!r}]; runpy.run_module('psmatch', run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("psmatch: the service needs the 'service' extra (no module named ")
    assert line.endswith("pip install 'psmatch[service]'") and not done.stdout


def test_invalid_expression_is_refused_before_kafka(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["subscribe", "s1", "price <", "--bootstrap-servers", "127.0.0.1:1"]) == 2
    assert "invalid expression" in capsys.readouterr().err


def test_bad_setting_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["tail", "--matcher", "magic"])
    assert exit_info.value.code == 2
    assert "unknown matcher" in capsys.readouterr().err


def _flags(config: ServiceConfig) -> list[str]:
    return [
        "--bootstrap-servers", config.bootstrap_servers,
        "--subscriptions-topic", config.subscriptions_topic,
        "--events-topic", config.events_topic,
        "--notifications-topic", config.notifications_topic,
        "--rejected-topic", config.rejected_topic,
        "--redis-url", config.redis_url,
        "--redis-prefix", config.redis_prefix,
    ]  # fmt: skip


def _read(config: ServiceConfig, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    consumer = KafkaConsumer(
        topic, bootstrap_servers=config.bootstrap_servers, auto_offset_reset="earliest",
        enable_auto_commit=False, group_id=None, consumer_timeout_ms=3000,
    )  # fmt: skip
    try:
        return [(m.key, m.value) for m in consumer]
    finally:
        consumer.close()


@pytest.mark.integration
def test_subscribe_unsubscribe_publish_and_rebuild(
    make_config: Callable[..., ServiceConfig],
    tmp_path: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = make_config()
    ensure_topics(
        config.bootstrap_servers,
        service_topics(config.subscriptions_topic, config.events_topic,
                       config.notifications_topic, config.rejected_topic),
    )  # fmt: skip
    flags = _flags(config)
    assert (
        main(["subscribe", "s1", "a = 1", "--subscriber", "me", "--extra", '{"x": 1}', *flags]) == 0
    )
    assert main(["subscribe", "s2", "a = 2", *flags]) == 0
    assert main(["subscribe", "s3", "a = 3", *flags]) == 0
    assert main(["unsubscribe", "s2", *flags]) == 0
    subs = _read(config, config.subscriptions_topic)
    assert sorted(k for k, _ in subs) == [b"s1", b"s2", b"s2", b"s3"]
    assert json.loads(dict(subs)[b"s1"]) == {"x": 1, "expr": "a = 1", "subscriber": "me"}
    assert (b"s2", None) in subs

    events_file = tmp_path / "events.jsonl"  # type: ignore[operator]
    events_file.write_text('{"a": 1, "id": "e1"}\n\n{"a": 2, "id": "e2"}\n')
    assert main(["publish", "--file", str(events_file), "--id-attribute", "id", *flags]) == 0
    assert main(["publish", '{"a": 3}', "not json", *flags]) == 2
    events = _read(config, config.events_topic)
    assert sorted(k or b"" for k, _ in events) == [b"", b"e1", b"e2"]
    assert "published 1 events" in capsys.readouterr().out

    # an invalid subscription written behind the CLI's back is skipped by rebuild-state
    producer = KafkaProducer(bootstrap_servers=config.bootstrap_servers)
    producer.send(config.subscriptions_topic, key=b"bad", value=b'{"expr": "a <"}')
    producer.flush()
    producer.close()
    assert main(["rebuild-state", *flags]) == 0
    assert "2 subscriptions, 1 invalid records skipped" in capsys.readouterr().out
    _, live = StateStore.from_url(config.redis_url, config.redis_prefix).snapshot()
    assert sorted(live) == ["s1", "s3"]


@pytest.mark.integration
def test_tail_prints_notifications(
    make_config: Callable[..., ServiceConfig], capsys: pytest.CaptureFixture[str]
) -> None:
    config = make_config()
    ensure_topics(config.bootstrap_servers, {config.notifications_topic: {}})
    producer = KafkaProducer(bootstrap_servers=config.bootstrap_servers)
    for i in range(3):
        producer.send(config.notifications_topic, key=b"s", value=json.dumps({"n": i}).encode())
    producer.flush()
    producer.close()
    args = ["tail", "--from-beginning", "--max", "2", "--idle-timeout", "10", *_flags(config)]
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line)["n"] for line in lines] == [0, 1]


def test_spark_conf_writes_a_fresh_secret_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def settings(path: Path) -> dict[str, str]:
        lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
        return dict(line.split(" ", 1) for line in lines)

    first, second = tmp_path / "a" / "conf" / "spark-defaults.conf", tmp_path / "b.conf"
    assert main(["spark-conf", "--out", str(first)]) == 0
    assert main(["spark-conf", "--out", str(second)]) == 0
    out = capsys.readouterr().out
    one, two = settings(first), settings(second)
    assert one["spark.authenticate"] == "true" and one["spark.network.crypto.enabled"] == "true"
    assert one["spark.network.crypto.cipher"] == "AES/GCM/NoPadding"
    secret = one["spark.authenticate.secret"]
    assert len(secret) == 43 and secret != two["spark.authenticate.secret"]  # 32 random bytes
    assert secret not in out and "spark.authenticate.secret" in out
    assert first.stat().st_mode & 0o777 == 0o600
    assert first.parent.stat().st_mode & 0o777 == 0o700

    assert main(["spark-conf", "--out", str(first)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"psmatch spark-conf: {first} exists: not overwritten")
    assert settings(first) == one
    assert main(["spark-conf", "--out", str(second / "x.conf")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == f"psmatch spark-conf: cannot create {second / 'x.conf'}: {second} is a file"
