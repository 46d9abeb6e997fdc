"""The job losing an ACL while it runs, on the real secured broker: ``psmatch run`` as a
process of its own, as a principal with exactly the ACLs ``psmatch acls`` prints. Its
WRITE on the notifications topic is deleted while events keep coming: each failed
attempt is one WARNING line naming the refusal (no traceback, no Java stack, no
password), the query is restarted with backoff, and once the ACL is back every
notification is there (at least once: duplicates allowed, nothing lost).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from psmatch.adapters.kafka.admin import Acl, create_acls, delete_acls
from psmatch.devservers.services import SecuredServices, secured_services
from psmatch.scan import ScanMatcher
from psmatch.service.cli import main
from psmatch.service.config import ENV_PREFIX, ServiceConfig
from tests.service.test_security import (
    assert_no_secret,
    config_of,
    kafka_flags,
    redis_flags,
    swap_flag,
    topic_flags,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]

ROOT = Path(__file__).resolve().parents[2]
USER = "acl-job"
SUBSCRIPTIONS = {"cheap": "price < 20", "mid": "price >= 10 and price < 40", "dear": "price >= 30"}
FAILED = "the streaming query failed ("
APPLIED = "psmatch_subscription_changes_applied_total"
NOTIFIED = "psmatch_notifications_total"
RESTARTS = "psmatch_query_restarts_total"


@dataclass
class Job:
    """``psmatch run`` in a child process (its settings in ``PSMATCH_*`` variables, its
    stdout and stderr in one file)."""

    proc: subprocess.Popen[bytes]
    log_file: Path

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")

    def wait_until(self, predicate: Callable[[], bool], what: str, timeout: float = 150) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            tail = "\n".join(self.log().splitlines()[-30:])
            assert self.proc.poll() is None, f"psmatch run exited waiting for {what}:\n{tail}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{tail}"
            time.sleep(0.5)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        return self.proc.returncode


def start_job(config: ServiceConfig, log_file: Path) -> Job:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    env.update({ENV_PREFIX + k.upper(): str(v) for k, v in config.as_dict().items()
                if k not in ("kafka_password", "redis_password")})  # fmt: skip
    with log_file.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "psmatch", "run"], cwd=ROOT, env=env,
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)  # fmt: skip
    return Job(proc, log_file)


def expected_pairs(events: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """The (subscription, event) pairs of :data:`SUBSCRIPTIONS` and ``events``, by scan."""
    matcher = ScanMatcher()
    for sub_id, expr in SUBSCRIPTIONS.items():
        matcher.add(sub_id, expr)
    matcher.check()
    return {(sub_id, json.dumps(event, sort_keys=True))
            for event in events for sub_id in matcher.match(event)}  # fmt: skip


def metric(config: ServiceConfig, name: str) -> float:
    """A counter of the job's metrics (0 while the job does not answer)."""
    from prometheus_client.parser import text_string_to_metric_families

    url = f"http://127.0.0.1:{config.metrics_port}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return 0.0
    samples = (s for f in text_string_to_metric_families(text) for s in f.samples)
    return sum(s.value for s in samples if s.name == name)


def notified(operator: list[str], capsys: pytest.CaptureFixture[str]) -> set[tuple[str, str]]:
    """The (subscription, event) pairs of the notifications topic, read by ``psmatch tail``
    (a read_committed consumer) from the beginning."""
    capsys.readouterr()
    assert main(["tail", "--from-beginning", "--idle-timeout", "3", *operator]) == 0
    got = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    return {(n["subscription_id"], json.dumps(n["event"], sort_keys=True)) for n in got}


@pytest.fixture(scope="module")
def secured() -> SecuredServices:
    return secured_services()


def test_a_revoked_write_acl_is_one_line_per_attempt_and_loses_nothing(
    secured: SecuredServices, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    operator = [*kafka_flags(secured, tmp_path), *redis_flags(secured, tmp_path),
                *topic_flags("lost", tmp_path)]  # fmt: skip
    password = tmp_path / f"{USER}.pw"
    password.write_text(f"{USER}-{secured.kafka_password[::-1]}\n")
    secured.kafka.add_scram_users({USER: password.read_text().strip()})
    assert main(["acls", "--principal", f"User:{USER}", "--apply", *operator]) == 0
    config = config_of(swap_flag(swap_flag(operator, "--kafka-username", USER),
                                 "--kafka-password-file", str(password)))  # fmt: skip
    admin = (secured.kafka.bootstrap_servers, config_of(operator).kafka_security)
    write = Acl(f"User:{USER}", "WRITE", "topic", config.notifications_topic)
    events: list[dict[str, Any]] = []

    def publish(*prices: int) -> None:
        new = [{"price": p, "n": len(events) + i} for i, p in enumerate(prices)]
        events.extend(new)
        assert main(["publish", *(json.dumps(e) for e in new), *operator]) == 0

    job = start_job(config, tmp_path / "job.log")
    try:
        job.wait_until(lambda: "running; Ctrl-C stops" in job.log(), "the query to start")
        for sub_id, expr in SUBSCRIPTIONS.items():
            assert main(["subscribe", sub_id, expr, *operator]) == 0
        job.wait_until(lambda: metric(config, APPLIED) >= len(SUBSCRIPTIONS),
                       "the subscriptions to be applied")  # fmt: skip
        publish(5, 15, 35)
        job.wait_until(lambda: metric(config, NOTIFIED) >= len(expected_pairs(events)),
                       "the first notifications")  # fmt: skip

        assert delete_acls(admin[0], [write], security=admin[1]) == 1
        # events keep coming while the query fails and is restarted; a second failure
        # is the restarted query refused as well
        deadline = time.monotonic() + 150
        while job.log().count(FAILED) < 2:
            assert job.proc.poll() is None and time.monotonic() < deadline, job.log()[-3000:]
            publish(12, 33, 8)
            time.sleep(2)
        create_acls(admin[0], [write], security=admin[1])
        publish(1, 25)

        expected = expected_pairs(events)
        job.wait_until(lambda: notified(operator, capsys) >= expected, "every notification")
        restarts = metric(config, RESTARTS)
    finally:
        code = job.stop()
    assert code == 0
    assert notified(operator, capsys) == expected  # at least once: nothing lost, nothing else
    log = job.log()
    failures = [line for line in log.splitlines() if FAILED in line]
    assert len(failures) == restarts >= 2, log[-3000:]
    for line in failures:
        assert re.fullmatch(
            r"[\d:]+ WARNING psmatch: the streaming query failed \(not authorised to write topic "
            r"lost\.notif: the principal needs WRITE on it\); restarting it from the checkpoint "
            r"in [\d.]+ s \(restart \d of at most 5 per 600 s\)", line), line  # fmt: skip
    # one line per failed attempt, and nothing else of the refusals
    assert sum("authori" in line.lower() for line in log.splitlines()) == len(failures), log
    assert "Traceback (most recent call last)" not in log, log
    assert not re.search(r"^\s+at ", log, re.MULTILINE), log
    assert "Caused by" not in log, log
    assert_no_secret(secured, log)
    assert password.read_text().strip() not in log
