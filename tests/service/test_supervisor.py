"""Which query failures are restarted, and the restart budget (pure logic); which of
py4j's log records ``psmatch run`` drops (py4j against a socket that answers nothing).

The failure texts are shortened copies of what ``str(query.exception())`` holds.
"""

from __future__ import annotations

import logging
import socket
import threading

import pytest
from py4j.java_gateway import GatewayClient, GatewayParameters

from psmatch.service.cli.run import _not_py4j_on_root, query_failure
from psmatch.service.supervisor import RESTART_CAP_S, RestartBudget, classify_failure

PY_TRACEBACK = """[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided
function in foreach batch sink. Reason: An exception was raised by the Python Proxy. Return Message:
Traceback (most recent call last):
  File "/work/main/streaming/job.py", line 250, in __call__
    result = self.store.apply(changes)
psmatch.adapters.state.StateUnavailableError: could not apply subscription changes: Redis at \
127.0.0.1:6379/0 stayed unreachable for 300.2 s after 40 retries
"""
JAVA = """Job aborted due to stage failure: Task 0 in stage 3.0 failed 1 times, most recent failure:
org.apache.kafka.common.errors.TimeoutException: Topic psmatch.notifications not present \
in metadata after 60000 ms.
\tat org.apache.kafka.clients.producer.KafkaProducer.waitOnMetadata(KafkaProducer.java:1100)"""
SINK = """org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage \
3.0 failed 1 times, most recent failure: Lost task 0.0 in stage 3.0 (TID 5)
\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:3)
Caused by: org.apache.kafka.common.errors.TimeoutException: Expiring 1 record(s) for \
psmatch.notifications-1:120001 ms has passed since batch creation
 SQLSTATE: 39000 SQLSTATE: XXKST"""
REFUSED = """[FOREACH_BATCH_USER_FUNCTION_ERROR] ... Job aborted due to stage failure: Task 1 \
in stage 4.0 failed 1 times, most recent failure: Lost task 1.0 in stage 4.0 (TID 11): \
org.apache.spark.api.python.PythonException: [PYTHON_EXCEPTION] An exception was thrown from \
the Python worker: Traceback (most recent call last):
  File "/work/main/src/psmatch/adapters/kafka/sink.py", line 178, in flush
    raise KafkaServiceError(f"{failures} output records were not written to Kafka, "
psmatch.adapters.kafka.client.KafkaServiceError: 2 output records were not written to Kafka, \
e.g. lost.notif: Broker: Topic authorization failed; lost.notif: Broker: Topic authorization failed
 SQLSTATE: 38000
\tat org.apache.spark.api.python.PythonRunner.handlePythonException(PythonRunner.scala:665)
"""
AUTH = """org.apache.kafka.common.errors.SaslAuthenticationException: Authentication \
failed: Invalid username or password"""


def test_an_outage_past_the_deadline_is_not_restarted_and_keeps_its_message() -> None:
    failure = classify_failure(PY_TRACEBACK)
    assert not failure.transient
    assert failure.message.startswith("StateUnavailableError: could not apply subscription")


@pytest.mark.parametrize(("text", "transient", "start"), [
    (JAVA, True, "TimeoutException: Topic psmatch.notifications"),
    (SINK, True, "TimeoutException: Expiring 1 record(s)"),
    (AUTH, False, "SaslAuthenticationException: Authentication failed"),
    (REFUSED, True, "not authorised to write topic lost.notif: the principal needs WRITE on it"),
    ("something odd\nmore", True, "something odd"),
    ("", True, "no message"),
])  # fmt: skip
def test_classification(text: str, transient: bool, start: str) -> None:
    failure = classify_failure(text)
    assert failure.transient is transient and failure.message.startswith(start)


def test_the_failure_is_logged_in_full_at_debug_only(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="psmatch")
    assert query_failure(REFUSED) == classify_failure(REFUSED)
    assert caplog.records == []
    caplog.set_level(logging.DEBUG, logger="psmatch")
    query_failure(REFUSED)
    [record] = caplog.records
    assert record.levelno == logging.DEBUG and REFUSED in record.getMessage()


def root_records_of_an_unanswered_py4j_call(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The root logger's records while py4j calls a gateway that closes each connection
    unanswered, as the JVM's end does when a stop closes it, then logs one of its own."""
    server = socket.create_server(("127.0.0.1", 0))

    def close_unanswered() -> None:
        for _ in range(2):  # py4j tries once more on an empty answer
            connection, _ = server.accept()
            connection.recv(1024)
            connection.close()

    closer = threading.Thread(target=close_unanswered, daemon=True)
    closer.start()
    caplog.clear()
    with caplog.at_level(logging.INFO):
        client = GatewayClient(gateway_parameters=GatewayParameters(port=server.getsockname()[1]))
        assert client.send_command("c\nt\ngetName\ne\n") == "x"  # py4j's error answer
        logging.info("a record of our own")
    closer.join(5)
    server.close()
    return [r.getMessage() for r in caplog.records if r.name == "root"]


def test_py4j_reports_on_the_root_logger_are_dropped_and_others_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """py4j logs "Exception while sending command." with its traceback on the root
    logger; the filter ``psmatch run`` puts there drops that and nothing else."""
    unfiltered = root_records_of_an_unanswered_py4j_call(caplog)
    assert "Exception while sending command." in unfiltered
    root = logging.getLogger()
    root.addFilter(_not_py4j_on_root)
    try:
        assert root_records_of_an_unanswered_py4j_call(caplog) == ["a record of our own"]
    finally:
        root.removeFilter(_not_py4j_on_root)


class FakeClock:
    """A monotonic clock the test moves by hand."""

    now = 0.0

    @classmethod
    def monotonic(cls) -> float:
        return cls.now


def test_restart_budget_backs_off_and_is_bounded_per_window() -> None:
    FakeClock.now = 0.0
    budget = RestartBudget(3, 100.0, clock=FakeClock)  # type: ignore[arg-type]
    delays = [budget.next_delay() for _ in range(3)]
    assert all(d is not None for d in delays)
    assert [round(d or 0, 3) <= cap for d, cap in zip(delays, (2, 4, 8), strict=True)] == [True] * 3
    assert delays[2] is not None and delays[2] >= 4.0  # at least half of the third cap
    assert budget.next_delay() is None and budget.used == 3
    FakeClock.now = 101.0  # the window moved past the three restarts
    again = budget.next_delay()
    assert again is not None and again <= 2.0
    assert RestartBudget(0, 100.0).next_delay() is None
    many = RestartBudget(50, 1e9, clock=FakeClock)  # type: ignore[arg-type]
    assert max(many.next_delay() or 0 for _ in range(50)) <= RESTART_CAP_S
