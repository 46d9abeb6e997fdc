"""The terminal sessions of README.md and docs/*.md, run as written against real Kafka,
Redis and Spark.

Each ``console`` block (see tests/docblocks.py) runs on a service of its own: fresh
topics, Redis prefix and checkpoint from ``make_config``, and the streaming query that
``psmatch run`` starts, here on the test session's Spark. Every ``$ command`` runs in
bash from the repository root with that config in ``PSMATCH_*`` variables, once the
query has processed everything published so far (``processAllAvailable``: what a person
waits for between two commands). Its stdout and stderr together must equal the lines
under it in the doc, with these placeholders:

* times: an ISO timestamp (``2026-11-25T22:16:48.766Z``) and ``"event_timestamp":<ms>``
  match any value;
* topics: the test's topic names are written back as the defaults
  (``psmatch.events``...), which the docs show;
* the output of ``psmatch tail`` compares in any order: it reads the topic's
  partitions concurrently;
* librdkafka's own log lines (``%4|1795667512.823|GETPID|...: retrying``) are dropped:
  warnings of retries while the test's freshly started broker loads its coordinators.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from psmatch.service.config import ENV_PREFIX, ServiceConfig
from psmatch.service.job import start_query, stop_query
from tests.docblocks import ROOT, Block, all_blocks

pytestmark = pytest.mark.timeout(600)

SESSIONS = [b for b in all_blocks() if b.language == "console" and b.not_executed is None]

_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
_EVENT_TIMESTAMP = re.compile(r'"event_timestamp":\d+')
_LIBRDKAFKA_LOG = re.compile(r"%\d\|\d+\.\d+\|[A-Z_]+\|")


def placeholders(text: str, command: str) -> list[str]:
    text = _EVENT_TIMESTAMP.sub('"event_timestamp":<ms>', _TIME.sub("<time>", text))
    lines = [line for line in text.splitlines() if not _LIBRDKAFKA_LOG.match(line)]
    return sorted(lines) if re.search(r"\bpsmatch tail\b", command) else lines


def as_documented(output: str, config: ServiceConfig) -> str:
    """The output with the test's topic names written back as the defaults."""
    defaults = ServiceConfig()
    for field in ("subscriptions_topic", "events_topic", "notifications_topic",
                  "rejected_topic"):  # fmt: skip
        output = output.replace(getattr(config, field), getattr(defaults, field))
    return output


def run(command: str, env: dict[str, str], timeout: float = 120) -> str:
    """Run one documented command; its stdout and stderr, interleaved. A command still
    running after ``timeout`` is killed with its whole process group and fails the test
    (a block that cannot finish, like ``make run``, must be marked not executed)."""
    proc = subprocess.Popen(
        ["bash", "-c", command], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        return proc.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError(f"still running after {timeout} s: $ {command}") from None


def test_the_docs_have_sessions_to_run() -> None:
    assert any(b.path.name == "README.md" for b in SESSIONS)


@pytest.mark.parametrize("block", SESSIONS, ids=lambda b: b.where)
def test_console_session_runs_as_documented(
    block: Block, spark: Any, make_config: Callable[..., ServiceConfig]
) -> None:
    config = make_config()
    env = {**os.environ,
           **{ENV_PREFIX + k.upper(): str(v) for k, v in dataclasses.asdict(config).items()}}
    query = start_query(config, spark)
    try:
        for command, expected in block.commands():
            query.processAllAvailable()
            actual = as_documented(run(command, env), config)
            assert placeholders(actual, command) == placeholders(expected, command), (
                f"{block.where}: $ {command}\n--- documented\n{expected}--- actual\n{actual}"
            )
    finally:
        stop_query(query)
