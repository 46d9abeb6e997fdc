"""Kafka outside Spark, with librdkafka: one module per concept.

* :mod:`~psmatch.adapters.kafka.security`: how every client authenticates and encrypts
  (:class:`~psmatch.adapters.kafka.security.KafkaSecurity`), as librdkafka settings and as
  the options of Spark's Kafka source;
* :mod:`~psmatch.adapters.kafka.client`: what every confluent-kafka client here shares: its
  errors, its error callback (a refused login fails at once, with one
  :class:`~psmatch.adapters.kafka.client.KafkaAuthenticationError`) and its log;
* :mod:`~psmatch.adapters.kafka.admin`: the service's four topics, created with their
  settings, and whether a broker answers;
* :mod:`~psmatch.adapters.kafka.producer`: a JSON producer (the CLI, the load generator);
* :mod:`~psmatch.adapters.kafka.sink`: the writer of the service's output records, a whole
  Arrow batch at a time (:mod:`psmatch.adapters.batch_producer`);
* :mod:`~psmatch.adapters.kafka.reader`: a topic read from the start, the end or given
  offsets, without a consumer group.
"""
