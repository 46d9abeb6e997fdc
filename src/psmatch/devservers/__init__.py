"""Development servers: the project's own Kafka, Redis and Spark standalone processes on
this machine, for ``make run``, ``psmatch servers``, the tests and the benchmarks.

:mod:`~psmatch.devservers.process` owns a server process's life (ports, start, stop,
a detached server found again), :mod:`~psmatch.devservers.kafka_broker` the Kafka broker,
:mod:`~psmatch.devservers.redis_server` the redis-server,
:mod:`~psmatch.devservers.services` the pair the test suites share, and
:mod:`~psmatch.devservers.standalone` a Spark standalone master and workers. Nothing of
the service is imported here; of the service, only ``psmatch.service.cli`` imports this
package.
"""
