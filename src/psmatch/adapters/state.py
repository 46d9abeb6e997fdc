"""The subscription state in Redis: current subscriptions plus a versioned change log.

This module owns every Redis key the service writes (all under one prefix, default
``psmatch:``):

``<prefix>subs``
    hash: subscription id → the subscription record (a JSON string, see
    :mod:`psmatch.service.records.subscriptions`); the live subscriptions, so a tombstone
    knows what to remove and a worker can load everything at once.
``<prefix>version``
    the number of changes applied so far; version *v* is the state after the *v*-th
    change.
``<prefix>log``
    a Redis stream whose entry ``<v>-0`` is the *v*-th change (``op`` = ``put`` with
    ``id``, ``rec`` and, unless too large, ``nf``, the expression's normal form, so that
    the workers need not parse it again; or ``del`` with ``id``). Trimmed to the last
    ``retention`` changes, but never within the changes of the latest micro-batch
    (:meth:`StateStore.apply`'s ``floor``): the workers catch up to every batch from
    the log however many changes it had, instead of reading every subscription again
    (so the log holds up to the larger of ``retention`` and the largest batch's
    changes). A worker further behind reloads ``subs`` instead.
``<prefix>offsets``
    hash: ``<topic>:<partition>`` → offset of the last subscription record applied.
    A change whose offset is not above it is skipped, so applying the same micro-batch
    twice (a replay after a crash) leaves the same state and the same version.

Each :meth:`StateStore.apply` chunk runs as one Lua script
(:mod:`psmatch.adapters.state_scripts`), so readers never see half of a chunk.

Redis outages are waited out here, for every caller (the driver's ``foreachBatch`` and
the executors' Python workers alike): a connection error or timeout is retried with
exponential backoff and jitter until ``retry_seconds`` have passed since the first
failure, one log line per retry (the schedule is :mod:`psmatch.adapters.redis_retry`'s,
which also counts them for the metrics); past that, :class:`StateUnavailableError`.
Retrying a change is safe because of the offset check above.
A wrong password fails at once (:class:`StateAuthenticationError`), and so does a TLS
refusal, which looks like an outage to the client (a CA that does not verify the server,
a client certificate the server does not accept, ``redis://`` to a TLS port or
``rediss://`` to a plaintext one): the first failure of a call asks the server once
(:mod:`psmatch.adapters.tls_probe`). Neither log lines nor errors ever contain a
password: the server is named by :func:`redact_url`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Literal, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from psmatch.adapters.redis_retry import backoff_delay, note_recovered, note_retry
from psmatch.adapters.state_scripts import APPLY_LUA, REBUILD_LUA
from psmatch.adapters.tls_probe import redis_tls_refusal
from psmatch.errors import PsmatchError


class StateError(PsmatchError):
    """Redis subscription state that cannot be read or written."""


class ChangeLogGapError(StateError):
    """The change log no longer holds the changes a reader needs (trimmed or rebuilt)."""


class StateUnavailableError(StateError):
    """Redis stayed unreachable for longer than the store waits (``retry_seconds``)."""


class StateAuthenticationError(StateError):
    """Redis refused the connection: its credentials (a wrong or missing password) or its
    TLS (see the module docstring); retrying cannot help."""


log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_RETRY_SECONDS = 300.0


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for logs and error messages)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


@dataclass(frozen=True, slots=True)
class SourceChange:
    """A subscription change read from Kafka, to be applied to the state.

    ``record`` is the JSON text of the subscription for a put, ``None`` for a delete;
    ``normal_form`` the text of its expression's DNF (see
    :attr:`psmatch.service.records.subscriptions.SubscriptionChange.normal_form`), for the
    change log only.
    """

    source: str  # "<topic>:<partition>"
    offset: int
    sub_id: str
    record: str | None
    normal_form: str | None = None


@dataclass(frozen=True, slots=True)
class Change:
    """One entry of the change log."""

    version: int
    op: Literal["put", "del"]
    sub_id: str
    record: str | None
    normal_form: str | None = None


@dataclass(frozen=True, slots=True)
class ChangeRun:
    """Consecutive entries of the change log, by column: version ``first + i`` is the
    change of ``ids[i]`` to the stored text ``records[i]`` (UTF-8 bytes as Redis holds
    them, ``None`` for a delete), logged with the normal form ``forms[i]`` (bytes,
    ``None`` when none was logged). No object per change: what a worker's catch-up
    reads (:meth:`StateStore.change_runs`)."""

    first: int
    ids: list[str]
    records: list[bytes | None]
    forms: list[bytes | None]

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def last(self) -> int:
        """The version of the run's last change."""
        return self.first + len(self.ids) - 1

    def changes(self) -> list[Change]:
        """The run's changes, one object each, their texts decoded."""
        return [Change(version, "del", sub_id, None) if record is None else
                Change(version, "put", sub_id, record.decode(),
                       None if form is None else form.decode())
                for version, sub_id, record, form in zip(
                    range(self.first, self.first + len(self.ids)), self.ids, self.records,
                    self.forms, strict=True)]  # fmt: skip


