"""The subscription state in Redis: current subscriptions plus a versioned change log.

This module owns every Redis key the service writes (all under one prefix, default
``psmatch:``):

``<prefix>subs``
    hash: subscription id → the subscription record (a JSON string, see
    :mod:`streaming.records`); the live subscriptions, so a tombstone knows what to
    remove and a worker can load everything at once.
``<prefix>version``
    the number of changes applied so far; version *v* is the state after the *v*-th
    change.
``<prefix>log``
    a Redis stream whose entry ``<v>-0`` is the *v*-th change (``op`` = ``put`` with
    ``id`` and ``rec``, or ``del`` with ``id``). Trimmed to the last
    ``retention`` changes; a worker further behind reloads ``subs`` instead.
``<prefix>offsets``
    hash: ``<topic>:<partition>`` → offset of the last subscription record applied.
    A change whose offset is not above it is skipped, so applying the same micro-batch
    twice (a replay after a crash) leaves the same state and the same version.

Each :meth:`StateStore.apply` chunk runs as one Lua script, so readers never see half
of a chunk.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import redis

from index.errors import PsmatchError


class StateError(PsmatchError):
    """Redis subscription state that cannot be read or written."""


class ChangeLogGapError(StateError):
    """The change log no longer holds the changes a reader needs (trimmed or rebuilt)."""


@dataclass(frozen=True, slots=True)
class SourceChange:
    """A subscription change read from Kafka, to be applied to the state.

    ``record`` is the JSON text of the subscription for a put, ``None`` for a delete.
    """

    source: str  # "<topic>:<partition>"
    offset: int
    sub_id: str
    record: str | None


@dataclass(frozen=True, slots=True)
class Change:
    """One entry of the change log."""

    version: int
    op: Literal["put", "del"]
    sub_id: str
    record: str | None


@dataclass(frozen=True, slots=True)
class ApplyResult:
    version: int
    applied: int
    skipped: int


_APPLY_LUA = """
local retention = tonumber(ARGV[1])
local v = tonumber(redis.call('GET', KEYS[2]) or '0')
local applied = 0
local skipped = 0
local i = 2
while i <= #ARGV do
  local src = ARGV[i]
  local off = tonumber(ARGV[i + 1])
  local op = ARGV[i + 2]
  local id = ARGV[i + 3]
  local rec = ARGV[i + 4]
  i = i + 5
  local last = tonumber(redis.call('HGET', KEYS[4], src) or '-1')
  if off > last then
    redis.call('HSET', KEYS[4], src, ARGV[i - 4])
    if op == 'put' then
      redis.call('HSET', KEYS[1], id, rec)
      v = v + 1
      redis.call('XADD', KEYS[3], v .. '-0', 'op', 'put', 'id', id, 'rec', rec)
      applied = applied + 1
    elseif redis.call('HDEL', KEYS[1], id) == 1 then
      v = v + 1
      redis.call('XADD', KEYS[3], v .. '-0', 'op', 'del', 'id', id)
      applied = applied + 1
    else
      skipped = skipped + 1
    end
  else
    skipped = skipped + 1
  end
end
redis.call('SET', KEYS[2], v)
if v > retention then
  redis.call('XTRIM', KEYS[3], 'MINID', (v - retention + 1) .. '-0')
