"""A librdkafka producer that queues a whole Arrow batch of records in one C call.

Owns the ctypes binding to librdkafka's producer API (the library confluent-kafka
loads, so the process holds one copy of it) and :class:`BatchProducer`, the client
under :class:`psmatch.adapters.kafka.sink.RecordSink`, the writer of the service's
output records.

Why not confluent-kafka's ``Producer``: its ``produce`` takes one record per Python call
(argument parsing, a topic lookup by name, a Python ``bytes`` each for the key and the
value), and its ``produce_batch`` a Python ``dict`` per record, which costs the calling
thread more than the loop it saves. Queued here, as pointers into the batch's Arrow
buffers that ``rd_kafka_produce_batch`` copies, a record costs the writing thread a
fraction of what ``produce`` does; librdkafka's own threads, which compress and send,
are the rest (``.venv/bin/python bench/bench_sink_compression.py`` measures both). A
matching worker writes many records per event (one per match), so this is per-record
work the workers would otherwise spend in Python.

Everything librdkafka reports reaches Python only from :meth:`BatchProducer.poll` and
:meth:`BatchProducer.flush`, in the calling thread: delivery failures (only failures are
reported: ``delivery.report.only.error``), client errors (``error_cb``) and librdkafka's
log (``log.queue``, forwarded to the main queue). A producer with a ``transactional.id``
also has librdkafka's transaction calls (:meth:`BatchProducer.init_transactions` and the
methods after it), each failing with a :class:`TransactionFailure` that says whether
the call may be retried, the transaction aborted, or the producer is done for.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path

import confluent_kafka.cimpl  # noqa: F401  (loads librdkafka: the copy bound here)
import numpy as np
import pyarrow as pa

from psmatch.adapters.arrow import null_mask, value_offsets
from psmatch.errors import PsmatchError

QUEUE_FULL = -184
"""``RD_KAFKA_RESP_ERR__QUEUE_FULL``: the producer's queue has no room for the record.
``rd_kafka_produce_batch`` then refuses it and every record after it, so the refused
ones are the batch's tail, queued again in order once there is room."""
_PARTITION_UA = -1  # RD_KAFKA_PARTITION_UA: the configured partitioner picks, per record
_MSG_F_COPY = 0x2  # librdkafka copies key and value before the call returns
_CONF_OK = 0
_PRODUCER = 0  # RD_KAFKA_PRODUCER
MAX_FAILURE_EXAMPLES = 3
"""Failed records described (topic and reason) until the failures are taken."""
_LOG_LEVELS = (logging.CRITICAL, logging.CRITICAL, logging.CRITICAL, logging.ERROR,
               logging.WARNING, logging.INFO, logging.INFO, logging.DEBUG)  # fmt: skip
"""Python's level for each syslog level librdkafka logs at (as confluent-kafka maps
them)."""


class KafkaClientError(PsmatchError):
    """librdkafka refused a producer setting, or could not create the producer."""


class TransactionFailure(KafkaClientError):
    """A transaction call failed: librdkafka's error ``code`` and text, and what may be
    done next: call again (``retriable``), abort the transaction and go on
    (``abortable``); when neither, the transaction is lost (the producer fenced by a
    newer one of its ``transactional.id``, say)."""

    def __init__(self, code: int, text: str, retriable: bool, abortable: bool) -> None:
        super().__init__(text)
        self.code = code
        self.retriable = retriable
        self.abortable = abortable


class _TopicPartition(ctypes.Structure):
    """``rd_kafka_topic_partition_t``: one entry of a topic partition list."""

    _fields_ = [
        ("topic", ctypes.c_char_p), ("partition", ctypes.c_int32), ("offset", ctypes.c_int64),
        ("metadata", ctypes.c_void_p), ("metadata_size", ctypes.c_size_t),
        ("opaque", ctypes.c_void_p), ("err", ctypes.c_int), ("private", ctypes.c_void_p),
    ]  # fmt: skip


