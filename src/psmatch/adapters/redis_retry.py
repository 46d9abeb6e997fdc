"""Waiting out Redis outages: the backoff between retries, and this process's figures.

Owns the retry schedule of :class:`psmatch.adapters.state.StateStore` (exponential
backoff with jitter, :func:`backoff_delay`) and the process-wide count of retries and
outages, with the length of the current one (:func:`redis_retry_stats`, which the
metrics read at each scrape). The retry loop itself, and its errors, are the store's.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass

# The n-th wait is uniform in [d/2, d], d = min(CAP, BASE * 2**n): quick retries for a
# blip, no more than one attempt (and one log line) per CAP seconds in a long outage, and
# jitter so that many workers do not reconnect in lockstep.
RETRY_BASE_S = 0.25
RETRY_CAP_S = 10.0


def backoff_delay(attempt: int, left: float) -> float:
    """Seconds to wait before retry ``attempt + 1`` (0-based ``attempt``), at most ``left``."""
    cap = min(RETRY_CAP_S, RETRY_BASE_S * 2**attempt)
    return min(random.uniform(cap / 2, cap), left)


@dataclass(frozen=True, slots=True)
class RedisRetryStats:
    """This process's Redis retries, for the metrics.

    ``retries``: connection errors retried since the process started (a counter);
    ``outages``: times Redis went from reachable to unreachable (a counter);
    ``waiting_seconds``: how long the current outage has lasted, 0 when Redis answers.
    """

    retries: int
    outages: int
    waiting_seconds: float


class _RetryState:
    """Process-wide retry figures: a store's calls may run in several threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.retries = 0
        self.outages = 0
        self._waiting: dict[int, float] = {}  # thread id -> monotonic start of its wait

    def retry(self, started: float) -> None:
        with self._lock:
            if not self._waiting:
                self.outages += 1
            self._waiting[threading.get_ident()] = started
            self.retries += 1

    def recovered(self) -> None:
        with self._lock:
            self._waiting.pop(threading.get_ident(), None)

    def snapshot(self) -> RedisRetryStats:
        with self._lock:
            since = min(self._waiting.values(), default=None)
            waited = 0.0 if since is None else time.monotonic() - since
            return RedisRetryStats(self.retries, self.outages, waited)


_RETRIES = _RetryState()


def note_retry(started: float) -> None:
    """The calling thread retries a call that first failed at ``started`` (monotonic)."""
    _RETRIES.retry(started)


def note_recovered() -> None:
    """The calling thread's wait is over (Redis answered, or the caller gave up)."""
    _RETRIES.recovered()


def redis_retry_stats() -> RedisRetryStats:
    """Retries and the current outage's length in this process (see
    :class:`psmatch.adapters.state.StateStore`)."""
    return _RETRIES.snapshot()
