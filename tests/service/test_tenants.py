"""Tenants on the real secured broker (``tenancy = "topics"``): alice and bob made by
``psmatch tenants add`` (their topics, ACLs and SCRAM users), one streaming query for the
module reading every tenant's subscriptions topic by pattern, delivering exactly once, as
a principal with exactly the ACLs ``psmatch acls --tenancy topics --delivery
exactly-once`` prints. Each subscribes through its own topic and reads its own
notifications alone (``psmatch tail`` reads ``read_committed``); writing or reading
another's topic is refused in one line; a record in alice's topic naming bob's id touches
only alice's. One test, on topics of its own, runs the same path delivering at least once
with that mode's ACLs, then shows that they do not let the job deliver exactly once.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from psmatch.adapters.kafka.admin import topic_names
from psmatch.adapters.state import StateStore
from psmatch.devservers.services import SecuredServices, secured_services
from psmatch.service.cli import main
from psmatch.service.config import ServiceConfig
from psmatch.service.delivery import transactional_prefix
from psmatch.service.job import start_query, stop_query
from psmatch.service.supervisor import classify_failure
from psmatch.service.tenants import TombstonesPending, remove_tenant
from tests.service.test_security import (
    assert_no_secret,
    config_of,
    kafka_flags,
    redis_flags,
    swap_flag,
    topic_flags,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]


@dataclass
class Tenancy:
    """The secured pair, the operator's flags (topics named ``<tag>.*``), the job's,
    each tenant's, and the running query."""

    secured: SecuredServices
    tag: str
    operator: list[str]
    job: list[str]
    config: ServiceConfig
    query: Any
    reports: list[Any]
    folder: Path

    def as_tenant(self, user: str, tenant: str | None = None) -> list[str]:
        """``user``'s own credentials, using the topics of ``tenant`` (default: its own)."""
        return ["--bootstrap-servers", self.secured.kafka.bootstrap_servers,
                "--kafka-security-protocol", "SASL_SSL", "--kafka-username", user,
                "--kafka-password-file", str(self.folder / f"{user}.pw"),
                "--kafka-ca-file", str(self.secured.ca.ca_file),
                *topic_flags(self.tag, self.folder), "--tenant", tenant or user]  # fmt: skip

    def wait_for(self, notifications: int) -> None:
        deadline = time.monotonic() + 120
        while sum(r.notifications for r in self.reports) < notifications:
            assert self.query.exception() is None, self.query.exception()
            assert time.monotonic() < deadline, "the notifications did not come"
            time.sleep(0.3)

    def wait_for_version(self, version: int) -> None:
        deadline = time.monotonic() + 120
        while max((r.version for r in self.reports), default=0) < version:
            assert self.query.exception() is None, self.query.exception()
            assert time.monotonic() < deadline, "the subscriptions were not applied"
            time.sleep(0.3)


