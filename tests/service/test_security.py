"""Kafka with SASL and Redis with a password, all real: the service works with the right
secrets and stops with one clear message (and no secret in it) with a wrong one.

A broker of its own with a SASL_PLAINTEXT listener (mechanism PLAIN, started by
``psmatch.devservers.kafka_broker``) and a redis-server with ``requirepass``; the CLI's producer,
consumer and admin client and a short Spark query (its Kafka source, and the tasks writing
their records) all go through SASL.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from psmatch.adapters.kafka.client import KafkaAuthenticationError
from psmatch.adapters.kafka.reader import TopicReader
from psmatch.adapters.kafka.security import KafkaSecurity
from psmatch.adapters.kafka.sink import RecordSink, SinkSettings
from psmatch.devservers.kafka_broker import KafkaBroker
from psmatch.devservers.process import free_port
from psmatch.devservers.redis_server import RedisServer
from psmatch.service.cli import main
from psmatch.service.config import ServiceConfig
from psmatch.service.job import start_query, stop_query

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]

KAFKA_PW = "kafka-S3cret-pw"
REDIS_PW = "redis-S3cret-pw"
SECRETS = ("S3cret",)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaBroker, RedisServer]]:
    base = tmp_path_factory.mktemp("secured")
    redis_server = RedisServer(base / "redis", password=REDIS_PW).start()
    broker = KafkaBroker(base / "kafka", sasl_users={"psmatch": KAFKA_PW})
    try:
        broker.start()
        yield broker, redis_server
    finally:
        broker.stop()
        redis_server.stop()


def flags(broker: KafkaBroker, redis_server: RedisServer, tmp_path: Path) -> list[str]:
    """Everything but the secrets, as flags; the Redis password comes from a file."""
    redis_pw = tmp_path / "redis.pw"
    redis_pw.write_text(REDIS_PW + "\n")
    return [
        "--bootstrap-servers", broker.sasl_bootstrap_servers,
        "--kafka-security-protocol", "SASL_PLAINTEXT",
        "--kafka-sasl-mechanism", "PLAIN",
        "--kafka-username", "psmatch",
        "--redis-url", redis_server.url,
        "--redis-password-file", str(redis_pw),
        "--redis-prefix", "sec:",
        "--subscriptions-topic", "sec.subs", "--events-topic", "sec.events",
        "--notifications-topic", "sec.notif", "--rejected-topic", "sec.rejected",
        "--checkpoint-location", str(tmp_path / "checkpoint"),
        "--metrics-port", str(free_port()),
        "--spark-master", "local[2]", "--trigger-seconds", "0.5",
        "--redis-retry-seconds", "2",
    ]  # fmt: skip


def no_secret(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text


def test_right_secrets_reach_every_client(
    secured: tuple[KafkaBroker, RedisServer],
    tmp_path: Path,
    spark: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    broker, redis_server = secured
    monkeypatch.setenv("PSMATCH_KAFKA_PASSWORD", KAFKA_PW)
    args = flags(broker, redis_server, tmp_path)
    config = ServiceConfig.load(overrides={
        a[2:].replace("-", "_"): b for a, b in zip(args[::2], args[1::2], strict=True)
    })  # fmt: skip
    reports: list[Any] = []
    query = start_query(config, spark, on_report=reports.append)  # admin client + Spark source
    try:
        assert main(["subscribe", "cheap", "price < 20", *args]) == 0  # producer
        assert main(["publish", '{"price": 12}', '{"price": 30}', *args]) == 0
        deadline = time.monotonic() + 120
        while sum(r.notifications for r in reports) < 1 and time.monotonic() < deadline:
            assert query.exception() is None, query.exception()
            time.sleep(0.5)
    finally:
        stop_query(query)
    assert sum(r.notifications for r in reports) == 1
    capsys.readouterr()
    # the matching task wrote it through SASL; the CLI's consumer reads it through SASL
    assert main(["tail", "--from-beginning", "--max", "1", "--idle-timeout", "20", *args]) == 0
    notification = json.loads(capsys.readouterr().out.splitlines()[0])
    assert notification["subscription_id"] == "cheap" and notification["event"] == {"price": 12}
    with TopicReader(broker.sasl_bootstrap_servers, "sec.notif",
                     security=config.kafka_security) as reader:  # fmt: skip
        assert len(reader.read_to_end()) == 1
    no_secret(caplog.text, repr(config), str(config.as_dict()))


@pytest.mark.parametrize("wrong", ["kafka", "redis"])
@pytest.mark.parametrize("command", ["run", "publish"])
def test_a_wrong_secret_is_one_clear_message(
    secured: tuple[KafkaBroker, RedisServer],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    wrong: str,
    command: str,
) -> None:
    if command == "publish" and wrong == "redis":
        pytest.skip("publish does not use Redis")
    broker, redis_server = secured
    args = flags(broker, redis_server, tmp_path)
    monkeypatch.setenv("PSMATCH_KAFKA_PASSWORD", "wrong-S3cret" if wrong == "kafka" else KAFKA_PW)
    if wrong == "redis":
        (tmp_path / "redis.pw").write_text("wrong-S3cret")
        args = [*args[: args.index("--redis-password-file") + 1], str(tmp_path / "redis.pw"),
                *args[args.index("--redis-password-file") + 2 :]]  # fmt: skip
    cmd = ["run", *args] if command == "run" else ["publish", '{"price": 1}', *args]
    assert main(cmd) == 1
    out = capsys.readouterr()
    lines = out.err.strip().splitlines()
    assert len(lines) == 1, out.err
    expected = "Kafka at" if wrong == "kafka" else "Redis at"
    assert lines[0].startswith(f"psmatch {command}: ") and expected in lines[0]
    assert "refused" in lines[0]  # the refusal itself, not a timeout waiting it out
    no_secret(out.err, out.out)


def test_the_record_sink_stops_at_a_refused_login(
    secured: tuple[KafkaBroker, RedisServer],
) -> None:
    broker, _ = secured
    wrong = KafkaSecurity("SASL_PLAINTEXT", "PLAIN", "psmatch", "wrong-S3cret")
    sink = RecordSink(SinkSettings(broker.sasl_bootstrap_servers, wrong))
    sink.write(pa.RecordBatch.from_pydict({"topic": ["sec.notif"], "key": [b"k"],
                                           "value": [b"v"]}))  # fmt: skip
    # the refusal itself, not "records not delivered" when the record's timeout ends
    with pytest.raises(KafkaAuthenticationError, match="refused") as refused:
        sink.flush()
    no_secret(str(refused.value))


def test_security_settings_for_each_client_kind() -> None:
    """librdkafka and Java (Spark) settings from one KafkaSecurity, TLS with a CA file."""
    sec = KafkaSecurity("SASL_SSL", "SCRAM-SHA-256", "u", 'p"w\\', "/etc/ca.pem")
    assert sec.client_config() == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "u", "sasl.password": 'p"w\\', "ssl.ca.location": "/etc/ca.pem",
    }  # fmt: skip
    java = sec.java_config()
    assert java["sasl.jaas.config"] == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required '
        'username="u" password="p\\"w\\\\";'
    )
    assert (java["ssl.truststore.type"], java["ssl.truststore.location"]) == ("PEM", "/etc/ca.pem")
    assert "p\"w" not in repr(sec)
    assert KafkaSecurity().client_config() == {"security.protocol": "PLAINTEXT"}
