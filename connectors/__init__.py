"""Plumbing between the streaming job and the outside world.

``connectors.kafka`` owns topic administration, the confluent-kafka producer/consumer
helpers used by the CLI and the load generator, and the writer of the service's output
records, over ``connectors.batch_producer`` (librdkafka's batch produce, through ctypes);
``connectors.state`` owns the Redis
subscription state (current subscriptions plus the versioned change log);
``connectors.local`` starts and stops the project's own Kafka and Redis processes;
``connectors.metrics`` owns the Prometheus metrics and their HTTP endpoint;
``connectors.standalone`` runs a local Spark standalone master and worker.
"""