class _Message(ctypes.Structure):
    """``rd_kafka_message_t``: one record of ``rd_kafka_produce_batch``'s array."""

    _fields_ = [
        ("err", ctypes.c_int), ("rkt", ctypes.c_void_p), ("partition", ctypes.c_int32),
        ("payload", ctypes.c_void_p), ("len", ctypes.c_size_t), ("key", ctypes.c_void_p),
        ("key_len", ctypes.c_size_t), ("offset", ctypes.c_int64), ("private", ctypes.c_void_p),
    ]  # fmt: skip


MESSAGE = np.dtype({
    "names": ["err", "payload", "len", "key", "key_len"],
    "formats": [np.int32, np.uintp, np.uintp, np.uintp, np.uintp],
    "offsets": [_Message.err.offset, _Message.payload.offset, _Message.len.offset,
                _Message.key.offset, _Message.key_len.offset],
    "itemsize": ctypes.sizeof(_Message),
})  # fmt: skip
"""``rd_kafka_message_t`` as a numpy record, its layout the C struct's (from ctypes):
the fields the producer sets; the others stay zero."""

_DR_MSG_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(_Message), ctypes.c_void_p)
_ERROR_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p,
                             ctypes.c_void_p)  # fmt: skip
_LOG_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p)
_EMPTY = np.zeros(1, dtype=np.uint8)
"""What an empty (not null) key or value points at when its column has no data buffer."""


def _library_path() -> str:
    """The file of the librdkafka this process loaded for confluent-kafka (its wheel
    bundles one under a mangled name), else the system's."""
    maps = Path("/proc/self/maps")
    if maps.exists():
        for line in maps.read_text().splitlines():
            fields = line.split(None, 5)
            if len(fields) == 6 and "librdkafka" in Path(fields[5]).name:
                return fields[5]
    found = ctypes.util.find_library("rdkafka")
    if found is None:
        raise KafkaClientError("librdkafka is not loaded and not installed: reinstall "
                               "confluent-kafka (make .venv/.installed)")  # fmt: skip
    return found


@functools.cache
def _librdkafka() -> ctypes.CDLL:
    """librdkafka, its producer functions typed. Loaded at first use."""
    lib = ctypes.CDLL(_library_path())
    pointer, text, size, number = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int
    for name, restype, argtypes in (
        ("rd_kafka_conf_new", pointer, []),
        ("rd_kafka_conf_set", number, [pointer, text, text, text, size]),
        ("rd_kafka_conf_destroy", None, [pointer]),
        ("rd_kafka_conf_set_dr_msg_cb", None, [pointer, _DR_MSG_CB]),
        ("rd_kafka_conf_set_error_cb", None, [pointer, _ERROR_CB]),
        ("rd_kafka_conf_set_log_cb", None, [pointer, _LOG_CB]),
        ("rd_kafka_new", pointer, [number, pointer, text, size]),
        ("rd_kafka_set_log_queue", number, [pointer, pointer]),
        ("rd_kafka_name", text, [pointer]),
        ("rd_kafka_topic_new", pointer, [pointer, text, pointer]),
        ("rd_kafka_topic_name", text, [pointer]),
        ("rd_kafka_topic_destroy", None, [pointer]),
        ("rd_kafka_produce_batch", number, [pointer, ctypes.c_int32, number, pointer, number]),
        ("rd_kafka_poll", number, [pointer, number]),
        ("rd_kafka_flush", number, [pointer, number]),
        ("rd_kafka_outq_len", number, [pointer]),
        ("rd_kafka_err2str", text, [number]),
        ("rd_kafka_metadata", number, [pointer, number, pointer, ctypes.POINTER(pointer), number]),
        ("rd_kafka_metadata_destroy", None, [pointer]),
        ("rd_kafka_destroy", None, [pointer]),
        ("rd_kafka_init_transactions", pointer, [pointer, number]),
        ("rd_kafka_begin_transaction", pointer, [pointer]),
        ("rd_kafka_send_offsets_to_transaction", pointer, [pointer, pointer, pointer, number]),
        ("rd_kafka_commit_transaction", pointer, [pointer, number]),
        ("rd_kafka_abort_transaction", pointer, [pointer, number]),
        ("rd_kafka_error_code", number, [pointer]),
        ("rd_kafka_error_string", text, [pointer]),
        ("rd_kafka_error_is_retriable", number, [pointer]),
        ("rd_kafka_error_txn_requires_abort", number, [pointer]),
        ("rd_kafka_error_destroy", None, [pointer]),
        ("rd_kafka_consumer_group_metadata_new", pointer, [text]),
        ("rd_kafka_consumer_group_metadata_destroy", None, [pointer]),
        ("rd_kafka_topic_partition_list_new", pointer, [number]),
        ("rd_kafka_topic_partition_list_add", ctypes.POINTER(_TopicPartition),
         [pointer, text, ctypes.c_int32]),
        ("rd_kafka_topic_partition_list_destroy", None, [pointer]),
    ):
        function = getattr(lib, name)
        function.restype, function.argtypes = restype, argtypes
    return lib