@dataclass(frozen=True, slots=True)
class ApplyResult:
    version: int
    applied: int
    skipped: int


class StateStore:
    """Reads and writes the subscription state under one Redis key prefix.

    Every method waits out a Redis outage of up to ``retry_seconds`` (see the module
    docstring); ``retry_seconds=0`` fails at the first connection error.
    """

    APPLY_CHUNK = 2000

    def __init__(
        self,
        client: redis.Redis,
        prefix: str = "psmatch:",
        retention: int = 200_000,
        retry_seconds: float = DEFAULT_RETRY_SECONDS,
    ):
        if retention < 1:
            raise StateError("the change log retention must be >= 1")
        if retry_seconds < 0:
            raise StateError("the Redis retry time must be >= 0 seconds")
        if client.connection_pool.connection_kwargs.get("decode_responses"):
            raise StateError("the state store reads bytes from Redis: give it a client "
                             "made without decode_responses")
        self.client = client
        self.prefix = prefix
        self.retention = retention
        self.retry_seconds = retry_seconds
        kw = client.connection_pool.connection_kwargs
        where = kw.get("path") or f"{kw.get('host', '?')}:{kw.get('port', '?')}/{kw.get('db', 0)}"
        self.where = f"Redis at {where}"
        self._password = kw.get("password") or None
        self.k_subs = prefix + "subs"
        self.k_version = prefix + "version"
        self.k_log = prefix + "log"
        self.k_offsets = prefix + "offsets"
        # the change log is read through a client on the same connections that leaves
        # XRANGE's reply as hiredis parsed it (lists, no dictionary per entry built by
        # redis-py): a worker's catch-up reads every change of the log
        self._raw = redis.Redis(connection_pool=client.connection_pool)
        del self._raw.response_callbacks["XRANGE"]
        self._apply = client.register_script(APPLY_LUA)
        self._rebuild = client.register_script(REBUILD_LUA)

    @classmethod
    def from_url(
        cls,
        url: str,
        prefix: str = "psmatch:",
        retention: int = 200_000,
        retry_seconds: float = DEFAULT_RETRY_SECONDS,
    ) -> StateStore:
        """A store on ``redis://[[user]:password@]host:port/db``, ``rediss://`` (TLS) or
        ``unix://``; with ``rediss://``, the query parameters ``ssl_ca_certs=<file>`` (the
        CA bundle that verifies the server) and ``ssl_certfile``/``ssl_keyfile`` (a client
        certificate and its key)."""
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query))
        options: dict[str, Any] = {k: query.pop(k) for k in _TLS_PARAMETERS if k in query}
        if options and parts.scheme != "rediss":
            raise StateError(f"{sorted(options)[0]} is for TLS: the URL must be rediss://, "
                             f"not {redact_url(urlunsplit(parts._replace(query='')))}")  # fmt: skip
        query.pop("decode_responses", None)  # the store decodes what it reads itself
        url = urlunsplit(parts._replace(query=urlencode(query)))
        client = redis.Redis.from_url(
            url,
            decode_responses=False,
            socket_timeout=30,
            socket_connect_timeout=10,
            retry=Retry(NoBackoff(), 0),  # the store's own retry loop is the only one
            **options,
        )
        return cls(client, prefix, retention, retry_seconds)

    @property
    def _keys(self) -> list[str]:
        return [self.k_subs, self.k_version, self.k_log, self.k_offsets]

    def _call(self, what: str, fn: Callable[[], T], retry: bool = True) -> T:
        """``fn()``, retrying connection errors until ``retry_seconds`` have passed.

        ``what`` completes "could not ..." in messages. Any other Redis error is a
        :class:`StateError` at once.
        """
        started: float | None = None
        attempt = 0
        while True:
            try:
                result = fn()
            except redis.AuthenticationError as exc:
                raise StateAuthenticationError(
                    f"{self.where} refused the credentials ({self._clean(exc)}): check the "
                    "password (PSMATCH_REDIS_PASSWORD or --redis-password-file)"
                ) from None
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                refusal = None
                if attempt == 0:  # ask the server once per call: a refusal, or an outage?
                    pool = self.client.connection_pool
                    refusal = redis_tls_refusal(pool.connection_kwargs,
                                                issubclass(pool.connection_class,
                                                           redis.SSLConnection))  # fmt: skip
                if refusal is not None:
                    raise StateAuthenticationError(f"{self.where} {refusal}") from None
                now = time.monotonic()
                started = now if started is None else started
                waited = now - started
                left = self.retry_seconds - waited if retry else 0.0
                if left <= 0:
                    note_recovered()
                    if not retry or self.retry_seconds == 0:
                        raise StateUnavailableError(
                            f"could not {what}: {self.where} is not reachable "
                            f"({self._clean(exc)})"
                        ) from None
                    raise StateUnavailableError(
                        f"could not {what}: {self.where} stayed unreachable for "
                        f"{waited:.1f} s after {attempt} retries (last error: "
                        f"{self._clean(exc)}); giving up (redis_retry_seconds = "
                        f"{self.retry_seconds:g}). Bring Redis back and start the job again: "
                        "it resumes from its checkpoint."
                    ) from None
                delay = backoff_delay(attempt, left)
                attempt += 1
                note_retry(started)
                log.warning(
                    "%s is not reachable (%s): retry %d in %.1f s, giving up in %.1f s",
                    self.where, self._clean(exc), attempt, delay, left,
                )  # fmt: skip
                time.sleep(delay)
                continue
            except redis.RedisError as exc:
                raise StateError(f"could not {what}: {self._clean(exc)}") from None
            if started is not None:
                note_recovered()
                log.warning(
                    "%s is reachable again after %.1f s and %d retries",
                    self.where, time.monotonic() - started, attempt,
                )  # fmt: skip
            return result

    def _clean(self, exc: BaseException) -> str:
        """The exception's text, with its type, never showing the password."""
        text = f"{type(exc).__name__}: {exc}"
        return text.replace(self._password, "***") if self._password else text

    def ping(self) -> None:
        """Fail at once (no retry) when Redis does not answer: for start-up checks."""
        self._call("reach Redis", self.client.ping, retry=False)

    # -- writes ------------------------------------------------------------------------

    def apply(self, changes: Sequence[SourceChange], floor: int | None = None) -> ApplyResult:
        """Apply changes in order; those already applied (by source offset) are skipped.
        The change log keeps every change after version ``floor`` (default: the version
        when the call starts), and trims older ones past the retention (see the module
        docstring). Calls that apply one micro-batch's partitions at the same time (the
        executors' tasks, :mod:`psmatch.service.subscriptions`) pass the batch's first version,
        so that none trims what another added.

        A chunk retried after a lost connection (it may have run) is skipped by offset.
        """
        version = floor = self.version() if floor is None or not changes else floor
        applied = skipped = 0
        for start in range(0, len(changes), self.APPLY_CHUNK):
            args: list[Any] = [self.retention, floor]
            for c in changes[start : start + self.APPLY_CHUNK]:
                op = "put" if c.record is not None else "del"
                args += [c.source, c.offset, op, c.sub_id, c.record or "", c.normal_form or ""]
            version, a, s = self._call(
                "apply subscription changes",
                lambda args=args: self._apply(keys=self._keys, args=args),
            )
            applied += int(a)
            skipped += int(s)
        return ApplyResult(int(version), applied, skipped)

    def rebuild(self, records: Mapping[str, str], offsets: Mapping[str, int] | None = None) -> int:
        """Replace the whole state with ``records`` (id → record JSON); returns the version.

        The version moves forward by one and the change log is emptied, so every worker
        notices the gap and reloads.
        """

        def rebuild() -> int:
            version = int(self._rebuild(keys=self._keys))
            pipe = self.client.pipeline(transaction=True)
            items = list(records.items())
            for start in range(0, len(items), 10_000):
                pipe.hset(self.k_subs, mapping=dict(items[start : start + 10_000]))
            if offsets:
                pipe.hset(self.k_offsets, mapping={k: str(v) for k, v in offsets.items()})
            pipe.execute()
            return version

        return self._call("rebuild the subscription state", rebuild)

    def clear(self) -> None:
        self._call("clear the subscription state", lambda: self.client.delete(*self._keys))

    # -- reads -------------------------------------------------------------------------

    def version(self) -> int:
        value = self._call("read the state version", lambda: self.client.get(self.k_version))
        return int(value or 0)

    def get(self, sub_id: str) -> str | None:
        value = self._call("read a subscription", lambda: self.client.hget(self.k_subs, sub_id))
        return None if value is None else value.decode()

    def held(self, sub_ids: Sequence[str]) -> list[str]:
        """Those of ``sub_ids`` the state holds, in order. Cost O(ids), in round trips of
        10,000 ids."""
        found: list[str] = []
        for start in range(0, len(sub_ids), 10_000):
            chunk = list(sub_ids[start : start + 10_000])
            values = self._call(
                "read subscriptions", lambda chunk=chunk: self.client.hmget(self.k_subs, chunk))
            found += [sub_id for sub_id, value in zip(chunk, values, strict=True)
                      if value is not None]  # fmt: skip
        return found

    def count(self) -> int:
        return int(self._call("count subscriptions", lambda: self.client.hlen(self.k_subs)))

    def offsets(self) -> dict[str, int]:
        found = self._call("read the applied offsets", lambda: self.client.hgetall(self.k_offsets))
        return {k.decode(): int(v) for k, v in found.items()}

    def snapshot(self) -> tuple[int, dict[str, str]]:
        """The version and all current subscriptions, read atomically."""

        def read() -> list[Any]:
            pipe = self.client.pipeline(transaction=True)
            pipe.get(self.k_version)
            pipe.hgetall(self.k_subs)
            return pipe.execute()  # type: ignore[no-any-return]

        version, subs = self._call("read the subscription state", read)
        return int(version or 0), {k.decode(): v.decode() for k, v in subs.items()}

    def scan(self, size: int) -> Iterator[tuple[str, str]]:
        """Every current subscription, ``(id, stored text)``, read in chunks of about
        ``size`` (``HSCAN``'s ``COUNT``): memory for one chunk, not for the whole state
        (a worker's reload reads as many as it indexes at once, ``psmatch.service
        .worker_index.LOAD_CHUNK``).

        Not atomic: a subscription changed while the scan runs may be given in either
        form, or twice. Replaying the change log from a version read before the scan on
        top of what it gives yields the state at the log's end (each id's last change
        wins); an id present throughout is given at least once (Redis's guarantee).
        """
        cursor = 0
        while True:
            cursor, found = self._call(
                "read the subscription state",
                lambda cursor=cursor: self.client.hscan(self.k_subs, cursor, count=size),
            )
            for sub_id, stored in found.items():
                yield sub_id.decode(), stored.decode()
            if not cursor:
                return

    def change_runs(self, after: int, upto: int, size: int) -> Iterator[ChangeRun]:
        """Changes ``after+1 .. upto`` in order, in runs of at most ``size`` (one
        ``XRANGE`` each): memory for one run, not for the whole range (a worker's
        catch-up applies each run at once, ``psmatch.service.worker_index.LOAD_CHUNK``
        changes). Cost per change: its reply parsed in C (hiredis), then its fields
        taken by position in C loops (:func:`_columns`) and its id decoded; the texts
        stay bytes.

        :class:`ChangeLogGapError` as soon as a change is found gone, before the run
        that would lack it (the log is trimmed from its oldest end, so a reader that
        falls behind a concurrent trim finds it at the next run).
        """
        while after < upto:
            entries = self._call(
                "read the change log",
                lambda after=after: self._raw.execute_command(
                    "XRANGE", self.k_log, f"{after + 1}-0", f"{upto}-0", "COUNT", size),
            )  # fmt: skip
            first, last = ((_version(entries[0][0]), _version(entries[-1][0])) if entries
                           else (0, 0))  # fmt: skip
            if (first, last) != (after + 1, after + len(entries)):
                raise ChangeLogGapError(
                    f"the change log no longer holds every change after version {after} "
                    f"up to {upto} (retention {self.retention})"
                )
            yield ChangeRun(first, *_columns([flat for _, flat in entries]))
            after = last

    def change_chunks(self, after: int, upto: int, size: int) -> Iterator[list[Change]]:
        """The changes of :meth:`change_runs`, one object each, in lists of at most
        ``size``."""
        for run in self.change_runs(after, upto, size):
            yield run.changes()

    def changes(self, after: int, upto: int) -> list[Change]:
        """Changes ``after+1 .. upto`` in order, in one list (see :meth:`change_chunks`);
        :class:`ChangeLogGapError` if any is gone."""
        return [change for part in self.change_chunks(after, upto, max(upto - after, 1))
                for change in part]


