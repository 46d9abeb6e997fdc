"""``psmatch run``: the streaming query in the foreground, restarted after a fault.

Owns the driver's loop around the query: starting it (and, with ``--start-local``, the
local servers, :mod:`psmatch.service.cli.servers`), serving the metrics and feeding them
each batch's figures and Spark's progress, restarting the query from its checkpoint
within the budget of :class:`psmatch.service.supervisor.RestartBudget` (each failure one
WARNING line, its full text at DEBUG), and stopping cleanly on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from psmatch.errors import PsmatchError
from psmatch.service.cli.servers import SERVER_KINDS, start_local_servers, stop_local_servers
from psmatch.service.config import ServiceConfig
from psmatch.service.errors import ConfigError

if TYPE_CHECKING:
    from psmatch.service.job import BatchReport
    from psmatch.service.metrics import BatchFigures, ServiceMetrics
    from psmatch.service.supervisor import QueryFailure

log = logging.getLogger("psmatch")


def batch_figures(report: BatchReport) -> BatchFigures:
    """What the metrics take of one batch's report (:meth:`ServiceMetrics.observe_batch`)."""
    from psmatch.service.metrics import BatchFigures

    w = report.workers
    phases = {
        "read": report.read_s, "state": report.state_s, "match_write": report.match_write_s,
        "subscriptions_validate": report.subscriptions_validate_s,
        "subscriptions_apply": report.subscriptions_apply_s,
        "worker_sync": w.sync_s - w.snapshot_s, "worker_snapshot": w.snapshot_s,
        "worker_parse": w.parse_s, "worker_match": w.match_s, "worker_encode": w.encode_s,
        "worker_write": w.write_s,
    }  # fmt: skip
    return BatchFigures(
        subscription_records=report.subscription_records, events=report.events,
        events_rejected=report.events_rejected, notifications=report.notifications,
        changes_applied=report.subscriptions_applied, total_s=report.total_s,
        live_subscriptions=report.live_subscriptions, version=report.version,
        rejects=report.rejects, phase_seconds=phases, tasks=w.tasks, match_s=w.match_s,
        reloads=w.reloads, lag=w.lag, shard_subscriptions=dict(w.shard_subscriptions),
        index_predicates=w.index_predicates, index_spaces=w.index_spaces,
        index_bytes=w.index_bytes, peak_rss_bytes=w.peak_rss_bytes,
        filter_candidates=dict(w.filter_candidates), filter_matches=dict(w.filter_matches),
        replayed=w.replayed,
    )  # fmt: skip


def _watch(query: Any, metrics: ServiceMetrics) -> None:
    """Until the query stops: feed Spark's progress to the metrics once a second."""
    from pyspark.errors import StreamingQueryException

    while query.isActive:
        try:
            query.awaitTermination(1.0)
        except StreamingQueryException:
            return  # the caller reads query.exception()
        progress = query.lastProgress
        metrics.observe_progress(None if progress is None else json.loads(progress.json))


def query_failure(text: str) -> QueryFailure:
    """Classify the text of a failed query (:func:`psmatch.service.supervisor.classify_failure`)
    and log that text in full at DEBUG, as one record: the stacks are for whoever debugs,
    the one WARNING line :func:`cmd_run` writes is for the operator."""
    from psmatch.service.supervisor import classify_failure

    log.debug("the streaming query failed:\n%s", text)
    return classify_failure(text)


def _not_py4j_on_root(record: logging.LogRecord) -> bool:
    """False for py4j's reports of a call into Spark that got no answer, which py4j logs
    with their tracebacks on the root logger, not its own: a call interrupted by the stop
    that SIGTERM or Ctrl-C asked for, or one whose connection the stop closed ("Answer
    from Java side is empty"). The caller sees the failure itself; psmatch reports it."""
    return not (record.name == "root" and f"{os.sep}py4j{os.sep}" in record.pathname)


