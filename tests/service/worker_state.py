"""A worker's state for tests against a real Redis: its settings under a fresh key
prefix, the StateStore the driver writes, an emptied index cache, and subscription
changes to apply."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from psmatch.adapters.state import SourceChange, StateStore
from psmatch.service import index_cache
from psmatch.service.records.subscriptions import dumps_record
from psmatch.service.task_contract import WorkerSettings


@contextlib.contextmanager
def worker_state(redis_url: str, tmp_path: Path, name: str, retention: int,
                 **settings: Any) -> Iterator[tuple[WorkerSettings, StateStore]]:
    """Worker settings (PSTHash, snapshots under ``tmp_path``) and the store, on a key
    prefix of their own; the cache of worker indexes is empty on entry and on exit."""
    prefix = f"{name}-{uuid.uuid4().hex[:10]}:"
    worker_settings = WorkerSettings(
        redis_url=redis_url, redis_prefix=prefix, retention=retention, matcher="psthash",
        notifications_topic="n", rejected_topic="r", snapshot_dir=str(tmp_path / "snapshots"),
        **settings,
    )  # fmt: skip
    store = StateStore.from_url(redis_url, prefix, retention)
    index_cache.INDEXES.clear()
    try:
        yield worker_settings, store
    finally:
        index_cache.INDEXES.clear()
        store.clear()


def put(offset: int, sub_id: str, expr: str) -> SourceChange:
    """The change that stores subscription ``sub_id`` at source offset ``offset``."""
    return SourceChange("subs:0", offset, sub_id, dumps_record(expr, "who", {}))
