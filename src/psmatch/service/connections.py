"""This process's clients of the service's servers, opened at first use and kept for the
process's life (a Spark Python worker serves many tasks and batches): one
:class:`psmatch.adapters.state.StateStore` per Redis setting (:func:`state_store`) and one
:class:`psmatch.adapters.kafka.sink.RecordSink` per sink setting (:func:`record_sink`).
"""

from __future__ import annotations

import threading

from psmatch.adapters.kafka.sink import RecordSink, SinkSettings
from psmatch.adapters.state import StateStore
from psmatch.service.task_contract import WorkerSettings

_STORES: dict[tuple[str, str, int, float], StateStore] = {}
_SINKS: dict[SinkSettings, RecordSink] = {}
_LOCK = threading.Lock()


def state_store(settings: WorkerSettings) -> StateStore:
    """This process's state store for ``settings``'s Redis, opened at first use."""
    key = (settings.redis_url, settings.redis_prefix, settings.retention,
           settings.redis_retry_seconds)  # fmt: skip
    with _LOCK:
        store = _STORES.get(key)
        if store is None:
            store = _STORES[key] = StateStore.from_url(*key)
        return store


def record_sink(settings: SinkSettings) -> RecordSink:
    """This process's Kafka writer for ``settings``, opened at first use."""
    with _LOCK:
        sink = _SINKS.get(settings)
        if sink is None:
            sink = _SINKS[settings] = RecordSink(settings)
        return sink
