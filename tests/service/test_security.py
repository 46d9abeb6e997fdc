"""Kafka and Redis secured, all real: TLS everywhere, SCRAM-SHA-512 and client
certificates, the broker's ACLs. The service works with the right settings and stops
with one clear line (no traceback, no secret, no timeout waited out) with a wrong one.

One secured pair for the whole session (:func:`psmatch.devservers.services.secured_services`):
a broker with a SASL_SSL listener and an mTLS listener whose authorizer denies what no
ACL allows, and a TLS-only Redis with an ACL user. The Spark query (its Java Kafka
source, the tasks' librdkafka writers, Redis from the workers) runs over mTLS; the
CLI's clients over SASL_SSL.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from psmatch.adapters.kafka.admin import ensure_topics, service_topics
from psmatch.adapters.kafka.reader import GROUP_PREFIX
from psmatch.adapters.kafka.security import KafkaSecurity, pem_keystore_problem
from psmatch.adapters.redis_retry import redis_retry_stats
from psmatch.adapters.state import StateError, StateStore
from psmatch.devservers.process import free_port
from psmatch.devservers.services import SERVICE_USER, SecuredServices, secured_services
from psmatch.devservers.tls import DevCA
from psmatch.service.cli import main
from psmatch.service.config import ServiceConfig
from psmatch.service.errors import ConfigError
from psmatch.service.job import start_query, stop_query
from psmatch.service.spark_rpc import spark_rpc_conf, warn_if_unprotected

integration = [pytest.mark.integration, pytest.mark.timeout(400)]


@pytest.fixture(scope="session")
def secured() -> SecuredServices:
    return secured_services()


@pytest.fixture(scope="session")
def stranger(tmp_path_factory: pytest.TempPathFactory) -> DevCA:
    """A CA the servers do not trust."""
    return DevCA(tmp_path_factory.mktemp("stranger-ca"))


def secret_files(sec: SecuredServices, folder: Path) -> tuple[Path, Path]:
    kafka_pw, redis_pw = folder / "kafka.pw", folder / "redis.pw"
    kafka_pw.write_text(sec.kafka_password + "\n")
    redis_pw.write_text(sec.redis_password + "\n")
    return kafka_pw, redis_pw


def kafka_flags(sec: SecuredServices, folder: Path, via: str = "sasl") -> list[str]:
    """The service principal's Kafka settings over SASL_SSL or mTLS (``via``)."""
    if via == "mtls":
        cert = sec.ca.issue(SERVICE_USER)
        return ["--bootstrap-servers", sec.kafka.mtls_bootstrap_servers,
                "--kafka-security-protocol", "SSL", "--kafka-ca-file", str(sec.ca.ca_file),
                "--kafka-cert-file", str(cert.cert_file),
                "--kafka-key-file", str(cert.keystore_file)]  # fmt: skip
    return ["--bootstrap-servers", sec.kafka.bootstrap_servers,
            "--kafka-security-protocol", "SASL_SSL", "--kafka-username", SERVICE_USER,
            "--kafka-password-file", str(secret_files(sec, folder)[0]),
            "--kafka-ca-file", str(sec.ca.ca_file)]  # fmt: skip


def redis_flags(sec: SecuredServices, folder: Path) -> list[str]:
    """The service's Redis settings: TLS with a client certificate, an ACL user."""
    cert = sec.ca.issue("psmatch-redis")
    return ["--redis-url", f"rediss://{SERVICE_USER}@127.0.0.1:{sec.redis.port}/0",
            "--redis-password-file", str(secret_files(sec, folder)[1]),
            "--redis-ca-file", str(sec.ca.ca_file), "--redis-cert-file", str(cert.cert_file),
            "--redis-key-file", str(cert.key_file)]  # fmt: skip


def topic_flags(tag: str, folder: Path) -> list[str]:
    return ["--redis-prefix", f"{tag}:", "--subscriptions-topic", f"{tag}.subs",
            "--events-topic", f"{tag}.events", "--notifications-topic", f"{tag}.notif",
            "--rejected-topic", f"{tag}.rejected",
            "--checkpoint-location", str(folder / "checkpoint"),
            "--metrics-port", str(free_port()), "--spark-master", "local[2]",
            "--trigger-seconds", "0.5"]  # fmt: skip


def config_of(args: list[str]) -> ServiceConfig:
    return ServiceConfig.load(env={}, overrides={
        a[2:].replace("-", "_"): b for a, b in zip(args[::2], args[1::2], strict=True)
    })  # fmt: skip


