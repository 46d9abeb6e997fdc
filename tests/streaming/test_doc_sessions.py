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
  partitions concurrently.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from streaming.config import ENV_PREFIX, ServiceConfig
from streaming.job import start_query, stop_query
from tests.docblocks import ROOT, Block, all_blocks

pytestmark = pytest.mark.timeout(600)

SESSIONS = [b for b in all_blocks() if b.language == "console" and b.not_executed is None]

_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
_EVENT_TIMESTAMP = re.compile(r'"event_timestamp":\d+')


def placeholders(text: str, command: str) -> list[str]:
    text = _EVENT_TIMESTAMP.sub('"event_timestamp":<ms>', _TIME.sub("<time>", text))
    lines = text.splitlines()
    return sorted(lines) if re.search(r"\bpsmatch tail\b", command) else lines


def as_documented(output: str, config: ServiceConfig) -> str:
    """The output with the test's topic names written back as the defaults."""
    defaults = ServiceConfig()
    for field in ("subscriptions_topic", "events_topic", "notifications_topic",
                  "rejected_topic"):  # fmt: skip
        output = output.replace(getattr(config, field), getattr(defaults, field))
    return output


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
            result = subprocess.run(
                ["bash", "-c", command], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120,
            )  # fmt: skip
            actual = as_documented(result.stdout, config)
            assert placeholders(actual, command) == placeholders(expected, command), (
                f"{block.where}: $ {command}\n--- documented\n{expected}--- actual\n{actual}"
            )
    finally:
        stop_query(query)
