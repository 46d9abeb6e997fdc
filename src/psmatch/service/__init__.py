"""The psmatch streaming service: Kafka in, Spark Structured Streaming, notifications out.

``psmatch.service.config`` owns the settings, ``psmatch.service.records`` the topic formats,
``psmatch.service.worker`` the per-worker index cache and partition matching,
``psmatch.service.job`` the Spark query and its ``foreachBatch`` logic,
``psmatch.service.metrics`` the Prometheus metrics and their endpoint,
``psmatch.service.supervisor`` which query failures are restarted and how often,
``psmatch.service.cli`` the ``psmatch`` command (the only part of the service that starts
development servers, :mod:`psmatch.devservers`). The service's clients of Kafka and Redis
are :mod:`psmatch.adapters`.
"""