def assert_no_secret(sec: SecuredServices, *texts: str) -> None:
    for text in texts:
        assert sec.kafka_password not in text and sec.redis_password not in text


def command_lines(sec: SecuredServices) -> list[str]:
    """The command lines of the servers and of this process's children (the Spark JVM)."""
    procs = [psutil.Process(pid) for pid in (sec.kafka.pid, sec.redis.pid) if pid]
    procs += psutil.Process().children(recursive=True)
    lines = []
    for proc in procs:
        try:
            lines.append(" ".join(proc.cmdline()))
        except psutil.Error:  # exited meanwhile
            continue
    return lines


@pytest.mark.integration
@pytest.mark.timeout(400)
def test_the_whole_path_over_mtls_and_sasl_ssl(
    secured: SecuredServices,
    tmp_path: Path,
    spark: Any,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="psmatch")
    topics = topic_flags("path", tmp_path)
    sasl = [*kafka_flags(secured, tmp_path), *redis_flags(secured, tmp_path), *topics]
    mtls = [*kafka_flags(secured, tmp_path, "mtls"), *redis_flags(secured, tmp_path), *topics]
    config = config_of(mtls)
    reports: list[Any] = []
    query = start_query(config, spark, on_report=reports.append)
    try:
        assert main(["subscribe", "cheap", "price < 20", *sasl]) == 0
        assert main(["publish", '{"price": 12}', '{"price": 30}', *sasl]) == 0
        deadline = time.monotonic() + 120
        while sum(r.notifications for r in reports) < 1 and time.monotonic() < deadline:
            assert query.exception() is None, query.exception()
            time.sleep(0.5)
        lines = command_lines(secured)
    finally:
        stop_query(query)
    assert sum(r.notifications for r in reports) == 1
    capsys.readouterr()
    for flags in (mtls, sasl):
        assert main(["tail", "--from-beginning", "--max", "1", "--idle-timeout", "20",
                     *flags]) == 0  # fmt: skip
        notification = json.loads(capsys.readouterr().out.splitlines()[0])
        assert notification["subscription_id"] == "cheap"
        assert notification["event"] == {"price": 12}
    assert main(["explain", "cheap", '{"price": 12}', *sasl]) == 0
    out = capsys.readouterr()
    assert "cheap" in out.out
    assert any("java" in line for line in lines)  # the Spark JVM was among them
    assert_no_secret(secured, caplog.text, out.out, out.err, repr(config),
                     str(config.as_dict()), *lines)  # fmt: skip


REFUSALS = {
    # case: (command, what it says)
    "kafka-wrong-ca": ("publish", "kafka_ca_file"),
    "kafka-wrong-password": ("publish", "refused the login"),
    "kafka-untrusted-certificate": ("publish", "TLS alert"),
    "kafka-no-certificate": ("publish", "TLS alert"),
    "kafka-plaintext-to-tls": ("publish", "is a TLS listener"),
    "kafka-tls-to-plaintext": ("publish", "is this listener TLS?"),
    "kafka-untrusted-certificate-run": ("run", "TLS alert"),
    "redis-wrong-ca": ("explain", "refused the TLS connection"),
    "redis-wrong-password": ("explain", "refused the credentials"),
    "redis-untrusted-certificate": ("explain", "refused the TLS connection"),
    "redis-plaintext-to-tls": ("explain", "speaks TLS"),
}


def swap_flag(flags: list[str], flag: str, value: str) -> list[str]:
    at = flags.index(flag)
    return [*flags[: at + 1], value, *flags[at + 2 :]]


