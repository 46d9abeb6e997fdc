"""Plumbing between the streaming job and the outside world.

``psmatch.adapters.kafka`` owns topic administration, the confluent-kafka producer/consumer
helpers used by the CLI and the load generator, and the writer of the service's output
records, over ``psmatch.adapters.batch_producer`` (librdkafka's batch produce, through ctypes);
``psmatch.adapters.state`` owns the Redis
subscription state (current subscriptions plus the versioned change log);
``psmatch.devservers.local`` starts and stops the project's own Kafka and Redis processes;
``psmatch.service.metrics`` owns the Prometheus metrics and their HTTP endpoint;
``psmatch.devservers.standalone`` runs a local Spark standalone master and worker.
"""