end
return {v, applied, skipped}
"""

_REBUILD_LUA = """
local v = tonumber(redis.call('GET', KEYS[2]) or '0') + 1
redis.call('DEL', KEYS[1], KEYS[3], KEYS[4])
redis.call('SET', KEYS[2], v)
return v
"""


class StateStore:
    """Reads and writes the subscription state under one Redis key prefix."""

    APPLY_CHUNK = 2000

    def __init__(self, client: redis.Redis, prefix: str = "psmatch:", retention: int = 200_000):
        if retention < 1:
            raise StateError("the change log retention must be >= 1")
        self.client = client
        self.prefix = prefix
        self.retention = retention
        self.k_subs = prefix + "subs"
        self.k_version = prefix + "version"
        self.k_log = prefix + "log"
        self.k_offsets = prefix + "offsets"
        self._apply = client.register_script(_APPLY_LUA)
        self._rebuild = client.register_script(_REBUILD_LUA)

    @classmethod
    def from_url(cls, url: str, prefix: str = "psmatch:", retention: int = 200_000) -> StateStore:
        client = redis.Redis.from_url(url, socket_timeout=30, socket_connect_timeout=10)
        return cls(client, prefix, retention)

    @property
    def _keys(self) -> list[str]:
        return [self.k_subs, self.k_version, self.k_log, self.k_offsets]

    def ping(self) -> None:
        try:
            self.client.ping()
        except redis.RedisError as exc:
            raise StateError(f"Redis is not reachable: {exc}") from exc

    # -- writes ------------------------------------------------------------------------

    def apply(self, changes: Sequence[SourceChange]) -> ApplyResult:
        """Apply changes in order; those already applied (by source offset) are skipped."""
        version = self.version()
        applied = skipped = 0
        for start in range(0, len(changes), self.APPLY_CHUNK):
            args: list[Any] = [self.retention]
            for c in changes[start : start + self.APPLY_CHUNK]:
                op = "put" if c.record is not None else "del"
                args += [c.source, c.offset, op, c.sub_id, c.record or ""]
            try:
                version, a, s = self._apply(keys=self._keys, args=args)
            except redis.RedisError as exc:
                raise StateError(f"could not apply subscription changes: {exc}") from exc
            applied += int(a)
            skipped += int(s)
        return ApplyResult(int(version), applied, skipped)

    def rebuild(self, records: Mapping[str, str], offsets: Mapping[str, int] | None = None) -> int:
        """Replace the whole state with ``records`` (id → record JSON); returns the version.

        The version moves forward by one and the change log is emptied, so every worker
        notices the gap and reloads.
        """
        try:
            version = int(self._rebuild(keys=self._keys))
            pipe = self.client.pipeline(transaction=True)
            items = list(records.items())
            for start in range(0, len(items), 10_000):
                pipe.hset(self.k_subs, mapping=dict(items[start : start + 10_000]))
            if offsets:
                pipe.hset(self.k_offsets, mapping={k: str(v) for k, v in offsets.items()})
            pipe.execute()
        except redis.RedisError as exc:
            raise StateError(f"could not rebuild the subscription state: {exc}") from exc
        return version

    def clear(self) -> None:
        self.client.delete(*self._keys)

    # -- reads -------------------------------------------------------------------------

    def version(self) -> int:
        try:
            return int(self.client.get(self.k_version) or 0)
        except redis.RedisError as exc:
            raise StateError(f"could not read the state version: {exc}") from exc

    def get(self, sub_id: str) -> str | None:
        value = self.client.hget(self.k_subs, sub_id)
        return None if value is None else _text(value)

    def count(self) -> int:
        return int(self.client.hlen(self.k_subs))

    def offsets(self) -> dict[str, int]:
        return {_text(k): int(v) for k, v in self.client.hgetall(self.k_offsets).items()}

    def snapshot(self) -> tuple[int, dict[str, str]]:
        """The version and all current subscriptions, read atomically."""
        try:
            pipe = self.client.pipeline(transaction=True)
            pipe.get(self.k_version)
            pipe.hgetall(self.k_subs)
            version, subs = pipe.execute()
        except redis.RedisError as exc:
            raise StateError(f"could not read the subscription state: {exc}") from exc
        return int(version or 0), {_text(k): _text(v) for k, v in subs.items()}

    def changes(self, after: int, upto: int) -> list[Change]:
        """Changes ``after+1 .. upto`` in order; :class:`ChangeLogGapError` if any is gone."""
        if upto <= after:
            return []
        try:
            entries = self.client.xrange(self.k_log, min=f"{after + 1}-0", max=f"{upto}-0")
        except redis.RedisError as exc:
            raise StateError(f"could not read the change log: {exc}") from exc
        out = [_change(entry_id, fields) for entry_id, fields in entries]
        if len(out) != upto - after or (out and out[0].version != after + 1):
            raise ChangeLogGapError(
                f"change log holds {len(out)} of the {upto - after} changes after version "
                f"{after} (retention {self.retention})"
            )
        return out


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _change(entry_id: bytes | str, fields: Mapping[Any, Any]) -> Change:
    f = {_text(k): _text(v) for k, v in fields.items()}
    version = int(_text(entry_id).split("-", 1)[0])
    op = "put" if f["op"] == "put" else "del"
    return Change(version, op, f["id"], f.get("rec") if op == "put" else None)


def dumps_record(expr: str, subscriber: str, extra: Mapping[str, Any]) -> str:
    """The canonical JSON text a subscription is stored as."""
    return json.dumps(
        {"expr": expr, "subscriber": subscriber, "extra": dict(extra)},
        separators=(",", ":"),
        sort_keys=True,
        ensure_ascii=False,
    )