def _transient(exc: PsmatchError) -> bool:
    """Whether a failure to (re)start the query may pass: a server still down."""
    from psmatch.adapters.kafka.client import KafkaAuthenticationError, KafkaServiceError
    from psmatch.adapters.state import StateAuthenticationError, StateUnavailableError

    if isinstance(exc, KafkaAuthenticationError | StateAuthenticationError | ConfigError):
        return False
    return isinstance(exc, KafkaServiceError | StateUnavailableError)


def cmd_run(args: argparse.Namespace, cfg: ServiceConfig) -> int:
    """Run the query; restart it from its checkpoint after an infrastructure fault, within
    the budget of :class:`psmatch.service.supervisor.RestartBudget`."""
    from psmatch.service.job import build_spark, start_query, stop_query
    from psmatch.service.metrics import ServiceMetrics
    from psmatch.service.supervisor import QueryFailure, RestartBudget

    data_dir = Path(args.data_dir)
    ours: list[str] = []
    query = None
    metrics = ServiceMetrics(cfg.subscriptions_topic, cfg.events_topic,
                             tenants=cfg.tenancy == "topics")  # fmt: skip
    metrics_server = metrics.serve(cfg.metrics_port, cfg.metrics_host) if cfg.metrics_port else None
    stopping = False

    def on_report(report: BatchReport) -> None:
        metrics.observe_batch(batch_figures(report))

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    if cfg.log_level.upper() != "DEBUG":
        logging.getLogger().addFilter(_not_py4j_on_root)
    try:
        if args.start_local:
            ours = start_local_servers(cfg, data_dir, SERVER_KINDS)
        log.info("starting Spark (%s)", cfg.spark_master)
        spark = build_spark(cfg)
        query = start_query(cfg, spark, on_report=on_report, query_name="psmatch")
        log.info("running; Ctrl-C stops")
        budget = RestartBudget(cfg.query_max_restarts, cfg.query_restart_window_seconds)
        while True:
            if query is not None:
                _watch(query, metrics)
                exc = query.exception()
                if exc is None:
                    return 0  # stopped by someone else
                failure = query_failure(str(exc))
                query = None
            if not failure.transient:
                log.error("the streaming query stopped: %s", failure.message)
                return 1
            delay = budget.next_delay()
            if delay is None:
                log.error("the streaming query failed %d times within %.0f s (query_max_restarts "
                          "%d); giving up. Last failure: %s", budget.used + 1,
                          cfg.query_restart_window_seconds, cfg.query_max_restarts,
                          failure.message)  # fmt: skip
                return 1
            log.warning("the streaming query failed (%s); restarting it from the checkpoint "
                        "in %.1f s (restart %d of at most %d per %.0f s)", failure.message,
                        delay, budget.used, cfg.query_max_restarts,
                        cfg.query_restart_window_seconds)  # fmt: skip
            time.sleep(delay)
            metrics.query_restarts.inc()
            try:
                spark = build_spark(cfg)
                query = start_query(cfg, spark, on_report=on_report, query_name="psmatch")
                log.info("the streaming query runs again")
            except PsmatchError as exc:
                failure = QueryFailure(str(exc), transient=_transient(exc))
    except KeyboardInterrupt:
        stopping = True
        log.info("stopping")
        return 0
    finally:
        if query is not None:
            with contextlib.suppress(Exception):
                stop_query(query)
        if stopping or ours:
            with contextlib.suppress(Exception):
                from pyspark.sql import SparkSession

                active = SparkSession.getActiveSession()
                if active is not None:
                    active.stop()
        if stopping:
            stop_local_servers(cfg, data_dir, ours)
        elif ours:
            log.info("the local %s started by --start-local keep running; `psmatch servers "
                     "stop` stops them", " and ".join(ours))  # fmt: skip
        if metrics_server is not None:
            metrics_server.stop()
        if stopping:
            log.info("stopped")
        # the process may go on (a test calling main(), say) with its root logger as it was
        logging.getLogger().removeFilter(_not_py4j_on_root)