class _Failures:
    """Records librdkafka did not deliver, counted (a few described) until taken."""

    def __init__(self) -> None:
        self.count = 0
        self.examples: list[str] = []

    def add(self, topic: str, err: int) -> None:
        self.count += 1
        if len(self.examples) < MAX_FAILURE_EXAMPLES:
            self.examples.append(f"{topic}: {_librdkafka().rd_kafka_err2str(err).decode()}")


def _callbacks(failures: _Failures, on_error: Callable[[int, str], None],
               logger: logging.Logger) -> tuple[_DR_MSG_CB, _ERROR_CB, _LOG_CB]:  # fmt: skip
    """The C callbacks of one producer. They hold no reference to the producer, so that
    a producer nobody holds is destroyed (:func:`_destroy`)."""
    lib = _librdkafka()

    def on_delivery(rk: int, message: ctypes._Pointer[_Message], opaque: int) -> None:
        record = message.contents
        if record.err:  # reported only for failures; kept cheap all the same
            failures.add(lib.rd_kafka_topic_name(record.rkt).decode(), record.err)

    def on_client_error(rk: int, err: int, reason: bytes, opaque: int) -> None:
        on_error(err, reason.decode(errors="replace"))

    def on_log(rk: int, level: int, facility: bytes, message: bytes) -> None:
        logger.log(_LOG_LEVELS[min(max(level, 0), 7)], "%s [%s] %s",
                   facility.decode(errors="replace"), lib.rd_kafka_name(rk).decode(),
                   message.decode(errors="replace"))  # fmt: skip

    return _DR_MSG_CB(on_delivery), _ERROR_CB(on_client_error), _LOG_CB(on_log)


def _destroy(rk: int, topics: dict[str, int], callbacks: tuple[object, ...]) -> None:
    """Release a producer's topic handles, then the producer (records still queued are
    dropped); ``callbacks`` are kept alive until then."""
    lib = _librdkafka()
    for rkt in topics.values():
        lib.rd_kafka_topic_destroy(rkt)
    lib.rd_kafka_destroy(rk)