def refused_args(case: str, sec: SecuredServices, stranger: DevCA, folder: Path,
                 plain_broker: str = "") -> list[str]:  # fmt: skip
    """The command line of ``case``: the right settings but one."""
    kafka = kafka_flags(sec, folder, "mtls" if "certificate" in case else "sasl")
    redis = redis_flags(sec, folder)

    foreign = stranger.issue("mallory")
    if case == "kafka-wrong-ca":
        kafka = swap_flag(kafka, "--kafka-ca-file", str(stranger.ca_file))
    elif case == "kafka-wrong-password":
        (folder / "kafka.pw").write_text("not-" + sec.kafka_password)
    elif case.startswith("kafka-untrusted-certificate"):
        kafka = swap_flag(swap_flag(kafka, "--kafka-cert-file", str(foreign.cert_file)),
                     "--kafka-key-file", str(foreign.keystore_file))  # fmt: skip
    elif case == "kafka-no-certificate":
        kafka = kafka[: kafka.index("--kafka-cert-file")]
    elif case == "kafka-plaintext-to-tls":
        kafka = ["--bootstrap-servers", sec.kafka.bootstrap_servers]
    elif case == "redis-wrong-ca":
        redis = swap_flag(redis, "--redis-ca-file", str(stranger.ca_file))
    elif case == "redis-wrong-password":
        (folder / "redis.pw").write_text("not-" + sec.redis_password)
    elif case == "redis-untrusted-certificate":
        redis = swap_flag(swap_flag(redis, "--redis-cert-file", str(foreign.cert_file)),
                          "--redis-key-file", str(foreign.key_file))  # fmt: skip
    elif case == "redis-plaintext-to-tls":
        redis = [f"--redis-url=redis://{SERVICE_USER}@127.0.0.1:{sec.redis.port}/0",
                 *redis[2:4]]  # fmt: skip
    elif case == "kafka-tls-to-plaintext":
        kafka = ["--bootstrap-servers", plain_broker, "--kafka-security-protocol", "SSL",
                 "--kafka-ca-file", str(sec.ca.ca_file)]  # fmt: skip
    return [*kafka, *redis, *topic_flags("refused", folder)]


@pytest.mark.integration
@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_refusal_is_one_clear_line_at_once(
    secured: SecuredServices,
    stranger: DevCA,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    request: pytest.FixtureRequest,
    case: str,
) -> None:
    command, says = REFUSALS[case]
    plain = ""  # the suite's plaintext broker, for the one case that needs it
    if case == "kafka-tls-to-plaintext":
        plain = request.getfixturevalue("services").kafka.bootstrap_servers
    args = refused_args(case, secured, stranger, tmp_path, plain)
    if command == "publish":
        cmd = ["publish", '{"price": 1}', *args]
    elif command == "explain":
        cmd = ["explain", "any-id", '{"price": 1}', *args]
    else:
        cmd = ["run", *args]
    retries = redis_retry_stats().retries
    root_filters = list(logging.getLogger().filters)
    assert main(cmd) == 1
    assert logging.getLogger().filters == root_filters  # run takes its log filter off again
    out = capsys.readouterr()
    lines = out.err.strip().splitlines()
    assert len(lines) == 1, out.err
    assert lines[0].startswith(f"psmatch {command}: ") and says in lines[0], lines[0]
    assert "Traceback" not in out.err + caplog.text
    # the refusal itself at once: no Redis retry, no Kafka delivery timeout
    assert redis_retry_stats().retries == retries
    assert "not delivered" not in lines[0] and "not reachable" not in lines[0]
    assert_no_secret(secured, out.err, out.out, caplog.text)


