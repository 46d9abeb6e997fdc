"""The psmatch streaming service: Kafka in, Spark Structured Streaming, notifications out.

``psmatch.service.config`` owns the settings, ``psmatch.service.records`` the topic formats,
``psmatch.service.worker`` the per-worker index cache and partition matching,
``psmatch.service.job`` the Spark query and its ``foreachBatch`` logic, ``psmatch.service.cli`` the
``psmatch`` command.
"""