class BatchProducer:
    """A librdkafka producer of ``config`` (librdkafka's settings, as text), queueing
    the records of an Arrow batch in one ``rd_kafka_produce_batch`` call.

    ``on_error(code, reason)`` hears librdkafka's client errors (a refused login,
    brokers down) and ``logger`` its log, both while :meth:`poll` or :meth:`flush`
    run. Records librdkafka could not deliver (or refused to queue) are counted until
    :meth:`take_failures`. Destroyed when no longer referenced, or by :meth:`close`.
    """

    def __init__(self, config: Mapping[str, str], on_error: Callable[[int, str], None],
                 logger: logging.Logger) -> None:  # fmt: skip
        lib = _librdkafka()
        self._failures = _Failures()
        callbacks = _callbacks(self._failures, on_error, logger)
        error = ctypes.create_string_buffer(512)
        conf = lib.rd_kafka_conf_new()
        for name, value in {**config, "delivery.report.only.error": "true",
                            "log.queue": "true"}.items():  # fmt: skip
            if lib.rd_kafka_conf_set(conf, name.encode(), value.encode(), error,
                                     len(error)) != _CONF_OK:  # fmt: skip
                lib.rd_kafka_conf_destroy(conf)
                raise KafkaClientError(f"the producer setting {name}: {error.value.decode()}")
        lib.rd_kafka_conf_set_dr_msg_cb(conf, callbacks[0])
        lib.rd_kafka_conf_set_error_cb(conf, callbacks[1])
        lib.rd_kafka_conf_set_log_cb(conf, callbacks[2])
        rk = lib.rd_kafka_new(_PRODUCER, conf, error, len(error))  # owns conf if it succeeds
        if not rk:
            lib.rd_kafka_conf_destroy(conf)
            raise KafkaClientError(f"cannot create a Kafka producer: {error.value.decode()}")
        lib.rd_kafka_set_log_queue(rk, None)  # the log is served by poll, in this thread
        self._rk: int = rk
        self._topics: dict[str, int] = {}
        self._release = weakref.finalize(self, _destroy, rk, self._topics, callbacks)

    def _topic(self, topic: str) -> int:
        rkt = self._topics.get(topic)
        if rkt is None:
            rkt = _librdkafka().rd_kafka_topic_new(self._rk, topic.encode(), None)
            if not rkt:
                raise KafkaClientError(f"cannot produce to topic {topic!r}")
            self._topics[topic] = rkt
        return rkt

    def produce(self, topic: str, keys: pa.Array, values: pa.Array,
                wait: Callable[[], None]) -> None:  # fmt: skip
        """Queue the records ``(keys[i], values[i])`` of ``topic`` (``binary`` or
        ``large_binary`` columns of one length; a null is Kafka's null), in order, each
        to the partition the configured partitioner picks. A record librdkafka refuses
        (larger than ``message.max.bytes``, a fatal producer error) is a failure, as if
        it were not delivered. When the queue is full, callbacks are served for 50 ms
        and ``wait()`` is called (it may raise, to give up), then the rest is queued.

        Cost: O(records) in numpy to point at the keys and values, then one C call that
        copies each record into librdkafka's queue.
        """
        lib = _librdkafka()
        rkt = self._topic(topic)
        messages = np.zeros(len(values), dtype=MESSAGE)
        _point_at(messages, "key", "key_len", keys)
        _point_at(messages, "payload", "len", values)
        while len(messages):
            queued = lib.rd_kafka_produce_batch(rkt, _PARTITION_UA, _MSG_F_COPY,
                                                messages.ctypes.data, len(messages))  # fmt: skip
            if queued == len(messages):
                return
            err = messages["err"]
            full = np.flatnonzero(err == QUEUE_FULL)
            refused = err[: full[0] if len(full) else len(err)]
            for code in refused[refused != 0].tolist():
                self._failures.add(topic, code)
            messages = messages[full].copy()
            messages["err"] = 0
            if len(messages):
                lib.rd_kafka_poll(self._rk, 50)
                wait()

    def poll(self, timeout: float) -> None:
        """Serve librdkafka's callbacks, waiting up to ``timeout`` seconds for one."""
        _librdkafka().rd_kafka_poll(self._rk, int(timeout * 1000))

    def flush(self, timeout: float) -> int:
        """Send what is queued and wait up to ``timeout`` seconds for every record's
        acknowledgement or failure, serving callbacks; the records still in flight."""
        lib = _librdkafka()
        lib.rd_kafka_flush(self._rk, int(timeout * 1000))
        return int(lib.rd_kafka_outq_len(self._rk))

    def take_failures(self) -> tuple[int, list[str]]:
        """How many records failed since the last call, and a few of them described
        (``topic: reason``)."""
        failures = self._failures
        taken = failures.count, failures.examples
        failures.count, failures.examples = 0, []
        return taken

    def close(self) -> None:
        """Destroy the producer now; records still queued are dropped."""
        self._release()

    def await_broker(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a broker to answer one metadata request
        (for no topic): whether one did. Called before :meth:`init_transactions`: on a
        producer with no connection up yet, librdkafka's transaction manager finds no
        broker to ask for its coordinator and tries again on a 500 ms timer, which held
        up to a third of the openings of a task's producer by half a second."""
        lib = _librdkafka()
        metadata = ctypes.c_void_p()
        err = lib.rd_kafka_metadata(self._rk, 0, None, ctypes.byref(metadata),
                                    int(timeout * 1000))  # fmt: skip
        if metadata:
            lib.rd_kafka_metadata_destroy(metadata)
        return err == 0

    def init_transactions(self, timeout: float) -> None:
        """Register the producer's ``transactional.id`` with its coordinator, fencing
        every earlier producer of it (the broker aborts its open transaction). Once per
        producer, before any other transaction call."""
        _raise_failure(_librdkafka().rd_kafka_init_transactions(self._rk, int(timeout * 1000)))

    def begin_transaction(self) -> None:
        """Start a transaction: the records produced until its commit or abort are in it
        (local to the producer: no round trip)."""
        _raise_failure(_librdkafka().rd_kafka_begin_transaction(self._rk))

    def send_offsets_to_transaction(self, topic: str, positions: Mapping[int, int],
                                    group: str, metadata: str, timeout: float) -> None:  # fmt: skip
        """Commit ``positions`` (partition of ``topic`` -> next offset) as ``group``'s,
        each noted with ``metadata``, in the open transaction: visible when it commits,
        never if it aborts. Two round trips, to the transaction's and the group's
        coordinators; a producer fenced meanwhile fails here."""
        lib = _librdkafka()
        offsets = lib.rd_kafka_topic_partition_list_new(len(positions))
        note = metadata.encode()
        try:
            for partition, offset in sorted(positions.items()):
                entry = lib.rd_kafka_topic_partition_list_add(offsets, topic.encode(), partition)
                entry.contents.offset = offset
                if note:
                    # the list owns its entries' metadata and frees it with free();
                    # NUL-terminated, as librdkafka's readers of it take it as a C string
                    entry.contents.metadata = _libc().malloc(len(note) + 1)
                    ctypes.memmove(entry.contents.metadata, note + b"\0", len(note) + 1)
                    entry.contents.metadata_size = len(note)
            group_metadata = lib.rd_kafka_consumer_group_metadata_new(group.encode())
            try:
                _raise_failure(lib.rd_kafka_send_offsets_to_transaction(
                    self._rk, offsets, group_metadata, int(timeout * 1000)))  # fmt: skip
            finally:
                lib.rd_kafka_consumer_group_metadata_destroy(group_metadata)
        finally:
            lib.rd_kafka_topic_partition_list_destroy(offsets)

    def commit_transaction(self, timeout: float) -> None:
        """Send what is queued and commit the open transaction, waiting up to
        ``timeout`` seconds; it fails (abortable) if any of its records failed."""
        _raise_failure(_librdkafka().rd_kafka_commit_transaction(self._rk, int(timeout * 1000)))

    def abort_transaction(self, timeout: float) -> None:
        """Abort the open transaction: its records and offsets are never visible to
        ``read_committed`` readers."""
        _raise_failure(_librdkafka().rd_kafka_abort_transaction(self._rk, int(timeout * 1000)))


@functools.cache
def _libc() -> ctypes.CDLL:
    """The C library librdkafka allocates with (``malloc`` for what it frees)."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    return libc


def _raise_failure(error: int | None) -> None:
    """Raise the :class:`TransactionFailure` of librdkafka's ``rd_kafka_error_t``
    (``None``: the call succeeded), releasing it."""
    if not error:
        return
    lib = _librdkafka()
    try:
        failure = TransactionFailure(
            lib.rd_kafka_error_code(error), lib.rd_kafka_error_string(error).decode(),
            retriable=bool(lib.rd_kafka_error_is_retriable(error)),
            abortable=bool(lib.rd_kafka_error_txn_requires_abort(error)),
        )  # fmt: skip
    finally:
        lib.rd_kafka_error_destroy(error)
    raise failure


def _point_at(messages: np.ndarray, pointer: str, length: str, column: pa.Array) -> None:
    """Set ``messages[pointer]`` and ``messages[length]`` to the address and size of each
    value of ``column``: null for a null, the data of an empty value, in place (the
    column must outlive the produce call that reads them)."""
    offsets = value_offsets(column)
    data = column.buffers()[2]
    base = data.address if data is not None and data.size else _EMPTY.ctypes.data
    messages[pointer] = offsets[:-1].astype(np.uintp) + np.uintp(base)
    messages[length] = np.diff(offsets)
    if column.null_count:
        nulls = null_mask(column)
        messages[pointer][nulls] = 0
        messages[length][nulls] = 0
