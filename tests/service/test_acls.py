"""The ACLs ``psmatch acls`` prints for the streaming job, for both delivery modes and both
tenancies (that they are all the job needs on a real broker is shown by
``tests/service/test_security.py`` and ``tests/service/test_tenants.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from psmatch.adapters.kafka.admin import Acl
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
]  # fmt: skip
TENANTS = [
    Acl(JOB, "READ", "topic", "s.", True), Acl(JOB, "WRITE", "topic", "n.", True),
    Acl(JOB, "WRITE", "topic", "r.", True), Acl(JOB, "READ", "topic", "e"),
    Acl(JOB, "WRITE", "topic", "r"), Acl(JOB, "CREATE", "topic", "e"),
    Acl(JOB, "CREATE", "topic", "r"),
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
        [acl.name for acl in service_acls(config, JOB) if acl.resource == kind]
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