_TLS_PARAMETERS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")


def _version(entry_id: bytes) -> int:
    """The version of the change log's entry ``entry_id`` (``<version>-0``)."""
    return int(entry_id.split(b"-", 1)[0])


_LAYOUTS = {(b"op", b"id", b"rec", b"nf"), (b"op", b"id", b"rec"), (b"op", b"id")}
"""The field names of an entry as the apply script logs it, in its order: a put with
its normal form, a put without, a delete."""
_NAMES = itemgetter(slice(0, None, 2))
_OP, _ID = itemgetter(1), itemgetter(3)


def _columns(entries: list[list[bytes]]) -> tuple[list[str], list[bytes | None],
                                                  list[bytes | None]]:  # fmt: skip
    """The ids, stored texts (``None`` for a delete) and normal forms of log entries
    (each its field names and values, alternately): by position in C loops when every
    entry's fields are in the order the apply script writes them, else by name."""
    if set(map(tuple, map(_NAMES, entries))) <= _LAYOUTS:
        ids = list(map(bytes.decode, map(_ID, entries)))
        puts = [op == b"put" for op in map(_OP, entries)]
        records = [f[5] if put and len(f) > 4 else None
                   for f, put in zip(entries, puts, strict=True)]  # fmt: skip
        forms = [f[7] if put and len(f) > 6 else None
                 for f, put in zip(entries, puts, strict=True)]  # fmt: skip
        return ids, records, forms
    ids, records, forms = [], [], []
    for flat in entries:
        fields = dict(zip(flat[::2], flat[1::2], strict=True))
        ids.append(fields[b"id"].decode())
        put = fields[b"op"] == b"put"
        records.append(fields.get(b"rec") if put else None)
        forms.append(fields.get(b"nf") if put else None)
    return ids, records, forms