def tail(flags: list[str], capsys: pytest.CaptureFixture[str], *extra: str) -> list[Any]:
    capsys.readouterr()
    assert main(["tail", "--from-beginning", "--idle-timeout", "4", *extra, *flags]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def refusal(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one line a refused command prints (exit 1, no traceback)."""
    capsys.readouterr()
    assert main(argv) == 1
    out = capsys.readouterr()
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.err, out.err
    return lines[0]


def start_tenancy(spark: Any, folder: Path, tag: str, delivery: str) -> Tenancy:
    """alice and bob added, and the job delivering in ``delivery``'s mode as the
    principal ``<tag>-job`` with exactly what ``psmatch acls`` prints for this layout
    and that mode."""
    secured = secured_services()
    operator = [*kafka_flags(secured, folder), *redis_flags(secured, folder),
                *topic_flags(tag, folder), "--tenancy", "topics"]  # fmt: skip
    for user in ("alice", "bob"):
        (folder / f"{user}.pw").write_text(f"{user}-{secured.kafka_password[::-1]}\n")
        assert main(["tenants", "add", user, "--password-file", str(folder / f"{user}.pw"),
                     *operator]) == 0  # fmt: skip
    job_password = folder / f"{tag}-job.pw"
    job_password.write_text(f"job-{secured.kafka_password[::-1]}\n")
    secured.kafka.add_scram_users({f"{tag}-job": job_password.read_text().strip()})
    assert main(["acls", "--principal", f"User:{tag}-job", "--delivery", delivery, "--apply",
                 *operator]) == 0  # fmt: skip
    job = [*swap_flag(swap_flag(operator, "--kafka-username", f"{tag}-job"),
                      "--kafka-password-file", str(job_password)),
           "--delivery", delivery]  # fmt: skip
    config = config_of(job)
    reports: list[Any] = []
    query = start_query(config, spark, on_report=reports.append)
    return Tenancy(secured, tag, operator, job, config, query, reports, folder)


@pytest.fixture(scope="module")
def tenancy(tmp_path_factory: pytest.TempPathFactory, spark: Any) -> Iterator[Tenancy]:
    tenancy = start_tenancy(spark, tmp_path_factory.mktemp("tenants"), "ten", "exactly-once")
    try:
        yield tenancy
    finally:
        stop_query(tenancy.query)


def each_reads_its_own(tenancy: Tenancy, capsys: pytest.CaptureFixture[str]) -> None:
    """alice and bob subscribe, each through its own topic; an event later, each reads
    its own notifications once, and no one else's."""
    alice, bob = tenancy.as_tenant("alice"), tenancy.as_tenant("bob")
    assert main(["subscribe", "cheap", "price < 20", "--extra", '{"phone": "a-1"}', *alice]) == 0
    assert main(["subscribe", "cheap", "price < 50", "--extra", '{"phone": "b-2"}', *bob]) == 0
    assert main(["subscribe", "bob-1", "price > 10", *bob]) == 0
    tenancy.wait_for_version(3)
    assert main(["publish", '{"price": 12}', '{"price": 30}', *tenancy.operator]) == 0
    tenancy.wait_for(4)  # alice's cheap once, bob's cheap twice and bob-1 twice: 5
    tenancy.wait_for(5)
    mine = tail(alice, capsys)
    assert [(n["subscription_id"], n["subscriber"], n["extra"], n["event"]) for n in mine] == [
        ("cheap", "cheap", {"phone": "a-1"}, {"price": 12})]
    his = tail(bob, capsys)
    assert sorted((n["subscription_id"], n["event"]["price"]) for n in his) == [
        ("bob-1", 12), ("bob-1", 30), ("cheap", 12), ("cheap", 30)]
    assert all(n["extra"] == {"phone": "b-2"} for n in his if n["subscription_id"] == "cheap")
    store = StateStore.from_url(tenancy.config.redis_connection_url, tenancy.config.redis_prefix)
    assert store.get("alice/cheap") is not None and store.get("bob/bob-1") is not None
    assert store.get("cheap") is None


def test_tenants_delivered_at_least_once_and_the_acls_that_mode_needs(
    tmp_path: Path, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """At least once, the same path works with that mode's ACLs; the job delivering
    exactly once with them stops in one line naming the transactional id it may not
    use, the id ``psmatch acls --delivery exactly-once`` grants by its prefix."""
    tenancy = start_tenancy(spark, tmp_path, "tal", "at-least-once")
    try:
        each_reads_its_own(tenancy, capsys)
    finally:
        stop_query(tenancy.query)
    config = config_of(swap_flag(tenancy.job, "--delivery", "exactly-once"))
    query = start_query(config, spark)
    try:
        assert main(["publish", '{"price": 13}', *tenancy.operator]) == 0
        deadline = time.monotonic() + 120
        while query.exception() is None:
            assert time.monotonic() < deadline, "the job did not stop"
            time.sleep(0.3)
        failure = classify_failure(str(query.exception()))
    finally:
        if query.exception() is None:  # a failed query has stopped
            stop_query(query)
    prefix = transactional_prefix(config.checkpoint_location, config.notifications_topic)
    assert re.fullmatch(f"KafkaAuthorizationError: not authorised to use transactional id "
                        f"{re.escape(prefix)}\\.p[01]: the principal needs WRITE on it "
                        r"\(psmatch acls --delivery exactly-once\)", failure.message), failure
    capsys.readouterr()
    assert main(["acls", "--principal", "User:tal-job", "--delivery", "exactly-once",
                 *tenancy.operator]) == 0  # fmt: skip
    assert (f"ALLOW User:tal-job WRITE on transactional_id {prefix}. (prefixed)"
            in capsys.readouterr().out.splitlines())  # fmt: skip


def test_each_tenant_subscribes_through_its_topic_and_reads_its_own_notifications(
    tenancy: Tenancy, capsys: pytest.CaptureFixture[str]
) -> None:
    each_reads_its_own(tenancy, capsys)


def test_a_tenant_may_not_write_anothers_subscriptions(
    tenancy: Tenancy, capsys: pytest.CaptureFixture[str]
) -> None:
    line = refusal(["subscribe", "bob-1", "price > 1000000",
                    *tenancy.as_tenant("alice", "bob")], capsys)  # fmt: skip
    assert line == ("psmatch subscribe: not authorised to write topic ten.subs.bob: the "
                    "principal needs WRITE on it")  # fmt: skip
    line = refusal(["unsubscribe", "bob-1", *tenancy.as_tenant("alice", "bob")], capsys)
    assert line == ("psmatch unsubscribe: not authorised to write topic ten.subs.bob: the "
                    "principal needs WRITE on it")  # fmt: skip
    # nor the events, which are the operator's
    line = refusal(["publish", '{"price": 1}', *tenancy.as_tenant("alice")], capsys)
    assert line == ("psmatch publish: not authorised to write topic ten.events: the "
                    "principal needs WRITE on it")  # fmt: skip
    assert_no_secret(tenancy.secured, line)


def test_a_tenant_may_not_read_anothers_notifications(
    tenancy: Tenancy, capsys: pytest.CaptureFixture[str]
) -> None:
    for extra in ((), ("--rejected",)):
        line = refusal(["tail", "--from-beginning", "--idle-timeout", "4", *extra,
                        *tenancy.as_tenant("alice", "bob")], capsys)  # fmt: skip
        topic = "ten.rejected.bob" if extra else "ten.notif.bob"
        assert line == (f"psmatch tail: not authorised to read topic {topic}: the principal "
                        "needs READ on it")  # fmt: skip


def test_a_tenant_explains_its_own_subscription_and_no_others(
    tenancy: Tenancy, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["explain", "--from-topic", "cheap", '{"price": 12}', "--timeout", "30",
                 *tenancy.as_tenant("alice")]) == 0  # fmt: skip
    assert capsys.readouterr().out.startswith("subscription cheap: price < 20")
    line = refusal(["explain", "--from-topic", "cheap", '{"price": 12}', "--timeout", "30",
                    *tenancy.as_tenant("alice", "bob")], capsys)  # fmt: skip
    assert line == ("psmatch explain: not authorised to read topic ten.subs.bob: the "
                    "principal needs READ on it")  # fmt: skip


def test_a_record_in_alices_topic_naming_bobs_id_touches_only_alices(
    tenancy: Tenancy, capsys: pytest.CaptureFixture[str]
) -> None:
    alice, bob = tenancy.as_tenant("alice"), tenancy.as_tenant("bob")
    store = StateStore.from_url(tenancy.config.redis_connection_url, tenancy.config.redis_prefix)
    assert main(["subscribe", "bob-1", "price > 1", *bob]) == 0
    tenancy.wait_for_version(store.version() + 1)
    bobs = store.get("bob/bob-1")
    version = store.version()
    assert main(["subscribe", "bob-1", "price > 1000000", *alice]) == 0
    assert main(["unsubscribe", "bob-1", *alice]) == 0
    tenancy.wait_for_version(version + 2)
    assert store.get("bob/bob-1") == bobs and store.get("alice/bob-1") is None
    # a bad record of alice's is rejected where alice reads it, and bob does not
    capsys.readouterr()
    sent = ["subscribe", "broken", "price <", *alice]
    assert main(sent) == 2  # the command refuses it before sending: send it raw
    from psmatch.adapters.kafka.producer import JsonProducer

    alice_config = config_of(alice)
    with JsonProducer(alice_config.bootstrap_servers, alice_config.kafka_security) as producer:
        producer.send("ten.subs.alice", b'{"expr": "price <"}', key="broken", raw=True)
    deadline = time.monotonic() + 60
    while not any(r.subscriptions_rejected for r in tenancy.reports):
        assert time.monotonic() < deadline, "the bad record was not rejected"
        time.sleep(0.3)
    rejected = tail(alice, capsys, "--rejected")
    assert [(r["code"], r["topic"], r["key"]) for r in rejected] == [
        ("invalid_expression", "ten.subs.alice", "broken")]
    assert tail(bob, capsys, "--rejected") == []


def test_tenants_are_listed_and_removed(
    tenancy: Tenancy, capsys: pytest.CaptureFixture[str]
) -> None:
    operator = tenancy.operator
    assert main(["tenants", "add", "carol", "--principal", "User:CN=carol", *operator]) == 0
    capsys.readouterr()
    assert main(["tenants", "list", *operator]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "alice: WRITE on its subscriptions by User:alice",
        "bob: WRITE on its subscriptions by User:bob",
        "carol: WRITE on its subscriptions by User:CN=carol"]  # fmt: skip
    assert main(["tenants", "remove", "carol", "--principal", "User:CN=carol",
                 "--delete-topics", *operator]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "deleted 5 ACLs of User:CN=carol" in out and "deleted topic ten.subs.carol" in out
    assert main(["tenants", "list", *operator]) == 0
    assert "carol" not in capsys.readouterr().out
    assert main(["tenants", "add", "Carol!", *operator]) == 2
    assert "a tenant's name is 1 to 63 of a-z" in capsys.readouterr().err


def test_a_tenants_topics_are_deleted_once_the_job_has_forgotten_its_subscriptions(
    tenancy: Tenancy, capsys: pytest.CaptureFixture[str]
) -> None:
    """``remove --delete-topics`` at once after subscribing: the topics go only once the
    job has applied the tombstones, so no notification is left to a topic that is gone."""
    operator = tenancy.operator
    (tenancy.folder / "dave.pw").write_text("dave-secret-1\n")
    assert main(["tenants", "add", "dave", "--password-file", str(tenancy.folder / "dave.pw"),
                 *operator]) == 0  # fmt: skip
    assert main(["subscribe", "d1", "price < 5", *tenancy.as_tenant("dave")]) == 0
    store = StateStore.from_url(tenancy.config.redis_connection_url, tenancy.config.redis_prefix)
    deadline = time.monotonic() + 120
    while store.get("dave/d1") is None:
        assert time.monotonic() < deadline, "dave's subscription was not applied"
        time.sleep(0.3)
    capsys.readouterr()
    assert main(["tenants", "remove", "dave", "--user", "--delete-topics", *operator]) == 0
    out = capsys.readouterr().out
    assert "deleted 1 subscriptions (tombstones in ten.subs.dave)" in out
    assert "deleted topic ten.subs.dave" in out and "deleted topic ten.notif.dave" in out, out
    assert store.held(["dave/d1", "alice/cheap"]) == ["alice/cheap"]


def test_a_tenants_topics_are_kept_while_the_state_still_holds_its_subscriptions(
    tenancy: Tenancy,
) -> None:
    """With no job applying the tombstones (a state no job serves), the topics are kept
    and the error says why, in one line."""
    operator = config_of(tenancy.operator)
    config = operator.replace(redis_prefix="ten-idle:")
    idle = StateStore.from_url(config.redis_connection_url, config.redis_prefix)
    idle.rebuild({"erin/e1": '{"expr": "price < 5"}'})
    (tenancy.folder / "erin.pw").write_text("erin-secret-1\n")
    assert main(["tenants", "add", "erin", "--password-file", str(tenancy.folder / "erin.pw"),
                 *tenancy.operator]) == 0  # fmt: skip
    assert main(["subscribe", "e1", "price < 5", *tenancy.as_tenant("erin")]) == 0
    with pytest.raises(TombstonesPending, match=r"the job still holds 1 of tenant erin's "
                       r"subscriptions \(e\.g\. erin/e1\) 2 s after their tombstones"
                       ) as pending:  # fmt: skip
        remove_tenant(config, "erin", "User:erin", delete_topics=True, timeout=2)
    assert "\n" not in str(pending.value)
    assert "ten.subs.erin" in topic_names(config.bootstrap_servers,
                                          security=config.kafka_security)  # fmt: skip
    idle.clear()
    # run again as the error says, against the state the job serves: the topics go
    done = remove_tenant(operator, "erin", "User:erin", delete_topics=True)
    assert "deleted topic ten.subs.erin" in done


def test_the_state_is_rebuilt_from_every_tenants_topic(
    tenancy: Tenancy, capsys: pytest.CaptureFixture[str]
) -> None:
    store = StateStore.from_url(tenancy.config.redis_connection_url, tenancy.config.redis_prefix)
    before = {sub_id: store.get(sub_id) for sub_id in ("alice/cheap", "bob/cheap", "bob/bob-1")}
    assert None not in before.values() and store.count() == 3
    capsys.readouterr()
    assert main(["rebuild-state", *tenancy.operator]) == 0
    out = capsys.readouterr().out
    assert "ten.subs.alice" in out and "ten.subs.bob" in out and ": 3 subscriptions" in out, out
    assert {sub_id: store.get(sub_id) for sub_id in before} == before and store.count() == 3
