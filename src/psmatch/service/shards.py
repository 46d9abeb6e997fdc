"""Sharding of the subscriptions: which shard holds a subscription.

Owns the one function that splits subscriptions into shards, :func:`shard_of`, and the
:class:`Shard` a worker index holds. With ``--shards N`` (``ServiceConfig.shards``) the
subscriptions are split into N disjoint shards by a stable hash of their id; a worker's
index of shard i holds only the subscriptions of shard i (its reload, change-log
catch-up and snapshot, :mod:`psmatch.service.index_cache` and
:mod:`psmatch.service.snapshots`, all go through :meth:`Shard.holds`), and every event
is matched by every shard (:mod:`psmatch.service.job` pairs each event with each shard
id and partitions the pairs by shard), so the notifications are the union of the shards'
matches.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass


def shard_of(sub_id: str, shards: int) -> int:
    """The shard (``0 .. shards - 1``) of subscription ``sub_id``: the CRC-32 of its UTF-8
    bytes modulo ``shards``. Stable across processes, machines and Python versions
    (never Python's ``hash``, which is salted per process), so every worker, every
    snapshot and every test agrees on it.

    Cost: one CRC-32 over the id, a fraction of a microsecond for a short id.
    """
    return zlib.crc32(sub_id.encode("utf-8", "surrogatepass")) % shards


@dataclass(frozen=True, slots=True)
class Shard:
    """Shard ``number`` of ``count``: the subscriptions whose :func:`shard_of` is
    ``number``. The default, shard 0 of 1, holds every subscription."""

    number: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.number < self.count:
            raise ValueError(f"shard {self.number} of {self.count} does not exist")

    def holds(self, sub_id: str) -> bool:
        """Whether subscription ``sub_id`` belongs to this shard (always, with one)."""
        return self.count == 1 or shard_of(sub_id, self.count) == self.number

    def __str__(self) -> str:
        return f"shard {self.number} of {self.count}"


WHOLE = Shard()
"""The one shard of an unsharded service (``--shards 1``): every subscription."""
