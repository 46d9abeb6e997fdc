"""The service's clients of the outside world: Kafka, Redis and Arrow, below the service.

* :mod:`psmatch.adapters.kafka` (a package): Kafka security settings, topic
  administration, the JSON producer, the writer of the service's output records and the
  topic reader, one module each;
* :mod:`psmatch.adapters.batch_producer`: librdkafka's batch produce through ctypes, the
  client under the output record writer;
* :mod:`psmatch.adapters.state`: the subscription state in Redis (current subscriptions,
  the versioned change log, the applied offsets) and every Redis key the service writes;
* :mod:`psmatch.adapters.state_scripts`: the Lua scripts that change that state, each
  in one atomic step;
* :mod:`psmatch.adapters.redis_retry`: the backoff that waits out a Redis outage, and this
  process's retry figures;
* :mod:`psmatch.adapters.arrow`: Arrow columns built from and read into numpy, from their
  buffers.

The adapters import nothing of :mod:`psmatch.service` nor of :mod:`psmatch.devservers`.
"""
