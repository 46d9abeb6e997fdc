"""The ACLs ``psmatch acls`` prints for the streaming job, for both delivery modes and both
tenancies, and, on the real secured broker, that each ACL exactly-once delivery adds is
needed by a task's transactional sink (that the printed ACLs are all the job needs is
shown by ``tests/service/test_security.py`` and ``tests/service/test_tenants.py``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from psmatch.adapters.kafka.admin import Acl
from psmatch.adapters.kafka.reader import GROUP_PREFIX
from psmatch.service.acls import service_acls
from psmatch.service.cli import main
from psmatch.service.config import ServiceConfig
from psmatch.service.delivery import transactional_prefix

JOB = "User:job"
TOPICS = {"subscriptions_topic": "s", "events_topic": "e", "notifications_topic": "n",
          "rejected_topic": "r"}  # fmt: skip

SINGLE = [
    Acl(JOB, "READ", "topic", "s"), Acl(JOB, "READ", "topic", "e"),
    Acl(JOB, "WRITE", "topic", "n"), Acl(JOB, "WRITE", "topic", "r"),
    *(Acl(JOB, "CREATE", "topic", name) for name in "senr"),
    Acl(JOB, "READ", "group", GROUP_PREFIX, True),  # the driver's reader of subscriptions
]  # fmt: skip
TENANTS = [
    Acl(JOB, "READ", "topic", "s.", True), Acl(JOB, "WRITE", "topic", "n.", True),
    Acl(JOB, "WRITE", "topic", "r.", True), Acl(JOB, "READ", "topic", "e"),
    Acl(JOB, "WRITE", "topic", "r"), Acl(JOB, "CREATE", "topic", "e"),
    Acl(JOB, "CREATE", "topic", "r"), Acl(JOB, "READ", "group", GROUP_PREFIX, True),
]  # fmt: skip


def transactional(checkpoint: str) -> list[Acl]:
    """What exactly-once adds: the tasks' transactional ids and marker groups, by the
    prefix the job gives them."""
    prefix = transactional_prefix(checkpoint, "n") + "."
    return [Acl(JOB, "WRITE", "transactional_id", prefix, True),
            Acl(JOB, "READ", "group", prefix, True)]  # fmt: skip


@pytest.mark.parametrize("tenancy", ["single", "topics"])
@pytest.mark.parametrize("delivery", ["at-least-once", "exactly-once"])
def test_the_job_needs_its_topics_and_with_exactly_once_its_transactional_ids(
    tenancy: str, delivery: str
) -> None:
    config = ServiceConfig(**TOPICS, tenancy=tenancy, delivery=delivery,
                           checkpoint_location="/srv/psmatch/checkpoint")  # fmt: skip
    expected = SINGLE if tenancy == "single" else TENANTS
    if delivery == "exactly-once":
        expected = [*expected, *transactional("/srv/psmatch/checkpoint")]
    assert service_acls(config, JOB) == expected


def test_the_transactional_prefix_covers_every_task_and_only_the_querys() -> None:
    """Every task's ``transactional.id`` (``<prefix>.p<partition>`` or ``.s<shard>``, its
    marker group named the same) starts with the printed prefix; another checkpoint (a
    query of its own) does not."""
    config = ServiceConfig(**TOPICS, delivery="exactly-once", checkpoint_location="/a/cp")
    ids, groups = (
        [acl.name for acl in service_acls(config, JOB)
         if acl.resource == kind and acl.name != GROUP_PREFIX]
        for kind in ("transactional_id", "group")
    )  # fmt: skip
    assert ids == groups and len(ids) == 1
    prefix = transactional_prefix("/a/cp", "n")
    assert all(f"{prefix}.{task}".startswith(ids[0]) for task in ("p0", "p11", "s3"))
    assert not transactional_prefix("/b/cp", "n").startswith(ids[0])


def test_psmatch_acls_prints_the_transactional_acls_of_the_jobs_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = str(tmp_path / "checkpoint")
    flags = ["--principal", JOB, "--checkpoint-location", checkpoint,
             *(f"--{name.replace('_', '-')}={topic}" for name, topic in TOPICS.items())]
    assert main(["acls", *flags]) == 0
    assert capsys.readouterr().out.splitlines() == [str(acl) for acl in SINGLE]
    assert main(["acls", *flags, "--delivery", "exactly-once", "--tenancy", "topics"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed == [str(acl) for acl in (*TENANTS, *transactional(checkpoint))]
    assert printed[-2:] == [
        f"ALLOW {JOB} WRITE on transactional_id {transactional_prefix(checkpoint, 'n')}. "
        "(prefixed)",
        f"ALLOW {JOB} READ on group {transactional_prefix(checkpoint, 'n')}. (prefixed)"]


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_each_acl_of_exactly_once_is_needed_and_a_task_lacking_one_says_which(
    tmp_path: Path,
) -> None:
    """On the secured broker, a task's transactional sink as a principal with the printed
    ACLs commits its records and marker; without WRITE on the transactional ids, or with
    DESCRIBE instead of READ on the marker groups, it stops in one line naming the ACL;
    without any ACL on the groups, librdkafka waits, and the line names the group."""
    import pyarrow as pa

    from psmatch.adapters.kafka.admin import create_acls, ensure_topics
    from psmatch.adapters.kafka.client import KafkaAuthorizationError, KafkaServiceError
    from psmatch.adapters.kafka.security import KafkaSecurity
    from psmatch.adapters.kafka.sink import SinkSettings, TransactionalSink
    from psmatch.devservers.services import SERVICE_USER, secured_services

    secured = secured_services()
    ca = str(secured.ca.ca_file)
    admin = KafkaSecurity("SASL_SSL", "SCRAM-SHA-512", SERVICE_USER, secured.kafka_password, ca)
    servers = secured.kafka.bootstrap_servers
    topics = {"subscriptions_topic": "eos-acl.s", "events_topic": "eos-acl.e",
              "notifications_topic": "eos-acl.n", "rejected_topic": "eos-acl.r"}  # fmt: skip
    ensure_topics(servers, {topic: {} for topic in topics.values()}, security=admin)
    config = ServiceConfig(**topics, delivery="exactly-once",
                           checkpoint_location=str(tmp_path / "checkpoint"))  # fmt: skip
    task_id = f"{transactional_prefix(config.checkpoint_location, 'eos-acl.n')}.p0"
    record = pa.RecordBatch.from_pydict({"topic": ["eos-acl.n"], "key": [b"k"],
                                         "value": [b"v"]})  # fmt: skip

    def task_as(user: str, keep: Callable[[Acl], Acl | None], timeout_s: float = 30) -> None:
        """One task's transaction as ``user``, granted the printed ACLs through ``keep``."""
        secured.kafka.add_scram_users({user: secured.kafka_password[::-1]})
        granted = [keep(acl) for acl in service_acls(config, f"User:{user}")]
        create_acls(servers, [acl for acl in granted if acl is not None], security=admin)
        own = KafkaSecurity("SASL_SSL", "SCRAM-SHA-512", user, secured.kafka_password[::-1], ca)
        sink = TransactionalSink(SinkSettings(servers, own), task_id, task_id, timeout_s)
        try:
            marker = sink.committed("eos-acl.e", [0])
            sink.begin()
            sink.write(record)
            sink.commit("eos-acl.e", {0: marker[0] + 1}, "batch 0")
        finally:
            sink.close()

    task_as("eos-acl-all", lambda acl: acl)
    with pytest.raises(KafkaAuthorizationError) as refused:
        task_as("eos-acl-no-id", lambda acl: None if acl.resource == "transactional_id" else acl)
    assert str(refused.value) == (f"not authorised to use transactional id {task_id}: the "
                                  "principal needs WRITE on it (psmatch acls --delivery "
                                  "exactly-once)")  # fmt: skip
    with pytest.raises(KafkaAuthorizationError) as refused:
        task_as("eos-acl-describe", lambda acl: Acl(
            acl.principal, "DESCRIBE", "group", acl.name, True) if acl.resource == "group" else acl)
    assert str(refused.value) == (f"not authorised to commit to consumer group {task_id}: "
                                  "the principal needs READ on it (psmatch acls --delivery "
                                  "exactly-once)")  # fmt: skip
    with pytest.raises(KafkaServiceError) as refused:
        task_as("eos-acl-no-group", lambda acl: None if acl.resource == "group" else acl, 3)
    assert str(refused.value) == (f"could not read the marker of consumer group {task_id} "
                                  "within 3 s: is the broker reachable, and may the principal "
                                  "READ the group (psmatch acls --delivery exactly-once)?")
