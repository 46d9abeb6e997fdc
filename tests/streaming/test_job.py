"""The streaming query's plan (:mod:`streaming.job`), against a real Kafka broker and Spark."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from connectors.kafka import JsonProducer, spark_kafka_options
from streaming.config import ServiceConfig
from streaming.job import EVENTS_SOURCE, SUBSCRIPTIONS_SOURCE, from_source, prepare, tag_source


def test_each_source_of_a_batch_is_read_alone(
    spark: Any, make_config: Callable[..., ServiceConfig]
) -> None:
    """The query is the union of its two tagged Kafka sources; selecting one source's
    records leaves a single Kafka scan, of that source's topic, in the optimised plan: the
    subscription job never reads the events, nor the matching job the subscriptions."""
    config = make_config()
    prepare(config)
    producer = JsonProducer(config.bootstrap_servers)
    producer.send(config.subscriptions_topic, {"expr": "a = 1", "subscriber": "s"}, key="s1")
    producer.send(config.events_topic, {"a": 1}, key="e1")
    producer.flush()
    options = spark_kafka_options(config.bootstrap_servers, config.kafka_security)

    def read(topic: str) -> Any:
        return (spark.read.format("kafka").options(**options).option("subscribe", topic)
                .option("startingOffsets", "earliest").load())  # fmt: skip

    batch = tag_source(read(config.subscriptions_topic), SUBSCRIPTIONS_SOURCE).unionByName(
        tag_source(read(config.events_topic), EVENTS_SOURCE)
    )
    for source, topic in ((SUBSCRIPTIONS_SOURCE, config.subscriptions_topic),
                          (EVENTS_SOURCE, config.events_topic)):  # fmt: skip
        records = from_source(batch, source).select("key", "topic")
        plan = records._jdf.queryExecution().optimizedPlan().toString()
        assert plan.count("KafkaRelation") == 1, plan
        assert f"Subscribe[{topic}]" in plan, plan
        assert [(r.key, r.topic) for r in records.collect()] == [
            (b"s1" if source == SUBSCRIPTIONS_SOURCE else b"e1", topic)
        ]