def create_user_with_acls(sec: SecuredServices, user: str, acls: list[Any]) -> None:
    from confluent_kafka.admin import AdminClient

    sec.kafka.add_scram_users({user: sec.kafka_password[::-1]})
    admin = AdminClient(sec.kafka.admin_config())
    for future in admin.create_acls(acls).values():
        future.result(timeout=30)


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_tail_without_read_says_what_is_not_authorised(
    secured: SecuredServices, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    topics = topic_flags("tail", tmp_path)
    service = [*kafka_flags(secured, tmp_path), *redis_flags(secured, tmp_path), *topics]
    config = config_of(service)
    ensure_topics(config.bootstrap_servers, service_topics(
        config.subscriptions_topic, config.events_topic, config.notifications_topic,
        config.rejected_topic), security=config.kafka_security)  # fmt: skip
    user = "reader-without-group"
    create_user_with_acls(secured, user, [AclBinding(
        ResourceType.TOPIC, "tail.notif", ResourcePatternType.LITERAL, f"User:{user}", "*",
        AclOperation.READ, AclPermissionType.ALLOW)])  # fmt: skip
    (tmp_path / "user.pw").write_text(secured.kafka_password[::-1])
    as_user = ["--bootstrap-servers", secured.kafka.bootstrap_servers,
               "--kafka-security-protocol", "SASL_SSL", "--kafka-username", user,
               "--kafka-password-file", str(tmp_path / "user.pw"),
               "--kafka-ca-file", str(secured.ca.ca_file), *topics]  # fmt: skip
    capsys.readouterr()
    # READ on the notifications topic but not on the readers' groups
    assert main(["tail", "--from-beginning", "--idle-timeout", "5", *as_user]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "READ on the groups with that prefix" in err[0], err
    assert GROUP_PREFIX in err[0]
    # no READ on the rejected topic at all
    assert main(["tail", "--rejected", "--idle-timeout", "5", *as_user]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["psmatch tail: not authorised to read topic tail.rejected: the principal "
                   "needs READ on it"]  # fmt: skip



@pytest.mark.integration
@pytest.mark.timeout(120)
def test_a_subscriber_explains_from_the_topic_it_may_read(
    secured: SecuredServices, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``explain --from-topic`` reads with the caller's Kafka credentials: no Redis
    password, and the broker's ACLs decide what it sees."""
    from psmatch.adapters.kafka.admin import create_acls
    from psmatch.service.acls import reader_acls

    topics = topic_flags("expl", tmp_path)
    service = [*kafka_flags(secured, tmp_path), *redis_flags(secured, tmp_path), *topics]
    config = config_of(service)
    ensure_topics(config.bootstrap_servers, service_topics(
        config.subscriptions_topic, config.events_topic, config.notifications_topic,
        config.rejected_topic), security=config.kafka_security)  # fmt: skip
    assert main(["subscribe", "cheap", "price < 20", *service]) == 0
    assert main(["subscribe", "gone", "price < 1", *service]) == 0
    assert main(["unsubscribe", "gone", *service]) == 0
    user = "subscriber"
    secured.kafka.add_scram_users({user: secured.kafka_password[::-1]})
    (tmp_path / "user.pw").write_text(secured.kafka_password[::-1])
    as_user = ["--bootstrap-servers", secured.kafka.bootstrap_servers,
               "--kafka-security-protocol", "SASL_SSL", "--kafka-username", user,
               "--kafka-password-file", str(tmp_path / "user.pw"),
               "--kafka-ca-file", str(secured.ca.ca_file), *topics]  # fmt: skip
    explain = ["explain", "--from-topic", "cheap", '{"price": 12}', *as_user]
    capsys.readouterr()
    assert main(explain) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        "psmatch explain: not authorised to read topic expl.subs: the principal needs READ "
        "on it"]  # fmt: skip
    create_acls(config.bootstrap_servers, reader_acls("expl.subs", f"User:{user}"),
                security=config.kafka_security)  # fmt: skip
    assert main(explain) == 0
    out = capsys.readouterr().out
    assert out.startswith("subscription cheap: price < 20") and "match" in out
    assert main(["explain", "--from-topic", "gone", '{"price": 0}', *as_user]) == 2
    assert "no subscription 'gone' in the topic expl.subs" in capsys.readouterr().err


@pytest.mark.integration
@pytest.mark.timeout(400)
def test_the_printed_acls_are_all_the_job_and_a_reader_need(
    secured: SecuredServices, tmp_path: Path, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A job principal with exactly ``psmatch acls`` (no super user), creating its topics
    itself, and a reader with exactly ``psmatch acls --reader``: the whole path works."""
    topics = topic_flags("acl", tmp_path)
    admin = [*kafka_flags(secured, tmp_path), *redis_flags(secured, tmp_path), *topics]
    for user in ("acl-job", "acl-reader"):
        secured.kafka.add_scram_users({user: secured.kafka_password[::-1]})
    assert main(["acls", "--principal", "User:acl-job", "--apply", *admin]) == 0
    assert main(["acls", "--principal", "User:acl-reader", "--reader", "--apply", *admin]) == 0
    printed = capsys.readouterr().out
    assert "ALLOW User:acl-job WRITE on topic acl.notif (literal)" in printed
    assert "ALLOW User:acl-reader READ on group psmatch-reader- (prefixed)" in printed
    (tmp_path / "user.pw").write_text(secured.kafka_password[::-1])

    def as_user(user: str) -> list[str]:
        flags = swap_flag(admin, "--kafka-username", user)
        return swap_flag(flags, "--kafka-password-file", str(tmp_path / "user.pw"))

    reports: list[Any] = []
    query = start_query(config_of(as_user("acl-job")), spark, on_report=reports.append)
    try:
        assert main(["subscribe", "cheap", "price < 20", *admin]) == 0
        assert main(["publish", '{"price": 12}', *admin]) == 0
        deadline = time.monotonic() + 120
        while sum(r.notifications for r in reports) < 1 and time.monotonic() < deadline:
            assert query.exception() is None, query.exception()
            time.sleep(0.5)
    finally:
        stop_query(query)
    capsys.readouterr()
    assert main(["tail", "--from-beginning", "--max", "1", "--idle-timeout", "20",
                 *as_user("acl-reader")]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["subscription_id"] == "cheap"


# -- settings, without servers ---------------------------------------------------------


def test_security_settings_for_each_client_kind() -> None:
    """librdkafka and Java (Spark) settings from one KafkaSecurity, TLS with a CA file
    and a client certificate."""
    sec = KafkaSecurity("SASL_SSL", "SCRAM-SHA-256", "u", 'p"w\\', "/etc/ca.pem",
                        "/etc/c.pem", "/etc/ks.pem")  # fmt: skip
    assert sec.client_config() == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "u", "sasl.password": 'p"w\\', "ssl.ca.location": "/etc/ca.pem",
        "ssl.certificate.location": "/etc/c.pem", "ssl.key.location": "/etc/ks.pem",
    }  # fmt: skip
    java = sec.java_config()
    assert java["sasl.jaas.config"] == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required '
        'username="u" password="p\\"w\\\\";'
    )
    assert (java["ssl.truststore.type"], java["ssl.truststore.location"]) == ("PEM", "/etc/ca.pem")
    assert (java["ssl.keystore.type"], java["ssl.keystore.location"]) == ("PEM", "/etc/ks.pem")
    assert "p\"w" not in repr(sec)
    assert KafkaSecurity().client_config() == {"security.protocol": "PLAINTEXT"}


def test_certificate_settings_are_checked_in_one_line(tmp_path: Path) -> None:
    ca = DevCA(tmp_path / "ca")
    issued = ca.issue("client")
    tls = {"kafka_security_protocol": "SSL", "kafka_cert_file": str(issued.cert_file)}
    with pytest.raises(ConfigError, match="go together"):
        ServiceConfig(**tls)
    with pytest.raises(ConfigError, match="holds no certificate"):
        ServiceConfig(**tls, kafka_key_file=str(issued.key_file))
    assert pem_keystore_problem(str(issued.keystore_file)) is None
    ServiceConfig(**tls, kafka_key_file=str(issued.keystore_file))
    with pytest.raises(ConfigError, match="needs kafka_security_protocol SSL or SASL_SSL"):
        ServiceConfig(kafka_cert_file=str(issued.cert_file),
                      kafka_key_file=str(issued.keystore_file))  # fmt: skip
    with pytest.raises(ConfigError, match=r"redis_ca_file is for TLS: give a rediss://"):
        ServiceConfig(redis_ca_file=str(ca.ca_file))
    rediss = ServiceConfig(redis_url="rediss://h:1/0", redis_ca_file=str(ca.ca_file),
                           redis_cert_file=str(issued.cert_file),
                           redis_key_file=str(issued.key_file))  # fmt: skip
    assert "ssl_certfile=" in rediss.redis_connection_url
    with pytest.raises(StateError, match="is for TLS"):  # the store's own check
        StateStore.from_url(f"redis://h:1/0?ssl_ca_certs={ca.ca_file}")


def test_spark_rpc_is_protected_on_clusters(caplog: pytest.LogCaptureFixture) -> None:
    assert spark_rpc_conf("local[2]") == {} and spark_rpc_conf("spark://h:7077") == {}
    on = {"spark.authenticate": "true", "spark.network.crypto.enabled": "true"}
    assert spark_rpc_conf("yarn") == on and spark_rpc_conf("k8s://https://h:6443") == on
    assert not warn_if_unprotected("local[*]", lambda name, default: default)
    assert not warn_if_unprotected("spark://h:7077", lambda name, default: on[name])
    assert not caplog.records
    assert warn_if_unprotected("spark://h:7077", lambda name, default: default)
    assert len(caplog.records) == 1 and "spark.authenticate" in caplog.records[0].message


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_the_record_sink_stops_at_a_refused_login(secured: SecuredServices) -> None:
    import pyarrow as pa

    from psmatch.adapters.kafka.client import KafkaAuthenticationError
    from psmatch.adapters.kafka.sink import RecordSink, SinkSettings

    wrong = KafkaSecurity("SASL_SSL", "SCRAM-SHA-512", SERVICE_USER,
                          "not-" + secured.kafka_password, str(secured.ca.ca_file))  # fmt: skip
    sink = RecordSink(SinkSettings(secured.kafka.bootstrap_servers, wrong))
    sink.write(pa.RecordBatch.from_pydict({"topic": ["any"], "key": [b"k"],
                                           "value": [b"v"]}))  # fmt: skip
    # the refusal itself, not "records not delivered" when the record's timeout ends
    with pytest.raises(KafkaAuthenticationError, match="refused the login") as refused:
        sink.flush()
    assert_no_secret(secured, str(refused.value))
