"""The record formats of the service's topics and of its Redis state, one owner each (an
encoder and a decoder per format; pure logic, no I/O):

* :mod:`~psmatch.service.records.subscriptions`: the subscriptions topic's record and the
  subscription as stored in Redis (and its change-log entry);
* :mod:`~psmatch.service.records.normal_forms`: a subscription's normal form as the JSON
  text its change-log entry carries beside it;
* :mod:`~psmatch.service.records.events`: the events topic's record;
* :mod:`~psmatch.service.records.notifications`: the notifications topic's record, with
  its compiled writer (``_notification_writer.c``) and the heads a worker writes it from;
* :mod:`~psmatch.service.records.rejected`: the rejected topic's record;
* :mod:`~psmatch.service.records.common`: what they share: the bounded JSON decoder, the
  limits on records, and ``RecordError`` with its reject codes.
"""
