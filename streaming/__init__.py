"""The psmatch streaming service: Kafka in, Spark Structured Streaming, notifications out.

``streaming.config`` owns the settings, ``streaming.records`` the topic formats,
``streaming.worker`` the per-worker index cache and partition matching,
``streaming.job`` the Spark query and its ``foreachBatch`` logic, ``streaming.cli`` the
``psmatch`` command.
"""
