"""The psmatch streaming service: Kafka in, Spark Structured Streaming, notifications out.

``psmatch.service.config`` owns the settings, ``psmatch.service.records`` the record
formats, ``psmatch.service.index_cache`` the per-worker index cache,
``psmatch.service.tasks`` the matching tasks, ``psmatch.service.job`` the Spark query and
its ``foreachBatch`` logic, ``psmatch.service.metrics`` the Prometheus metrics and their
endpoint, ``psmatch.service.supervisor`` which query failures are restarted and how
often, ``psmatch.service.cli`` the ``psmatch`` command (the only part of the service that
starts development servers, :mod:`psmatch.devservers`). The service's clients of Kafka
and Redis are :mod:`psmatch.adapters`.
"""
