"""Fault injection against a real psmatch service: the harness of ``test_faults.py`` and
``bench/bench_faults.py``.

Owns everything a fault-injection run needs, all real and all its own (never the
session-shared servers of ``tests/conftest.py``):

* a Kafka broker and a redis-server (``psmatch.devservers``) on free loopback ports, in a
  folder of the run, that the run kills, stops and restarts;
* ``psmatch run`` as a subprocess (:class:`JobProcess`), configured through
  ``PSMATCH_*`` environment variables, that the run ``kill -9``\\ s and restarts from its
  checkpoint;
* a producer thread (:class:`EventStream`) publishing good events at a steady rate, the
  notifications each one must cause computed on the spot with the ``scan`` matcher on
  the same subscriptions;
* a consumer thread (:class:`OutputWatcher`) recording every notification and rejected
  record with its arrival time;
* the poison records of issue 8 and other malformed kinds (:func:`bad_records`), each
  with the reject code of ``/work/notes/codes.md`` it must get, sent with three
  independent clients (confluent-kafka, kafka-python, kcat when installed).

A run is a sequence of phases (:meth:`FaultRun.phase`); each tags the events published
during it, marks when its fault started and ended and, when closed, waits for every
notification its events must cause and measures it (:class:`PhaseResult`): events sent,
notifications expected, received and duplicated, time from the end of the fault to the
first notification and until everything published before that end was delivered.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from psmatch import make_matcher
from psmatch.adapters.kafka.admin import ensure_topics, service_topics
from psmatch.devservers.kafka_broker import KafkaBroker
from psmatch.devservers.process import free_port
from psmatch.devservers.redis_server import RedisServer
from psmatch.service.config import ServiceConfig
from psmatch.service.records.common import (
    DEFAULT_MAX_EVENT_ATTRIBUTES,
    DEFAULT_MAX_EVENT_BYTES,
    DEFAULT_MAX_STRING_LENGTH,
    DEFAULT_MAX_SUBSCRIPTION_BYTES,
    MAX_ID_LENGTH,
    MAX_NESTING,
)
from psmatch.service.records.rejected import REJECT_PREFIX_BYTES
from tests.service.workload import ATTRS, random_subscriptions

log = logging.getLogger("psmatch.faults")


# -- the workload ----------------------------------------------------------------------


def random_event(rng: random.Random) -> dict[str, Any]:
    event: dict[str, Any] = {a: rng.randint(0, 20) for a in ATTRS if rng.random() < 0.8}
    if rng.random() < 0.7:
        event["s"] = rng.choice("xyzw")
    return event


# -- bad records -----------------------------------------------------------------------


@dataclass(frozen=True)
class BadRecord:
    """A record the service must reject exactly once with ``code``."""

    kind: str
    role: str  # "events" or "subscriptions"
    key: bytes  # from bad_records(): what to append to the unique key the sender makes
    value: bytes | None
    code: str
    client: str = ""


def _nested_object(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


def bad_records(garbage_seed: int = 8) -> list[BadRecord]:
    """Every malformed kind, one record each (``key``: a suffix for the sender's key).

    The poison records of issue 8 item 1 come first; the 600 KB binary garbage is fixed
    by ``garbage_seed`` and starts with bytes that are not UTF-8. Limits are the
    service's defaults (``psmatch.service.records.common``).
    """
    garbage = bytearray(random.Random(garbage_seed).randbytes(600 * 1024))
    garbage[:4] = b"\xff\xfe\x00\x01"
    sub = b'{"expr": "a < 5", "subscriber": "s"'
    many = json.dumps({f"k{i}": i for i in range(DEFAULT_MAX_EVENT_ATTRIBUTES + 1)}).encode()
    long_string = json.dumps({"s": "x" * (DEFAULT_MAX_STRING_LENGTH + 1)}).encode()
    kinds: list[tuple[str, str, bytes, bytes | None, str]] = [
        # issue 8 item 1: each of these ended the query
        ("event nested 1,000 deep", "events", b"", _nested_object(1000), "too_deep"),
        ("subscriber with a lone surrogate escape", "subscriptions", b"",
         b'{"expr": "a < 5", "subscriber": "x\\udc00y"}', "invalid_unicode"),
        ("array nested 5,000 deep in extra", "subscriptions", b"",
         sub + b', "x": ' + b"[" * 5000 + b"]" * 5000 + b"}", "too_deep"),
        ("600 KB of binary garbage", "events", b"", bytes(garbage), "invalid_unicode"),
        # other malformed events
        ("event nested 20,000 deep", "events", b"", _nested_object(20_000), "too_deep"),
        (f"event nested {MAX_NESTING + 1} deep", "events", b"",
         _nested_object(MAX_NESTING + 1), "too_deep"),  # its own object is the first level
        ("event not JSON", "events", b"", b"this is not JSON", "invalid_json"),
        ("event not UTF-8", "events", b"", b'{"a": "\xff\xfe"}', "invalid_unicode"),
        ("event with NaN", "events", b"", b'{"a": NaN}', "invalid_json"),
        ("event with trailing data", "events", b"", b'{"a": 1} {"b": 2}', "invalid_json"),
        ("null event", "events", b"", None, "invalid_record"),
        ("array event", "events", b"", b'[{"a": 1}]', "invalid_record"),
        ("event with a lone surrogate escape", "events", b"", b'{"s": "x\\ud800"}',
         "invalid_unicode"),
        ("event with an array attribute", "events", b"", b'{"a": [1, 2]}', "invalid_event"),
        (f"event over {DEFAULT_MAX_EVENT_BYTES:,} bytes", "events", b"",
         b'{"s": "' + b"x" * DEFAULT_MAX_EVENT_BYTES + b'"}', "too_large"),
        (f"event with {DEFAULT_MAX_EVENT_ATTRIBUTES + 1} attributes", "events", b"", many,
         "limit_exceeded"),
        (f"event with a string of {DEFAULT_MAX_STRING_LENGTH + 1} characters", "events", b"",
         long_string, "limit_exceeded"),
        # other malformed subscriptions
        ("subscription not JSON", "subscriptions", b"", b"a < 5", "invalid_json"),
        ("subscription not UTF-8", "subscriptions", b"",
         b'{"expr": "s = \'\xe9\'", "subscriber": "s"}', "invalid_unicode"),
        ("subscription key not UTF-8", "subscriptions", b"-\xff\xfe", b'{"expr": "a < 5"}',
         "invalid_unicode"),
        (f"subscription id over {MAX_ID_LENGTH} characters", "subscriptions",
         b"-" + b"k" * MAX_ID_LENGTH, b'{"expr": "a < 5"}', "limit_exceeded"),
        ("subscription with NaN", "subscriptions", b"", sub + b', "w": NaN}', "invalid_json"),
        ("subscription array", "subscriptions", b"", b'["a < 5"]', "invalid_record"),
        ("subscription without expr", "subscriptions", b"", b'{"subscriber": "s"}',
         "invalid_record"),
        ("subscriber not a string", "subscriptions", b"",
         b'{"expr": "a < 5", "subscriber": 5}', "invalid_record"),
        (f"subscription over {DEFAULT_MAX_SUBSCRIPTION_BYTES:,} bytes", "subscriptions", b"",
         sub + b', "x": "' + b"x" * DEFAULT_MAX_SUBSCRIPTION_BYTES + b'"}', "too_large"),
        ("bad expression", "subscriptions", b"", b'{"expr": "a <", "subscriber": "s"}',
         "invalid_expression"),
        ("unsatisfiable expression", "subscriptions", b"",
         b'{"expr": "a < 1 and a > 5", "subscriber": "s"}', "invalid_expression"),
    ]  # fmt: skip
    return [BadRecord(*kind) for kind in kinds]


def kcat_path() -> str | None:
    return shutil.which("kcat") or shutil.which("kafkacat")


# -- the servers' and the job's processes ----------------------------------------------


class JobProcess:
    """``psmatch run`` in a subprocess of its own session, its output in ``log_path``."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.env = env
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        psmatch = Path(sys.executable).with_name("psmatch")
        cmd = [str(psmatch), "run"] if psmatch.exists() else [
            sys.executable, "-m", "psmatch", "run"]  # fmt: skip
        with self.log_path.open("ab") as out:
            out.write(f"=== start {self.starts + 1}: {' '.join(cmd)}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        self.starts += 1

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self, grace: float = 30.0) -> int:
        """``kill -9`` of the ``psmatch run`` process alone, as an operator or the OOM
        killer would; waits for what it started (Spark's JVM, Python workers) to go.
        Returns how many of those outlived it by ``grace`` seconds (then killed too)."""
        assert self.proc is not None
        children = psutil.Process(self.proc.pid).children(recursive=True)
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        _, left = psutil.wait_procs(children, timeout=grace)
        for p in left:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        psutil.wait_procs(left, timeout=10)
        return len(left)

    def stop(self, grace: float = 60.0) -> None:
        """SIGTERM (psmatch run stops its query and Spark), then SIGKILL of the group."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=grace)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # the group is this job's session
        self.proc.wait(timeout=10)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])


@dataclass
class SentEvent:
    event_id: str
    phase: int
    sent_at: float  # time.monotonic()
    matches: frozenset[str]


class EventStream:
    """A thread publishing good events at ``rate`` per second with confluent-kafka.

    Each event's expected notifications are computed when it is sent, with the ``scan``
    matcher holding the same subscriptions as the service.
    """

    def __init__(
        self, bootstrap: str, topic: str, subscriptions: dict[str, str], rate: float, seed: int
    ) -> None:
        self.topic = topic
        self.rate = rate
        self.phase = 0
        self.sent: list[SentEvent] = []
        self.errors: list[str] = []
        self._rng = random.Random(seed)
        self._scan = make_matcher("scan")
        for sub_id, expr in subscriptions.items():
            self._scan.add(sub_id, expr)
        self._producer = Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True,
             "logger": logging.getLogger("psmatch.faults.producer")}
        )  # fmt: skip
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fault-events", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(f"{msg.key()!r}: {err}")

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            event = random_event(self._rng)
            ev_id = f"ev-{len(self.sent):06d}"
            matches = frozenset(self._scan.match(event))
            while True:
                try:
                    self._producer.produce(
                        self.topic,
                        json.dumps(event).encode(),
                        ev_id.encode(),
                        on_delivery=self._on_delivery,
                    )
                    break
                except BufferError:
                    self._producer.poll(0.05)
            self.sent.append(SentEvent(ev_id, self.phase, time.monotonic(), matches))
            self._producer.poll(0)
            next_at += 1.0 / self.rate
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def stop(self, flush_timeout: float = 120.0) -> int:
        """Stop publishing; returns how many events were never delivered."""
        self._stop.set()
        self._thread.join()
        return int(self._producer.flush(flush_timeout))


class OutputWatcher:
    """A thread reading the notifications and rejected topics from their start."""

    def __init__(self, bootstrap: str, notifications: str, rejected: str, partitions: int) -> None:
        self.notifications_topic = notifications
        # (subscription id, event id) -> arrival times (time.monotonic())
        self.arrivals: dict[tuple[str, str], list[float]] = defaultdict(list)
        self.arrival_times: list[float] = []  # of every notification, in arrival order
        self.rejects: dict[bytes, list[dict[str, Any]]] = defaultdict(list)
        self.reject_sizes: list[int] = []
        self.malformed: list[bytes] = []
        self._consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": f"faults-{uuid.uuid4().hex}",
             "enable.auto.commit": False, "auto.offset.reset": "earliest",
             "logger": logging.getLogger("psmatch.faults.consumer")}
        )  # fmt: skip
        self._consumer.assign(
            [TopicPartition(t, p, OFFSET_BEGINNING)
             for t in (notifications, rejected) for p in range(partitions)]
        )  # fmt: skip
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fault-outputs", daemon=True)
        self.lock = threading.Lock()

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            msgs = self._consumer.consume(num_messages=5000, timeout=0.3)
            now = time.monotonic()
            with self.lock:
                for msg in msgs:
                    if msg.error() is not None:  # broker down: librdkafka reconnects
                        continue
                    if msg.topic() == self.notifications_topic:
                        try:
                            value = json.loads(msg.value())
                            pair = (value["subscription_id"], value["event_id"])
                        except (ValueError, KeyError, TypeError):
                            self.malformed.append(msg.value() or b"")
                            continue
                        self.arrivals[pair].append(now)
                        self.arrival_times.append(now)
                    else:
                        self.reject_sizes.append(len(msg.value() or b""))
                        self.rejects[msg.key() or b""].append(json.loads(msg.value()))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._consumer.close()


# -- the run ---------------------------------------------------------------------------


@dataclass
class Phase:
    name: str
    index: int
    started: float
    fault_start: float | None = None
    fault_end: float | None = None
    closed: float | None = None  # when measured: the phase's window is [started, closed]
    bad: list[BadRecord] = field(default_factory=list)
    restarts_at_start: int = 0
    restarts_at_close: int = 0
    notes: list[str] = field(default_factory=list)

    def fault(self) -> Any:
        """Context manager around the fault itself: ``with phase.fault(): ...``."""
        return _FaultWindow(self)


class _FaultWindow:
    def __init__(self, phase: Phase) -> None:
        self.phase = phase

    def __enter__(self) -> Phase:
        self.phase.fault_start = time.monotonic()
        return self.phase

    def __exit__(self, *exc: object) -> None:
        self.phase.fault_end = time.monotonic()


@dataclass
class PhaseResult:
    """What a phase measured; times in seconds after the end of its fault."""

    name: str
    events_sent: int
    expected: int
    received: int
    duplicates: int
    unexpected: int
    first_notification_s: float | None
    new_event_s: float | None
    caught_up_s: float | None
    fault_s: float
    bad_records: int = 0
    reject_problems: dict[str, list[str]] = field(default_factory=dict)
    query_restarts: int = 0
    job_alive: bool = True
    missing_sample: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def row(self) -> str:
        def s(x: float | None) -> str:
            return "-" if x is None else f"{x:.1f}"

        ok = self.bad_records - len(self.reject_problems)
        rejects = f"{ok}/{self.bad_records}" if self.bad_records else "-"
        return (
            f"| {self.name} | {self.fault_s:.1f} | {self.events_sent:,} | {self.expected:,} | "
            f"{self.received:,} | {self.duplicates:,} | {rejects} | "
            f"{s(self.first_notification_s)} | {s(self.new_event_s)} | {s(self.caught_up_s)} | "
            f"{self.query_restarts} |"
        )


TABLE_HEADER = (
    "| fault | fault lasted (s) | good events sent | notifications expected | received | "
    "duplicates | bad records rejected once with the right code | first notification "
    "after the fault (s) | first notification of an event published after the fault (s) | "
    "all caught up after the fault (s) | automatic query restarts |\n"
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
)

# A line psmatch run logs when it restarts its query (psmatch.service.cli); counted per phase.
RESTART_MARKER = "restarting it from the checkpoint"
# The line psmatch run logs once its query runs.
RUNNING_MARKER = "running; Ctrl-C stops"


class FaultRun:
    """Servers, job, producer and consumer of one fault-injection run."""

    def __init__(self, base: Path, rate: float = 10.0, subscriptions: int = 30,
                 seed: int = 8, trigger_seconds: float = 0.5) -> None:  # fmt: skip
        self.base = base
        self.rate = rate
        self.redis = RedisServer(base / "redis")
        self.kafka = KafkaBroker(base / "kafka", heap="512m")
        tag = uuid.uuid4().hex[:8]
        self.subscriptions = random_subscriptions(random.Random(seed), subscriptions)
        self.seed = seed
        self.trigger_seconds = trigger_seconds
        self.tag = tag
        self.phases: list[Phase] = []
        self.results: list[PhaseResult] = []
        self.bad_sent: list[BadRecord] = []
        self.config: ServiceConfig | None = None
        self.job: JobProcess | None = None
        self.events: EventStream | None = None
        self.outputs: OutputWatcher | None = None
        self._kafka_log = logging.getLogger("psmatch.faults.kafka")

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> FaultRun:
        """Servers, topics, subscriptions, consumer, job; then good events until the
        first notification arrives."""
        self.redis.start()
        self.kafka.start()
        cfg = ServiceConfig(
            bootstrap_servers=self.kafka.bootstrap_servers,
            redis_url=self.redis.url,
            redis_prefix=f"faults{self.tag}:",
            subscriptions_topic=f"subs-{self.tag}",
            events_topic=f"events-{self.tag}",
            notifications_topic=f"notif-{self.tag}",
            rejected_topic=f"rejected-{self.tag}",
            checkpoint_location=str(self.base / "checkpoint"),
            spark_master="local[2]",
            trigger_seconds=self.trigger_seconds,
            metrics_port=free_port(),
        )
        self.config = cfg
        ensure_topics(cfg.bootstrap_servers, service_topics(
            cfg.subscriptions_topic, cfg.events_topic, cfg.notifications_topic,
            cfg.rejected_topic), partitions=cfg.topic_partitions)  # fmt: skip
        producer = Producer({"bootstrap.servers": cfg.bootstrap_servers, "logger": self._kafka_log})
        for sub_id, expr in self.subscriptions.items():
            producer.produce(cfg.subscriptions_topic,
                             json.dumps({"expr": expr, "subscriber": sub_id}).encode(),
                             sub_id.encode())  # fmt: skip
        assert producer.flush(30) == 0
        del producer  # no reconnect attempts (and log lines) while the broker is stopped
        self.outputs = OutputWatcher(cfg.bootstrap_servers, cfg.notifications_topic,
                                     cfg.rejected_topic, cfg.topic_partitions)  # fmt: skip
        self.outputs.start()
        env = {k: v for k, v in os.environ.items() if not k.startswith("PSMATCH_")}
        for name in ("bootstrap_servers", "redis_url", "redis_prefix", "subscriptions_topic",
                     "events_topic", "notifications_topic", "rejected_topic",
                     "checkpoint_location", "spark_master", "trigger_seconds",
                     "metrics_port", "topic_partitions"):  # fmt: skip
            env["PSMATCH_" + name.upper()] = str(getattr(cfg, name))
        job = self.job = JobProcess(env, self.base / "job.log")
        job.start()
        self.events = EventStream(cfg.bootstrap_servers, cfg.events_topic, self.subscriptions,
                                  self.rate, self.seed)  # fmt: skip
        now = time.monotonic()
        self.phases.append(Phase("start-up and between faults", 0, now, now, now))
        # events flow from when the query runs: a start-up backlog would only make the
        # first batch (and the run) longer
        self.wait_for(lambda: RUNNING_MARKER in job.log_text(), 300, "the query to run")
        self.events.start()
        self.wait_for(lambda: bool(self.outputs and self.outputs.arrival_times), 300,
                      "the first notification of the job")  # fmt: skip
        return self

    def close(self) -> None:
        """Stop everything this run started (each step even when another failed)."""
        for step in (
            lambda: self.events and self.events.stop(flush_timeout=10),
            lambda: self.job and self.job.stop(),
            lambda: self.outputs and self.outputs.stop(),
            self.kafka.stop,
            self.redis.stop,
        ):
            try:
                step()
            except Exception as exc:  # stop the rest anyway
                log.warning("fault run clean-up step failed: %s", exc)

    def __enter__(self) -> FaultRun:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers -----------------------------------------------------------------------

    def wait_for(self, predicate: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.2)
        tail = self.job.tail() if self.job else ""
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; "
                             f"job log:\n{tail}")  # fmt: skip

    def query_restarts(self) -> int:
        """How many times ``psmatch run`` said it restarts its query, over all its runs."""
        text = self.job.log_text() if self.job else ""
        return text.count(RESTART_MARKER)

    @contextlib.contextmanager
    def _phase(self, name: str, timeout: float = 120.0, settle: float = 3.0) -> Iterator[Phase]:
        """A phase: its events are those published inside the block plus ``settle``
        seconds after; on exit, waits up to ``timeout`` s for all their notifications and
        appends the :class:`PhaseResult` to :attr:`results`."""
        assert self.events is not None
        phase = Phase(name, len(self.phases), time.monotonic(),
                      restarts_at_start=self.query_restarts())  # fmt: skip
        self.phases.append(phase)
        self.events.phase = phase.index
        yield phase
        if phase.fault_end is None:
            phase.fault_start = phase.fault_start or phase.started
            phase.fault_end = time.monotonic()
        time.sleep(settle)
        self.events.phase = 0  # between phases: counted with start-up
        sent = [e for e in self.events.sent if e.phase == phase.index]
        expected = {(s, e.event_id) for e in sent for s in e.matches}
        with contextlib.suppress(AssertionError):
            self.wait_for(lambda: expected <= self.outputs.arrivals.keys(), timeout,
                          f"the notifications of phase {name!r}")  # fmt: skip
        if phase.bad:
            with contextlib.suppress(AssertionError):
                self.wait_for(lambda: all(r.key in self.outputs.rejects for r in phase.bad),
                              30, f"the rejects of phase {name!r}")  # fmt: skip
        phase.closed = time.monotonic()
        phase.restarts_at_close = self.query_restarts()
        self.results.append(self.measure(phase))

    def finish(self, timeout: float = 120.0) -> PhaseResult:
        """Stop publishing, wait for every notification of the events published outside
        the phases (from the job's start) and measure them."""
        assert self.events is not None and self.outputs is not None
        undelivered = self.events.stop()
        assert undelivered == 0 and not self.events.errors, (undelivered, self.events.errors[:3])
        sent = [e for e in self.events.sent if e.phase == 0]
        expected = {(s, e.event_id) for e in sent for s in e.matches}
        with contextlib.suppress(AssertionError):
            self.wait_for(lambda: expected <= self.outputs.arrivals.keys(), timeout,
                          "the notifications outside the phases")  # fmt: skip
        outside = self.phases[0]
        outside.closed = time.monotonic()
        outside.restarts_at_close = self.query_restarts() - sum(
            p.restarts_at_close - p.restarts_at_start for p in self.phases[1:]
        )
        result = self.measure(outside)
        self.results.insert(0, result)
        return result

    def extra_copies(self, phase: Phase) -> int:
        """Notifications that arrived again (any event) inside the window of ``phase``;
        for the start-up phase, outside the window of every other phase."""
        assert self.outputs is not None
        with self.outputs.lock:
            extras = [t for times in self.outputs.arrivals.values() for t in sorted(times)[1:]]
        if phase.index:
            return sum(1 for t in extras if phase.started <= t <= (phase.closed or t))
        windows = [(p.started, p.closed or float("inf")) for p in self.phases[1:]]
        return sum(1 for t in extras if not any(a <= t <= b for a, b in windows))

    def measure(self, phase: Phase) -> PhaseResult:
        """The figures of ``phase`` from what has arrived so far. Its duplicates are the
        extra copies that arrived during it, whatever the event: a replay after a crash
        repeats the notifications of the last, uncommitted batch, published earlier."""
        assert self.events is not None and self.outputs is not None
        assert phase.fault_start is not None and phase.fault_end is not None
        sent = [e for e in self.events.sent if e.phase == phase.index]
        ids = {e.event_id for e in sent}
        expected = {(s, e.event_id) for e in sent for s in e.matches}
        end = phase.fault_end
        problems = {f"{r.client}: {r.kind}": p for r in phase.bad if (p := self.reject_problems(r))}
        with self.outputs.lock:
            arrivals = {p: list(t) for p, t in self.outputs.arrivals.items() if p[1] in ids}
            after = [t for t in self.outputs.arrival_times if t >= end]
        received = expected & arrivals.keys()
        before_end = {(s, e.event_id) for e in sent if e.sent_at <= end for s in e.matches}
        first_arrivals = [min(arrivals[p]) for p in before_end if p in arrivals]
        new = [min(arrivals[(s, e.event_id)]) for e in sent if e.sent_at > end
               for s in e.matches if (s, e.event_id) in arrivals]  # fmt: skip
        caught_up = None
        if before_end and before_end <= arrivals.keys():
            caught_up = max(0.0, max(first_arrivals) - end)
        return PhaseResult(
            name=phase.name,
            events_sent=len(sent),
            expected=len(expected),
            received=len(received),
            duplicates=self.extra_copies(phase),
            unexpected=len(arrivals.keys() - expected),
            first_notification_s=(min(after) - end) if after else None,
            new_event_s=(min(new) - end) if new else None,
            caught_up_s=caught_up,
            fault_s=end - phase.fault_start,
            bad_records=len(phase.bad),
            reject_problems=problems,
            query_restarts=phase.restarts_at_close - phase.restarts_at_start,
            job_alive=bool(self.job and self.job.alive),
            missing_sample=sorted(expected - arrivals.keys())[:5],
            notes=list(phase.notes),
        )

    # -- faults ------------------------------------------------------------------------

    def send_bad(self, phase: Phase, clients: tuple[str, ...]) -> None:
        """Every :func:`bad_records` kind through each client, plus one invalid value
        under a live subscription's id (confluent-kafka): that subscription must stay."""
        assert self.config is not None
        cfg = self.config
        topics = {"events": cfg.events_topic, "subscriptions": cfg.subscriptions_topic}
        for client in clients:
            records = [
                BadRecord(
                    r.kind,
                    r.role,
                    f"bad-{client}-{n:02d}".encode() + r.key,
                    r.value,
                    r.code,
                    client,
                )
                for n, r in enumerate(bad_records())
            ]
            if client == "confluent-kafka":
                live = next(iter(self.subscriptions))
                records.append(BadRecord("invalid value under a live id", "subscriptions",
                                         live.encode(), b'{"expr": "a <<"}',
                                         "invalid_expression", client))  # fmt: skip
            _SENDERS[client](cfg.bootstrap_servers, topics, records)
            phase.bad.extend(records)
            self.bad_sent.extend(records)

    def reject_problems(self, record: BadRecord) -> list[str]:
        """What is wrong with the rejects of ``record`` (empty: exactly one, right code,
        the original recoverable within the embedded prefix)."""
        assert self.outputs is not None
        with self.outputs.lock:
            rejects = list(self.outputs.rejects.get(record.key, []))
        if len(rejects) != 1:
            return [f"{len(rejects)} rejects"]
        r = rejects[0]
        problems = []
        if r.get("code") != record.code:
            problems.append(f"code {r.get('code')!r} != {record.code!r} ({r.get('reason')!r})")
        if not r.get("reason"):
            problems.append("no reason")
        if record.value is not None:
            problems += _embedding_problems(r, record.value)
        return problems

    def poison(self, lead_s: float = 2.0) -> PhaseResult:
        """Every bad record kind through every client while good events flow."""
        names = clients()
        with self._phase(f"poison and malformed records ({', '.join(names)})") as phase:
            time.sleep(lead_s)
            with phase.fault():
                self.send_bad(phase, names)
        return self.results[-1]

    def redis_kill(self, down_s: float = 5.0, lead_s: float = 2.0) -> PhaseResult:
        """``kill -9`` redis-server; start it again after ``down_s`` (same port, AOF)."""
        with self._phase(f"kill -9 redis-server, back after {down_s:g} s") as phase:
            time.sleep(lead_s)
            with phase.fault():
                self.redis.kill()
                time.sleep(down_s)
                self.redis.start()
        return self.results[-1]

    def broker_outage(self, down_s: float = 30.0, lead_s: float = 2.0) -> PhaseResult:
        """Stop the Kafka broker (SIGTERM); start it again ``down_s`` s after it exited,
        on the same port and data directory."""
        with self._phase(f"Kafka broker stopped for {down_s:g} s", timeout=240) as phase:
            time.sleep(lead_s)
            with phase.fault():
                self.kafka.stop()
                time.sleep(down_s)
                self.kafka.start()
        return self.results[-1]

    def job_kill(self, lead_s: float = 3.0) -> PhaseResult:
        """``kill -9`` of ``psmatch run``, started again at once from its checkpoint:
        the fault ends when the operator starts it again."""
        assert self.job is not None
        with self._phase("kill -9 of psmatch run, restarted", timeout=300) as phase:
            time.sleep(lead_s)
            with phase.fault():
                left = self.job.kill9()
                if left:
                    phase.notes.append(f"{left} processes of the killed job outlived it")
            self.job.start()
        return self.results[-1]


def _embedding_problems(reject: dict[str, Any], original: bytes) -> list[str]:
    """The rejected-record contract of codes.md for the value of ``original``."""
    problems = []
    if reject.get("value_size") != len(original):
        problems.append(f"value_size {reject.get('value_size')} != {len(original)}")
    if reject.get("value_sha256") != hashlib.sha256(original).hexdigest():
        problems.append("value_sha256 is not the sha256 of the original")
    prefix = original[:REJECT_PREFIX_BYTES]
    if reject.get("truncated") != (len(original) > REJECT_PREFIX_BYTES):
        problems.append(f"truncated is {reject.get('truncated')!r}")
    value = reject.get("value")
    encoding = reject.get("value_encoding")
    if encoding == "base64":
        if base64.b64decode(value or "") != prefix:
            problems.append("the base64 value is not the original's prefix")
    elif encoding == "utf-8":
        if not isinstance(value, str) or not prefix.startswith(
            value.encode("utf-8", errors="surrogatepass")
        ):
            problems.append("the utf-8 value is not the original's prefix")
    else:
        problems.append(f"value_encoding {encoding!r}")
    return problems


# -- three independent clients for bad records ------------------------------------------


def _send_confluent(bootstrap: str, topics: dict[str, str], records: list[BadRecord]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 1_000_000})
    errors: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    for r in records:
        producer.produce(topics[r.role], r.value, r.key, on_delivery=on_delivery)
    assert producer.flush(30) == 0 and not errors, errors


def _send_kafka_python(bootstrap: str, topics: dict[str, str], records: list[BadRecord]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, max_request_size=1_000_000)
    try:
        futures = [producer.send(topics[r.role], key=r.key, value=r.value) for r in records]
        producer.flush(30)
        for future in futures:
            future.get(timeout=30)
    finally:
        producer.close()


def _send_kcat(bootstrap: str, topics: dict[str, str], records: list[BadRecord]) -> None:
    """One ``kcat -P`` per record: the value as a whole file, or (kcat skips empty files)
    a null value as a ``key<TAB>`` line on stdin with ``-Z``."""
    kcat = kcat_path()
    assert kcat is not None
    with tempfile_dir() as tmp:
        for n, r in enumerate(records):
            cmd: list[str | bytes] = [kcat, "-P", "-q", "-b", bootstrap, "-t", topics[r.role],
                                      "-X", "message.max.bytes=1000000"]  # fmt: skip
            if r.value is None:
                cmd += ["-K", "\t", "-Z"]
                stdin = r.key + b"\t\n"
            else:
                path = tmp / f"value-{n}"
                path.write_bytes(r.value)
                cmd += ["-k", r.key, str(path)]
                stdin = b""
            subprocess.run(cmd, input=stdin, check=True, timeout=60, capture_output=True)


@contextlib.contextmanager
def tempfile_dir() -> Iterator[Path]:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="psmatch-kcat-") as tmp:
        yield Path(tmp)


_SENDERS = {
    "confluent-kafka": _send_confluent,
    "kafka-python": _send_kafka_python,
    "kcat": _send_kcat,
}


def clients() -> tuple[str, ...]:
    """The clients bad records are sent with: kcat only when installed."""
    return ("confluent-kafka", "kafka-python") + (("kcat",) if kcat_path() else ())
