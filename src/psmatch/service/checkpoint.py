"""The streaming query's checkpoint as local files: where it is, the offset ranges a
micro-batch reads (from the query's offset log, which Spark writes before the batch
runs), and the folder beside it where the workers keep their index snapshots.

A checkpoint that is not a local path (``hdfs://``, ``s3a://``...) tells none of these
(``None``): the job then applies subscription records in a Spark job and its workers keep
no snapshots.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path


def local_checkpoint(checkpoint_location: str) -> Path | None:
    """The checkpoint directory as an absolute local path; ``None`` when it is not a local
    path (``hdfs://``, ``s3a://``...), which the driver and the Python workers cannot
    open as files."""
    if "://" in checkpoint_location and not checkpoint_location.startswith("file://"):
        return None
    return Path(checkpoint_location.removeprefix("file://")).absolute()


def snapshot_dir(checkpoint_location: str) -> str | None:
    """Where the workers keep their index snapshots (:mod:`psmatch.service.snapshots`): the
    directory ``<checkpoint>.snapshots`` beside the checkpoint, since the checkpoint is
    already on storage every executor must reach; ``None`` (no snapshots) when the
    checkpoint is not a local path."""
    path = local_checkpoint(checkpoint_location)
    return None if path is None else str(path.with_name(path.name + ".snapshots"))


OffsetRanges = dict[tuple[str, int], tuple[int, int]]
"""``(topic, partition): (start, end)``: the offsets ``start <= offset < end``."""


def subscription_ranges(checkpoint_location: str, batch_id: int,
                        topics: Callable[[str], bool]) -> OffsetRanges | None:  # fmt: skip
    """The offset ranges ``(topic, partition): (start, end)`` that micro-batch
    ``batch_id`` reads of the topics that ``topics`` holds, those not empty; ``None``
    whenever that cannot be told.

    Spark writes ``<checkpoint>/offsets/<id>`` before it runs batch ``id`` (a version
    line ``v1``, a line of metadata, then one line per source: for the Kafka source
    ``{"topic": {"partition": offset}}``), and batch ``id`` starts where batch ``id - 1``
    ended. ``None`` for the first batch, a checkpoint that is not a local path, a missing
    or unexpected file, and a partition or topic the batch before did not have (Spark
    reads a new one from its earliest offset, which the log does not give).

    Cost: two small local files read, no Spark job.
    """
    path = local_checkpoint(checkpoint_location)
    if path is None or batch_id == 0:
        return None
    ends = []
    for n in (batch_id - 1, batch_id):
        try:
            lines = (path / "offsets" / str(n)).read_text().splitlines()
            if lines[0] != "v1" or len(lines) != 3:
                return None
            ends.append({(name, int(p)): int(offset)
                         for name, offsets in json.loads(lines[2]).items() if topics(name)
                         for p, offset in offsets.items()})  # fmt: skip
        except (OSError, IndexError, ValueError, AttributeError, TypeError):
            return None
    before, after = ends
    if not before or not after.keys() <= before.keys():
        return None
    return {tp: (before[tp], end) for tp, end in after.items() if end != before[tp]}
