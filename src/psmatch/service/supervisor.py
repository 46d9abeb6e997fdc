"""Keeping the streaming query running: which failures are restarted, and how often.

``psmatch run`` watches its query. When the query stops on an exception,
:func:`classify_failure` tells an infrastructure fault (a broker or executor lost, a
timeout, anything not listed below) from a fault a restart cannot cure: Redis down past
``redis_retry_seconds`` (:class:`psmatch.adapters.state.StateUnavailableError`, whose message
the job exits with), credentials refused by Kafka or Redis, or a bad setting. A WRITE
the broker's ACLs refuse is restarted (an operator may grant it again) and named as such.
:class:`RestartBudget` then allows at most ``query_max_restarts`` restarts within
``query_restart_window_seconds``, waiting longer before each (exponential backoff with
jitter). A restarted query resumes from its checkpoint: the batch that failed is run
again, which the offset-based idempotence of :mod:`psmatch.adapters.state` makes safe.
"""

from __future__ import annotations

import random
import re
import time
from collections import deque
from dataclasses import dataclass

# The exception names, as they appear in the text of a failed query (Python tracebacks of
# foreachBatch or of a worker, or Java stack traces), of faults a restart does not cure.
_PERMANENT = (
    "StateUnavailableError",
    "StateAuthenticationError",
    "KafkaAuthenticationError",
    "SaslAuthenticationException",
    "AuthenticationException",
    "ConfigError",
)
# librdkafka's reason for a record the topic's ACLs refused, as the sink of the matching
# tasks names its failed records (``topic: reason``, psmatch.adapters.kafka.sink)
_WRITE_REFUSED = re.compile(r"([\w.-]+): Broker: Topic authorization failed")
_EXCEPTION_LINE = re.compile(
    r"^\s*(?:Caused by: )?(?:[\w.$]+\.)?(\w+(?:Error|Exception)): (.+)$", re.MULTILINE
)

RESTART_BASE_S = 2.0
RESTART_CAP_S = 60.0


@dataclass(frozen=True, slots=True)
class QueryFailure:
    """Why a query stopped: one line for the log, and whether a restart may help."""

    message: str
    transient: bool


def classify_failure(text: str) -> QueryFailure:
    """Classify the text of a query's exception (``str(query.exception())``).

    The message is the line of the innermost permanent fault when there is one (so
    ``StateUnavailableError``'s own explanation is what the operator reads), else the
    topic whose ACLs refused the output records (transient: a restart succeeds once the
    WRITE is granted again), else the last ``...Error: ...``/``...Exception: ...`` line
    (the root cause in a Python traceback, the last ``Caused by:`` of a Java one), else
    the first line; at most 500 characters.
    """
    lines = _EXCEPTION_LINE.findall(text)
    for name in _PERMANENT:
        found = [msg for exc, msg in lines if exc == name]
        if found:
            return QueryFailure(_short(f"{name}: {found[-1]}"), transient=False)
    refused = _WRITE_REFUSED.search(text)
    if refused:
        return QueryFailure(_short(f"not authorised to write topic {refused[1]}: the "
                                   "principal needs WRITE on it"), transient=True)  # fmt: skip
    if lines:
        name, msg = lines[-1]
        return QueryFailure(_short(f"{name}: {msg}"), transient=True)
    first = text.strip().splitlines()[0] if text.strip() else "no message"
    return QueryFailure(_short(first), transient=True)


def _short(line: str, limit: int = 500) -> str:
    line = line.strip()
    return line if len(line) <= limit else line[: limit - 3] + "..."


class RestartBudget:
    """At most ``max_restarts`` restarts within any ``window_s`` seconds.

    :meth:`next_delay` records a restart and returns how long to wait before it
    (``RESTART_BASE_S * 2**k`` for the ``k``-th restart in the window, capped at
    ``RESTART_CAP_S``, with jitter), or ``None`` when the budget is spent.
    """

    def __init__(self, max_restarts: int, window_s: float, clock: type = time) -> None:
        self.max_restarts = max_restarts
        self.window_s = window_s
        self._clock = clock
        self._restarts: deque[float] = deque()

    def next_delay(self) -> float | None:
        now = self._clock.monotonic()
        while self._restarts and now - self._restarts[0] > self.window_s:
            self._restarts.popleft()
        if len(self._restarts) >= self.max_restarts:
            return None
        cap = min(RESTART_CAP_S, RESTART_BASE_S * 2 ** len(self._restarts))
        self._restarts.append(now)
        return random.uniform(cap / 2, cap)

    @property
    def used(self) -> int:
        """Restarts within the current window."""
        return len(self._restarts)
